package allocator

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator/take"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Static is the configured static policy for one machine. It is immutable
// and safe for concurrent use; all mutable data travels in State values.
type Static struct {
	topo         *topology.Topology
	m            *take.Machine
	opts         Options
	reserved     cpuset.CPUSet
	reservedMask cpumask.Mask
	reservedBits take.Bits
	// reservedPhys is the reserved CPUs plus all their thread siblings:
	// full-pcpus-only counts them as unavailable.
	reservedPhysBits take.Bits
	// hintTable serves hint generation; nil above maxTableNodes NUMA nodes.
	hintTable *hintTable
}

// ReservedByCount chooses n reserved CPUs the way the kubelet does for a
// count-only reservation: takeByTopology over all online CPUs with the
// configured options (so the distribute and uncore options change the
// choice). On an idle machine that is the lowest-id whole cores of the
// first NUMA node or socket.
func ReservedByCount(topo *topology.Topology, o Options, n int) (cpuset.CPUSet, error) {
	if topo == nil {
		return cpuset.New(), fmt.Errorf("reserved CPUs: no topology")
	}
	if n < 0 {
		return cpuset.New(), fmt.Errorf("reserved CPUs: negative count %d", n)
	}
	if n == 0 {
		return cpuset.New(), nil
	}
	m := take.NewMachine(topo)
	if n > m.N() {
		return cpuset.New(), &InsufficientCPUsError{Requested: n, Available: m.N()}
	}
	got := takeByTopology(m, o, m.All(), n, 0)
	if got == nil || got.Count() != n {
		return cpuset.New(), fmt.Errorf("reserved CPUs: unable to reserve %d CPUs", n)
	}
	return m.ToSet(got), nil
}

// takeByTopology dispatches to the packed or the NUMA-distributed best fit
// with the options, as the kubelet's static policy does. hintNUMAs is the
// NUMA node count of the topology manager hint the CPUs are taken for (0:
// none), which the distributed fit spreads over under kubelet v1.38.
func takeByTopology(m *take.Machine, o Options, avail take.Bits, n, hintNUMAs int) take.Bits {
	f := fitOf(o)
	if o.DistributeCPUsAcrossNUMA {
		group := 1
		if o.FullPCPUsOnly {
			group = m.CPUsPerCore()
		}
		f.HintNUMAs = hintNUMAs
		return m.Distributed(avail, n, group, f)
	}
	return m.Packed(avail, n, f)
}

// fitOf is the fit of the static-policy options, without a hint.
func fitOf(o Options) take.Fit {
	return take.Fit{
		Spread:   o.DistributeCPUsAcrossCores,
		Uncore:   o.PreferAlignByUncoreCache,
		BySocket: o.AlignBySocket,
		V137:     o.KubeletVersion == kubever.V137,
	}
}

// NewStatic validates the options against topo and the reserved CPUs (all
// online) and builds the policy. An empty reserved set is accepted, as by
// the kubelet's static policy.
func NewStatic(topo *topology.Topology, o Options, reserved cpuset.CPUSet) (*Static, error) {
	if topo == nil {
		return nil, fmt.Errorf("static policy: no topology")
	}
	if err := o.Validate(topo); err != nil {
		return nil, err
	}
	if off := reserved.Difference(topo.CPUs()); !off.IsEmpty() {
		return nil, fmt.Errorf("static policy: reserved CPUs %s are not online (online: %s)", off, topo.CPUs())
	}
	m := take.NewMachine(topo)
	s := &Static{topo: topo, m: m, opts: o, reserved: reserved.Clone(), reservedBits: m.ToBits(reserved)}
	phys := take.NewBits(m.N())
	s.reservedBits.ForEach(func(p int) {
		for _, q := range m.Cores().CPUs(m.CoreOf(p)) {
			phys.Set(q)
		}
	})
	s.reservedPhysBits = phys
	s.reservedMask = m.BitsMask(s.reservedBits)
	if len(m.NUMAs().IDs()) <= maxTableNodes {
		s.hintTable = newHintTable(m)
	}
	return s, nil
}

