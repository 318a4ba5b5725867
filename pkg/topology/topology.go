// Package topology is the plain, immutable model of a machine's CPUs that
// every other package shares: which logical CPUs exist, and to which core,
// socket, die, NUMA node and uncore (L3) cache group each belongs, plus NUMA
// distances, per-node memory and the isolated CPUs.
//
// It does no I/O: pkg/sysfs reads a machine into a Machine and calls New.
// Every query returns fresh values and never modifies the Topology, so one
// Topology can be shared by concurrent readers without a lock.
package topology

import (
	"fmt"
	"maps"
	"slices"
	"sort"

	"k8s.io/utils/cpuset"
)

// CPUInfo describes one online logical CPU.
type CPUInfo struct {
	// CPU is the logical CPU id (cpuN in sysfs).
	CPU int `json:"cpu"`
	// Core is a machine-wide core id: the lowest logical CPU id among the
	// core's threads. The kubelet identifies cores this way, and every
	// "lowest id first" tie-break uses it.
	Core int `json:"core"`
	// SysfsCoreID is topology/core_id as sysfs reports it; it repeats across
	// sockets and is kept only for display.
	SysfsCoreID int `json:"sysfs_core_id"`
	// Socket is topology/physical_package_id.
	Socket int `json:"socket"`
	// Die is topology/die_id (0 where the kernel does not report dies).
	Die int `json:"die"`
	// NUMA is the NUMA node whose cpulist holds this CPU.
	NUMA int `json:"numa"`
	// L3 is the uncore cache group id the allocator uses (the kubelet's
	// UncoreCacheID: the L3 id, or the socket id where the kubelet falls back
	// to it).
	L3 int `json:"l3"`
}

// Machine is the raw input to New.
type Machine struct {
	// CPUs lists every online CPU once, in any order.
	CPUs []CPUInfo
	// Distances[a][b] is the distance from NUMA node a to NUMA node b, as
	// in nodeA/distance. May be nil (all nodes then count as equally far).
	Distances map[int]map[int]int
	// MemoryBytes is MemTotal per NUMA node, including memory-only nodes.
	MemoryBytes map[int]uint64
	// Isolated are the isolcpus CPUs (devices/system/cpu/isolated).
	Isolated cpuset.CPUSet
}

// Topology is an immutable, validated Machine with precomputed groupings.
type Topology struct {
	cpus      []CPUInfo      // sorted by CPU id
	index     map[int]int    // CPU id -> position in cpus
	all       cpuset.CPUSet  // every online CPU
	bySocket  map[int][]int  // socket -> CPU ids, ascending
	byNUMA    map[int][]int  // NUMA node -> CPU ids
	byL3      map[int][]int  // L3 group -> CPU ids
	byCore    map[int][]int  // core id -> CPU ids
	sockets   []int          // ascending ids
	numaNodes []int          // NUMA nodes that have CPUs, ascending
	l3s       []int          // ascending
	cores     []int          // ascending
	memNodes  []int          // NUMA nodes with memory > 0, ascending
	memory    map[int]uint64 // MemTotal per node
	distances map[int]map[int]int
	isolated  cpuset.CPUSet
}

