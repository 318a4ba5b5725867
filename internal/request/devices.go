package request

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// DeviceResource names the device hint provider in Request.Hints.
const DeviceResource = "devices"

// NoDeviceHintMsg is the warning for device NUMA nodes that cannot be read.
const NoDeviceHintMsg = "cannot read the NUMA node of a device; no device hint"

// pciEnvPrefixes are the device plugins' environment variables that carry
// PCI addresses ("addr,addr,..."): the SR-IOV network device plugin's
// PCIDEVICE_<RESOURCE> (its PCIDEVICE_<RESOURCE>_INFO is JSON, skipped)
// and KubeVirt's PCI_RESOURCE_<RESOURCE>. NVIDIA_VISIBLE_DEVICES is read
// apart (gpusFromEnv).
var pciEnvPrefixes = []string{"PCIDEVICE_", "PCI_RESOURCE_"}

// maxEnvAddresses bounds the PCI addresses, and apart the GPU UUIDs,
// read from one container's environment, which its pod spec can fill.
const maxEnvAddresses = 64

// maxSkipped bounds the warnings about one container's variables.
const maxSkipped = 8

// Device is a located device: its label (the log lines' and /state's)
// and its NUMA nodes; the fields are those of ledger.DeviceView, which
// the daemon converts it to.
type Device struct {
	Device string
	NUMA   []int
}

// DeviceInfo is what the device hint provider found for one container.
type DeviceInfo struct {
	// Nodes are all its devices' NUMA nodes together, ascending.
	Nodes []int
	// Devices are the devices that gave nodes; Considered counts all.
	Devices    []Device
	Considered int
	// Skipped are environment values that are no PCI address, or beyond
	// maxEnvAddresses (at most maxSkipped of them).
	Skipped []string
	// Unseen are DRA metadata files mounted into the container that the
	// plugin cannot see (the kubelet's plugin directory not mounted into
	// its own container).
	Unseen []string
}

// Log writes the debug line naming the devices and their nodes, and a
// warning per skipped environment value.
func (info DeviceInfo) Log(entry *logrus.Entry) {
	for _, s := range info.Skipped {
		entry.WithField("value", s).Warn("device plugin variable: not a PCI address, or more than 64 addresses or GPUs in the container; ignored for device hints")
	}
	for _, f := range info.Unseen {
		entry.WithField("file", f).Warn("DRA metadata file not found where the container's mount takes it from (mount the kubelet's plugin directory into the plugin at the same path); ignored for device hints")
	}
	if info.Considered == 0 || !entry.Logger.IsLevelEnabled(logrus.DebugLevel) {
		return
	}
	entry.WithFields(logrus.Fields{"devices": info.labels(), "numa": intList(info.Nodes), "considered": info.Considered}).
		Debug("device hints")
}

// labels names each located device and its nodes ("/dev/nvidia3
// 0000:86:00.0 numa 1"), for the log lines of the decision.
func (info DeviceInfo) labels() []string {
	devs := make([]string, 0, len(info.Devices))
	for _, d := range info.Devices {
		devs = append(devs, d.Device+" numa "+intList(d.NUMA))
	}
	return devs
}

// WithDevices adds the located devices to the container's log entry, so
// the decision's info line (or its refusal) names them.
func (info DeviceInfo) WithDevices(entry *logrus.Entry) *logrus.Entry {
	if len(info.Devices) == 0 {
		return entry
	}
	return entry.WithField("devices", info.labels())
}

func intList(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	return strings.Join(s, ",")
}

// DeviceReader finds the NUMA nodes of containers' devices; handlers use
// it before they take the ledger's lock.
type DeviceReader struct {
	topologyPolicy string
	sysfsRoot      string
	procfsRoot     string
}

// DeviceReaderOf is the device reader of a configuration.
func DeviceReaderOf(cfg config.Config) DeviceReader {
	return DeviceReader{topologyPolicy: cfg.TopologyManagerPolicy, sysfsRoot: cfg.SysfsRoot, procfsRoot: cfg.ProcfsRoot}
}

