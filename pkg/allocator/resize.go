package allocator

import (
	"fmt"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator/take"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// In-place resize of an exclusive container (KEP-5554's rules; the policy
// engine decides the NUMA affinity and the baseline, these functions pick
// the CPUs):
//
//   - Grow keeps every CPU the container holds and adds CPUs taken the way
//     Allocate takes them: from the shared pool minus the reserved CPUs,
//     as many as fit from the affinity's NUMA nodes and the rest from all
//     others, with takeByTopology and the options. full-pcpus-only adds
//     whole free cores only; strict-align-cpus-by-uncorecache adds CPUs of
//     the uncore caches the container already uses only. Under
//     distribute-cpus-across-numa, a container whose affinity spans
//     several NUMA nodes gets each added CPU (core, under full-pcpus-only)
//     on the node of the affinity that holds the fewest of its CPUs
//     (ties: the lowest node id), so that it stays spread evenly.
//   - Shrink keeps the baseline and, of the CPUs the container gained
//     since, the ones takeByTopology picks, those of the baseline's NUMA
//     nodes first; the rest return to the shared pool. The KEP keeps the
//     promised CPUs and leaves the order of the others to the allocation
//     policy (it rejected a last-in-first-out record).

// growAvail is the CPUs a grow of the container may add: assignable shared
// CPUs, under full-pcpus-only only those of wholly assignable cores, under
// the strict uncore option only those of the caches cur lies in.
func (s *Static) growAvail(st State, cur take.Bits) take.Bits {
	m := s.m
	avail := m.MaskBits(st.Default).AndNot(s.reservedBits)
	if s.opts.FullPCPUsOnly {
		avail = m.WholeCores(avail)
	}
	if s.strict() {
		own := take.NewBits(m.N())
		l3s := m.L3s()
		for g := range l3s.IDs() {
			if cur.Intersects(l3s.Mask(g)) {
				own = own.Or(l3s.Mask(g))
			}
		}
		avail = avail.And(own)
	}
	return avail
}

// CheckResizeCount is full-pcpus-only's rule for a resize to n CPUs: a
// count that is not whole cores is an *SMTAlignmentError (checked before
// the topology manager's admission, as for a new container).
func (s *Static) CheckResizeCount(n int) error {
	if s.opts.FullPCPUsOnly && n%s.m.CPUsPerCore() != 0 {
		return &SMTAlignmentError{RequestedCPUs: n, CpusPerCore: s.m.CPUsPerCore()}
	}
	return nil
}

// GrowRoom is how many CPUs Grow could add to the container inside the
// NUMA nodes of aff (their sockets under align-by-socket; 0 = anywhere).
func (s *Static) GrowRoom(st State, pod, container string, aff hints.Mask) int {
	cur, ok := st.Assignments[pod][container]
	if !ok {
		return 0
	}
	avail := s.growAvail(st, s.m.ToBits(cur))
	if aff != 0 {
		avail = avail.And(s.alignedMask(aff))
	}
	return avail.Count()
}

// ResizeHints is the CPU hint generation for a container growing to n
// CPUs: the NUMA node sets that contain every node of its CPUs and whose
// free CPUs plus its own can hold n; preferred as for an admission (the
// fewest nodes whose CPUs could hold n). nil: no preference (more NUMA
// nodes than hints enumerate).
func (s *Static) ResizeHints(st State, pod, container string, n int) []hints.Hint {
	cur, ok := st.Assignments[pod][container]
	if !ok || n < 1 {
		return nil
	}
	own := s.m.ToBits(cur)
	return s.generateHints(s.growAvail(st, own), own, s.free(st), n)
}

// Grow gives the container n CPUs in all, n above what it holds, keeping
// the ones it holds (see the rules above). Errors: SMTAlignmentError (n
// not whole cores, or not enough whole free cores), UncoreCacheAlignmentError
// (not enough free CPUs in its caches under the strict option),
// InsufficientCPUs, InvalidState (no such container, or n not above its
// count). st is never modified; it returns the next state and the CPUs
// added.
func (s *Static) Grow(st State, pod, container string, n int, aff hints.Mask) (State, cpuset.CPUSet, error) {
	m := s.m
	cur, ok := st.Assignments[pod][container]
	if !ok || n <= cur.Size() {
		return st, cpuset.New(), &InvalidStateError{Pod: pod, Container: container,
			Msg: fmt.Sprintf("grow to %d CPUs: the container holds %d exclusive CPUs (%s)", n, cur.Size(), cur)}
	}
	if s.opts.FullPCPUsOnly && n%m.CPUsPerCore() != 0 {
		return st, cpuset.New(), &SMTAlignmentError{RequestedCPUs: n, CpusPerCore: m.CPUsPerCore()}
	}
	own := m.ToBits(cur)
	avail := s.growAvail(st, own)
	add := n - cur.Size()
	if have := avail.Count(); add > have {
		switch {
		case s.opts.FullPCPUsOnly:
			return st, cpuset.New(), &SMTAlignmentError{RequestedCPUs: n, CpusPerCore: m.CPUsPerCore(),
				AvailablePhysicalCPUs: have + cur.Size(), CausedByPhysicalCPUs: true}
		case s.strict():
			return st, cpuset.New(), &UncoreCacheAlignmentError{RequestedCPUs: n, CacheCPUs: m.LargestL3(),
				Exclusive: s.opts.StrictUncoreCache == UncoreStrictExclusive, Largest: have + cur.Size()}
		default:
			return st, cpuset.New(), &InsufficientCPUsError{Requested: add, Available: have}
		}
	}
	var got take.Bits
	if s.opts.DistributeCPUsAcrossNUMA {
		got = s.growDistributed(avail, own, add, aff)
	}
	if got == nil {
		got = s.place(avail, add, aff)
	}
	if got == nil {
		return st, cpuset.New(), &InsufficientCPUsError{Requested: add, Available: avail.Count()}
	}
	added := m.ToSet(got)
	next := withAssignment(st, pod, container, cur.Union(added))
	next.Default = m.BitsMask(m.MaskBits(st.Default).AndNot(got))
	if next.ReusablePod != pod && !next.Reusable.IsEmpty() {
		next.Reusable = next.Reusable.Difference(added)
	}
	return next, added, nil
}

// Shrink narrows the container to n CPUs that keep every CPU of keep (its
// baseline, a subset of what it holds, at most n CPUs); the others return
// to the shared pool, except those another container of the same pod
// still holds. Errors: SMTAlignmentError (n not whole cores),
// InvalidState (no such container, keep not held, n out of range). st is
// never modified; it returns the next state and the CPUs given back.
func (s *Static) Shrink(st State, pod, container string, n int, keep cpuset.CPUSet) (State, cpuset.CPUSet, error) {
	m := s.m
	cur, ok := st.Assignments[pod][container]
	bad := func(format string, args ...any) (State, cpuset.CPUSet, error) {
		return st, cpuset.New(), &InvalidStateError{Pod: pod, Container: container, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case !ok:
		return bad("shrink to %d CPUs: the container holds no exclusive CPUs", n)
	case !keep.IsSubsetOf(cur):
		return bad("shrink: baseline %s is not part of the container's CPUs %s", keep, cur)
	case n < keep.Size() || n >= cur.Size():
		return bad("shrink to %d CPUs: want between the baseline's %d and the %d held", n, keep.Size(), cur.Size())
	}
	if s.opts.FullPCPUsOnly && n%m.CPUsPerCore() != 0 {
		return st, cpuset.New(), &SMTAlignmentError{RequestedCPUs: n, CpusPerCore: m.CPUsPerCore()}
	}
	extra := m.ToBits(cur.Difference(keep))
	if s.opts.FullPCPUsOnly {
		// The gained CPUs are whole cores when they came from Grow; a
		// restored state may hold a split one, which is given back first.
		extra = m.WholeCores(extra)
	}
	var keepNodes hints.Mask
	for _, cpu := range keep.UnsortedList() {
		keepNodes |= hints.NewMask(m.NUMAs().IDs()[m.NUMAOf(m.Pos(cpu))])
	}
	kept := take.NewBits(m.N())
	if k := n - keep.Size(); k > 0 {
		if kept = s.place(extra, k, keepNodes); kept == nil {
			return bad("shrink to %d CPUs: cannot keep %d of the gained CPUs %s", n, k, m.ToSet(extra))
		}
	}
	retained := keep.Union(m.ToSet(kept))
	released := cur.Difference(retained)
	inUse := cpuset.New()
	for c, set := range st.Assignments[pod] {
		if c != container {
			inUse = inUse.Union(set)
		}
	}
	next := withAssignment(st, pod, container, retained)
	next.Default = st.Default.Union(m.SetMask(released.Difference(inUse)))
	return next, released, nil
}

// growDistributed is Grow's choice under distribute-cpus-across-numa when
// the affinity (the nodes of own when it is 0) spans several NUMA nodes:
// the added CPUs, a unit (a core under full-pcpus-only) at a time, go to
// the node holding the fewest of the container's CPUs that still has a
// unit free, and are taken there packed. nil when the affinity is one node
// or the nodes cannot hold all of them (Grow then places as Allocate does).
func (s *Static) growDistributed(avail, own take.Bits, add int, aff hints.Mask) take.Bits {
	m := s.m
	numas := m.NUMAs()
	var nodes []int
	for g, id := range numas.IDs() {
		if (aff != 0 && aff.IsSet(id)) || (aff == 0 && own.Intersects(numas.Mask(g))) {
			nodes = append(nodes, g)
		}
	}
	if len(nodes) < 2 {
		return nil
	}
	unit := 1
	if s.opts.FullPCPUsOnly {
		unit = m.CPUsPerCore()
	}
	held := make([]int, len(nodes))
	free := make([]int, len(nodes))
	per := make([]int, len(nodes))
	for i, g := range nodes {
		held[i] = own.AndCount(numas.Mask(g))
		free[i] = avail.AndCount(numas.Mask(g))
	}
	for left := add; left > 0; left -= unit {
		best := -1
		for i := range nodes {
			if free[i]-per[i] < unit {
				continue
			}
			if best < 0 || held[i]+per[i] < held[best]+per[best] {
				best = i
			}
		}
		if best < 0 {
			return nil
		}
		per[best] += unit
	}
	out := take.NewBits(m.N())
	for i, g := range nodes {
		if per[i] == 0 {
			continue
		}
		got := m.Packed(avail.And(numas.Mask(g)), per[i], fitOf(s.opts))
		if got == nil {
			return nil
		}
		out = out.Or(got)
	}
	return out
}