// New validates m and builds a Topology. It returns an error (never panics)
// when CPU ids repeat, ids are negative, a CPU id exceeds MaxCPUID, a core
// spans sockets or NUMA nodes, or there are no CPUs.
func New(m Machine) (*Topology, error) {
	if len(m.CPUs) == 0 {
		return nil, fmt.Errorf("topology: no online CPUs")
	}
	t := &Topology{
		index:     make(map[int]int, len(m.CPUs)),
		bySocket:  map[int][]int{},
		byNUMA:    map[int][]int{},
		byL3:      map[int][]int{},
		byCore:    map[int][]int{},
		memory:    map[int]uint64{},
		distances: map[int]map[int]int{},
		isolated:  m.Isolated.Clone(),
	}
	t.cpus = append([]CPUInfo(nil), m.CPUs...)
	sort.Slice(t.cpus, func(i, j int) bool { return t.cpus[i].CPU < t.cpus[j].CPU })
	ids := make([]int, 0, len(t.cpus))
	for i, c := range t.cpus {
		if c.CPU < 0 || c.Core < 0 || c.Socket < 0 || c.NUMA < 0 || c.L3 < 0 || c.Die < 0 {
			return nil, fmt.Errorf("topology: cpu %d has a negative id: %+v", c.CPU, c)
		}
		if c.CPU > MaxCPUID {
			return nil, fmt.Errorf("topology: cpu id %d above the largest supported id %d", c.CPU, MaxCPUID)
		}
		if _, dup := t.index[c.CPU]; dup {
			return nil, fmt.Errorf("topology: cpu %d listed twice", c.CPU)
		}
		t.index[c.CPU] = i
		ids = append(ids, c.CPU)
		t.bySocket[c.Socket] = append(t.bySocket[c.Socket], c.CPU)
		t.byNUMA[c.NUMA] = append(t.byNUMA[c.NUMA], c.CPU)
		t.byL3[c.L3] = append(t.byL3[c.L3], c.CPU)
		t.byCore[c.Core] = append(t.byCore[c.Core], c.CPU)
	}
	for core, cpus := range t.byCore {
		first := t.cpus[t.index[cpus[0]]]
		for _, cpu := range cpus[1:] {
			c := t.cpus[t.index[cpu]]
			if c.Socket != first.Socket || c.NUMA != first.NUMA {
				return nil, fmt.Errorf("topology: core %d spans cpus %d and %d on different sockets or NUMA nodes", core, first.CPU, c.CPU)
			}
		}
	}
	if !t.isolated.IsSubsetOf(cpuset.New(ids...)) {
		// isolcpus may name offline CPUs; keep only the online ones.
		t.isolated = t.isolated.Intersection(cpuset.New(ids...))
	}
	t.all = cpuset.New(ids...)
	t.sockets = slices.Sorted(maps.Keys(t.bySocket))
	t.numaNodes = slices.Sorted(maps.Keys(t.byNUMA))
	t.l3s = slices.Sorted(maps.Keys(t.byL3))
	t.cores = slices.Sorted(maps.Keys(t.byCore))
	for node, b := range m.MemoryBytes {
		if node < 0 {
			return nil, fmt.Errorf("topology: negative NUMA node id %d in memory map", node)
		}
		t.memory[node] = b
		if b > 0 {
			t.memNodes = append(t.memNodes, node)
		}
	}
	sort.Ints(t.memNodes)
	for a, row := range m.Distances {
		t.distances[a] = map[int]int{}
		for b, d := range row {
			t.distances[a][b] = d
		}
	}
	return t, nil
}

// CPUs returns every online CPU.
func (t *Topology) CPUs() cpuset.CPUSet { return t.all }

// Details returns a copy of the per-CPU records, sorted by CPU id.
func (t *Topology) Details() []CPUInfo { return append([]CPUInfo(nil), t.cpus...) }

// Info returns the record of one CPU and whether it is online.
func (t *Topology) Info(cpu int) (CPUInfo, bool) {
	i, ok := t.index[cpu]
	if !ok {
		return CPUInfo{}, false
	}
	return t.cpus[i], true
}

// NumCPUs is the number of online logical CPUs.
func (t *Topology) NumCPUs() int { return len(t.cpus) }

// NumCores is the number of physical cores.
func (t *Topology) NumCores() int { return len(t.cores) }

// NumSockets is the number of sockets.
func (t *Topology) NumSockets() int { return len(t.sockets) }

// NumNUMANodes is the number of NUMA nodes that have CPUs.
func (t *Topology) NumNUMANodes() int { return len(t.numaNodes) }

// NumL3 is the number of uncore cache groups.
func (t *Topology) NumL3() int { return len(t.l3s) }

// CPUsPerCore is the machine average NumCPUs/NumCores (integer division),
// as the kubelet computes it: 1 on hybrid parts where only some cores have
// two threads.
func (t *Topology) CPUsPerCore() int { return len(t.cpus) / len(t.cores) }

// CPUsPerSocket is NumCPUs/NumSockets.
func (t *Topology) CPUsPerSocket() int { return len(t.cpus) / len(t.sockets) }

// CPUsPerNUMA is NumCPUs/NumNUMANodes.
func (t *Topology) CPUsPerNUMA() int { return len(t.cpus) / len(t.numaNodes) }

// CPUsPerL3 is NumCPUs/NumL3 (the kubelet's CPUsPerUncore).
func (t *Topology) CPUsPerL3() int { return len(t.cpus) / len(t.l3s) }

// MaxThreadsPerCore is the largest number of threads any core has.
func (t *Topology) MaxThreadsPerCore() int {
	n := 0
	for _, cpus := range t.byCore {
		if len(cpus) > n {
			n = len(cpus)
		}
	}
	return n
}

// Sockets returns the socket ids, ascending.
func (t *Topology) Sockets() []int { return append([]int(nil), t.sockets...) }

// NUMANodes returns the ids of NUMA nodes that have CPUs, ascending.
func (t *Topology) NUMANodes() []int { return append([]int(nil), t.numaNodes...) }

