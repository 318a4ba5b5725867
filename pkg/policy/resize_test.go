package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// resize runs Engine.Resize, fails on an error and checks the state.
func resize(t *testing.T, e *policy.Engine, st policy.State, req policy.Request) (policy.State, policy.ResizeDecision) {
	t.Helper()
	next, d, err := e.Resize(st, req)
	if err != nil {
		t.Fatalf("Resize(%s/%s to %dm): %v", req.Pod, req.Container, req.CPURequestMilli, err)
	}
	if err := e.Validate(next); err != nil {
		t.Fatalf("state invalid after Resize(%s/%s): %v", req.Pod, req.Container, err)
	}
	return next, d
}

// refused runs a resize that must fail with reason, leaving st as it was.
func refused(t *testing.T, e *policy.Engine, st policy.State, req policy.Request, reason string) error {
	t.Helper()
	before := e.Snapshot(st)
	next, _, err := e.Resize(st, req)
	if err == nil {
		t.Fatalf("Resize(%s/%s to %dm) succeeded; want %s", req.Pod, req.Container, req.CPURequestMilli, reason)
	}
	var r interface{ Reason() string }
	if !errors.As(err, &r) || r.Reason() != reason || !strings.HasPrefix(err.Error(), reason+": ") {
		t.Fatalf("Resize(%s/%s to %dm): error %v; want reason %s", req.Pod, req.Container, req.CPURequestMilli, err, reason)
	}
	if got := e.Snapshot(next); !sameSnapshot(got, before) {
		t.Fatalf("refused resize changed the state: %+v, was %+v", got, before)
	}
	return err
}

func sameSnapshot(a, b policy.Snapshot) bool {
	if a.Shared != b.Shared || len(a.Assignments) != len(b.Assignments) || len(a.Baseline) != len(b.Baseline) ||
		len(a.PodAffinity) != len(b.PodAffinity) {
		return false
	}
	for p, cs := range a.Assignments {
		for c, v := range cs {
			if b.Assignments[p][c] != v {
				return false
			}
		}
	}
	for p, cs := range a.Baseline {
		for c, v := range cs {
			if b.Baseline[p][c] != v {
				return false
			}
		}
	}
	return true
}

func withOptions(c policy.Config, opts ...string) policy.Config {
	c.CPUOptions = map[string]string{}
	for _, o := range opts {
		k, v, ok := strings.Cut(o, "=")
		if !ok {
			v = "true"
		}
		c.CPUOptions[k] = v
	}
	return c
}

func wantSets(t *testing.T, d policy.ResizeDecision, cpus, added, released, baseline string) {
	t.Helper()
	if d.CPUs.String() != cpus || d.Added.String() != added || d.Released.String() != released || d.Baseline.String() != baseline {
		t.Fatalf("resize cpus=%q added=%q released=%q baseline=%q; want %q %q %q %q",
			d.CPUs, d.Added, d.Released, d.Baseline, cpus, added, released, baseline)
	}
}

