// Package request reads what a container asks for from what NRI reports,
// before the ledger's lock is taken: the policy.Request (QoS, CPU request
// and limit from the cgroup values the kubelet wrote, the pod's own
// request, memory), the NUMA nodes of its devices (sysfs, the NVIDIA
// driver's procfs files, DRA metadata) and the devices the kubelet's
// PodResources API lists for it. It knows nothing of the ledger or the
// daemon.
package request

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// The kubelet's CPU conversions for cgroup values: it writes
// cpu.shares = max(2, milli*1024/1000) and, with a CPU limit,
// cfs_quota = milli*period/1000 with period 100000. This file turns them
// back into milli-CPUs.
const (
	sharesPerCPU = 1024
	milliPerCPU  = 1000
	minShares    = 2
)

// milliFromShares is the CPU request the kubelet turned into shares.
// Shares of 2 or less are the kubelet's floor (BestEffort, or a request
// below 2m): no request.
func milliFromShares(shares uint64) int64 {
	if shares <= minShares {
		return 0
	}
	shares = min(shares, maxCgroupValue)
	return int64(shares * milliPerCPU / sharesPerCPU)
}

// maxCgroupValue caps shares, quota and period before the arithmetic
// (2^40: far beyond what a kernel accepts, while x*1000 cannot overflow),
// so that absurd values give absurd but non-negative requests instead of
// wrapping around to negative ones.
const maxCgroupValue = 1 << 40

// milliFromQuota is the CPU limit the kubelet turned into a CFS quota; a
// quota <= 0 (-1 = unlimited, 0 = unset) or no period means no limit.
func milliFromQuota(quota int64, period uint64) int64 {
	if quota <= 0 || period == 0 {
		return 0
	}
	quota, period = min(quota, maxCgroupValue), min(period, maxCgroupValue)
	return quota * milliPerCPU / int64(period)
}

// qosFromCgroupParent derives the pod's QoS class from the cgroup parent
// the kubelet chose for it: /kubepods/burstable/pod<uid> (cgroupfs) or
// kubepods-burstable-pod<uid>.slice (systemd) is Burstable, the same with
// besteffort is BestEffort, and a pod directly under kubepods is
// Guaranteed.
func qosFromCgroupParent(parent string) policy.QoS {
	p := strings.ToLower(parent)
	// Only the kubelet's own path components count, not a pod UID or
	// container ID that happens to contain the word.
	for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == ':' }) {
		part = strings.TrimSuffix(part, ".slice")
		for _, word := range strings.Split(part, "-") {
			switch word {
			case "besteffort":
				return policy.BestEffort
			case "burstable":
				return policy.Burstable
			}
		}
	}
	return policy.Guaranteed
}

// CPUOf returns the LinuxCPU of a resources message, or nil.
func CPUOf(r *api.LinuxResources) *api.LinuxCPU {
	if r == nil {
		return nil
	}
	return r.GetCpu()
}

// requestFromCPU turns cgroup CPU values into milli-CPU request and limit.
func requestFromCPU(cpu *api.LinuxCPU) (request, limit int64) {
	if cpu == nil {
		return 0, 0
	}
	return milliFromShares(cpu.GetShares().GetValue()), milliFromQuota(cpu.GetQuota().GetValue(), cpu.GetPeriod().GetValue())
}

// For builds the engine request for a container from what NRI
// reports: QoS from the pod's cgroup parent (or the container's cgroups
// path when the pod has none), request and limit from cpu.shares and the
// CFS quota, and under the pod scope the pod's request from the pod-level
// resources the kubelet sends with the sandbox (PodResources: the pod's
// effective request, init containers and sidecars counted as Kubernetes
// counts them).
//
// Every container is an app container: a real kubelet v1.36 sends nothing
// that marks an init container or a sidecar (restartable init container).
// Its container labels are the pod name, namespace, UID and container
// name; its annotations the container hash, restart count, termination
// message path and policy, grace period (and preStop, ports); the
// runtimes add their own (container type "container" for all three). The
// order of creation and the exit are the only differences, and the exit
// is what matters: the runtime sends StopContainer when an init container
// exits (containerd and CRI-O both, checked by test/kubelet), which gives
// its exclusive CPUs back before the kubelet creates the next container.
//
// The engine decides exclusivity from these values (Guaranteed, request
// equal to limit, whole CPUs). Because shares lose precision
// (333m -> 340 shares -> 332m), a non-integral request never comes back as
// an integral one, while n CPUs always come back as exactly n*1000.
func For(pod *api.PodSandbox, ctr *api.Container) policy.Request {
	return WithCPU(pod, ctr, CPUOf(ctr.GetLinux().GetResources()))
}

