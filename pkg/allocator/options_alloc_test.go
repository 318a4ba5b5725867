package allocator

import (
	"errors"
	"slices"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// distribute-cpus-across-numa on ht-2s-4numa-80 (NUMA n = CPUs 10n..10n+9,
// 40+10n..40+10n+9; sockets first since 2 sockets < 4 nodes), reserved
// 0,40, worked by hand from kubelet-rules §4.
func TestDistributeAcrossNUMA(t *testing.T) {
	topo := build(t, specHT2S4NUMA)
	tests := []struct {
		name string
		o    Options
		n    int
		want string
	}{
		// Fits one node: k ranges from min = 1; every node can hold 10;
		// balance (stddev of free after, over nodes 0-3): node 0 -> [8,20,
		// 20,20] = 5.196, node 1 -> [18,10,20,20] = 4.123 (best; nodes 2,
		// 3 tie and lose to the first). Packed inside node 1: cores 10-14.
		{"10 on one node", Options{DistributeCPUsAcrossNUMA: true}, 10, "10-14,50-54"},
		// 24: min 2 nodes, 12 each, no remainder. Free after per combo:
		// (0,1) [6,8,20,20] sd 6.538; (1,2) [18,8,8,20] sd 5.545 — the best,
		// first among the ties (1,3), (2,3). Node 1: cores 10-15, node 2:
		// cores 20-25.
		{"24 over two nodes", Options{DistributeCPUsAcrossNUMA: true}, 24, "10-15,20-25,50-55,60-65"},
		// 25: 12 each on two nodes and a remainder of 1. For (1,2): free
		// after [18,8,8,20]; remainder on node 1 -> [18,7,8,20] sd 5.804
		// (same for node 2; first subset wins) — better than any (0,x)
		// (6.759 at best). Node 1 gets 12 + 1 (CPU 16 of core 16).
		{"25 with a remainder", Options{DistributeCPUsAcrossNUMA: true}, 25, "10-16,20-25,50-55,60-65"},
		// full-pcpus-only: groups of 2 CPUs. 26 = 12 + 12 + one group of 2:
		// (1,2) [18,8,8,20] then the group on node 1 -> [18,6,8,20] sd
		// 6.083 beats (0,1)'s best 7.0. Node 1: 12 + core 16 {16,56}.
		{"26 full cores", Options{DistributeCPUsAcrossNUMA: true, FullPCPUsOnly: true}, 26, "10-16,20-25,50-56,60-65"},
		// Packed for comparison: sockets first, socket 0 (38 free) before
		// socket 1 (40): node 0 (18 free) is not whole, node 1 (20) is
		// taken whole; 4 more: node 0 cores 1,2.
		{"24 packed", Options{}, 24, "1-2,10-19,41-42,50-59"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, topo, tc.o, "0,40")
			_, got, err := alloc(t, s, s.NewState(), "p", "c", tc.n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustParse(t, tc.want); !got.Equals(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
	// A count that is not a multiple of the group size falls back to
	// packed (only reachable through a reserved count): 3 -> core 0 and
	// CPU 1.
	got, err := ReservedByCount(topo, Options{DistributeCPUsAcrossNUMA: true, FullPCPUsOnly: true}, 3)
	if err != nil || !got.Equals(mustParse(t, "0-1,40")) {
		t.Errorf("reserved 3: got %s, %v; want 0-1,40", got, err)
	}
}

// prefer-align-cpus-by-uncorecache on the EPYC 7702P (SMT on): 16 L3 of 4
// cores; L3 g = cores 4g..4g+3 = CPUs 4g..4g+3, 64+4g..64+4g+3. Reserved
// 0,64 (core 0).
func TestUncoreEPYC7702P(t *testing.T) {
	topo := build(t, specEPYC7702P)
	steps := []struct {
		n       int
		packed  string
		uncore  string
		comment string
	}{
		// L3 0 has 6 free: the partial take of cores 1-3 fits exactly.
		{6, "1-3,65-67", "1-3,65-67", "fills L3 0"},
		// L3 0 full; L3 1 is first of the equally free caches: cores 4,5.
		{4, "4-5,68-69", "4-5,68-69", "starts L3 1"},
		// 8 = a whole cache: packed takes cores 6-9 across L3 1 and 2; the
		// uncore walk (L3 1 first, 4 free) takes the free L3 2 whole.
		{8, "6-9,70-73", "8-11,72-75", "a whole L3"},
		// 4: uncore packs the rest of L3 1 (cores 6,7).
		{4, "10-11,74-75", "6-7,70-71", "the rest of L3 1"},
	}
	for _, mode := range []struct {
		name string
		o    Options
	}{
		{"packed", Options{}},
		{"uncore", Options{PreferAlignByUncoreCache: true}},
		{"uncore+full-pcpus-only", Options{PreferAlignByUncoreCache: true, FullPCPUsOnly: true}},
	} {
		t.Run(mode.name, func(t *testing.T) {
			s := newStatic(t, topo, mode.o, "0,64")
			st := s.NewState()
			for i, step := range steps {
				var got cpuset.CPUSet
				var err error
				st, got, err = alloc(t, s, st, "p", string(rune('a'+i)), step.n, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := step.uncore
				if !mode.o.PreferAlignByUncoreCache {
					want = step.packed
				}
				if !got.Equals(mustParse(t, want)) {
					t.Errorf("step %d (%s, %d CPUs): got %s, want %s", i, step.comment, step.n, got, want)
				}
			}
		})
	}
}

// The partial-uncore quirks: the step looks only at the lowest-id
// ceil(need/CPUsPerCore) cores with a free CPU and claims only an exact
// match, so a cache whose free CPUs are scattered over half-used cores is
// passed over even when it has enough of them.
func TestUncorePartialQuirks(t *testing.T) {
	topo := build(t, specEPYC7702P)
	s := newStatic(t, topo, Options{PreferAlignByUncoreCache: true}, "0,64")
	// Another pod holds 65,66 (siblings of 1, 2): L3 0 free = 1,2,3,67.
	st, err := s.Assign(s.NewState(), "x", "c", mustParse(t, "65-66"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		n    int
		want string
	}{
		// L3 0 has exactly 4 free CPUs, but cores 1,2 (the 2 lowest) have
		// only 2 free -> no match; L3 1: cores 4,5.
		{"4 skips the scattered cache", 4, "4-5,68-69"},
		// Odd need: cores 1,2 give {1,2}, 2 != 3; in L3 1 cores 4,5 give
		// {4,5,68,69}, the highest (69) is dropped -> {4,5,68}.
		{"3 odd drops the highest", 3, "4-5,68"},
		// 2: ceil(2/2) = 1 core: core 1 gives {1}, 1 != 2; L3 1: core 4
		// {4,68}. (Packed would take the whole free core 3 of L3 0.)
		{"2 looks at one core only", 2, "4,68"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, got, err := alloc(t, s, st, "p", "c", tc.n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equals(mustParse(t, tc.want)) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// distribute-cpus-across-cores: no whole-core step, CPUs by socket then id.
func TestDistributeAcrossCores(t *testing.T) {
	tests := []struct {
		name string
		s    spec
		res  string
		n    int
		want string
	}{
		// ht-1s-4c: 1,2,3 are three different cores (packed: 1,5,2).
		{"spread over cores", specHT1S4C, "0,4", 3, "1-3"},
		// Once the first threads are used, the ids continue with 5.
		{"then siblings", specHT1S4C, "0,4", 4, "1-3,5"},
		// ht-2s-6c: socket 0 (reserved 0,12: 10 free) before socket 1.
		{"most used socket first", specHT2S6C, "0,12", 4, "1-4"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, build(t, tc.s), Options{DistributeCPUsAcrossCores: true}, tc.res)
			_, got, err := alloc(t, s, s.NewState(), "p", "c", tc.n, 0)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Equals(mustParse(t, tc.want)) {
				t.Errorf("got %s, want %s", got, tc.want)
			}
		})
	}
}

// Init containers' CPUs are reusable by the pod's later containers;
// sidecars' are not; removal keeps CPUs still used by a sibling container.
func TestInitReuseAndRelease(t *testing.T) {
	s := newStatic(t, build(t, specHT1S4C), Options{}, "0,4")
	st := s.NewState()
	req := func(pod, c string, typ ContainerType, n int) Request {
		return Request{Pod: pod, Container: c, Type: typ, CPUs: n}
	}
	step := func(r Request, want string) {
		t.Helper()
		var got cpuset.CPUSet
		var err error
		st, got, err = s.Allocate(st, r, hints.Hint{})
		if err != nil {
			t.Fatalf("%s: %v", r.Container, err)
		}
		if err := s.Validate(st); err != nil {
			t.Fatalf("%s: %v", r.Container, err)
		}
		if !got.Equals(mustParse(t, want)) {
			t.Errorf("%s: got %s, want %s", r.Container, got, want)
		}
	}
	// init: cores 1,2.
	step(req("p", "init", Init, 4), "1-2,5-6")
	if !st.Reusable.Equals(mustParse(t, "1-2,5-6")) || st.ReusablePod != "p" {
		t.Fatalf("reuse set %q %s", st.ReusablePod, st.Reusable)
	}
	// app: assignable = 3,7 + reusable 1,2,5,6; best fit takes core 1
	// (all cores have 2 free; lowest id) — the init container's CPUs.
	step(req("p", "app", App, 2), "1,5")
	if !st.Reusable.Equals(mustParse(t, "2,6")) {
		t.Errorf("reuse set after app: %s, want 2,6", st.Reusable)
	}
	if !st.Default.Equals(mustMask(t, "0,3-4,7")) {
		t.Errorf("shared %s, want 0,3-4,7", st.Default)
	}
	// Removing the init container: 1,5 are still the app's, 2,6 return.
	st = s.Release(st, "p", "init")
	if err := s.Validate(st); err != nil {
		t.Fatal(err)
	}
	if !st.Default.Equals(mustMask(t, "0,2-4,6-7")) {
		t.Errorf("shared after init removal %s, want 0,2-4,6-7", st.Default)
	}
	// Idempotent.
	if again := s.Release(st, "p", "init"); !again.Default.Equals(st.Default) {
		t.Errorf("second release changed the shared pool")
	}
	st = s.Release(st, "p", "app")
	if !st.Default.Equals(mustMask(t, "0-7")) || len(st.Assignments) != 0 {
		t.Errorf("after removing all: shared %s, assignments %v", st.Default, st.Assignments)
	}

	// Sidecars (restartable init containers) never join the reuse set.
	st = s.NewState()
	step(req("q", "side", Sidecar, 2), "1,5")
	if !st.Reusable.IsEmpty() {
		t.Errorf("sidecar CPUs became reusable: %s", st.Reusable)
	}
	step(req("q", "app", App, 2), "2,6")

	// The reuse set belongs to the most recently allocated pod only.
	st = s.NewState()
	step(req("r", "init", Init, 2), "1,5")
	step(req("other", "app", App, 2), "2,6")
	if st.ReusablePod != "other" || !st.Reusable.IsEmpty() {
		t.Errorf("reuse set not reset: %q %s", st.ReusablePod, st.Reusable)
	}
	step(req("r", "app", App, 2), "3,7")
}

func TestAssign(t *testing.T) {
	topo := build(t, specHT1S4C)
	s := newStatic(t, topo, Options{}, "0,4")
	st, err := s.Assign(s.NewState(), "p", "a", mustParse(t, "2-3"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Validate(st); err != nil {
		t.Fatal(err)
	}
	if !st.Default.Equals(mustMask(t, "0-1,4-7")) {
		t.Errorf("shared %s", st.Default)
	}
	tests := []struct {
		name string
		pod  string
		cpus string
	}{
		{"offline", "q", "8"},
		{"reserved", "q", "4"},
		{"held by another pod", "q", "3,5"},
		{"empty", "q", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			next, err := s.Assign(st, tc.pod, "c", mustParse(t, tc.cpus))
			var ise *InvalidStateError
			if !errors.As(err, &ise) || ise.Reason() != "InvalidState" {
				t.Fatalf("got %v, want InvalidStateError", err)
			}
			if !next.Default.Equals(st.Default) || len(next.Assignments) != len(st.Assignments) {
				t.Errorf("a refused Assign changed the state")
			}
		})
	}
	// Another container of the same pod is "another container" too.
	if _, err := s.Assign(st, "p", "b", mustParse(t, "3,7")); reasonOf(err) != "InvalidState" {
		t.Errorf("same-pod overlap: got %v, want InvalidState", err)
	}
	// AssignReusing accepts it (init-container reuse restored from a
	// checkpoint), but still not another pod's CPUs.
	st2, err := s.AssignReusing(st, "p", "b", mustParse(t, "3,7"))
	if err != nil {
		t.Fatalf("same-pod overlap refused: %v", err)
	}
	if err := s.Validate(st2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AssignReusing(st2, "q", "b", mustParse(t, "7")); reasonOf(err) != "InvalidState" {
		t.Errorf("other-pod overlap through AssignReusing: got %v", err)
	}
	// Re-assigning a container replaces its CPUs.
	st3, err := s.Assign(st, "p", "a", mustParse(t, "5"))
	if err != nil {
		t.Fatal(err)
	}
	if !st3.Default.Equals(mustMask(t, "0-4,6-7")) {
		t.Errorf("after replacing: shared %s", st3.Default)
	}
	// Leaving the shared pool empty is allowed (no reservation), as
	// Allocate allows it.
	s0 := newStatic(t, topo, Options{}, "")
	if st0, err := s0.Assign(s0.NewState(), "p", "a", mustParse(t, "0-7")); err != nil || !st0.Default.IsEmpty() {
		t.Errorf("emptying the shared pool: got shared %s, %v", st0.Default, err)
	}
}

// An Assign over CPUs of several containers names every holder, in the same
// order on every call (the state's maps iterate in random order).
func TestAssignHeldByNamesEveryHolder(t *testing.T) {
	topo := build(t, specHT1S4C)
	s := newStatic(t, topo, Options{}, "0,4")
	st := s.NewState()
	for _, a := range []struct{ pod, container, cpus string }{
		{"p", "a", "1"}, {"q", "b", "2"}, {"r", "c", "3"}, {"r", "d", "5"},
	} {
		var err error
		if st, err = s.Assign(st, a.pod, a.container, mustParse(t, a.cpus)); err != nil {
			t.Fatal(err)
		}
	}
	want := `CPUs 1 are held by pod "p" container "a"; ` +
		`CPUs 2 are held by pod "q" container "b"; ` +
		`CPUs 3 are held by pod "r" container "c"`
	for range 20 {
		_, err := s.Assign(st, "x", "y", mustParse(t, "1-3,6"))
		var ise *InvalidStateError
		if !errors.As(err, &ise) {
			t.Fatalf("got %v, want InvalidStateError", err)
		}
		if ise.Pod != "x" || ise.Container != "y" || ise.Msg != want {
			t.Fatalf("got %q %q %q,\nwant \"x\" \"y\" %q", ise.Pod, ise.Container, ise.Msg, want)
		}
	}
}

func TestValidateFindsViolations(t *testing.T) {
	topo := build(t, specHT1S4C)
	s := newStatic(t, topo, Options{}, "0,4")
	strict := newStatic(t, topo, Options{StrictCPUReservation: true}, "0,4")
	as := func(m map[string]map[string]string) map[string]map[string]cpuset.CPUSet {
		out := map[string]map[string]cpuset.CPUSet{}
		for p, cs := range m {
			out[p] = map[string]cpuset.CPUSet{}
			for c, v := range cs {
				out[p][c] = mustParse(t, v)
			}
		}
		return out
	}
	tests := []struct {
		name string
		s    *Static
		st   State
		ok   bool
	}{
		{"fresh", s, s.NewState(), true},
		{"fresh strict", strict, strict.NewState(), true},
		{"reserved not shared", s, State{Default: mustMask(t, "1-7"), Assignments: as(map[string]map[string]string{"p": {"c": "0"}})}, false},
		{"strict reserved shared", strict, State{Default: mustMask(t, "0-7")}, false},
		{"assignment overlaps shared", s, State{Default: mustMask(t, "0-7"), Assignments: as(map[string]map[string]string{"p": {"c": "1"}})}, false},
		{"pods overlap", s, State{Default: mustMask(t, "0,3-4,7"), Assignments: as(map[string]map[string]string{"p": {"c": "1-2"}, "q": {"c": "2,5-6"}})}, false},
		{"same pod overlap is fine", s, State{Default: mustMask(t, "0,3-4,7"), Assignments: as(map[string]map[string]string{"p": {"i": "1-2,5-6", "c": "1,5"}})}, true},
		{"CPU lost", s, State{Default: mustMask(t, "0,4")}, false},
		{"offline CPU", s, State{Default: mustMask(t, "0-8")}, false},
		{"empty shared, nothing reserved", newStatic(t, topo, Options{}, ""), State{Default: mustMask(t, ""), Assignments: as(map[string]map[string]string{"p": {"c": "0-7"}})}, true},
		{"empty shared, strict", strict, State{Default: mustMask(t, ""), Assignments: as(map[string]map[string]string{"p": {"c": "1-3,5-7"}})}, true},
		{"empty shared, reserved not shared", s, State{Default: mustMask(t, ""), Assignments: as(map[string]map[string]string{"p": {"c": "1-3,5-7"}})}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.s.Validate(tc.st)
			if tc.ok && err != nil {
				t.Fatalf("unexpected: %v", err)
			}
			if !tc.ok {
				var ise *InvalidStateError
				if !errors.As(err, &ise) {
					t.Fatalf("got %v, want InvalidStateError", err)
				}
			}
		})
	}
}

func TestCPUHints(t *testing.T) {
	topo := build(t, specHT2S4NUMA) // 4 nodes of 20 CPUs, sockets {0,1} {2,3}
	h := func(pref bool, nodes ...int) hints.Hint {
		return hints.Hint{Affinity: hints.NewMask(nodes...), Preferred: pref}
	}
	all15 := func(prefSize int) []hints.Hint {
		var out []hints.Hint
		for _, m := range [][]int{{0}, {1}, {2}, {3}, {0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}, {0, 1, 2}, {0, 1, 3}, {0, 2, 3}, {1, 2, 3}, {0, 1, 2, 3}} {
			out = append(out, h(len(m) == prefSize, m...))
		}
		return out
	}
	tests := []struct {
		name string
		o    Options
		n    int
		want []hints.Hint
	}{
		// Fits one node: every mask is a hint, singletons preferred.
		{"4 CPUs", Options{}, 4, all15(1)},
		// 30 > 20: no singleton; pairs (40 total) are the minimum.
		{"30 CPUs", Options{}, 30, all15(2)[4:]},
		// 50: triples are the minimum (60); node 0 has 18 free so every
		// triple still has >= 58.
		{"50 CPUs", Options{}, 50, all15(3)[10:]},
		// align-by-socket: min 3 nodes -> 2 sockets; the 4-node mask spans
		// 2 sockets too, so it is preferred as well.
		{"50 CPUs align-by-socket", Options{AlignBySocket: true}, 50, append(all15(3)[10:14], h(true, 0, 1, 2, 3))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, topo, tc.o, "0,40")
			got := s.CPUHints(s.NewState(), Request{Pod: "p", Container: "c", CPUs: tc.n})
			// Nothing is assigned: every hint scores 1 (kubelet v1.38).
			want := slices.Clone(tc.want)
			for i := range want {
				want[i].Score = 1
			}
			if !equalHints(got, want) {
				t.Errorf("got  %v\nwant %v", got, want)
			}
		})
	}

	s := newStatic(t, topo, Options{}, "0,40")
	st, _, err := s.Allocate(s.NewState(), Request{Pod: "p", Container: "c", CPUs: 2}, hints.Hint{Affinity: hints.NewMask(1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Run("regenerated from the assignment", func(t *testing.T) {
		// c holds 10,50 (node 1): only masks with node 1 can hold it; {1}
		// is the narrowest. Scores: 2 CPUs assigned of the mask's
		// unreserved ones (20 a node, 18 on node 0): 10, 5 for pairs, 3
		// for triples, 2 for all four.
		got := s.CPUHints(st, Request{Pod: "p", Container: "c", CPUs: 2})
		want := scoredHints([]int64{10, 5, 5, 5, 3, 3, 3, 2}, h(true, 1), h(false, 0, 1), h(false, 1, 2), h(false, 1, 3), h(false, 0, 1, 2), h(false, 0, 1, 3), h(false, 1, 2, 3), h(false, 0, 1, 2, 3))
		if !equalHints(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
	})
	t.Run("size differs", func(t *testing.T) {
		got := s.CPUHints(st, Request{Pod: "p", Container: "c", CPUs: 4})
		if got == nil || len(got) != 0 {
			t.Errorf("got %v, want an empty non-nil list", got)
		}
	})
	t.Run("no request", func(t *testing.T) {
		if got := s.CPUHints(st, Request{Pod: "p", Container: "d"}); got != nil {
			t.Errorf("got %v, want nil", got)
		}
	})
	t.Run("reusable CPUs pin the hint", func(t *testing.T) {
		st2, _, err := s.Allocate(s.NewState(), Request{Pod: "p", Container: "i", Type: Init, CPUs: 2}, hints.Hint{Affinity: hints.NewMask(2)})
		if err != nil {
			t.Fatal(err)
		}
		got := s.CPUHints(st2, Request{Pod: "p", Container: "app", CPUs: 2})
		// The init container's 2 CPUs count as assigned: the same scores.
		want := scoredHints([]int64{10, 5, 5, 5, 3, 3, 3, 2}, h(true, 2), h(false, 0, 2), h(false, 1, 2), h(false, 2, 3), h(false, 0, 1, 2), h(false, 0, 2, 3), h(false, 1, 2, 3), h(false, 0, 1, 2, 3))
		if !equalHints(got, want) {
			t.Errorf("got  %v\nwant %v", got, want)
		}
	})
	t.Run("pod scope regenerates", func(t *testing.T) {
		got := s.PodCPUHints(st, "p", 2)
		if len(got) != 8 || got[0] != scoredHints([]int64{10}, h(true, 1))[0] {
			t.Errorf("got %v", got)
		}
		if got := s.PodCPUHintsFor(st, "p", 2, map[string]int{"c": 4}); got == nil || len(got) != 0 {
			t.Errorf("size mismatch: got %v, want empty", got)
		}
	})
}

// scoredHints is hs with the scores given, in order.
func scoredHints(scores []int64, hs ...hints.Hint) []hints.Hint {
	for i := range hs {
		hs[i].Score = scores[i]
	}
	return hs
}

func equalHints(a, b []hints.Hint) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCPUHintsTooManyNodes(t *testing.T) {
	// 17 NUMA nodes of one core each: no enumeration, no preference.
	topo := kubeletTopo(t, 17, func(i int) (int, int, int, int) { return i, i, i, i })
	s := newStatic(t, topo, Options{}, "0")
	if got := s.CPUHints(s.NewState(), Request{Pod: "p", Container: "c", CPUs: 2}); got != nil {
		t.Errorf("got %d hints, want nil", len(got))
	}
	// 16 nodes still enumerate. Reserved 0 leaves node 0 with no free
	// CPU, so a mask holds >= 2 free CPUs iff it has >= 2 nodes other than
	// node 0.
	topo16 := kubeletTopo(t, 16, func(i int) (int, int, int, int) { return i, i, i, i })
	s16 := newStatic(t, topo16, Options{}, "0")
	got := s16.CPUHints(s16.NewState(), Request{Pod: "p", Container: "c", CPUs: 2})
	// All masks (65535) minus the 16 singletons minus the 15 pairs {0,x}.
	if want := 65535 - 16 - 15; len(got) != want {
		t.Errorf("got %d hints, want %d", len(got), want)
	}
	pref := 0
	for _, h := range got {
		if h.Preferred {
			pref++
		}
	}
	// Preferred: the C(15,2) = 105 pairs without node 0.
	if pref != 105 {
		t.Errorf("got %d preferred, want 105", pref)
	}
}

// TestDistributeTooManyCombinations: 40 NUMA nodes of 2 CPUs, 40 CPUs
// over 20 nodes would need C(40,20) combinations; the packed fallback
// answers at once (take's TestBinomial has the bound).
func TestDistributeTooManyCombinations(t *testing.T) {
	topo := kubeletTopo(t, 80, func(i int) (int, int, int, int) { return i / 2, i, i / 2, i / 2 })
	s := newStatic(t, topo, Options{DistributeCPUsAcrossNUMA: true}, "")
	_, got, err := alloc(t, s, s.NewState(), "p", "c", 40, 0)
	if err != nil || !got.Equals(mustParse(t, "0-39")) {
		t.Errorf("got %s, %v; want the packed 0-39", got, err)
	}
}
