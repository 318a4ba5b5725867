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

// withDeviceHints adds the device hint provider to req: the NUMA nodes of
// the container's char/block devices, found in sysfs from major:minor only
// (never from a container-controlled path). Devices without locality (the
// usual /dev/null, /dev/zero, ...) give no preference. A sysfs error is
// logged and also counts as no preference: device locality steers
// placement, it is never a reason to fail a container.
func (d *Daemon) withDeviceHints(req policy.Request, ctr *api.Container, entry *logrus.Entry) policy.Request {
	if d.cfg.TopologyManagerPolicy == "" || d.cfg.TopologyManagerPolicy == hints.PolicyNone {
		return req // the merge consults no provider
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
		return req
	}
	nodes, err := sysfs.DeviceNUMANodes(d.cfg.SysfsRoot, devs)
	if err != nil {
		entry.WithError(err).Warn("cannot read the NUMA node of a device; no device hint")
		return req
	}
	if len(nodes) == 0 {
		return req
	}
	h := make(map[string][]hints.Hint, len(req.Hints)+1)
	for k, v := range req.Hints {
		h[k] = v
	}
	h[deviceResource] = d.engine.DeviceHints(nodes)
	req.Hints = h
	return req
}
