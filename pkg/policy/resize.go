package policy

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// ReasonResizeRejected is the reason word of a resize the rules refuse.
const ReasonResizeRejected = "InPlaceResizeRejected"

// Rules a refused resize names (ResizeError.Rule).
const (
	RuleBelowBaseline     = "below-baseline"
	RuleSharedToExclusive = "shared-to-exclusive"
	RuleExclusiveToShared = "exclusive-to-shared"
	// RulePodLevelSlice: the container's CPUs are a slice of its
	// pod-level pod's block (podlevel.go); the plugin does not grow or
	// shrink slices in place.
	RulePodLevelSlice = "pod-level-slice"
)

// ResizeError is an in-place resize that KEP-5554's rules forbid: below
// the CPUs the container was admitted with, or between the shared pool and
// exclusive CPUs. The container keeps its CPUs.
type ResizeError struct {
	Pod, Container string
	Rule           string // RuleBelowBaseline, RuleSharedToExclusive, RuleExclusiveToShared
	Msg            string
}

// Error starts with the reason word, then names the container and the rule.
func (e *ResizeError) Error() string {
	return fmt.Sprintf("%s: pod %q container %q: %s: %s", e.Reason(), e.Pod, e.Container, e.Rule, e.Msg)
}

// Reason is "InPlaceResizeRejected".
func (e *ResizeError) Reason() string { return ReasonResizeRejected }

// Resize kinds (ResizeDecision.Kind).
const (
	ResizeNone = "none"     // same CPU count, or a shared-pool container staying shared
	ResizeUp   = "upsize"   // CPUs added
	ResizeDown = "downsize" // CPUs given back
)

// ResizeDecision is the outcome of an admitted resize.
type ResizeDecision struct {
	Decision               // the container's new CPUs, mems and affinity
	Kind     string        // ResizeNone, ResizeUp or ResizeDown
	Before   cpuset.CPUSet // the CPUs it held
	Baseline cpuset.CPUSet // the CPUs it was admitted with
	Added    cpuset.CPUSet // upsize: the CPUs taken from the shared pool
	Released cpuset.CPUSet // downsize: the CPUs given back to the shared pool
}

// Baseline is the CPUs a container with exclusive CPUs was admitted with
// (its current CPUs until a resize changes them).
func (e *Engine) Baseline(st State, pod, container string) (cpuset.CPUSet, bool) {
	if b, ok := st.Baseline[pod][container]; ok {
		return b, true
	}
	return e.Assignment(st, pod, container)
}

