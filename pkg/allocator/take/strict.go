package take

// The planning half of strict-align-cpus-by-uncorecache (pkg/allocator's
// uncore_strict.go has the rules and the refusal): which uncore caches a
// strict placement uses, from counts only, and the CPUs it takes there.

// LargestL3 is the CPUs of the largest uncore cache.
func (m *Machine) LargestL3() int {
	n := 0
	for g := range m.l3s.ids {
		if sz := m.l3s.Size(g); sz > n {
			n = sz
		}
	}
	return n
}

// WholeCores is the CPUs of the cores set holds entirely.
func (m *Machine) WholeCores(set Bits) Bits {
	whole := NewBits(m.n)
	for c := range m.cores.cpus {
		if m.CoreWithin(c, set) {
			whole = whole.Or(m.cores.mask[c])
		}
	}
	return whole
}

// CoreWithin reports whether set holds every CPU of core c (an index).
func (m *Machine) CoreWithin(c int, set Bits) bool {
	for _, p := range m.cores.cpus[c] {
		if !set.has(p) {
			return false
		}
	}
	return true
}

// StrictPlan is a strict placement: whole caches plus at most one partly
// used cache (partial -1 when none) from which k CPUs are taken.
type StrictPlan struct {
	whole      []int
	partial, k int
}

// StrictMiss is what a strict placement found when it failed: the most
// assignable CPUs of one cache (what a request up to LargestL3 lacked) and
// the wholly assignable caches (what a larger one lacked).
type StrictMiss struct {
	Largest, WholeFree int
}

// PlanStrict chooses the caches for n CPUs out of avail; ok false when the
// strict rules cannot be met, with what was found. It looks at counts
// only, so hint generation can ask it for every NUMA node combination.
func (m *Machine) PlanStrict(avail Bits, n int) (StrictPlan, bool, StrictMiss) {
	nl := len(m.l3s.ids)
	free := make([]int, nl)
	for g := range free {
		free[g] = avail.AndCount(m.l3s.mask[g])
	}
	// Walk order: NUMA nodes by ascending assignable CPUs then id (the
	// kubelet's best fit), each cache under its lowest NUMA node, then by
	// ascending assignable CPUs and id.
	nodeFree := make([]int, len(m.numas.ids))
	for g := range nodeFree {
		nodeFree[g] = avail.AndCount(m.numas.mask[g])
	}
	nodes := make([]int, 0, len(nodeFree))
	for g := range nodeFree {
		nodes = append(nodes, g)
	}
	sortByFree(nodes, nodeFree)
	seen := make([]bool, nl)
	order := make([]int, 0, nl)
	for _, nd := range nodes {
		start := len(order)
		for _, u := range m.numaL3[nd] {
			if !seen[u] && free[u] > 0 {
				seen[u] = true
				order = append(order, u)
			}
		}
		sortByFree(order[start:], free)
	}
	var miss StrictMiss
	for _, u := range order {
		if free[u] > miss.Largest {
			miss.Largest = free[u]
		}
		if free[u] == m.l3s.Size(u) {
			miss.WholeFree++
		}
	}
	// bestFit is the cache with the fewest assignable CPUs >= need, ties
	// in walk order.
	bestFit := func(need int, skip []bool) int {
		best := -1
		for _, u := range order {
			if skip[u] || free[u] < need {
				continue
			}
			if best < 0 || free[u] < free[best] {
				best = u
			}
		}
		return best
	}
	taken := make([]bool, nl)
	var plan StrictPlan
	need := n
	if n > m.LargestL3() {
		for _, u := range order {
			if sz := m.l3s.Size(u); free[u] == sz && need >= sz {
				plan.whole = append(plan.whole, u)
				taken[u] = true
				need -= sz
			}
		}
	}
	plan.partial = -1
	if need > 0 {
		u := bestFit(need, taken)
		if u < 0 {
			return StrictPlan{}, false, miss
		}
		plan.partial, plan.k = u, need
	}
	return plan, true, StrictMiss{}
}

// TakeStrict turns a plan into CPUs: the whole caches, and the packed best
// fit (whole cores first) inside the partly used cache. nil when that
// cache no longer holds k CPUs of avail.
func (m *Machine) TakeStrict(avail Bits, p StrictPlan, v137 bool) Bits {
	out := NewBits(m.n)
	for _, u := range p.whole {
		out = out.Or(m.l3s.mask[u])
	}
	if p.partial >= 0 {
		got := m.Packed(avail.And(m.l3s.mask[p.partial]), p.k, Fit{V137: v137})
		if got == nil {
			return nil
		}
		out = out.Or(got)
	}
	return out
}