// ht-2s-6c: NUMA 0 = CPUs 0-5,12-17, NUMA 1 = 6-11,18-23, core k = {k,
// k+12}. Reserved core 0 (CPUs 0,12).
func TestResizeFullPCPUsOnlyWholeCores(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", withOptions(static("none", "0,12"), allocator.OptFullPCPUsOnly))
	st, d := add(t, e, e.NewState(), guaranteed("a", "c", 2))
	// Packed: NUMA 0 (fewer free CPUs) first, its first free core 1.
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true})

	// +2: a whole free core of NUMA 0, the lowest: core 2.
	st, rd := resize(t, e, st, guaranteed("a", "c", 4))
	wantSets(t, rd, "1-2,13-14", "2,14", "", "1,13")
	if rd.Kind != policy.ResizeUp || rd.Mems.String() != "0-1" {
		t.Fatalf("kind %s mems %s; want upsize, 0-1 (every memory node)", rd.Kind, rd.Mems)
	}
	if got := e.SharedCPUs(st).String(); got != "0,3-12,15-23" {
		t.Fatalf("shared %s; want 0,3-12,15-23", got)
	}
	// 5 CPUs is not whole cores, up or down.
	refused(t, e, st, guaranteed("a", "c", 5), allocator.ReasonSMTAlignment)
	refused(t, e, st, guaranteed("a", "c", 3), allocator.ReasonSMTAlignment)

	// Fill NUMA 0's cores 3-5 and NUMA 1's cores 6-10: one whole core is
	// left (11), which the next two CPUs must be, outside NUMA 0.
	st, _ = add(t, e, st, guaranteed("b", "c", 6))  // cores 3-5
	st, _ = add(t, e, st, guaranteed("x", "c", 10)) // cores 6-10
	if got := e.SharedCPUs(st).String(); got != "0,11-12,23" {
		t.Fatalf("shared %s; want 0,11-12,23", got)
	}
	st, rd = resize(t, e, st, guaranteed("a", "c", 6))
	wantSets(t, rd, "1-2,11,13-14,23", "11,23", "", "1,13")
	if rd.Mems.String() != "0-1" {
		t.Fatalf("mems %s after spilling to NUMA 1; want 0-1", rd.Mems)
	}
	err := refused(t, e, st, guaranteed("a", "c", 8), allocator.ReasonSMTAlignment)
	if !strings.Contains(err.Error(), "not enough free physical CPUs") {
		t.Fatalf("error %v; want the physical-CPU count", err)
	}

	// Down to 4: the baseline stays, of the gained cores the one on the
	// baseline's NUMA node (core 2) stays, core 11 goes back.
	st, rd = resize(t, e, st, guaranteed("a", "c", 4))
	wantSets(t, rd, "1-2,13-14", "", "11,23", "1,13")
	if rd.Kind != policy.ResizeDown || rd.Mems.String() != "0-1" {
		t.Fatalf("kind %s mems %s; want downsize, 0-1 (every memory node)", rd.Kind, rd.Mems)
	}
	// Down to the baseline: no baseline entry left.
	st, rd = resize(t, e, st, guaranteed("a", "c", 2))
	wantSets(t, rd, "1,13", "", "2,14", "1,13")
	if s := e.Snapshot(st); len(s.Baseline) != 0 {
		t.Fatalf("baseline entries %v after returning to the baseline; want none", s.Baseline)
	}
}

func TestResizeBelowBaselineAndSharedExclusive(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("best-effort", "0"))
	st, _ := add(t, e, e.NewState(), guaranteed("a", "c", 2)) // 1,13
	st, _ = resize(t, e, st, guaranteed("a", "c", 3))
	err := refused(t, e, st, guaranteed("a", "c", 1), policy.ReasonResizeRejected)
	if !strings.Contains(err.Error(), policy.RuleBelowBaseline) || !strings.Contains(err.Error(), "1,13") {
		t.Fatalf("error %v; want the rule %s and the baseline 1,13", err, policy.RuleBelowBaseline)
	}
	// 2 -> 1500m: exclusive to shared.
	frac := guaranteed("a", "c", 0)
	frac.CPURequestMilli, frac.CPULimitMilli = 1500, 1500
	err = refused(t, e, st, frac, policy.ReasonResizeRejected)
	if !strings.Contains(err.Error(), policy.RuleExclusiveToShared) {
		t.Fatalf("error %v; want the rule %s", err, policy.RuleExclusiveToShared)
	}
	// A Burstable container with exclusive CPUs cannot exist; a 1500m
	// Guaranteed one is shared: 1500m -> 2 CPUs is shared to exclusive.
	frac.Pod = "s"
	st, _ = add(t, e, st, frac)
	err = refused(t, e, st, guaranteed("s", "c", 2), policy.ReasonResizeRejected)
	if !strings.Contains(err.Error(), policy.RuleSharedToExclusive) {
		t.Fatalf("error %v; want the rule %s", err, policy.RuleSharedToExclusive)
	}
	// Shared staying shared: nothing changes.
	frac.CPURequestMilli, frac.CPULimitMilli = 500, 500
	_, rd := resize(t, e, st, frac)
	if rd.Kind != policy.ResizeNone || rd.Exclusive {
		t.Fatalf("shared resize: %+v; want no change", rd)
	}
}

// Two containers spread over both NUMA nodes (restored with Assign):
// distribute-cpus-across-numa puts the added CPUs one per node, packed
// per node onto the most used core; the packed policy takes a whole core
// of the fuller node instead.
func TestResizeDistributeAcrossNUMA(t *testing.T) {
	for _, tc := range []struct {
		opts  []string
		added string
	}{
		// Node 0 holds 1,2 and node 1 holds 6,7: one each. Node 0's most
		// used cores are 1 and 2 (one free thread each): 13; node 1: 18.
		{[]string{allocator.OptDistributeCPUsAcrossNUMA}, "13,18"},
		// Packed: node 0 has 8 free CPUs, node 1 has 10: node 0 first,
		// its first whole free core, 3.
		{nil, "3,15"},
	} {
		e := newEngine(t, "ht-2s-6c", withOptions(static("best-effort", "0,12"), tc.opts...))
		st, err := e.Assign(e.NewState(), "a", "c", mustParse(t, "1-2,6-7"))
		if err != nil {
			t.Fatal(err)
		}
		_, rd := resize(t, e, st, guaranteed("a", "c", 6))
		if rd.Added.String() != tc.added || rd.Mems.String() != "0-1" {
			t.Fatalf("%v: added %s mems %s; want %s, 0-1", tc.opts, rd.Added, rd.Mems, tc.added)
		}
	}
}

