package take

import (
	"math/bits"
	"sync"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Bits is a set of CPU positions (indexes into a Machine's online CPUs,
// ascending by id). The allocator works on Bits internally and converts to
// cpuset.CPUSet only at its API boundary: a 256-CPU machine is four words.
// Operations on two sets need them of the same Machine.
type Bits []uint64

// NewBits is an empty set of n positions (Machine.N).
func NewBits(n int) Bits { return make(Bits, (n+63)/64) }

func (b Bits) has(i int) bool { return b[i>>6]&(1<<uint(i&63)) != 0 }

// Set and Clear add and remove position i.
func (b Bits) Set(i int)   { b[i>>6] |= 1 << uint(i&63) }
func (b Bits) Clear(i int) { b[i>>6] &^= 1 << uint(i&63) }

// Count is the number of positions in b.
func (b Bits) Count() int {
	n := 0
	for _, w := range b {
		n += bits.OnesCount64(w)
	}
	return n
}

// Clone is a copy of b.
func (b Bits) Clone() Bits { return append(Bits(nil), b...) }

// Intersects reports whether b and o share a position.
func (b Bits) Intersects(o Bits) bool {
	for i, w := range b {
		if w&o[i] != 0 {
			return true
		}
	}
	return false
}

// AndCount is |b ∩ o|, without building the set.
func (b Bits) AndCount(o Bits) int {
	n := 0
	for i, w := range b {
		n += bits.OnesCount64(w & o[i])
	}
	return n
}

// AndNotCount is |b − o|, without building the set.
func (b Bits) AndNotCount(o Bits) int {
	n := 0
	for i, w := range b {
		n += bits.OnesCount64(w &^ o[i])
	}
	return n
}

// And returns b ∩ o as a new set.
func (b Bits) And(o Bits) Bits {
	out := make(Bits, len(b))
	for i, w := range b {
		out[i] = w & o[i]
	}
	return out
}

// AndNot returns b − o as a new set.
func (b Bits) AndNot(o Bits) Bits {
	out := make(Bits, len(b))
	for i, w := range b {
		out[i] = w &^ o[i]
	}
	return out
}

// Or returns b ∪ o as a new set.
func (b Bits) Or(o Bits) Bits {
	out := make(Bits, len(b))
	for i, w := range b {
		out[i] = w | o[i]
	}
	return out
}

// ForEach calls f for every position, ascending.
func (b Bits) ForEach(f func(i int)) {
	for wi, w := range b {
		for w != 0 {
			t := bits.TrailingZeros64(w)
			f(wi<<6 + t)
			w &= w - 1
		}
	}
}

// Level is one grouping of the machine's CPUs (cores, sockets, NUMA nodes
// or uncore caches), indexed densely in ascending id order so that "lowest
// id first" tie-breaks compare indexes. Its slices are the Machine's own:
// read them, never write them.
type Level struct {
	ids  []int   // index -> group id
	cpus [][]int // index -> CPU positions, ascending
	mask []Bits  // index -> the same CPUs as a set
}

// IDs is the group ids by index.
func (l *Level) IDs() []int { return l.ids }

// CPUs is group g's CPU positions, ascending.
func (l *Level) CPUs(g int) []int { return l.cpus[g] }

// Mask is group g's CPUs as a set.
func (l *Level) Mask(g int) Bits { return l.mask[g] }

// Size is group g's CPU count.
func (l *Level) Size(g int) int { return len(l.cpus[g]) }

// Machine is the allocator's precomputed view of a Topology: every
// grouping the kubelet's accumulator queries, built once per policy so a
// decision costs time linear in the CPUs and allocates little. It is
// immutable after NewMachine and safe for concurrent use.
type Machine struct {
	n     int   // online CPUs
	cpuID []int // position -> CPU id, ascending
	posOf []int // CPU id -> position, -1 for ids that are not online
	// identity: CPU ids are exactly 0..n-1, so a position set and a
	// cpumask.Mask have the same words (the common case: no CPU offline).
	identity bool

	coreOf, sockOf, numaOf, l3Of []int // position -> group index
	cores, socks, numas, l3s     Level

	cpusPerCore   int // machine averages, as the kubelet computes them
	cpusPerSocket int
	cpusPerL3     int
	maxThreads    int
	minThreads    int // CPUs of the smallest core

	// numaFirst: NumSockets >= NumNUMANodes, so NUMA nodes are the first
	// (larger) level of the hierarchy; otherwise sockets are.
	numaFirst bool
	// l1/l2 are the first and second hierarchy levels; l1Kids lists, for
	// each first-level group, the second-level groups sharing CPUs with it
	// and l1KidMask those shared CPUs. l2Cores lists each second-level
	// group's cores.
	l1, l2    *Level
	l1Kids    [][]int
	l1KidMask [][]Bits
	l2Cores   [][]int
	// numaL3 lists each NUMA node's uncore caches and numaL3Mask the CPUs
	// they share; l3Cores each uncore cache's cores.
	numaL3     [][]int
	numaL3Mask [][]Bits
	l3Cores    [][]int

	accs sync.Pool // of *accumulator sized for this machine
}

// NewMachine precomputes the groupings of t.
func NewMachine(t *topology.Topology) *Machine {
	details := t.Details()
	m := &Machine{n: len(details)}
	maxID := 0
	for _, c := range details {
		if c.CPU > maxID {
			maxID = c.CPU
		}
	}
	m.posOf = make([]int, maxID+1)
	for i := range m.posOf {
		m.posOf[i] = -1
	}
	m.cpuID = make([]int, m.n)
	m.identity = true
	for i, c := range details {
		m.cpuID[i] = c.CPU
		m.posOf[c.CPU] = i
		m.identity = m.identity && c.CPU == i
	}
	m.coreOf = buildLevel(&m.cores, details, func(c topology.CPUInfo) int { return c.Core })
	m.sockOf = buildLevel(&m.socks, details, func(c topology.CPUInfo) int { return c.Socket })
	m.numaOf = buildLevel(&m.numas, details, func(c topology.CPUInfo) int { return c.NUMA })
	m.l3Of = buildLevel(&m.l3s, details, func(c topology.CPUInfo) int { return c.L3 })

	m.cpusPerCore = m.n / len(m.cores.ids)
	m.cpusPerSocket = m.n / len(m.socks.ids)
	m.cpusPerL3 = m.n / len(m.l3s.ids)
	m.minThreads = m.n
	for _, c := range m.cores.cpus {
		m.maxThreads = max(m.maxThreads, len(c))
		m.minThreads = min(m.minThreads, len(c))
	}
	m.numaFirst = len(m.socks.ids) >= len(m.numas.ids)
	var l1Of, l2Of []int
	if m.numaFirst {
		m.l1, m.l2, l1Of, l2Of = &m.numas, &m.socks, m.numaOf, m.sockOf
	} else {
		m.l1, m.l2, l1Of, l2Of = &m.socks, &m.numas, m.sockOf, m.numaOf
	}
	m.l1Kids, m.l1KidMask = m.crossing(len(m.l1.ids), len(m.l2.ids), l1Of, l2Of)
	m.l2Cores = m.members(len(m.l2.ids), l2Of)
	m.numaL3, m.numaL3Mask = m.crossing(len(m.numas.ids), len(m.l3s.ids), m.numaOf, m.l3Of)
	m.l3Cores = m.members(len(m.l3s.ids), m.l3Of)
	return m
}

// N is the number of online CPUs (positions 0..N-1).
func (m *Machine) N() int { return m.n }

// Cores, Sockets, NUMAs and L3s are the machine's groupings.
func (m *Machine) Cores() *Level   { return &m.cores }
func (m *Machine) Sockets() *Level { return &m.socks }
func (m *Machine) NUMAs() *Level   { return &m.numas }
func (m *Machine) L3s() *Level     { return &m.l3s }

// CoreOf, SocketOf and NUMAOf are position p's group indexes.
func (m *Machine) CoreOf(p int) int   { return m.coreOf[p] }
func (m *Machine) SocketOf(p int) int { return m.sockOf[p] }
func (m *Machine) NUMAOf(p int) int   { return m.numaOf[p] }

// Pos is an online CPU's position.
func (m *Machine) Pos(cpu int) int { return m.posOf[cpu] }

// CPUsPerCore is the machine average (CPUs / cores), as the kubelet
// computes it: full-pcpus-only's unit.
func (m *Machine) CPUsPerCore() int { return m.cpusPerCore }

// buildLevel groups the CPUs by key into lv and returns position -> index.
func buildLevel(lv *Level, details []topology.CPUInfo, key func(topology.CPUInfo) int) []int {
	seen := map[int]bool{}
	for _, c := range details {
		if k := key(c); !seen[k] {
			seen[k] = true
			lv.ids = append(lv.ids, k)
		}
	}
	sortInts(lv.ids)
	idx := make(map[int]int, len(lv.ids))
	for i, id := range lv.ids {
		idx[id] = i
	}
	lv.cpus = make([][]int, len(lv.ids))
	lv.mask = make([]Bits, len(lv.ids))
	of := make([]int, len(details))
	for p, c := range details {
		g := idx[key(c)]
		of[p] = g
		lv.cpus[g] = append(lv.cpus[g], p)
	}
	for g, cpus := range lv.cpus {
		lv.mask[g] = NewBits(len(details))
		for _, p := range cpus {
			lv.mask[g].Set(p)
		}
	}
	return of
}

// crossing lists, for each group of an outer level, the inner-level groups
// that share CPUs with it (ascending) and the shared CPUs.
func (m *Machine) crossing(nOuter, nInner int, outerOf, innerOf []int) ([][]int, [][]Bits) {
	kids := make([][]int, nOuter)
	masks := make([][]Bits, nOuter)
	slot := make([]map[int]int, nOuter)
	for o := range slot {
		slot[o] = map[int]int{}
	}
	for p := 0; p < m.n; p++ {
		o, in := outerOf[p], innerOf[p]
		k, ok := slot[o][in]
		if !ok {
			k = len(kids[o])
			slot[o][in] = k
			kids[o] = append(kids[o], in)
			masks[o] = append(masks[o], NewBits(m.n))
		}
		masks[o][k].Set(p)
	}
	for o := range kids {
		// Sort kids ascending, keeping masks parallel.
		for i := 1; i < len(kids[o]); i++ {
			for j := i; j > 0 && kids[o][j] < kids[o][j-1]; j-- {
				kids[o][j], kids[o][j-1] = kids[o][j-1], kids[o][j]
				masks[o][j], masks[o][j-1] = masks[o][j-1], masks[o][j]
			}
		}
	}
	return kids, masks
}

// members lists, for each group of a level, the cores with a CPU in it
// (ascending core index).
func (m *Machine) members(nGroups int, groupOf []int) [][]int {
	out := make([][]int, nGroups)
	for c, cpus := range m.cores.cpus {
		seen := map[int]bool{}
		for _, p := range cpus {
			if g := groupOf[p]; !seen[g] {
				seen[g] = true
				out[g] = append(out[g], c)
			}
		}
	}
	return out
}

func sortInts(a []int) {
	for i := 1; i < len(a); i++ {
		for j := i; j > 0 && a[j] < a[j-1]; j-- {
			a[j], a[j-1] = a[j-1], a[j]
		}
	}
}

// ToBits converts a CPUSet; CPUs that are not online are ignored (callers
// validate first where that matters).
func (m *Machine) ToBits(s cpuset.CPUSet) Bits {
	b := NewBits(m.n)
	for _, cpu := range s.UnsortedList() {
		if cpu >= 0 && cpu < len(m.posOf) && m.posOf[cpu] >= 0 {
			b.Set(m.posOf[cpu])
		}
	}
	return b
}

// ToSet converts back to a CPUSet.
func (m *Machine) ToSet(b Bits) cpuset.CPUSet {
	ids := make([]int, 0, b.Count())
	b.ForEach(func(p int) { ids = append(ids, m.cpuID[p]) })
	return cpuset.New(ids...)
}

// MaskBits converts a Mask; CPUs that are not online are ignored.
func (m *Machine) MaskBits(s cpumask.Mask) Bits {
	b := NewBits(m.n)
	if m.identity {
		for i := range b {
			b[i] = s.Word(i)
		}
		if r := m.n & 63; r != 0 {
			b[len(b)-1] &= 1<<uint(r) - 1
		}
		return b
	}
	s.ForEach(func(cpu int) {
		if cpu < len(m.posOf) && m.posOf[cpu] >= 0 {
			b.Set(m.posOf[cpu])
		}
	})
	return b
}

// BitsMask converts back to a Mask. Topology bounds CPU ids by
// MaxCPUID, which is cpumask.MaxID, so the conversion cannot fail.
func (m *Machine) BitsMask(b Bits) cpumask.Mask {
	var (
		out cpumask.Mask
		err error
	)
	if m.identity {
		out, err = cpumask.FromWords(b)
	} else {
		ids := make([]int, 0, b.Count())
		b.ForEach(func(p int) { ids = append(ids, m.cpuID[p]) })
		out, err = cpumask.New(ids...)
	}
	if err != nil {
		// Unreachable (see above); an empty mask fails Validate loudly
		// rather than taking the process down.
		return cpumask.Mask{}
	}
	return out
}

// SetMask converts a CPUSet of online CPUs to a Mask (others are dropped).
func (m *Machine) SetMask(s cpuset.CPUSet) cpumask.Mask { return m.BitsMask(m.ToBits(s)) }

// All returns every online CPU.
func (m *Machine) All() Bits {
	b := NewBits(m.n)
	for p := 0; p < m.n; p++ {
		b.Set(p)
	}
	return b
}
