package sysfs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// DeviceNUMANode returns the NUMA node of a character ("char") or block
// ("block") device given by major:minor, as the device hint provider needs
// it. It resolves root/dev/<kind>/<major>:<minor> (a symlink into
// root/devices/...) and walks up from the device towards root/devices to the
// first directory holding a numa_node file, usually the PCI function the
// device hangs off.
//
// ok is false, with a nil error, when the device has no NUMA affinity: no
// sysfs entry (a purely virtual device, or one sysfs does not show), no
// numa_node on the way up, or numa_node < 0 (the kernel writes -1 when the
// firmware gives no locality). Only paths derived from major:minor are read,
// and the walk never leaves root. A numa_node file that does not parse, or
// a link that points outside root, is an error naming the file.
func DeviceNUMANode(root, kind string, major, minor int64) (node int, ok bool, err error) {
	realRoot, dir, err := resolveDevice(root, kind, major, minor)
	if err != nil || dir == "" {
		return 0, false, err
	}
	return nodeAbove(dir, filepath.Join(realRoot, "devices"))
}

// resolveDevice returns the real root and the device's directory under
// root/devices, "" when sysfs has no entry for it.
func resolveDevice(root, kind string, major, minor int64) (realRoot, dir string, err error) {
	if kind != "char" && kind != "block" {
		return "", "", fmt.Errorf("sysfs: device kind %q: want char or block", kind)
	}
	if major < 0 || minor < 0 {
		return "", "", fmt.Errorf("sysfs: device %s %d:%d: negative major or minor", kind, major, minor)
	}
	realRoot, err = filepath.EvalSymlinks(root)
	if err != nil {
		return "", "", fmt.Errorf("sysfs: root: %w", err)
	}
	link := filepath.Join(realRoot, "dev", kind, strconv.FormatInt(major, 10)+":"+strconv.FormatInt(minor, 10))
	dir, err = inDevices(realRoot, link)
	return realRoot, dir, err
}

// inDevices resolves the symlink link, which must lead into
// realRoot/devices; "" when it does not exist.
func inDevices(realRoot, link string) (string, error) {
	dir, err := filepath.EvalSymlinks(link)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("sysfs: %w", err)
	}
	stop := filepath.Join(realRoot, "devices")
	if !within(dir, stop) || dir == stop {
		return "", fmt.Errorf("sysfs: %s: link leads to %s, outside %s", link, dir, stop)
	}
	return dir, nil
}

// nodeAbove walks up from dir towards stop to the first numa_node file
// and returns its node; ok is false without one or for a negative node.
func nodeAbove(dir, stop string) (node int, ok bool, err error) {
	for d := dir; within(d, stop) && d != stop; d = filepath.Dir(d) {
		p := filepath.Join(d, "numa_node")
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, false, fmt.Errorf("sysfs: %w", err)
		}
		text := strings.TrimSpace(string(data))
		n, err := strconv.Atoi(text)
		if err != nil || n >= maxDeviceNUMANode {
			return 0, false, fmt.Errorf("sysfs: %s: want a NUMA node id (or -1) below %d, content %q", p, maxDeviceNUMANode, shorten(text))
		}
		if n < 0 {
			return 0, false, nil
		}
		return n, true, nil
	}
	return 0, false, nil
}

// Device is one device of a container: a device node as the runtime
// lists it (Kind "char" or "block" and its major:minor numbers), a PCI
// function a device plugin handed over by address (Kind "pci", PCI in the
// canonical form ParsePCIAddress gives), or a device whose driver named
// its NUMA nodes itself (Kind "numa", Nodes: a DRA device's
// resource.kubernetes.io/numaNode, a device plugin's TopologyInfo).
type Device struct {
	Kind         string
	Major, Minor int64
	PCI          string
	Nodes        []int
}

// String names the device as sysfs knows it: "char 242:1", "pci 0000:af:02.1".
func (d Device) String() string {
	switch d.Kind {
	case "pci":
		return "pci " + d.PCI
	case "numa":
		ns := make([]string, len(d.Nodes))
		for i, n := range d.Nodes {
			ns[i] = strconv.Itoa(n)
		}
		return "numa " + strings.Join(ns, ",")
	}
	return d.Kind + " " + strconv.FormatInt(d.Major, 10) + ":" + strconv.FormatInt(d.Minor, 10)
}