// collected is what the device sources found in one container, in
// order: the devices to locate in sysfs, each with the label /state and
// the log show, and the variable values they skipped.
type collected struct {
	devs    []sysfs.Device
	names   []string
	skipped []string
	unseen  []string
	// gpus is the NVIDIA driver's GPU list, read once per container and
	// only when it holds an NVIDIA GPU.
	gpus   *sysfs.NVIDIAGPUs
	gpuErr error
}

func (c *collected) add(d sysfs.Device, name string) {
	c.devs = append(c.devs, d)
	c.names = append(c.names, name)
}

func (c *collected) skip(value string) {
	if len(c.skipped) < maxSkipped {
		c.skipped = append(c.skipped, shortValue(value))
	}
}

// deviceSource adds what one kind of signal says about the container's
// devices to c; an error means the container's devices cannot all be
// located (no device hint at all, rather than a partial one). pod is nil
// outside the daemon (simulate). A source that knows a device's nodes
// itself adds a sysfs.Device{Kind: "numa", Nodes: ...}.
type deviceSource func(r DeviceReader, pod *api.PodSandbox, ctr *api.Container, c *collected) error

// deviceSources are read in this order: the device nodes the runtime
// lists (NVIDIA's through procfs), the device plugins' variables, the
// DRA metadata mounted into the container.
var deviceSources = []deviceSource{
	DeviceReader.fromDeviceNodes,
	DeviceReader.fromEnv,
	DeviceReader.fromDRAMetadata,
}

// Nodes finds the NUMA nodes of the container's devices (deviceSources):
// its char/block devices found in sysfs from major:minor only (VFIO
// groups through their IOMMU group, NVIDIA GPUs through the driver's
// procfs files), the PCI functions and GPUs device plugins name in its
// environment, and the devices of its DRA claims' metadata; never a
// container-controlled path. None when the topology manager consults no
// provider. Devices without locality (the usual /dev/null, /dev/zero,
// ...) give none.
func (r DeviceReader) Nodes(pod *api.PodSandbox, ctr *api.Container) (DeviceInfo, error) {
	var info DeviceInfo
	if r.topologyPolicy == "" || r.topologyPolicy == hints.PolicyNone {
		return info, nil // the merge consults no provider
	}
	return r.locate(pod, ctr)
}

// LocateDevices is the device hint provider's lookup for one container
// outside the daemon (simulate's devices, env and mounts): what Nodes
// finds, reading sysfsRoot and procfsRoot, whatever the policy.
func LocateDevices(sysfsRoot, procfsRoot string, ctr *api.Container) (nodes []int, devices []Device, skipped []string, err error) {
	info, err := DeviceReader{sysfsRoot: sysfsRoot, procfsRoot: procfsRoot}.locate(nil, ctr)
	skipped = info.Skipped
	for _, f := range info.Unseen {
		skipped = append(skipped, "DRA metadata "+f+": not found")
	}
	return info.Nodes, info.Devices, skipped, err
}

// locate reads every device source and locates what they found.
func (r DeviceReader) locate(pod *api.PodSandbox, ctr *api.Container) (DeviceInfo, error) {
	var info DeviceInfo
	var c collected
	for _, src := range deviceSources {
		if err := src(r, pod, ctr, &c); err != nil {
			info.Skipped, info.Unseen = c.skipped, c.unseen
			return info, err
		}
	}
	info.Skipped, info.Unseen = c.skipped, c.unseen
	info.Considered = len(c.devs)
	if len(c.devs) == 0 {
		return info, nil
	}
	locs, err := sysfs.DeviceLocalities(r.sysfsRoot, c.devs)
	if err != nil {
		return info, err
	}
	for i, l := range locs {
		if len(l.Nodes) > 0 {
			info.Devices = append(info.Devices, Device{Device: c.names[i], NUMA: l.Nodes})
		}
	}
	info.Nodes = sysfs.UnionNodes(locs)
	return info, nil
}

