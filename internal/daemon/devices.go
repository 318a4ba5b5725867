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

// withDeviceHints adds the device hint provider to req: the NUMA nodes of
// the container's char/block devices (deviceNodes). A sysfs error is
// logged and also counts as no preference: device locality steers
// placement, it is never a reason to fail a container.
func (d *Daemon) withDeviceHints(req policy.Request, ctr *api.Container, entry *logrus.Entry) policy.Request {
	nodes, err := d.deviceNodes(ctr)
	if err != nil {
		entry.WithError(err).Warn(noDeviceHintMsg)
		return req
	}
	return withNodeHints(d.engine, req, nodes)
}

// deviceNodes are the NUMA nodes of the container's char/block devices,
// found in sysfs from major:minor only (never from a container-controlled
// path); none when the topology manager consults no provider. Devices
// without locality (the usual /dev/null, /dev/zero, ...) give none.
func (d *Daemon) deviceNodes(ctr *api.Container) ([]int, error) {
	if d.cfg.TopologyManagerPolicy == "" || d.cfg.TopologyManagerPolicy == hints.PolicyNone {
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
	return sysfs.DeviceNUMANodes(d.cfg.SysfsRoot, devs)
}
