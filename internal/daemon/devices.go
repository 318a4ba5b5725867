package daemon

import (
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// deviceResource names the device hint provider in Request.Hints.
const deviceResource = "devices"

// noDeviceHintMsg is the warning for device NUMA nodes that cannot be read.
const noDeviceHintMsg = "cannot read the NUMA node of a device; no device hint"

// pciEnvPrefixes are the device plugins' environment variables that carry
// PCI addresses ("addr,addr,..."): the SR-IOV network device plugin's
// PCIDEVICE_<RESOURCE> (its PCIDEVICE_<RESOURCE>_INFO is JSON, skipped)
// and KubeVirt's PCI_RESOURCE_<RESOURCE>. docs/devices.md says why others
// (NVIDIA_VISIBLE_DEVICES, ...) are not read.
var pciEnvPrefixes = []string{"PCIDEVICE_", "PCI_RESOURCE_"}

// maxEnvAddresses bounds the PCI addresses read from one container's
// environment, which its pod spec can fill.
const maxEnvAddresses = 64

// maxSkipped bounds the warnings about one container's variables.
const maxSkipped = 8

// deviceInfo is what the device hint provider found for one container.
type deviceInfo struct {
	// Nodes are all its devices' NUMA nodes together, ascending.
	Nodes []int
	// Devices are the devices that gave nodes; Considered counts all.
	Devices    []DeviceView
	Considered int
	// Skipped are environment values that are no PCI address, or beyond
	// maxEnvAddresses (at most maxSkipped of them).
	Skipped []string
}

// log writes the debug line naming the devices and their nodes, and a
// warning per skipped environment value.
func (info deviceInfo) log(entry *logrus.Entry) {
	for _, s := range info.Skipped {
		entry.WithField("value", s).Warn("device plugin variable: not a PCI address, or more than 64 in the container; ignored for device hints")
	}
	if info.Considered == 0 || !entry.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	devs := make([]string, 0, len(info.Devices))
	for _, d := range info.Devices {
		devs = append(devs, d.Device+" numa "+intList(d.NUMA))
	}
	entry.WithFields(logrus.Fields{"devices": devs, "numa": intList(info.Nodes), "considered": info.Considered}).
		Debug("device hints")
}

func intList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
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
	cfg := d.led.Config()
	return deviceReader{topologyPolicy: cfg.TopologyManagerPolicy, sysfsRoot: cfg.SysfsRoot}
}

// nodes finds the NUMA nodes of the container's devices: its char/block
// devices found in sysfs from major:minor only (VFIO groups through their
// IOMMU group), and the PCI functions device plugins name in its
// environment (pciEnvPrefixes), never a container-controlled path. None
// when the topology manager consults no provider. Devices without
// locality (the usual /dev/null, /dev/zero, ...) give none.
func (r deviceReader) nodes(ctr *api.Container) (deviceInfo, error) {
	var info deviceInfo
	if r.topologyPolicy == "" || r.topologyPolicy == hints.PolicyNone {
		return info, nil // the merge consults no provider
	}
	var devs []sysfs.Device
	var names []string
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
		d := sysfs.Device{Kind: kind, Major: dev.GetMajor(), Minor: dev.GetMinor()}
		devs = append(devs, d)
		names = append(names, dev.GetPath()+" ("+d.String()+")")
	}
	envDevs, envNames, skipped := pciFromEnv(ctr.GetEnv())
	devs, names, info.Skipped = append(devs, envDevs...), append(names, envNames...), skipped
	info.Considered = len(devs)
	if len(devs) == 0 {
		return info, nil
	}
	locs, err := sysfs.DeviceLocalities(r.sysfsRoot, devs)
	if err != nil {
		return info, err
	}
	for i, l := range locs {
		if len(l.Nodes) > 0 {
			info.Devices = append(info.Devices, DeviceView{Device: names[i], NUMA: l.Nodes})
		}
	}
	info.Nodes = sysfs.UnionNodes(locs)
	return info, nil
}

// pciFromEnv returns the PCI functions named by the device plugins'
// variables in env ("NAME=value"), each with its label, and the values
// that are no PCI address ("NAME=value" quoted as given, shortened).
func pciFromEnv(env []string) (devs []sysfs.Device, names, skipped []string) {
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !pciEnvVar(name) {
			continue
		}
		for _, v := range strings.Split(value, ",") {
			v = strings.TrimSpace(v)
			if v == "" {
				continue
			}
			addr, err := sysfs.ParsePCIAddress(v)
			if err != nil || len(devs) == maxEnvAddresses {
				if len(skipped) < maxSkipped {
					skipped = append(skipped, shortValue(name+"="+v))
				}
				continue
			}
			devs = append(devs, sysfs.Device{Kind: "pci", PCI: addr})
			names = append(names, name+" "+addr)
		}
	}
	return devs, names, skipped
}

func pciEnvVar(name string) bool {
	if strings.HasSuffix(name, "_INFO") {
		return false
	}
	for _, p := range pciEnvPrefixes {
		if strings.HasPrefix(name, p) && len(name) > len(p) {
			return true
		}
	}
	return false
}

func shortValue(s string) string {
	if len(s) > 80 {
		return s[:80] + "..."
	}
	return s
}

// devicesOf is ledger.devices after a Synchronize: the located devices
// of the live containers the index keeps.
func devicesOf(in syncInput, records map[string]ctrRecord) map[string][]DeviceView {
	out := map[string][]DeviceView{}
	for _, c := range in.Ctrs {
		if _, ok := records[c.ID]; ok && len(c.Devices.Devices) > 0 {
			out[c.ID] = c.Devices.Devices
		}
	}
	return out
}