// Options returns the policy options.
func (s *Static) Options() Options { return s.opts }

// Reserved returns the reserved CPUs.
func (s *Static) Reserved() cpuset.CPUSet { return s.reserved }

// Topology returns the machine the policy places CPUs on.
func (s *Static) Topology() *topology.Topology { return s.topo }

// NewState is the state of an idle machine: every online CPU shared, minus
// the reserved ones under strict-cpu-reservation.
func (s *Static) NewState() State {
	def := s.m.All()
	if s.opts.StrictCPUReservation {
		def = def.AndNot(s.reservedBits)
	}
	return State{Default: s.m.BitsMask(def), Assignments: map[string]map[string]cpuset.CPUSet{}, Reusable: cpuset.New()}
}

// SharedCPUs is the cpuset of every shared-pool container (the default
// set; it includes the reserved CPUs unless strict-cpu-reservation).
func (s *Static) SharedCPUs(st State) cpuset.CPUSet { return st.Default.CPUSet() }

// Assignment returns a container's exclusive CPUs.
func (s *Static) Assignment(st State, pod, container string) (cpuset.CPUSet, bool) {
	c, ok := st.Assignments[pod][container]
	return c, ok
}

// AvailableCPUs is the assignable pool: shared minus reserved.
func (s *Static) AvailableCPUs(st State) cpuset.CPUSet {
	return st.Default.Difference(s.reservedMask).CPUSet()
}

// reusable returns the CPUs of the pod's finished init containers that its
// next container may take, minus anything another pod holds (possible only
// after an Assign) or that is reserved.
func (s *Static) reusable(st State, pod string) take.Bits {
	if st.ReusablePod != pod || st.Reusable.IsEmpty() {
		return take.NewBits(s.m.N())
	}
	r := s.m.ToBits(st.Reusable).AndNot(s.reservedBits)
	for p, cs := range st.Assignments {
		if p == pod {
			continue
		}
		for _, c := range cs {
			r = r.AndNot(s.m.ToBits(c))
		}
	}
	return r
}

// Allocate gives req.CPUs exclusive CPUs to a container, as the kubelet's
// static policy (v1.37) does: an existing assignment is returned as is,
// then full-pcpus-only is checked, then CPUs are taken from the hinted NUMA
// nodes (affinity; 0 = any) with takeByTopology and the rest from all
// assignable CPUs. The pod's reusable init-container CPUs count as
// assignable. A request of 0 CPUs is a shared-pool container: no CPUs, no
// error. st is never modified.
func (s *Static) Allocate(st State, req Request, affinity hints.Hint) (State, cpuset.CPUSet, error) {
	n := req.CPUs
	if n < 1 {
		return st, cpuset.New(), nil
	}
	// Since kubelet v1.37 a restored assignment is kept before the SMT
	// checks: after a restart the CPUs it holds are no longer free, so
	// counting them as missing would refuse a container already running.
	if cur, ok := st.Assignments[req.Pod][req.Container]; ok {
		next := st
		next.ReusablePod, next.Reusable = updateReuse(st, req, cur)
		return next, cur, nil
	}
	m := s.m
	var def take.Bits
	if s.opts.FullPCPUsOnly {
		if n%m.CPUsPerCore() != 0 {
			return st, cpuset.New(), &SMTAlignmentError{RequestedCPUs: n, CpusPerCore: m.CPUsPerCore()}
		}
		def = m.MaskBits(st.Default)
		availPhys := def.AndNotCount(s.reservedPhysBits)
		if n > availPhys {
			return st, cpuset.New(), &SMTAlignmentError{RequestedCPUs: n, CpusPerCore: m.CPUsPerCore(), AvailablePhysicalCPUs: availPhys, CausedByPhysicalCPUs: true}
		}
	}
	if def == nil {
		def = m.MaskBits(st.Default)
	}
	// As the kubelet, every assignable CPU may go: the shared pool empties
	// when the reserved CPUs are outside it (strict-cpu-reservation) or
	// none are reserved. Where its containers then run is the caller's
	// business (policy.Engine.SharedCPUs).
	allocatable := def.AndNot(s.reservedBits).Or(s.reusable(st, req.Pod))
	avail := allocatable.Count()
	if n > avail {
		return st, cpuset.New(), &InsufficientCPUsError{Requested: n, Available: avail}
	}
	var result take.Bits
	if s.strict() {
		var err error
		if result, err = s.placeStrict(def, allocatable, s.reusable(st, req.Pod), n, affinity.Affinity); err != nil {
			return st, cpuset.New(), err
		}
	} else if result = s.place(allocatable, n, affinity.Affinity); result == nil {
		return st, cpuset.New(), &InsufficientCPUsError{Requested: n, Available: avail}
	}
	newDef := def.AndNot(result)
	cpus := m.ToSet(result)
	next := withAssignment(st, req.Pod, req.Container, cpus)
	next.Default = m.BitsMask(newDef)
	next.ReusablePod, next.Reusable = updateReuse(st, req, cpus)
	return next, cpus, nil
}

