package daemon

import (
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// deviceResource names the device hint provider in Request.Hints.
const deviceResource = "devices"

// noDeviceHintMsg is the warning for device NUMA nodes that cannot be read.
const noDeviceHintMsg = "cannot read the NUMA node of a device; no device hint"

// withDeviceHints adds the device hint provider to req: nodes, the NUMA
// nodes of the container's char/block devices (deviceReader.nodes). A
// sysfs error is logged and also counts as no preference: device locality
// steers placement, it is never a reason to fail a container.
func withDeviceHints(e *policy.Engine, req policy.Request, nodes []int, err error, entry *logrus.Entry) policy.Request {
	if err != nil {
		entry.WithError(err).Warn(noDeviceHintMsg)
		return req
	}
	return withNodeHints(e, req, nodes)
}

// deviceReader finds the NUMA nodes of containers' devices; handlers use
// it before they take the ledger's lock.
type deviceReader struct {
	topologyPolicy string
	sysfsRoot      string
}

// deviceReader is the device reader of the current configuration.
func (p *plugin) deviceReader() deviceReader {
	d := p.d
	cfg := d.led.config()
	return deviceReader{topologyPolicy: cfg.TopologyManagerPolicy, sysfsRoot: cfg.SysfsRoot}
}

// nodes are the NUMA nodes of the container's char/block devices, found
// in sysfs from major:minor only (never from a container-controlled
// path); none when the topology manager consults no provider. Devices
// without locality (the usual /dev/null, /dev/zero, ...) give none.
func (r deviceReader) nodes(ctr *api.Container) ([]int, error) {
	if r.topologyPolicy == "" || r.topologyPolicy == hints.PolicyNone {
		return nil, nil // the merge consults no provider
	}
	var devs []sysfs.Device
	for _, dev := range ctr.GetLinux().GetDevices() {
		kind := ""
		switch dev.GetType() {
		case "c", "u":
			kind = "char"
		case "b":
			kind = "block"
		default:
			continue
		}
		devs = append(devs, sysfs.Device{Kind: kind, Major: dev.GetMajor(), Minor: dev.GetMinor()})
	}
	if len(devs) == 0 {
		return nil, nil
	}
	return sysfs.DeviceNUMANodes(r.sysfsRoot, devs)
}