// DeviceNodes returns the NUMA nodes of one device, ascending; none when
// it has no locality. A char or block device is looked up as
// DeviceNUMANode does; when that finds no numa_node and the device is a
// VFIO group (the kernel's class device root/devices/virtual/vfio/<group>,
// a virtual device with no PCI parent, named after its IOMMU group, or
// "noiommu-<group>"), the group's functions under
// root/kernel/iommu_groups/<group>/devices give the nodes. The group
// number is the kernel's name of the class device that major:minor leads
// to, never the container's /dev/vfio/<N> path. A PCI function is read at
// root/bus/pci/devices/<address>/numa_node. A "numa" device is its nodes.
//
// Where a function's numa_node is -1 (the firmware names no node), its
// local_cpulist is the locality left: the nodes whose CPUs it holds, when
// that is fewer than all the machine's nodes with CPUs (NodesOfCPUs).
func DeviceNodes(root string, d Device) ([]int, error) {
	l, err := newLocator(root)
	if err != nil {
		return nil, err
	}
	return l.nodes(d)
}

// locator looks devices up under one sysfs root. It reads the NUMA
// nodes' CPU lists once, and only when a function without numa_node
// needs them.
type locator struct {
	realRoot string
	nodeCPUs map[int]cpuset.CPUSet // nil until read
}

func newLocator(root string) (*locator, error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("sysfs: root: %w", err)
	}
	return &locator{realRoot: realRoot}, nil
}

func (l *locator) nodes(d Device) ([]int, error) {
	switch d.Kind {
	case "numa":
		var nodes []int
		for _, n := range d.Nodes {
			if n < 0 || n >= maxDeviceNUMANode {
				return nil, fmt.Errorf("sysfs: NUMA node %d: want 0-%d", n, maxDeviceNUMANode-1)
			}
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
		sort.Ints(nodes)
		return nodes, nil
	case "pci":
		addr, err := ParsePCIAddress(d.PCI)
		if err != nil {
			return nil, err
		}
		dir, err := inDevices(l.realRoot, filepath.Join(l.realRoot, "bus", "pci", "devices", addr))
		if err != nil || dir == "" {
			return nil, err
		}
		return l.nodesAbove(dir)
	}
	if d.Kind != "char" && d.Kind != "block" {
		return nil, fmt.Errorf("sysfs: device kind %q: want char, block, pci or numa", d.Kind)
	}
	if d.Major < 0 || d.Minor < 0 {
		return nil, fmt.Errorf("sysfs: device %s %d:%d: negative major or minor", d.Kind, d.Major, d.Minor)
	}
	link := filepath.Join(l.realRoot, "dev", d.Kind, strconv.FormatInt(d.Major, 10)+":"+strconv.FormatInt(d.Minor, 10))
	dir, err := inDevices(l.realRoot, link)
	if err != nil || dir == "" {
		return nil, err
	}
	nodes, found, err := l.nodesAt(dir)
	if err != nil || found {
		return nodes, err
	}
	if d.Kind != "char" || filepath.Dir(dir) != filepath.Join(l.realRoot, "devices", "virtual", "vfio") {
		return nil, nil
	}
	group, ok := vfioGroup(filepath.Base(dir))
	if !ok {
		return nil, nil // /dev/vfio/vfio is misc, not here; anything else is unknown
	}
	return l.iommuGroupNodes(group)
}

// nodesAbove is nodesAt without telling whether a numa_node was found.
func (l *locator) nodesAbove(dir string) ([]int, error) {
	nodes, _, err := l.nodesAt(dir)
	return nodes, err
}

// nodesAt walks up from dir towards root/devices to the first numa_node
// file (found): its node, or for -1 the nodes of the local_cpulist beside
// it. Nothing found, or a -1 without a narrowing CPU list, is no node.
func (l *locator) nodesAt(dir string) (nodes []int, found bool, err error) {
	stop := filepath.Join(l.realRoot, "devices")
	for d := dir; within(d, stop) && d != stop; d = filepath.Dir(d) {
		p := filepath.Join(d, "numa_node")
		data, err := os.ReadFile(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, true, fmt.Errorf("sysfs: %w", err)
		}
		text := strings.TrimSpace(string(data))
		n, err := strconv.Atoi(text)
		if err != nil || n >= maxDeviceNUMANode {
			return nil, true, fmt.Errorf("sysfs: %s: want a NUMA node id (or -1) below %d, content %q", p, maxDeviceNUMANode, shorten(text))
		}
		if n >= 0 {
			return []int{n}, true, nil
		}
		nodes, err := l.byLocalCPUs(d)
		return nodes, true, err
	}
	return nil, false, nil
}

// byLocalCPUs is the locality of a function whose numa_node is -1: the
// nodes its local_cpulist names CPUs of (NodesOfCPUs). No local_cpulist
// (a bridge, a virtual device) is no node.
func (l *locator) byLocalCPUs(dir string) ([]int, error) {
	p := filepath.Join(dir, "local_cpulist")
	data, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	cpus, err := ParseList(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("sysfs: %s: %w", p, err)
	}
	if l.nodeCPUs == nil {
		if l.nodeCPUs, err = readNodeCPUs(l.realRoot); err != nil {
			return nil, err
		}
	}
	return NodesOfCPUs(cpus, l.nodeCPUs), nil
}

// readNodeCPUs reads root/devices/system/node/node<N>/cpulist, the nodes
// that have CPUs; none when the tree has no node directory.
func readNodeCPUs(realRoot string) (map[int]cpuset.CPUSet, error) {
	dir := filepath.Join(realRoot, "devices", "system", "node")
	entries, err := os.ReadDir(dir)
	out := map[int]cpuset.CPUSet{}
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	for _, e := range entries {
		n, ok, err := numbered(e.Name(), "node")
		if err != nil || !ok {
			continue // not a node<N> directory (has_cpu, online, ...)
		}
		if n >= maxDeviceNUMANode {
			return nil, fmt.Errorf("sysfs: %s: node %d, want below %d", filepath.Join(dir, e.Name()), n, maxDeviceNUMANode)
		}
		p := filepath.Join(dir, e.Name(), "cpulist")
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("sysfs: %w", err)
		}
		cpus, err := ParseList(strings.TrimSpace(string(data)))
		if err != nil {
			return nil, fmt.Errorf("sysfs: %s: %w", p, err)
		}
		if !cpus.IsEmpty() {
			out[n] = cpus
		}
	}
	return out, nil
}