// ht-1s-4c: 8 CPUs, core k = {k, k+4}. Reserved CPU 0 is outside the
// shared pool under strict-cpu-reservation: an upsize never takes it,
// and takes the pool's last CPU as an admission may.
func TestResizeStrictCPUReservation(t *testing.T) {
	e := newEngine(t, "ht-1s-4c", withOptions(static("none", "0"), allocator.OptStrictCPUReservation))
	st, d := add(t, e, e.NewState(), guaranteed("a", "c", 2))
	check(t, d, want{cpus: "1,5", mems: "0", exclusive: true})
	st, d = add(t, e, st, guaranteed("b", "c", 4))
	check(t, d, want{cpus: "2-3,6-7", mems: "0", exclusive: true})
	st, rd := resize(t, e, st, guaranteed("a", "c", 3))
	wantSets(t, rd, "1,4-5", "4", "", "1,5")
	if !e.SharedPoolEmpty(st) || e.SharedCPUs(st).String() != "0" {
		t.Fatalf("pool %s shared %s; want the pool empty and shared containers on the reserved CPU 0", e.SharedPool(st), e.SharedCPUs(st))
	}
	refused(t, e, st, guaranteed("a", "c", 4), allocator.ReasonInsufficientCPUs)
	// Giving CPU 4 back refills the pool.
	st, rd = resize(t, e, st, guaranteed("a", "c", 2))
	wantSets(t, rd, "1,5", "", "4", "1,5")
	if e.SharedPool(st).String() != "4" {
		t.Fatalf("pool %s; want 4", e.SharedPool(st))
	}
}

// epyc-7303-2p: core k = {k, k+32}; uncore cache g = cores 4g..4g+3, so
// cache 0 = CPUs 0-3,32-35. Reserved core 0.
func TestResizeStrictUncore(t *testing.T) {
	e := newEngine(t, "epyc-7303-2p", withOptions(static("none", "0,32"), allocator.OptStrictAlignByUncoreCache))
	st, d := add(t, e, e.NewState(), guaranteed("a", "c", 2))
	// The most used cache that holds 2: cache 0 (reserved core 0 in it).
	check(t, d, want{cpus: "1,33", mems: "0-1", exclusive: true})
	st, rd := resize(t, e, st, guaranteed("a", "c", 6))
	wantSets(t, rd, "1-3,33-35", "2-3,34-35", "", "1,33")
	// Cache 0 is full: growing further would leave it.
	refused(t, e, st, guaranteed("a", "c", 7), allocator.ReasonUncoreCacheAlignment)
}

// An affinity that must widen: the container fills NUMA 0 (10 free CPUs
// with core 0 reserved), and 12 CPUs need NUMA 1 too.
func TestResizeWidensAffinity(t *testing.T) {
	for _, tc := range []struct {
		policy string
		reason string
		cpus   string
	}{
		// 12 CPUs fit in one node (12 CPUs each): {0,1} is not
		// preferred, and single-numa-node cannot widen at all.
		{hints.PolicySingleNUMANode, "TopologyAffinityError", ""},
		{hints.PolicyRestricted, "TopologyAffinityError", ""},
		// best-effort admits it; the two added CPUs are NUMA 1's first
		// whole core, 6.
		{hints.PolicyBestEffort, "", "1-6,13-18"},
	} {
		e := newEngine(t, "ht-2s-6c", static(tc.policy, "0,12"))
		st, d := add(t, e, e.NewState(), guaranteed("a", "c", 10))
		check(t, d, want{cpus: "1-5,13-17", mems: "0-1", exclusive: true, numa: "0", preferred: true})
		// NUMA 0 has no free CPU left: 12 CPUs must widen to {0,1}.
		if tc.reason != "" {
			refused(t, e, st, guaranteed("a", "c", 12), tc.reason)
			continue
		}
		_, rd := resize(t, e, st, guaranteed("a", "c", 12))
		if rd.CPUs.String() != tc.cpus || rd.Mems.String() != "0-1" || rd.Affinity.Affinity.String() != "0-1" {
			t.Fatalf("%s: cpus %s mems %s affinity %s; want %s, 0-1, 0-1", tc.policy, rd.CPUs, rd.Mems, rd.Affinity.Affinity, tc.cpus)
		}
	}
}