// fromDeviceNodes adds the container's char and block devices. An
// NVIDIA GPU node (char 195:N, N < 254) has no sysfs entry: it becomes
// its PCI function through the driver's procfs files; the control nodes
// (nvidiactl 195:255, nvidia-modeset 195:254) carry no locality and are
// left out. nvidia-uvm and nvidia-caps have dynamic majors and no sysfs
// parent, so the sysfs walk finds nothing for them.
func (r DeviceReader) fromDeviceNodes(_ *api.PodSandbox, ctr *api.Container, c *collected) error {
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
		if kind == "char" && d.Major == sysfs.NVIDIAMajor {
			if d.Minor > sysfs.NVIDIAMaxGPUMinor {
				continue // nvidiactl, nvidia-modeset
			}
			g, err := r.gpuByMinor(c, d.Minor)
			if err != nil {
				return fmt.Errorf("GPU %s (%s): %w", dev.GetPath(), d, err)
			}
			c.add(sysfs.Device{Kind: "pci", PCI: g.PCI}, dev.GetPath()+" "+g.PCI)
			continue
		}
		c.add(d, dev.GetPath()+" ("+d.String()+")")
	}
	return nil
}

// fromEnv adds the PCI functions the device plugins' variables name
// (pciEnvPrefixes) and the GPUs NVIDIA_VISIBLE_DEVICES names by UUID.
func (r DeviceReader) fromEnv(_ *api.PodSandbox, ctr *api.Container, c *collected) error {
	env := ctr.GetEnv()
	pciFromEnv(env, c)
	return r.gpusFromEnv(env, c)
}

// nvidiaVisibleDevices is the NVIDIA container runtime's variable: GPU
// UUIDs, indices, MIG UUIDs, or all / none / void. Only GPU UUIDs name a
// GPU the driver's procfs files map; docs/devices.md says why the rest
// give no hint.
const nvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"

// gpusFromEnv adds the GPUs NVIDIA_VISIBLE_DEVICES names by "GPU-" UUID.
func (r DeviceReader) gpusFromEnv(env []string, c *collected) error {
	n := 0
	for _, kv := range env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name != nvidiaVisibleDevices {
			continue
		}
		for _, v := range strings.Split(value, ",") {
			v = strings.TrimSpace(v)
			if len(v) < 4 || !strings.EqualFold(v[:4], "GPU-") {
				continue // all, none, void, indices, MIG-<uuid>: no hint
			}
			if n == maxEnvAddresses {
				c.skip(name + "=" + v)
				continue
			}
			n++
			g, err := r.gpuByUUID(c, v)
			if err != nil {
				return fmt.Errorf("%s=%s: %w", name, shortValue(v), err)
			}
			c.add(sysfs.Device{Kind: "pci", PCI: g.PCI}, g.UUID+" "+g.PCI+" via "+name)
		}
	}
	return nil
}

// nvidiaGPUs reads the driver's GPU files once per container.
func (r DeviceReader) nvidiaGPUs(c *collected) (*sysfs.NVIDIAGPUs, error) {
	if c.gpus == nil && c.gpuErr == nil {
		g, err := sysfs.ReadNVIDIAGPUs(r.procfsRoot)
		c.gpus, c.gpuErr = &g, err
	}
	return c.gpus, c.gpuErr
}

func (r DeviceReader) gpuByMinor(c *collected, minor int64) (sysfs.NVIDIAGPU, error) {
	gpus, err := r.nvidiaGPUs(c)
	if err != nil {
		return sysfs.NVIDIAGPU{}, err
	}
	if g, ok := gpus.ByMinor(minor); ok {
		return g, nil
	}
	return sysfs.NVIDIAGPU{}, r.noGPU(gpus, "Device Minor "+strconv.FormatInt(minor, 10))
}

func (r DeviceReader) gpuByUUID(c *collected, uuid string) (sysfs.NVIDIAGPU, error) {
	gpus, err := r.nvidiaGPUs(c)
	if err != nil {
		return sysfs.NVIDIAGPU{}, err
	}
	if g, ok := gpus.ByUUID(uuid); ok {
		return g, nil
	}
	return sysfs.NVIDIAGPU{}, r.noGPU(gpus, "GPU UUID "+shortValue(uuid))
}

// noGPU says why a GPU is not in the driver's files: a file that did
// not parse (named), or none has it.
func (r DeviceReader) noGPU(gpus *sysfs.NVIDIAGPUs, what string) error {
	if len(gpus.Bad) > 0 {
		return fmt.Errorf("no GPU with %s among the ones read; %w", what, errors.Join(gpus.Bad...))
	}
	return fmt.Errorf("no GPU with %s in %s", what, filepath.Join(r.procfsRoot, "driver", "nvidia", "gpus", "*", "information"))
}