// place is the kubelet's allocateCPUs choice: min(n, aligned) CPUs from
// the hinted nodes with takeByTopology, then the rest from all the other
// allocatable CPUs. nil when n cannot be met.
func (s *Static) place(allocatable take.Bits, n int, aff hints.Mask) take.Bits {
	m := s.m
	if allocatable.Count() < n {
		return nil
	}
	result := take.NewBits(m.N())
	if aff != 0 {
		aligned := allocatable.And(s.alignedMask(aff))
		k := aligned.Count()
		if n < k {
			k = n
		}
		got := takeByTopology(m, s.opts, aligned, k, aff.Count())
		if got == nil {
			return nil
		}
		result = got
	}
	if rest := n - result.Count(); rest > 0 {
		got := takeByTopology(m, s.opts, allocatable.AndNot(result), rest, 0)
		if got == nil {
			return nil
		}
		result = result.Or(got)
	}
	return result
}

// alignedMask is the CPUs of the hinted NUMA nodes, widened to their
// sockets under align-by-socket.
func (s *Static) alignedMask(aff hints.Mask) take.Bits {
	m := s.m
	numas := m.NUMAs()
	out := take.NewBits(m.N())
	if s.opts.AlignBySocket {
		socks := make([]bool, len(m.Sockets().IDs()))
		for g, id := range numas.IDs() {
			if aff.IsSet(id) {
				for _, p := range numas.CPUs(g) {
					socks[m.SocketOf(p)] = true
				}
			}
		}
		for g, on := range socks {
			if on {
				out = out.Or(m.Sockets().Mask(g))
			}
		}
		return out
	}
	for g, id := range numas.IDs() {
		if aff.IsSet(id) {
			out = out.Or(numas.Mask(g))
		}
	}
	return out
}

// updateReuse keeps the reuse set of the most recently allocated pod only:
// an init container's CPUs join it, an app container's or a sidecar's
// leave it.
func updateReuse(st State, req Request, cpus cpuset.CPUSet) (string, cpuset.CPUSet) {
	reuse := st.Reusable
	if st.ReusablePod != req.Pod {
		// Not the zero CPUSet: its nil map makes Equals(cpuset.New()) false.
		reuse = cpuset.New()
	}
	if req.Type == Init {
		return req.Pod, reuse.Union(cpus)
	}
	if reuse.IsEmpty() {
		return req.Pod, reuse
	}
	return req.Pod, reuse.Difference(cpus)
}

// withAssignment returns st with (pod, container) set to cpus, copying
// only the maps it changes.
func withAssignment(st State, pod, container string, cpus cpuset.CPUSet) State {
	// maps.Clone copies the table wholesale, several times faster than
	// re-inserting every pod (this copy is the decision's only cost that
	// grows with the number of pods).
	out := maps.Clone(st.Assignments)
	if out == nil {
		out = make(map[string]map[string]cpuset.CPUSet, 1)
	}
	inner := maps.Clone(st.Assignments[pod])
	if inner == nil {
		inner = make(map[string]cpuset.CPUSet, 1)
	}
	inner[container] = cpus
	out[pod] = inner
	st.Assignments = out
	return st
}