// L3Groups returns the uncore cache group ids, ascending.
func (t *Topology) L3Groups() []int { return append([]int(nil), t.l3s...) }

// Cores returns the machine-wide core ids, ascending.
func (t *Topology) Cores() []int { return append([]int(nil), t.cores...) }

// MemoryNodes returns the NUMA nodes that have memory (including CPU-less
// ones), ascending.
func (t *Topology) MemoryNodes() []int { return append([]int(nil), t.memNodes...) }

// MemTotal returns MemTotal of a NUMA node in bytes (0 if unknown).
func (t *Topology) MemTotal(node int) uint64 { return t.memory[node] }

// Isolated returns the isolated (isolcpus) online CPUs.
func (t *Topology) Isolated() cpuset.CPUSet { return t.isolated }

// Distance returns the distance between two NUMA nodes and whether it is
// known.
func (t *Topology) Distance(a, b int) (int, bool) {
	row, ok := t.distances[a]
	if !ok {
		return 0, false
	}
	d, ok := row[b]
	return d, ok
}

// Distances returns a copy of the distance table.
func (t *Topology) Distances() map[int]map[int]int {
	out := make(map[int]map[int]int, len(t.distances))
	for a, row := range t.distances {
		out[a] = make(map[int]int, len(row))
		for b, d := range row {
			out[a][b] = d
		}
	}
	return out
}

func (t *Topology) collect(groups map[int][]int, ids []int) cpuset.CPUSet {
	var cpus []int
	for _, id := range ids {
		cpus = append(cpus, groups[id]...)
	}
	return cpuset.New(cpus...)
}

// CPUsInSockets returns the CPUs of the given sockets.
func (t *Topology) CPUsInSockets(ids ...int) cpuset.CPUSet { return t.collect(t.bySocket, ids) }

// CPUsInNUMANodes returns the CPUs of the given NUMA nodes.
func (t *Topology) CPUsInNUMANodes(ids ...int) cpuset.CPUSet { return t.collect(t.byNUMA, ids) }

// CPUsInL3Groups returns the CPUs of the given uncore cache groups.
func (t *Topology) CPUsInL3Groups(ids ...int) cpuset.CPUSet { return t.collect(t.byL3, ids) }

// CPUsInCores returns the CPUs (threads) of the given cores.
func (t *Topology) CPUsInCores(ids ...int) cpuset.CPUSet { return t.collect(t.byCore, ids) }

// Siblings returns the threads of cpu's core, cpu included (empty if cpu is
// not online).
func (t *Topology) Siblings(cpu int) cpuset.CPUSet {
	c, ok := t.Info(cpu)
	if !ok {
		return cpuset.New()
	}
	return cpuset.New(t.byCore[c.Core]...)
}

func (t *Topology) distinct(cpus cpuset.CPUSet, field func(CPUInfo) int) []int {
	seen := map[int]bool{}
	var out []int
	for _, cpu := range cpus.UnsortedList() {
		c, ok := t.Info(cpu)
		if !ok {
			continue
		}
		if v := field(c); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out
}

// SocketsOf returns the sockets the given CPUs sit on, ascending.
func (t *Topology) SocketsOf(cpus cpuset.CPUSet) []int {
	return t.distinct(cpus, func(c CPUInfo) int { return c.Socket })
}

// NUMANodesOf returns the NUMA nodes of the given CPUs, ascending.
func (t *Topology) NUMANodesOf(cpus cpuset.CPUSet) []int {
	return t.distinct(cpus, func(c CPUInfo) int { return c.NUMA })
}

// L3GroupsOf returns the uncore cache groups of the given CPUs, ascending.
func (t *Topology) L3GroupsOf(cpus cpuset.CPUSet) []int {
	return t.distinct(cpus, func(c CPUInfo) int { return c.L3 })
}

// CoresOf returns the cores of the given CPUs, ascending.
func (t *Topology) CoresOf(cpus cpuset.CPUSet) []int {
	return t.distinct(cpus, func(c CPUInfo) int { return c.Core })
}

// NUMANodesInSocket returns the NUMA nodes with CPUs on a socket, ascending.
func (t *Topology) NUMANodesInSocket(socket int) []int {
	return t.NUMANodesOf(t.CPUsInSockets(socket))
}

// SocketsInNUMANode returns the sockets with CPUs in a NUMA node, ascending.
func (t *Topology) SocketsInNUMANode(node int) []int {
	return t.SocketsOf(t.CPUsInNUMANodes(node))
}