// Resize decides an in-place resize of an existing container to req
// (its new CPU request and limit), following KEP-5554:
//
//   - a container that holds exclusive CPUs keeps them all on an upsize:
//     the new set is a superset of the current one, the added CPUs taken
//     from the shared pool by the admission's policy (options included,
//     see allocator.Grow). The NUMA affinity may only widen: the
//     container's nodes (and under the pod scope the pod's affinity) are
//     kept while their free CPUs suffice; otherwise the CPU hints of the
//     new size that contain them are merged and admitted by the topology
//     manager policy (single-numa-node refuses a second node, restricted
//     a non-preferred set), and under the pod scope the widened affinity
//     becomes the pod's;
//   - on a downsize the new set lies between the baseline (the CPUs it was
//     admitted with) and the current set (allocator.Shrink chooses which
//     gained CPUs stay); below the baseline is refused (RuleBelowBaseline);
//   - moving between the shared pool and exclusive CPUs either way is
//     refused (RuleSharedToExclusive, RuleExclusiveToShared);
//   - cpuset.mems is that of the new affinity and CPUs (memsFor).
//
// Refusals are *ResizeError, or the allocator's and topology manager's
// own errors (SMTAlignmentError, InsufficientCPUs,
// UncoreCacheAlignmentError, TopologyAffinityError); the returned State is
// then st. The pod scope applies the same rules to each container of the
// pod as it is resized. A shared-pool container that stays shared is
// Kind ResizeNone with the shared CPUs.
func (e *Engine) Resize(st State, req Request) (State, ResizeDecision, error) {
	if err := e.checkRequest(req); err != nil {
		return st, ResizeDecision{}, err
	}
	cur, has := e.Assignment(st, req.Pod, req.Container)
	want := e.isExclusive(req)
	refuse := func(rule, format string, args ...any) (State, ResizeDecision, error) {
		return st, ResizeDecision{}, &ResizeError{Pod: req.Pod, Container: req.Container, Rule: rule, Msg: fmt.Sprintf(format, args...)}
	}
	switch {
	case !has && !want:
		cpus := e.SharedCPUs(st)
		return st, ResizeDecision{Decision: Decision{CPUs: cpus, Mems: e.MemsOf(st, req.Pod, req.Container), Existing: true}, Kind: ResizeNone}, nil
	case !has:
		return refuse(RuleSharedToExclusive, "the container runs on the shared pool and the resize asks for %d exclusive CPUs; "+
			"exclusive CPUs are given at admission only, recreate the pod", req.CPURequestMilli/1000)
	case !want:
		return refuse(RuleExclusiveToShared, "the container holds exclusive CPUs %s and the resize asks for %s (not a whole number of CPUs of a Guaranteed pod); "+
			"it cannot move to the shared pool in place, recreate the pod", cur, milliText(req))
	}
	base, _ := e.Baseline(st, req.Pod, req.Container)
	n := int(req.CPURequestMilli / 1000)
	if _, block := st.Alloc.Assignments[req.Pod][PodPoolEntry]; block && n != cur.Size() {
		return refuse(RulePodLevelSlice, "the container holds %s, a slice of its pod's CPUs (pod-level resources), and the resize asks for %d; "+
			"slices are not resized in place, recreate the pod", cur, n)
	}
	rd := ResizeDecision{Before: cur, Baseline: base}
	switch {
	case n == cur.Size():
		aff := e.heldAffinity(st, req.Pod, cur)
		rd.Decision = Decision{CPUs: cur, Mems: e.MemsOf(st, req.Pod, req.Container), Exclusive: true, Affinity: hints.Hint{Affinity: aff, Preferred: true}, Existing: true}
		rd.Kind = ResizeNone
		return st, rd, nil
	case n < base.Size():
		return refuse(RuleBelowBaseline, "the resize asks for %d exclusive CPUs, fewer than the %d (%s) it was admitted with; "+
			"a downsize keeps the admitted CPUs, recreate the pod to go below them", n, base.Size(), base)
	case n < cur.Size():
		alloc, released, err := e.static.Shrink(st.Alloc, req.Pod, req.Container, n, base)
		if err != nil {
			return st, ResizeDecision{}, err
		}
		next := st
		next.Alloc = alloc
		cpus := alloc.Assignments[req.Pod][req.Container]
		next.Baseline = withBaseline(st.Baseline, req.Pod, req.Container, baselineEntry(base, cpus))
		aff := e.heldAffinity(next, req.Pod, cpus)
		rd.Decision = Decision{CPUs: cpus, Mems: e.MemsOf(st, req.Pod, req.Container), Exclusive: true, Affinity: hints.Hint{Affinity: aff, Preferred: true}}
		rd.Kind, rd.Released = ResizeDown, released
		return next, rd, nil
	}
	// Upsize.
	if err := e.static.CheckResizeCount(n); err != nil {
		return st, ResizeDecision{}, err
	}
	next := st
	aff := e.heldAffinity(st, req.Pod, cur)
	h := hints.Hint{Affinity: aff, Preferred: true}
	if e.static.GrowRoom(st.Alloc, req.Pod, req.Container, aff) < n-cur.Size() {
		hs := e.static.ResizeHints(st.Alloc, req.Pod, req.Container, n)
		if hs != nil {
			hs = slices.DeleteFunc(hs, func(x hints.Hint) bool { return aff&^x.Affinity != 0 })
		}
		if hs != nil && len(req.Hints) == 0 {
			h = e.merger.MergeLists(hs)
		} else {
			h = e.merger.Merge(map[string][]hints.Hint{"cpu": hs}, req.Hints)
		}
		if !e.merger.Admits(h) {
			return st, ResizeDecision{}, e.merger.Admit(h, fmt.Sprintf("pod %s container %s: resize from %d to %d exclusive CPUs keeping NUMA nodes %s",
				req.Pod, req.Container, cur.Size(), n, aff))
		}
		h.Affinity |= aff
		if e.cfg.TopologyScope == hints.ScopePod && e.cfg.TopologyPolicy != hints.PolicyNone {
			next.PodAffinity = copyAffinities(st.PodAffinity)
			next.PodAffinity[req.Pod] = podAffinity(h)
		}
	}
	alloc, added, err := e.static.Grow(st.Alloc, req.Pod, req.Container, n, h.Affinity)
	if err != nil {
		return st, ResizeDecision{}, err
	}
	next.Alloc = alloc
	cpus := cur.Union(added)
	next.Baseline = withBaseline(st.Baseline, req.Pod, req.Container, baselineEntry(base, cpus))
	rd.Decision = Decision{CPUs: cpus, Mems: e.MemsOf(st, req.Pod, req.Container), Exclusive: true, Affinity: h}
	rd.Kind, rd.Added = ResizeUp, added
	return next, rd, nil
}