// withoutAssignment returns st without (pod, container).
func withoutAssignment(st State, pod, container string) State {
	out := maps.Clone(st.Assignments)
	inner := make(map[string]cpuset.CPUSet, len(st.Assignments[pod]))
	for c, set := range st.Assignments[pod] {
		if c != container {
			inner[c] = set
		}
	}
	if len(inner) == 0 {
		delete(out, pod)
	} else {
		out[pod] = inner
	}
	st.Assignments = out
	return st
}

// Release drops a container's assignment and returns its CPUs to the shared
// pool, except those another container of the same pod still holds (an
// app container reusing an init container's CPUs), and out of the pod's
// reuse set. Idempotent.
func (s *Static) Release(st State, pod, container string) State {
	cpus, ok := st.Assignments[pod][container]
	if !ok {
		return st
	}
	inUse := cpuset.New()
	for c, set := range st.Assignments[pod] {
		if c != container {
			inUse = inUse.Union(set)
		}
	}
	next := withoutAssignment(st, pod, container)
	freed := cpus.Difference(inUse)
	next.Default = st.Default.Union(s.m.SetMask(freed))
	// CPUs back in the shared pool are no longer the pod's to reuse.
	if next.ReusablePod == pod && !next.Reusable.IsEmpty() {
		next.Reusable = next.Reusable.Difference(freed)
	}
	return next
}

// Assign restores an exclusive assignment (from a checkpoint, imported
// kubelet state or simulate's "assign"). Every CPU must be online, not
// reserved and not held by any other container; otherwise
// *InvalidStateError and st is returned unchanged. An existing assignment
// of the same container is replaced. It may take the last shared CPU, as
// Allocate may.
func (s *Static) Assign(st State, pod, container string, cpus cpuset.CPUSet) (State, error) {
	return s.assign(st, pod, container, cpus, false)
}

// AssignReusing is Assign for restoring a checkpoint written after
// init-container reuse: the CPUs may also be held by other containers of
// the same pod (an app container running on its finished init container's
// CPUs), never by another pod's.
func (s *Static) AssignReusing(st State, pod, container string, cpus cpuset.CPUSet) (State, error) {
	return s.assign(st, pod, container, cpus, true)
}

func (s *Static) assign(st State, pod, container string, cpus cpuset.CPUSet, samePodOK bool) (State, error) {
	bad := func(format string, args ...any) (State, error) {
		return st, &InvalidStateError{Pod: pod, Container: container, Msg: fmt.Sprintf(format, args...)}
	}
	if cpus.IsEmpty() {
		return bad("empty cpuset")
	}
	if off := cpus.Difference(s.topo.CPUs()); !off.IsEmpty() {
		return bad("CPUs %s are not online", off)
	}
	if r := cpus.Intersection(s.reserved); !r.IsEmpty() {
		return bad("CPUs %s are reserved", r)
	}
	// Every holder is named, in sorted order: the message must not depend on
	// map iteration (simulate's output and the logs are compared across runs).
	var held []string
	for p, cs := range st.Assignments {
		if p == pod && samePodOK {
			continue
		}
		for c, set := range cs {
			if p == pod && c == container {
				continue
			}
			if o := cpus.Intersection(set); !o.IsEmpty() {
				held = append(held, fmt.Sprintf("CPUs %s are held by pod %q container %q", o, p, c))
			}
		}
	}
	if len(held) > 0 {
		slices.Sort(held)
		return bad("%s", strings.Join(held, "; "))
	}
	next := s.Release(st, pod, container)
	next = withAssignment(next, pod, container, cpus)
	next.Default = next.Default.Difference(s.m.SetMask(cpus))
	if next.ReusablePod != pod && !next.Reusable.IsEmpty() {
		next.Reusable = next.Reusable.Difference(cpus)
	}
	return next, nil
}