// Pod scope: the pod's affinity is kept while its node has room, widens
// when a container needs more, and the pod's other containers then grow
// into the widened affinity.
func TestResizePodScope(t *testing.T) {
	cfg := static(hints.PolicyBestEffort, "0,12")
	cfg.TopologyScope = hints.ScopePod
	e := newEngine(t, "ht-2s-6c", cfg)
	ra, rb := guaranteed("p", "a", 2), guaranteed("p", "b", 2)
	ra.PodCPURequestMilli, rb.PodCPURequestMilli = 4000, 4000
	st, d := add(t, e, e.NewState(), ra)
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	st, d = add(t, e, st, rb)
	check(t, d, want{cpus: "2,14", mems: "0-1", exclusive: true, numa: "0", preferred: true})

	rb.CPURequestMilli, rb.CPULimitMilli = 4000, 4000
	st, rd := resize(t, e, st, rb)
	wantSets(t, rd, "2-3,14-15", "3,15", "", "2,14")
	// 14 CPUs: NUMA 0 has 4 free (cores 4, 5), so the pod widens to
	// {0,1}; packed, NUMA 0's cores 4-5 first, then NUMA 1's cores 6-8.
	rb.CPURequestMilli, rb.CPULimitMilli = 14000, 14000
	st, rd = resize(t, e, st, rb)
	wantSets(t, rd, "2-8,14-20", "4-8,16-20", "", "2,14")
	if h := st.PodAffinity["p"]; h.Affinity.String() != "0-1" {
		t.Fatalf("pod affinity %s; want 0-1", h.Affinity)
	}
	// Container a grows into the pod's NUMA 1 (NUMA 0 is full): the
	// first free CPU of its most used core... all of cores 9-11 are
	// free: core 9's first thread.
	ra.CPURequestMilli, ra.CPULimitMilli = 3000, 3000
	st, rd = resize(t, e, st, ra)
	wantSets(t, rd, "1,9,13", "9", "", "1,13")
	if rd.Mems.String() != "0-1" {
		t.Fatalf("mems %s; want 0-1", rd.Mems)
	}
	// And each container keeps its own baseline.
	ra.CPURequestMilli, ra.CPULimitMilli = 1000, 1000
	refused(t, e, st, ra, policy.ReasonResizeRejected)
}

func TestBaselineSnapshot(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("none", "0"))
	st, _ := add(t, e, e.NewState(), guaranteed("a", "c", 2)) // 1,13
	st, _ = resize(t, e, st, guaranteed("a", "c", 4))
	s := e.Snapshot(st)
	if got := s.Baseline["a"]["c"]; got != "1,13" {
		t.Fatalf("snapshot baseline %q; want 1,13", got)
	}
	back, notes, err := e.FromSnapshot(s)
	if err != nil || len(notes) != 0 {
		t.Fatalf("FromSnapshot: %v %v", notes, err)
	}
	if b, _ := e.Baseline(back, "a", "c"); b.String() != "1,13" {
		t.Fatalf("restored baseline %s; want 1,13", b)
	}
	// A checkpoint from before resizes has no baseline: the CPUs are.
	s.Baseline = nil
	back, _, _ = e.FromSnapshot(s)
	cur, _ := e.Assignment(back, "a", "c")
	if b, _ := e.Baseline(back, "a", "c"); !b.Equals(cur) || cur.Size() != 4 {
		t.Fatalf("baseline %s of an old checkpoint; want the CPUs %s", b, cur)
	}
	// A baseline that is not part of the CPUs is dropped with a note.
	s.Baseline = map[string]map[string]string{"a": {"c": "5"}, "gone": {"c": "7"}}
	back, notes, _ = e.FromSnapshot(s)
	if len(notes) != 2 || len(back.Baseline) != 0 {
		t.Fatalf("notes %q baseline %v; want two notes and no baseline", notes, back.Baseline)
	}
	// Removing the container drops its baseline.
	if got := e.Remove(st, "a", "c"); len(got.Baseline) != 0 {
		t.Fatalf("baseline %v after Remove; want none", got.Baseline)
	}
	if got := e.RemovePod(st, "a"); len(got.Baseline) != 0 {
		t.Fatalf("baseline %v after RemovePod; want none", got.Baseline)
	}
}
