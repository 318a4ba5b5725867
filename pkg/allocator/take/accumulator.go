package take

import "math/bits"

// accumulator is one run of the kubelet's topology-aware best fit: it claims
// CPUs from the free set, whole groups first, until need reaches zero. It
// lives for one Packed or Distributed call, between newAccumulator and
// finish.
type accumulator struct {
	m      *Machine
	free   Bits // CPUs that may still be claimed
	result Bits // CPUs claimed so far
	need   int
	v137   bool // kubelet v1.37.2's rules (Fit.V137)

	coreFree, sockFree, numaFree, l3Free []int // free CPUs per group
	l1Free, l2Free                       []int // aliases by hierarchy level
}

// Fit is what one best-fit run reads besides the free CPUs and the need:
// the static-policy options that steer it and the kubelet release whose
// rules it follows.
type Fit struct {
	Spread   bool // distribute-cpus-across-cores
	Uncore   bool // prefer-align-cpus-by-uncorecache (packed only)
	BySocket bool // align-by-socket (distributed only)
	V137     bool // kubelet v1.37.2's rules; false: v1.38's
	// HintNUMAs is the topology manager hint's NUMA node count, the least
	// number of nodes a distributed fit spreads over (v1.38; 0 = none).
	HintNUMAs int
}

// packedPart is the fit of the packed runs a distributed fit makes inside
// single NUMA nodes: neither the uncore step nor the hint applies there.
func (f Fit) packedPart() Fit { return Fit{Spread: f.Spread, V137: f.V137} }

func (m *Machine) newAccumulator(avail Bits, need int, v137 bool) *accumulator {
	// Accumulators are recycled through the machine's pool: their counters
	// are most of a decision's garbage, and garbage is what makes the
	// collector run and the slowest decisions slow.
	a, _ := m.accs.Get().(*accumulator)
	if a == nil {
		nc, ns, nn, nl := len(m.cores.ids), len(m.socks.ids), len(m.numas.ids), len(m.l3s.ids)
		counts := make([]int, nc+ns+nn+nl)
		w := (m.n + 63) / 64 // words of a Bits of m.n positions
		words := make(Bits, 2*w)
		a = &accumulator{
			m:        m,
			free:     words[:w:w],
			result:   words[w:],
			coreFree: counts[:nc:nc],
			sockFree: counts[nc : nc+ns : nc+ns],
			numaFree: counts[nc+ns : nc+ns+nn : nc+ns+nn],
			l3Free:   counts[nc+ns+nn:],
		}
		if m.numaFirst {
			a.l1Free, a.l2Free = a.numaFree, a.sockFree
		} else {
			a.l1Free, a.l2Free = a.sockFree, a.numaFree
		}
	}
	copy(a.free, avail)
	clear(a.result)
	clear(a.coreFree)
	clear(a.sockFree)
	clear(a.numaFree)
	clear(a.l3Free)
	a.need = need
	a.v137 = v137
	for wi, w := range a.free {
		for w != 0 {
			p := wi<<6 + bits.TrailingZeros64(w)
			w &= w - 1
			a.coreFree[m.coreOf[p]]++
			a.sockFree[m.sockOf[p]]++
			a.numaFree[m.numaOf[p]]++
			a.l3Free[m.l3Of[p]]++
		}
	}
	return a
}

// finish ends the run: a copy of the claimed CPUs when ok, else nil. The
// accumulator goes back to the pool and must not be used again.
func (a *accumulator) finish(ok bool) Bits {
	var out Bits
	if ok {
		out = a.result.Clone()
	}
	a.m.accs.Put(a)
	return out
}

func (a *accumulator) satisfied() bool         { return a.need < 1 }
func (a *accumulator) failed() bool            { return a.need > a.free.Count() }
func (a *accumulator) needsAtLeast(n int) bool { return a.need >= n }

// take claims one CPU position (it must be free).
func (a *accumulator) take(p int) {
	m := a.m
	a.free.Clear(p)
	a.result.Set(p)
	a.coreFree[m.coreOf[p]]--
	a.sockFree[m.sockOf[p]]--
	a.numaFree[m.numaOf[p]]--
	a.l3Free[m.l3Of[p]]--
	a.need--
}

// takeAll claims every free CPU among cpus.
func (a *accumulator) takeAll(cpus []int) {
	for _, p := range cpus {
		if a.free.has(p) {
			a.take(p)
		}
	}
}