// Validate checks the pool invariants: reserved ⊆ shared (reserved ∩
// shared = ∅ under strict-cpu-reservation); exclusive sets disjoint from
// the shared pool, from the reserved CPUs and from other pods' sets (a
// pod's own containers may overlap through init-container reuse); shared ∪
// exclusive (∪ reserved under strict) = all online CPUs. The shared pool
// may be empty (strict-cpu-reservation or no reserved CPUs), as in the
// kubelet. All violations are reported in one *InvalidStateError.
func (s *Static) Validate(st State) error {
	var probs []string
	add := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	all := s.topo.CPUs()
	def := st.Default.CPUSet()
	if off := def.Difference(all); !off.IsEmpty() {
		add("shared pool holds CPUs %s that are not online", off)
	}
	if s.opts.StrictCPUReservation {
		if r := def.Intersection(s.reserved); !r.IsEmpty() {
			add("shared pool holds reserved CPUs %s under %s", r, OptStrictCPUReservation)
		}
	} else if miss := s.reserved.Difference(def); !miss.IsEmpty() {
		add("reserved CPUs %s are not in the shared pool", miss)
	}
	union := def
	if s.opts.StrictCPUReservation {
		union = union.Union(s.reserved)
	}
	pods := slices.Sorted(maps.Keys(st.Assignments))
	podSets := make(map[string]cpuset.CPUSet, len(pods))
	for _, p := range pods {
		names := slices.Sorted(maps.Keys(st.Assignments[p]))
		ps := cpuset.New()
		for _, c := range names {
			set := st.Assignments[p][c]
			if set.IsEmpty() {
				add("pod %q container %q has an empty assignment", p, c)
			}
			if off := set.Difference(all); !off.IsEmpty() {
				add("pod %q container %q holds CPUs %s that are not online", p, c, off)
			}
			if o := set.Intersection(def); !o.IsEmpty() {
				add("pod %q container %q holds CPUs %s that are also shared", p, c, o)
			}
			if o := set.Intersection(s.reserved); !o.IsEmpty() {
				add("pod %q container %q holds reserved CPUs %s", p, c, o)
			}
			ps = ps.Union(set)
		}
		for _, q := range pods {
			if q >= p {
				break
			}
			if o := ps.Intersection(podSets[q]); !o.IsEmpty() {
				add("pods %q and %q both hold CPUs %s", q, p, o)
			}
		}
		podSets[p] = ps
		union = union.Union(ps)
	}
	if miss := all.Difference(union); !miss.IsEmpty() {
		add("CPUs %s are neither shared nor assigned", miss)
	}
	if !st.Reusable.IsEmpty() {
		for _, q := range pods {
			if q == st.ReusablePod {
				continue
			}
			if o := st.Reusable.Intersection(podSets[q]); !o.IsEmpty() {
				add("reusable CPUs %s of pod %q are held by pod %q", o, st.ReusablePod, q)
			}
		}
	}
	if len(probs) > 0 {
		return &InvalidStateError{Msg: strings.Join(probs, "; ")}
	}
	return nil
}

// Take picks n CPUs out of from with the static policy's topology walk
// (takeByTopology under the configured options), as the kubelet's
// AllocatePod partitions a pod's CPUs among its containers. CPUs of from
// that are not online are ignored. *InsufficientCPUsError when from holds
// fewer than n online CPUs. aff is the pod's topology manager hint: under
// kubelet v1.38 a distributed fit spreads over as many NUMA nodes as it
// names (0: none). It reads no State and changes nothing.
func (s *Static) Take(from cpuset.CPUSet, n int, aff hints.Mask) (cpuset.CPUSet, error) {
	if n < 1 {
		return cpuset.New(), nil
	}
	avail := s.m.ToBits(from.Intersection(s.topo.CPUs()))
	if c := avail.Count(); c < n {
		return cpuset.New(), &InsufficientCPUsError{Requested: n, Available: c}
	}
	got := takeByTopology(s.m, s.opts, avail, n, aff.Count())
	if got == nil {
		return cpuset.New(), &InsufficientCPUsError{Requested: n, Available: avail.Count()}
	}
	return s.m.ToSet(got), nil
}