// WithCPU is For with the container's CPU values replaced by
// cpu (an in-place resize).
func WithCPU(pod *api.PodSandbox, ctr *api.Container, cpu *api.LinuxCPU) policy.Request {
	parent := pod.GetLinux().GetCgroupParent()
	if parent == "" {
		parent = ctr.GetLinux().GetCgroupsPath()
	}
	qos := qosFromCgroupParent(parent)
	req, lim := requestFromCPU(cpu)
	req, lim = guaranteedAgreement(qos, req, lim)
	if lim < 0 {
		qos, lim = policy.Burstable, -lim
	}
	// Only PodResources is the pod's: pod.Linux.Resources is the sandbox
	// (pause) container's own cgroup values (cpu.shares 2 from containerd
	// 2.4 and CRI-O 1.37 under a real kubelet), never the pod's sum.
	podReq, podLim := requestFromCPU(CPUOf(pod.GetLinux().GetPodResources()))
	return policy.Request{
		Pod:                PodKey(pod),
		Container:          ctr.GetName(),
		QoS:                qos,
		CPURequestMilli:    req,
		CPULimitMilli:      lim,
		Type:               allocator.App,
		PodCPURequestMilli: podReq,
		PodCPULimitMilli:   podLim,
		Memory:             memoryOf(ctr.GetLinux().GetResources()),
		PodMemory:          memoryOf(pod.GetLinux().GetPodResources()),
	}
}

// guaranteedAgreement reconciles a Guaranteed container's request (from
// shares) with its limit (from the quota), which the kubelet makes equal:
//   - no quota (the kubelet's cpuCFSQuota off writes 0) means limit =
//     request;
//   - shares lose precision (333m -> 340 shares -> 332m): when the two
//     disagree, the non-integral one is taken for both, so the container
//     runs on the shared pool: whole CPUs only when both agree on an
//     integer;
//   - two different whole numbers cannot come from the kubelet; the
//     values are returned with the limit negated to tell the caller to
//     treat the container as Burstable.
//
// Other QoS classes are returned unchanged.
func guaranteedAgreement(qos policy.QoS, req, lim int64) (int64, int64) {
	if qos != policy.Guaranteed {
		return req, lim
	}
	switch {
	case lim == 0:
		return req, req
	case req == lim:
		return req, lim
	case lim%milliPerCPU != 0:
		return lim, lim
	case req%milliPerCPU != 0:
		return req, req
	default:
		return req, -lim
	}
}

// PodKey is the engine's pod key: the pod UID, or the sandbox ID for a
// sandbox without one (not created by the kubelet).
func PodKey(pod *api.PodSandbox) string {
	if uid := pod.GetUid(); uid != "" {
		return uid
	}
	return pod.GetId()
}

// PodName is namespace/name for logs.
func PodName(pod *api.PodSandbox) string {
	if pod.GetNamespace() == "" {
		return pod.GetName()
	}
	return pod.GetNamespace() + "/" + pod.GetName()
}

// memoryOf is the memory manager's request from what NRI reports of a
// cgroup: the memory limit and the hugepage limits (in a Guaranteed pod
// requests equal limits). The kubelet writes a hugetlb limit for every
// page size of the machine, 0 for the sizes not requested: those are
// left out. A page size that does not parse (the runtimes write the
// kernel's hugetlb names only) is left out too.
func memoryOf(r *api.LinuxResources) memorymanager.Request {
	out := memorymanager.Request{}
	if r == nil {
		return out
	}
	if lim := r.GetMemory().GetLimit().GetValue(); lim > 0 {
		out[memorymanager.Memory] = uint64(lim)
	}
	for _, h := range r.GetHugepageLimits() {
		if h.GetLimit() == 0 {
			continue
		}
		size, err := pageSize(h.GetPageSize())
		if err != nil {
			continue
		}
		out[memorymanager.HugepagesResource(size)] += h.GetLimit()
	}
	return out
}

// pageSize reads a hugetlb page size as the runtimes spell it ("2MB",
// "1GB", "64KB": the kernel's hugetlb cgroup names, binary units).
func pageSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40}}
	for _, u := range units {
		digits, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(digits, 10, 32)
		if err != nil || n == 0 || n > 1<<(63-u.shift) {
			break
		}
		return n << u.shift, nil
	}
	return 0, fmt.Errorf("hugepage size %q: want <n>KB, <n>MB or <n>GB", s)
}

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