// sortByFree orders group indexes by ascending free CPUs, ties by ascending
// index (= ascending id): the kubelet's best-fit order. The input must be in
// ascending index order; the sort is stable.
func sortByFree(idx []int, free []int) {
	for i := 1; i < len(idx); i++ {
		for j := i; j > 0 && free[idx[j]] < free[idx[j-1]]; j-- {
			idx[j], idx[j-1] = idx[j-1], idx[j]
		}
	}
}

// sortedL1 is the first-level groups with free CPUs in best-fit order.
func (a *accumulator) sortedL1() []int {
	out := make([]int, 0, len(a.l1Free))
	for g, f := range a.l1Free {
		if f > 0 {
			out = append(out, g)
		}
	}
	sortByFree(out, a.l1Free)
	return out
}

// sortedL2 is the second-level groups, nested under the sorted first-level
// groups: for each first-level group, the second-level groups with free CPUs
// inside it, sorted by their own free CPUs. On machines where a second-level
// group spans several first-level groups the kubelet would list it (and its
// cores) twice; it is listed once, at its first place.
func (a *accumulator) sortedL2(l1 []int) []int {
	m := a.m
	out := make([]int, 0, len(a.l2Free))
	seen := make([]bool, len(a.l2Free))
	for _, g1 := range l1 {
		start := len(out)
		for k, g2 := range m.l1Kids[g1] {
			if seen[g2] || a.l2Free[g2] == 0 || !m.l1KidMask[g1][k].Intersects(a.free) {
				continue
			}
			seen[g2] = true
			out = append(out, g2)
		}
		sortByFree(out[start:], a.l2Free)
	}
	return out
}

// walkCores calls f with every core that has free CPUs in the nested
// best-fit order (first level, second level, core; each by ascending free
// CPUs then id) until f returns false. The group orders are fixed when the
// walk starts, as the kubelet sorts once; a second-level group's cores are
// ordered when the walk reaches it, which is the same since taking CPUs
// elsewhere never changes another group's cores.
func (a *accumulator) walkCores(f func(c int) bool) {
	m := a.m
	buf := make([]int, 0, 64)
	for _, g2 := range a.sortedL2(a.sortedL1()) {
		cores := m.l2Cores[g2]
		buf = buf[:0]
		// Counting sort by free CPUs: a core has at most maxThreads, and the
		// cores are listed in ascending id order, so this is the stable
		// (free, id) order in linear time.
		for fr := 1; fr <= m.maxThreads; fr++ {
			for _, c := range cores {
				if a.coreFree[c] == fr {
					buf = append(buf, c)
				}
			}
		}
		for _, c := range buf {
			if !f(c) {
				return
			}
		}
	}
}

// sortedNUMA is the NUMA nodes with free CPUs in hierarchy order.
func (a *accumulator) sortedNUMA() []int {
	if a.m.numaFirst {
		return a.sortedL1()
	}
	return a.sortedL2(a.sortedL1())
}

// sortedSockets is the sockets with free CPUs in hierarchy order.
func (a *accumulator) sortedSockets() []int {
	if a.m.numaFirst {
		return a.sortedL2(a.sortedL1())
	}
	return a.sortedL1()
}

// takeFullNUMANodes claims whole free NUMA nodes (free = all its CPUs free)
// while the need is at least a node's size.
func (a *accumulator) takeFullNUMANodes() {
	for _, g := range a.freeGroups(a.sortedNUMA(), a.numaFree, func(g int) int { return a.m.numas.Size(g) }) {
		if a.needsAtLeast(a.m.numas.Size(g)) {
			a.takeAll(a.m.numas.cpus[g])
		}
	}
}

// takeFullSockets claims whole free sockets. A socket is free when all its
// CPUs are free (kubelet v1.38); v1.37 compared its free CPUs with the
// machine average CPUs per socket, so on sockets of different sizes a
// socket of the average size counted as free with CPUs busy elsewhere.
func (a *accumulator) takeFullSockets() {
	for _, g := range a.freeGroups(a.sortedSockets(), a.sockFree, a.socketFull) {
		if a.needsAtLeast(a.m.socks.Size(g)) {
			a.takeAll(a.m.socks.cpus[g])
		}
	}
}

// socketFull is the free CPU count at which a socket counts as free: its
// size (v1.38), or the machine average (v1.37).
func (a *accumulator) socketFull(g int) int {
	if a.v137 {
		return a.m.cpusPerSocket
	}
	return a.m.socks.Size(g)
}

