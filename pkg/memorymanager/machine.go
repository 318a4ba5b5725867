package memorymanager

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Resource is a memory resource name as Kubernetes spells it: "memory" or
// "hugepages-<size>" ("hugepages-2Mi", "hugepages-1Gi").
type Resource string

// Memory is regular memory.
const Memory Resource = "memory"

const hugepagesPrefix = "hugepages-"

// IsHugepages reports whether r names a hugepage resource.
func (r Resource) IsHugepages() bool {
	return strings.HasPrefix(string(r), hugepagesPrefix) && len(r) > len(hugepagesPrefix)
}

// valid reports whether r is one the memory manager accounts: memory or a
// hugepage size.
func (r Resource) valid() bool { return r == Memory || r.IsHugepages() }

// HugepagesResource returns the resource name of a hugepage size in bytes,
// the way the kubelet names it from the page size: 2 MiB is
// "hugepages-2Mi", 1 GiB "hugepages-1Gi".
func HugepagesResource(pageSize uint64) Resource {
	return Resource(hugepagesPrefix + FormatBytes(pageSize))
}

// FormatBytes writes a byte count the way a binary-SI Kubernetes quantity
// prints: with the largest of Ki, Mi, Gi, Ti, Pi, Ei that divides it
// exactly, else as a plain number ("2Mi", "1536Mi", "1000").
func FormatBytes(n uint64) string {
	suffixes := []string{"", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"}
	i := 0
	for n != 0 && n%1024 == 0 && i < len(suffixes)-1 {
		n /= 1024
		i++
	}
	return strconv.FormatUint(n, 10) + suffixes[i]
}

// NodeCapacity is what one NUMA node has: its MemTotal and its hugepage
// pools. The memory manager's input; reading it from sysfs is the caller's
// job.
type NodeCapacity struct {
	ID int
	// Memory is the node's MemTotal in bytes (hugepage pools included, as
	// in nodeN/meminfo).
	Memory uint64
	// Hugepages maps a page size in bytes to the number of pages of that
	// size the node holds (nodeN/hugepages/hugepages-<kB>kB/nr_hugepages).
	Hugepages map[uint64]uint64
}

// Reservation is one entry of the kubelet's reservedMemory: memory kept
// from containers on one NUMA node, per resource, in bytes.
type Reservation struct {
	NUMANode int
	Limits   map[Resource]uint64
}

// ValidateReservations applies the kubelet's configuration checks to
// reservedMemory (each its error text): a limit is memory or a hugepage
// size, is not zero, and a node and resource pair appears once.
func ValidateReservations(reserved []Reservation) []error {
	var errs []error
	seen := map[int]map[Resource]bool{}
	for _, r := range reserved {
		if seen[r.NUMANode] == nil {
			seen[r.NUMANode] = map[Resource]bool{}
		}
		for _, name := range sortedResources(r.Limits) {
			if !name.valid() {
				errs = append(errs, fmt.Errorf("invalid configuration: the limit type %q for NUMA node %d is not supported, only [memory hugepages-<HugePageSize>] is accepted", name, r.NUMANode))
			}
			if r.Limits[name] == 0 {
				errs = append(errs, fmt.Errorf("invalid configuration: reserved memory may not be zero for NUMA node %d and resource %q", r.NUMANode, name))
			}
			if seen[r.NUMANode][name] {
				errs = append(errs, fmt.Errorf("invalid configuration: the reserved memory has a duplicate value for NUMA node %d and resource %q", r.NUMANode, name))
			}
			seen[r.NUMANode][name] = true
		}
	}
	return errs
}

// ValidateReservedTotals is the kubelet's start-up check of reservedMemory
// against Node Allocatable: every reservation names a node of the machine,
// and for each memory resource the sum over the nodes equals what Node
// Allocatable holds back for it. nodeAllocatable is, per resource, the
// kubelet's kubeReserved + systemReserved + the hard eviction threshold
// (memory.available, for "memory" only), in bytes. The error texts are the
// kubelet's; amounts print as FormatBytes does, where the kubelet prints
// each quantity in the format it was written in ("1Gi" alike, "1G" not).
func ValidateReservedTotals(nodes []int, reserved []Reservation, nodeAllocatable map[Resource]uint64) error {
	totals := map[Resource]uint64{}
	for _, r := range reserved {
		if !slices.Contains(nodes, r.NUMANode) {
			return fmt.Errorf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NUMANode)
		}
		for name, v := range r.Limits {
			totals[name] += v
		}
	}
	names := map[Resource]uint64{}
	for name := range totals {
		names[name] = 0
	}
	for name := range nodeAllocatable {
		if name.valid() {
			names[name] = 0
		}
	}
	for _, name := range sortedResources(names) {
		if totals[name] != nodeAllocatable[name] {
			return fmt.Errorf("the total amount %q of type %q is not equal to the value %q determined by Node Allocatable feature",
				FormatBytes(totals[name]), name, FormatBytes(nodeAllocatable[name]))
		}
	}
	return nil
}