// NodesOfCPUs is the locality a function's local_cpulist gives when its
// numa_node is -1: the nodes (of nodeCPUs, the machine's nodes with CPUs)
// that local holds CPUs of, ascending. When that is every node, or none,
// the list does not narrow anything and there is no node: the kernel
// writes all online CPUs for a function it knows no node of (the real
// H200 host's GPU: local_cpulist 0-15 on a one-node machine).
func NodesOfCPUs(local cpuset.CPUSet, nodeCPUs map[int]cpuset.CPUSet) []int {
	var nodes []int
	for n, cpus := range nodeCPUs {
		if !cpus.Intersection(local).IsEmpty() {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == len(nodeCPUs) {
		return nil
	}
	sort.Ints(nodes)
	return nodes
}

// vfioGroup is the IOMMU group of a VFIO group class device's name.
func vfioGroup(name string) (int, bool) {
	name = strings.TrimPrefix(name, "noiommu-")
	if name == "" || len(name) > 9 || strings.Trim(name, "0123456789") != "" {
		return 0, false
	}
	n, err := strconv.Atoi(name)
	return n, err == nil
}

// IOMMUGroupNUMANodes returns the NUMA nodes of the devices of IOMMU group
// group (root/kernel/iommu_groups/<group>/devices/*), ascending; none when
// the group does not exist or no member has locality.
func IOMMUGroupNUMANodes(root string, group int) ([]int, error) {
	if group < 0 {
		return nil, fmt.Errorf("sysfs: IOMMU group %d: negative", group)
	}
	l, err := newLocator(root)
	if err != nil {
		return nil, err
	}
	return l.iommuGroupNodes(group)
}

// maxGroupDevices bounds how many members of one IOMMU group are read.
const maxGroupDevices = 256

func (l *locator) iommuGroupNodes(group int) ([]int, error) {
	realRoot := l.realRoot
	dir := filepath.Join(realRoot, "kernel", "iommu_groups", strconv.Itoa(group), "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	if len(entries) > maxGroupDevices {
		return nil, fmt.Errorf("sysfs: %s: %d devices, more than the %d read", dir, len(entries), maxGroupDevices)
	}
	var nodes []int
	for _, e := range entries {
		member, err := inDevices(realRoot, filepath.Join(dir, e.Name()))
		if err != nil || member == "" {
			if err != nil {
				return nil, err
			}
			continue
		}
		ns, err := l.nodesAbove(member)
		if err != nil {
			return nil, err
		}
		for _, node := range ns {
			if !slices.Contains(nodes, node) {
				nodes = append(nodes, node)
			}
		}
	}
	sort.Ints(nodes)
	return nodes, nil
}

// ParsePCIAddress checks a PCI function address in the kernel's form,
// DDDD:BB:DD.F (domain of 4 to 8 hex digits, the wider ones are VMD
// domains; bus; device 00-1f; function 0-7), and returns it in lower case
// as sysfs names it. Anything else is an error quoting the input.
func ParsePCIAddress(s string) (string, error) {
	bad := func(why string) (string, error) {
		return "", fmt.Errorf("sysfs: PCI address %q: %s (want DDDD:BB:DD.F)", shorten(s), why)
	}
	parts := strings.Split(s, ":")
	if len(parts) != 3 {
		return bad("not three colon-separated fields")
	}
	devFn := strings.Split(parts[2], ".")
	if len(devFn) != 2 {
		return bad("no .function")
	}
	dom, bus, dev, fn := parts[0], parts[1], devFn[0], devFn[1]
	if len(dom) < 4 || len(dom) > 8 || !isHex(dom) {
		return bad("domain is not 4 to 8 hex digits")
	}
	if len(bus) != 2 || !isHex(bus) {
		return bad("bus is not 2 hex digits")
	}
	if len(dev) != 2 || !isHex(dev) {
		return bad("device is not 2 hex digits")
	}
	if d, _ := strconv.ParseUint(dev, 16, 8); d > 0x1f {
		return bad("device above 1f")
	}
	if len(fn) != 1 || fn[0] < '0' || fn[0] > '7' {
		return bad("function is not 0-7")
	}
	return strings.ToLower(s), nil
}

func isHex(s string) bool {
	for _, c := range s {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// PCINUMANode returns the NUMA node of the PCI function at addr (checked
// with ParsePCIAddress), read from root/bus/pci/devices/<addr>/numa_node;
// ok is false when sysfs has no such function or it has no locality.
func PCINUMANode(root, addr string) (node int, ok bool, err error) {
	addr, err = ParsePCIAddress(addr)
	if err != nil {
		return 0, false, err
	}
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return 0, false, fmt.Errorf("sysfs: root: %w", err)
	}
	dir, err := inDevices(realRoot, filepath.Join(realRoot, "bus", "pci", "devices", addr))
	if err != nil || dir == "" {
		return 0, false, err
	}
	return nodeAbove(dir, filepath.Join(realRoot, "devices"))
}

// Locality is one device and the NUMA nodes it gave (none: no locality).
type Locality struct {
	Device Device
	Nodes  []int
}

// DeviceLocalities looks up every device with DeviceNodes, in order. The
// first error stops the walk (it names the file or the input).
func DeviceLocalities(root string, devs []Device) ([]Locality, error) {
	l, err := newLocator(root)
	if err != nil {
		return nil, err
	}
	out := make([]Locality, 0, len(devs))
	for _, d := range devs {
		nodes, err := l.nodes(d)
		if err != nil {
			return nil, err
		}
		out = append(out, Locality{Device: d, Nodes: nodes})
	}
	return out, nil
}

// DeviceNUMANodes returns the distinct NUMA nodes of a container's devices,
// ascending, for one device hint provider (policy.Engine.DeviceHints):
// the container holds all of them, so its hints must cover every node.
// Devices without NUMA affinity are skipped; an empty result means no
// preference. The first error stops the walk (it names the file).
func DeviceNUMANodes(root string, devs []Device) ([]int, error) {
	locs, err := DeviceLocalities(root, devs)
	if err != nil {
		return nil, err
	}
	return UnionNodes(locs), nil
}

// UnionNodes is the distinct nodes of locs, ascending.
func UnionNodes(locs []Locality) []int {
	var nodes []int
	for _, l := range locs {
		for _, n := range l.Nodes {
			if !slices.Contains(nodes, n) {
				nodes = append(nodes, n)
			}
		}
	}
	sort.Ints(nodes)
	return nodes
}

// maxDeviceNUMANode bounds the node ids DeviceNUMANode accepts: hints.Mask
// holds 64 nodes.
const maxDeviceNUMANode = 64

// shorten keeps error texts readable when a file holds garbage.
func shorten(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// within reports whether path is dir or below it (both cleaned, absolute).
func within(path, dir string) bool {
	return path == dir || strings.HasPrefix(path, dir+string(filepath.Separator))
}