// maxDRAFiles bounds the DRA metadata files read per container, and
// maxDRAEntries the directory entries looked at below one mounted
// directory (KEP-5304 mounts files; a directory there is a pod's own
// volume, which may be large).
const (
	maxDRAFiles   = 16
	maxDRAEntries = 256
)

// fromDRAMetadata adds the devices of the container's DRA claims, from
// the metadata KEP-5304 mounts at /var/run/dra-device-attributes/<claim>/
// <request>/<driver>-metadata.json: only the host files the runtime
// mounts there (a mount's Source whose Destination is below that
// directory), never a path inside the container. A device that
// publishes resource.kubernetes.io/numaNode is on that node; one that
// publishes only pciBusID is located in sysfs.
func (r DeviceReader) fromDRAMetadata(_ *api.PodSandbox, ctr *api.Container, c *collected) error {
	var files []string
	for _, m := range ctr.GetMounts() {
		if !within(path.Clean(m.GetDestination()), sysfs.DRAMetadataDir) || m.GetSource() == "" {
			continue
		}
		src := filepath.Clean(m.GetSource())
		if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) {
			// Not visible to the plugin: its other devices still count.
			if len(c.unseen) < maxSkipped {
				c.unseen = append(c.unseen, src)
			}
			continue
		}
		found, err := draFiles(src, maxDRAFiles-len(files))
		if err != nil {
			return err
		}
		files = append(files, found...)
	}
	for _, f := range files {
		devs, err := sysfs.ReadDRAMetadata(f)
		if err != nil {
			return err
		}
		for _, d := range devs {
			switch {
			case d.HasNode:
				c.add(sysfs.Device{Kind: "numa", Nodes: []int{d.Node}}, d.String())
			case d.PCI != "":
				c.add(sysfs.Device{Kind: "pci", PCI: d.PCI}, d.String())
			}
		}
	}
	return nil
}

// draFiles is the metadata files of one mount source: the file itself,
// or the "*metadata.json" files up to three levels below a directory
// (<claim>/<request>/<file>), at most limit of them.
func draFiles(src string, limit int) ([]string, error) {
	st, err := os.Stat(src)
	if err != nil {
		return nil, fmt.Errorf("DRA metadata: %w", err)
	}
	if !st.IsDir() {
		if limit <= 0 {
			return nil, fmt.Errorf("DRA metadata: %s: more than %d files in the container", src, maxDRAFiles)
		}
		return []string{src}, nil
	}
	var out []string
	seen := 0
	var walk func(dir string, depth int) error
	walk = func(dir string, depth int) error {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("DRA metadata: %w", err)
		}
		if seen += len(entries); seen > maxDRAEntries {
			return fmt.Errorf("DRA metadata: %s: more than %d entries below it; not a claim's metadata", src, maxDRAEntries)
		}
		for _, e := range entries {
			p := filepath.Join(dir, e.Name())
			switch {
			case e.IsDir() && depth < 3:
				if err := walk(p, depth+1); err != nil {
					return err
				}
			case e.Type().IsRegular() && strings.HasSuffix(e.Name(), "metadata.json"):
				if len(out) >= limit {
					return fmt.Errorf("DRA metadata: %s: more than %d files in the container", src, maxDRAFiles)
				}
				out = append(out, p)
			}
		}
		return nil
	}
	return out, walk(src, 1)
}

// within reports whether the clean path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// pciFromEnv adds the PCI functions named by the device plugins'
// variables in env ("NAME=value"), each labelled with its variable; a
// value that is no PCI address, or beyond maxEnvAddresses, is skipped
// ("NAME=value" quoted as given, shortened).
func pciFromEnv(env []string, c *collected) {
	n := 0
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
			if err != nil || n == maxEnvAddresses {
				c.skip(name + "=" + v)
				continue
			}
			n++
			c.add(sysfs.Device{Kind: "pci", PCI: addr}, name+" "+addr)
		}
	}
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