func sortedResources[V any](m map[Resource]V) []Resource {
	out := make([]Resource, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// NewState returns the machine state of a machine with no assignment: per
// node and resource, Allocatable = total - the node's reservation, all of
// it free; regular memory's total is MemTotal and its allocatable also
// leaves out the node's hugepage pools. The kubelet refuses the Static
// policy without any reserved memory ("you should specify the system
// reserved memory"); a reservation larger than what it is taken from is
// refused here too (the kubelet's arithmetic would wrap).
func NewState(machine []NodeCapacity, reserved []Reservation) (State, error) {
	if errs := ValidateReservations(reserved); len(errs) > 0 {
		return State{}, errs[0]
	}
	ids := make([]int, 0, len(machine))
	for _, n := range machine {
		if n.ID < 0 || n.ID >= maxNodes {
			return State{}, fmt.Errorf("NUMA node id %d out of range [0, %d)", n.ID, maxNodes)
		}
		if slices.Contains(ids, n.ID) {
			return State{}, fmt.Errorf("NUMA node %d listed twice", n.ID)
		}
		ids = append(ids, n.ID)
	}
	if len(ids) == 0 {
		return State{}, fmt.Errorf("no NUMA nodes")
	}
	byNode := map[int]map[Resource]uint64{}
	var memReserved uint64
	for _, r := range reserved {
		if !slices.Contains(ids, r.NUMANode) {
			return State{}, fmt.Errorf("the reserved memory configuration references a NUMA node %d that does not exist on this machine", r.NUMANode)
		}
		if byNode[r.NUMANode] == nil {
			byNode[r.NUMANode] = map[Resource]uint64{}
		}
		for name, v := range r.Limits {
			byNode[r.NUMANode][name] = v
			if name == Memory {
				memReserved += v
			}
		}
	}
	if memReserved == 0 {
		return State{}, fmt.Errorf("[memorymanager] you should specify the system reserved memory")
	}
	st := State{Nodes: map[int]NodeState{}}
	for _, n := range machine {
		ns := NodeState{MemoryMap: map[Resource]MemoryTable{}, Cells: []int{n.ID}}
		var inPools uint64
		sizes := make([]uint64, 0, len(n.Hugepages))
		for size := range n.Hugepages {
			sizes = append(sizes, size)
		}
		slices.Sort(sizes)
		for _, size := range sizes {
			name := HugepagesResource(size)
			count := n.Hugepages[size]
			if size != 0 && count > ^uint64(0)/size {
				return State{}, fmt.Errorf("NUMA node %d: %d pages of %s overflow", n.ID, count, name)
			}
			total := count * size
			t, err := newTable(n.ID, name, total, byNode[n.ID][name])
			if err != nil {
				return State{}, err
			}
			ns.MemoryMap[name] = t
			inPools += total
		}
		t, err := newTable(n.ID, Memory, n.Memory, byNode[n.ID][Memory])
		if err != nil {
			return State{}, err
		}
		if t.Allocatable < inPools {
			return State{}, fmt.Errorf("NUMA node %d: hugepage pools (%s) leave no room for the memory reservation (%s of %s)",
				n.ID, FormatBytes(inPools), FormatBytes(t.SystemReserved), FormatBytes(t.TotalMemSize))
		}
		t.Allocatable -= inPools
		t.Free = t.Allocatable
		ns.MemoryMap[Memory] = t
		for name := range byNode[n.ID] {
			if _, ok := ns.MemoryMap[name]; !ok {
				return State{}, fmt.Errorf("NUMA node %d: reserved %s of %s, which the node does not have", n.ID, FormatBytes(byNode[n.ID][name]), name)
			}
		}
		st.Nodes[n.ID] = ns
	}
	return st, nil
}

func newTable(node int, name Resource, total, reserved uint64) (MemoryTable, error) {
	if reserved > total {
		return MemoryTable{}, fmt.Errorf("NUMA node %d: reserved %s of %s exceeds its %s", node, FormatBytes(reserved), name, FormatBytes(total))
	}
	return MemoryTable{TotalMemSize: total, SystemReserved: reserved, Allocatable: total - reserved, Free: total - reserved}, nil
}