// coreIsFree is the kubelet's isCoreFree: every CPU of the core is free
// (v1.38). v1.37 compared the free CPUs with the machine average CPUs per
// core, so on hybrid parts (average 1) a two-thread core with one busy
// thread counted as free and a fully free one did not.
func (a *accumulator) coreIsFree(c int) bool {
	if a.v137 {
		return a.coreFree[c] == a.m.cpusPerCore
	}
	return a.coreFree[c] == a.m.cores.Size(c)
}

// takeFullCores claims whole free cores (coreIsFree) while the need is at
// least the core's size. A v1.37 "free" core whose sibling is busy gives
// its free CPUs only, never the busy one.
func (a *accumulator) takeFullCores() {
	m := a.m
	smallest := m.cpusPerCore
	if !a.v137 {
		smallest = m.minThreads
	}
	a.walkCores(func(c int) bool {
		// Once the need is below a free core's size nothing more is taken.
		if a.need < smallest {
			return false
		}
		if a.coreIsFree(c) && a.needsAtLeast(m.cores.Size(c)) {
			a.takeAll(m.cores.cpus[c])
		}
		return true
	})
}

func (a *accumulator) freeGroups(order []int, free []int, full func(g int) int) []int {
	out := make([]int, 0, len(order))
	for _, g := range order {
		if free[g] == full(g) {
			out = append(out, g)
		}
	}
	return out
}

// takeRemainingCPUs claims single CPUs in the packed order: cores in
// best-fit order, each core's free CPUs by id. The kubelet re-sorts after
// each CPU; taking a CPU only lowers the free counts of the groups that
// already come first, so one sort gives the same sequence.
func (a *accumulator) takeRemainingCPUs() {
	a.walkCores(func(c int) bool {
		for _, p := range a.m.cores.cpus[c] {
			if a.satisfied() {
				return false
			}
			if a.free.has(p) {
				a.take(p)
			}
		}
		return !a.satisfied()
	})
}

// takeRemainingCPUsSpread is distribute-cpus-across-cores: sockets in
// best-fit order; inside each, v1.38 walks the socket's cores with free
// CPUs by ascending free CPUs then id and takes one free thread of each
// in turn (the lowest first) before any second one, v1.37 its free CPUs
// by ascending id.
func (a *accumulator) takeRemainingCPUsSpread() {
	if !a.v137 {
		for _, p := range a.spreadOrder() {
			if a.satisfied() {
				return
			}
			a.take(p)
		}
		return
	}
	for _, s := range a.sortedSockets() {
		for _, p := range a.m.socks.cpus[s] {
			if a.satisfied() {
				return
			}
			if a.free.has(p) {
				a.take(p)
			}
		}
	}
}

// spreadOrder is kubelet v1.38's sortAvailableCPUsSpread: for each socket
// in best-fit order, its cores with free CPUs by ascending free CPUs then
// id, round-robin: the first free CPU of each, then the second, ... The
// order is fixed before any CPU is taken, as the kubelet sorts once.
func (a *accumulator) spreadOrder() []int {
	m := a.m
	out := make([]int, 0, a.free.Count())
	var cores []int
	for _, s := range a.sortedSockets() {
		cores = cores[:0]
		for _, p := range m.socks.cpus[s] {
			if c := m.coreOf[p]; a.free.has(p) && !containsInt(cores, c) {
				cores = append(cores, c)
			}
		}
		sortInts(cores)
		sortByFree(cores, a.coreFree)
		for i := 0; i < m.maxThreads; i++ {
			for _, c := range cores {
				k := 0
				for _, p := range m.cores.cpus[c] {
					if !a.free.has(p) {
						continue
					}
					if k == i {
						out = append(out, p)
						break
					}
					k++
				}
			}
		}
	}
	return out
}