// heldAffinity is the NUMA nodes a container's CPUs lie in, with the pod's
// affinity under the pod scope: what a resize keeps.
func (e *Engine) heldAffinity(st State, pod string, cpus cpuset.CPUSet) hints.Mask {
	var m hints.Mask
	for _, cpu := range cpus.UnsortedList() {
		if c, ok := e.topo.Info(cpu); ok {
			m |= hints.NewMask(c.NUMA)
		}
	}
	if e.cfg.TopologyScope == hints.ScopePod {
		m |= st.PodAffinity[pod].Affinity
	}
	return m
}

func milliText(req Request) string {
	return fmt.Sprintf("request %dm limit %dm", req.CPURequestMilli, req.CPULimitMilli)
}

// baselineEntry is what State.Baseline keeps for a container holding cpus:
// its baseline, or nothing (an empty set) when the two are the same.
func baselineEntry(base, cpus cpuset.CPUSet) cpuset.CPUSet {
	if base.Equals(cpus) {
		return cpuset.New()
	}
	return base
}

// withBaseline returns m with (pod, container) set to base, or removed
// when base is empty, copying only the maps it changes.
func withBaseline(m map[string]map[string]cpuset.CPUSet, pod, container string, base cpuset.CPUSet) map[string]map[string]cpuset.CPUSet {
	if _, ok := m[pod][container]; !ok && base.IsEmpty() {
		return m
	}
	out := maps.Clone(m)
	if out == nil {
		out = map[string]map[string]cpuset.CPUSet{}
	}
	inner := maps.Clone(m[pod])
	if inner == nil {
		inner = map[string]cpuset.CPUSet{}
	}
	if base.IsEmpty() {
		delete(inner, container)
	} else {
		inner[container] = base
	}
	if len(inner) == 0 {
		delete(out, pod)
	} else {
		out[pod] = inner
	}
	return out
}

// validateBaseline checks that every baseline entry belongs to a container
// with exclusive CPUs and is a proper, non-empty part of them.
func validateBaseline(st State) error {
	var probs []string
	for _, p := range slices.Sorted(maps.Keys(st.Baseline)) {
		for _, c := range slices.Sorted(maps.Keys(st.Baseline[p])) {
			b := st.Baseline[p][c]
			cur, ok := st.Alloc.Assignments[p][c]
			switch {
			case !ok:
				probs = append(probs, fmt.Sprintf("pod %q container %q has a baseline %s and no exclusive CPUs", p, c, b))
			case b.IsEmpty() || !b.IsSubsetOf(cur) || b.Equals(cur):
				probs = append(probs, fmt.Sprintf("pod %q container %q has baseline %s, not a proper part of its CPUs %s", p, c, b, cur))
			}
		}
	}
	if len(probs) == 0 {
		return nil
	}
	return &allocator.InvalidStateError{Msg: fmt.Sprint(probs)}
}

// baselineFromSnapshot restores the baselines of a checkpoint for the
// containers st kept; one that is not a proper part of the container's
// CPUs is dropped with a note (its baseline is then its CPUs).
func (e *Engine) baselineFromSnapshot(st State, in map[string]map[string]string, notes []string) (State, []string) {
	for _, p := range slices.Sorted(maps.Keys(in)) {
		for _, c := range slices.Sorted(maps.Keys(in[p])) {
			text := in[p][c]
			b, err := topology.ParseList(text)
			cur, ok := st.Alloc.Assignments[p][c]
			if err != nil || !ok || b.IsEmpty() || !b.IsSubsetOf(cur) || b.Equals(cur) {
				notes = append(notes, fmt.Sprintf("dropped baseline %q of pod %s container %s: not a proper part of its CPUs %q", text, p, c, cur.String()))
				continue
			}
			st.Baseline = withBaseline(st.Baseline, p, c, b)
		}
	}
	return st, notes
}