// podResourcesWarnEvery spaces the warnings of one kind (no socket, no
// answer in time, an error): a node without a reachable kubelet would
// otherwise warn on every container.
const podResourcesWarnEvery = time.Minute

// PodResources is the kubelet's PodResources API as a device hint
// source: the client of the configured socket, made when the socket
// changes, and when each kind of warning was last written. The zero
// value is ready; the daemon keeps one for its life (one connection).
type PodResources struct {
	mu     sync.Mutex
	socket string
	lister kubeletpodres.Lister
	closer func() error
	warned map[string]time.Time
	now    func() time.Time
}

// listerFor returns the lister of socket, replacing the one of another
// socket (a configuration change).
func (s *PodResources) listerFor(socket string) kubeletpodres.Lister {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lister != nil && s.socket == socket {
		return s.lister
	}
	if s.closer != nil {
		_ = s.closer()
	}
	c := kubeletpodres.New(socket)
	c.Connect()
	s.socket, s.lister, s.closer = socket, c, c.Close
	return c
}

// Warm connects to the kubelet in the background when the call will be
// made, so that the first container does not wait for the handshake
// (0.3-2 ms on a busy two-CPU machine).
func (s *PodResources) Warm(cfg config.Config) {
	if cfg.PodResources && cfg.TopologyManagerPolicy != "" && cfg.TopologyManagerPolicy != hints.PolicyNone {
		s.listerFor(cfg.PodResourcesSocket)
	}
}

// warnOnce reports whether a warning of kind may be written now.
func (s *PodResources) warnOnce(kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	if last, ok := s.warned[kind]; ok && now.Sub(last) < podResourcesWarnEvery {
		return false
	}
	if s.warned == nil {
		s.warned = map[string]time.Time{}
	}
	s.warned[kind] = now
	return true
}

// Close closes the client, if any.
func (s *PodResources) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closer != nil {
		_ = s.closer()
	}
	s.lister, s.closer, s.socket = nil, nil, ""
}

// Add adds to info the devices the kubelet's PodResources API lists for
// the container that carry a NUMA node, each named "RESOURCE ID[,ID] via
// PodResources", and returns entry with them as the field pod_resources,
// so that the decision's line names them. CreateContainer calls it
// before it takes the ledger's lock, with the current configuration. It waits
// at most pod_resources_timeout; a kubelet that does not answer in time,
// or has no socket, gives no hint and a warning (at most one a minute of
// each kind). Nothing is asked when the call is off or the topology
// manager consults no provider.
func (s *PodResources) Add(ctx context.Context, cfg config.Config, pod *api.PodSandbox, ctr *api.Container, info DeviceInfo, entry *logrus.Entry) (DeviceInfo, *logrus.Entry) {
	if !cfg.PodResources || cfg.TopologyManagerPolicy == "" || cfg.TopologyManagerPolicy == hints.PolicyNone {
		return info, entry
	}
	timeout := time.Duration(cfg.PodResourcesTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	devs, err := s.listerFor(cfg.PodResourcesSocket).ContainerDevices(ctx, pod.GetNamespace(), pod.GetName(), ctr.GetName())
	if err != nil {
		kind, msg := "error", "kubelet PodResources: Get failed; no device hint from it"
		switch {
		case errors.Is(err, kubeletpodres.ErrNoSocket):
			kind, msg = "socket", "kubelet PodResources: no socket; no device hint from it (set pod_resources = false where no kubelet runs)"
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
			kind, msg = "timeout", "kubelet PodResources: no answer within pod_resources_timeout; no device hint from it"
		}
		if s.warnOnce(kind) {
			entry.WithError(err).WithFields(logrus.Fields{"socket": cfg.PodResourcesSocket, "timeout": timeout.String()}).Warn(msg)
		}
		return info, entry
	}
	var named []string
	for _, dev := range devs {
		info.Considered++
		if len(dev.NUMA) == 0 {
			continue // no TopologyInfo: no hint, as under the kubelet
		}
		name := dev.Resource + " " + strings.Join(dev.IDs, ",") + " via PodResources"
		info.Devices = append(info.Devices, Device{Device: name, NUMA: dev.NUMA})
		info.Nodes = sysfs.UnionNodes([]sysfs.Locality{{Nodes: info.Nodes}, {Nodes: dev.NUMA}})
		named = append(named, name+" numa "+intList(dev.NUMA))
	}
	if len(named) > 0 {
		entry = entry.WithField("pod_resources", named)
	}
	return info, entry
}