func containsInt(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// sortedUncore is the uncore-cache walk order: NUMA nodes in hierarchy
// order, inside each the caches with free CPUs in that node by ascending
// free CPUs (whole cache), then id. v1.37 lists a cache spanning several
// NUMA nodes under each of them; v1.38 under the first only.
func (a *accumulator) sortedUncore() []int {
	m := a.m
	var out []int
	var seen []bool
	if !a.v137 {
		seen = make([]bool, len(a.l3Free))
	}
	for _, n := range a.sortedNUMA() {
		start := len(out)
		for k, u := range m.numaL3[n] {
			if seen != nil && seen[u] {
				continue // v1.38: listed under an earlier node
			}
			if a.l3Free[u] > 0 && m.numaL3Mask[n][k].Intersects(a.free) {
				out = append(out, u)
				if seen != nil {
					seen[u] = true
				}
			}
		}
		sortByFree(out[start:], a.l3Free)
	}
	return out
}

// takeUncoreCache is the prefer-align-cpus-by-uncorecache step. v1.38
// makes two passes over the caches: every wholly free cache the need
// still covers (its own size), then a partial take in each; v1.37 walks
// them once, taking whole caches while the need is at least the machine
// average cache size, then a partial take in the cache at hand.
func (a *accumulator) takeUncoreCache() {
	if !a.v137 {
		order := a.sortedUncore()
		for _, u := range order {
			if sz := a.m.l3s.Size(u); a.l3Free[u] == sz && a.needsAtLeast(sz) {
				a.takeAll(a.m.l3s.cpus[u])
			}
			if a.satisfied() {
				return
			}
		}
		for _, u := range order {
			a.takePartialUncore(u)
			if a.satisfied() {
				return
			}
		}
		return
	}
	for _, u := range a.sortedUncore() {
		if a.needsAtLeast(a.m.cpusPerL3) {
			a.takeFullUncore()
		}
		if a.satisfied() {
			return
		}
		a.takePartialUncore(u)
		if a.satisfied() {
			return
		}
	}
}

// takeFullUncore claims whole free uncore caches (free = all its CPUs free,
// real size) while the need is at least the cache's size.
func (a *accumulator) takeFullUncore() {
	m := a.m
	order := a.sortedUncore()
	var seen []bool
	for _, u := range order {
		if a.l3Free[u] != m.l3s.Size(u) || !a.needsAtLeast(m.l3s.Size(u)) {
			continue
		}
		if seen == nil {
			seen = make([]bool, len(a.l3Free))
		}
		if seen[u] {
			continue
		}
		seen[u] = true
		a.takeAll(m.l3s.cpus[u])
	}
}

// takePartialUncore claims the remaining need inside one uncore cache when
// it fits exactly, with the kubelet's quirks: it looks at the lowest-id
// ceil(need/CPUsPerCore) cores that have any free CPU in the cache, takes
// their free CPUs, drops the highest one when the need is odd (need%2, not
// need%CPUsPerCore) on an SMT machine, and claims only on an exact match.
func (a *accumulator) takePartialUncore(u int) {
	m := a.m
	coresNeeded := (a.need + m.cpusPerCore - 1) / m.cpusPerCore
	cpus := make([]int, 0, coresNeeded*m.maxThreads)
	taken := 0
	for _, c := range m.l3Cores[u] {
		if taken == coresNeeded {
			break
		}
		if a.coreFree[c] == 0 {
			continue
		}
		taken++
		for _, p := range m.cores.cpus[c] {
			if a.free.has(p) {
				cpus = append(cpus, p)
			}
		}
	}
	sortInts(cpus)
	if a.need%2 != 0 && m.cpusPerCore > 1 && len(cpus) > a.need {
		cpus = cpus[:len(cpus)-1]
	}
	if len(cpus) != a.need {
		return
	}
	for _, p := range cpus {
		a.take(p)
	}
}

// Packed is the kubelet's takeByTopologyNUMAPacked. It returns nil when
// the request cannot be met from avail.
func (m *Machine) Packed(avail Bits, n int, f Fit) Bits {
	a := m.newAccumulator(avail, n, f.V137)
	return a.finish(a.packed(f.Spread, f.Uncore))
}

// packed runs the packed best fit; it reports whether the need was met.
func (a *accumulator) packed(spread, uncore bool) bool {
	m := a.m
	if a.satisfied() {
		return true
	}
	if a.failed() {
		return false
	}
	if m.numaFirst {
		a.takeFullNUMANodes()
		if a.satisfied() {
			return true
		}
		a.takeFullSockets()
	} else {
		a.takeFullSockets()
		if a.satisfied() {
			return true
		}
		a.takeFullNUMANodes()
	}
	if a.satisfied() {
		return true
	}
	if uncore {
		a.takeUncoreCache()
		if a.satisfied() {
			return true
		}
	}
	if !spread {
		a.takeFullCores()
		if a.satisfied() {
			return true
		}
		a.takeRemainingCPUs()
	} else {
		a.takeRemainingCPUsSpread()
	}
	return a.satisfied()
}
