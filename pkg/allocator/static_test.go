package allocator

import (
	"errors"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// "allocating two CPUs on a system that has hyper-threading turned on
// yields both sibling threads on the same physical core" — and on a
// non-HT system two cores of the same socket.
func TestTwoCPUsAreSiblings(t *testing.T) {
	tests := []struct {
		name     string
		s        spec
		reserved string
		want     string
	}{
		// ht-1s-4c: core k = {k, k+4}; reserved core 0 -> next core 1.
		{"HT siblings N,N+4", specHT1S4C, "0,4", "1,5"},
		// adjacent numbering: core 0 = {0,1} reserved -> core 2 = {2,3}.
		{"HT siblings adjacent", spec{sockets: 1, coresPerSocket: 4, threads: 2, adjacent: true}, "0-1", "2-3"},
		// ht-2s-6c: socket 0 is the most used NUMA node (reserved 0,12)
		// so the allocation packs there: core 1 = {1,13}.
		{"dual socket HT packs on the used socket", specHT2S6C, "0,12", "1,13"},
		// no SMT, 2 sockets of 4: reserved 0 -> socket 0 has 3 free,
		// best fit -> CPUs 1,2 on socket 0.
		{"no HT: two cores of one socket", spec{sockets: 2, coresPerSocket: 4, threads: 1}, "0", "1-2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, build(t, tc.s), Options{}, tc.reserved)
			_, got, err := alloc(t, s, s.NewState(), "p", "a", 2, 0)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustParse(t, tc.want); !got.Equals(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

func TestReservedByCount(t *testing.T) {
	tests := []struct {
		name string
		s    spec
		o    Options
		n    int
		want string
	}{
		// Lowest-id whole core of the first NUMA node, siblings together.
		{"ht-1s-4c 2", specHT1S4C, Options{}, 2, "0,4"},
		{"ht-1s-4c 1", specHT1S4C, Options{}, 1, "0"},
		// Odd count: core 0 whole, then CPU 1 of core 1 (its sibling 5
		// stays shared).
		{"ht-1s-4c 3", specHT1S4C, Options{}, 3, "0-1,4"},
		// ht-2s-6c siblings are N and N+12: core 0 = {0,12}.
		{"ht-2s-6c 2", specHT2S6C, Options{}, 2, "0,12"},
		// 4 CPUs: cores 0 and 1 of socket 0.
		{"ht-2s-6c 4", specHT2S6C, Options{}, 4, "0-1,12-13"},
		// A whole socket (12 CPUs): socket 0 = 0-5,12-17.
		{"ht-2s-6c 12", specHT2S6C, Options{}, 12, "0-5,12-17"},
		// distribute-cpus-across-cores: socket order then CPU id, no
		// whole-core step -> 0,1 (different cores).
		{"ht-1s-4c 2 across cores", specHT1S4C, Options{DistributeCPUsAcrossCores: true}, 2, "0-1"},
		// distribute-cpus-across-numa on ht-2s-4numa-80 with 24: see the
		// distribute tests; min 2 nodes, first combo (0,1), 12 each.
		{"ht-2s-4numa-80 24 across numa", specHT2S4NUMA, Options{DistributeCPUsAcrossNUMA: true}, 24, "0-5,10-15,40-45,50-55"},
		// Packed, 24: sockets first (2 sockets < 4 nodes); no whole socket
		// (40 > 24); NUMA node 0 whole (20: 0-9,40-49), then 4 CPUs: socket
		// 0 (20 free) beats socket 1 (40) -> node 1, cores 10, 11.
		{"ht-2s-4numa-80 24 packed", specHT2S4NUMA, Options{}, 24, "0-11,40-51"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ReservedByCount(build(t, tc.s), tc.o, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustParse(t, tc.want); !got.Equals(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
	t.Run("too many", func(t *testing.T) {
		_, err := ReservedByCount(build(t, specHT1S4C), Options{}, 9)
		var ie *InsufficientCPUsError
		if !errors.As(err, &ie) || ie.Requested != 9 || ie.Available != 8 {
			t.Fatalf("got %v, want InsufficientCPUsError{9, 8}", err)
		}
	})
}

// KEP-2625: a 16-core SMT2 package, a container asking 5 CPUs under
// full-pcpus-only is rejected: 5 is not a multiple of 2 CPUs per core.
func TestFullPCPUsOnlyKEP2625(t *testing.T) {
	s := newStatic(t, build(t, specKEP2625), Options{FullPCPUsOnly: true}, "0,16")
	st := s.NewState()
	_, _, err := alloc(t, s, st, "frontend", "app", 5, 0)
	var smt *SMTAlignmentError
	if !errors.As(err, &smt) {
		t.Fatalf("got %v, want SMTAlignmentError", err)
	}
	want := SMTAlignmentError{RequestedCPUs: 5, CpusPerCore: 2}
	if *smt != want {
		t.Errorf("got %+v, want %+v", *smt, want)
	}
	if reasonOf(err) != "SMTAlignmentError" {
		t.Errorf("reason %q", reasonOf(err))
	}
	// 6 CPUs = 3 whole cores: cores 1-3 = {1-3, 17-19}.
	_, got, err := alloc(t, s, st, "frontend", "app", 6, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustParse(t, "1-3,17-19"); !got.Equals(want) {
		t.Errorf("got %s, want %s", got, want)
	}
}

// full-pcpus-only counts the thread siblings of reserved CPUs as
// unavailable (only for the count check).
func TestFullPCPUsOnlyAvailablePhysical(t *testing.T) {
	// ht-1s-4c, reserved 0 alone: its sibling 4 is shared, not reserved,
	// but full-pcpus-only counts available = 8 − {0,4} = 6.
	s := newStatic(t, build(t, specHT1S4C), Options{FullPCPUsOnly: true}, "0")
	st := s.NewState()
	_, _, err := alloc(t, s, st, "p", "c", 8, 0)
	var smt *SMTAlignmentError
	if !errors.As(err, &smt) {
		t.Fatalf("got %v, want SMTAlignmentError", err)
	}
	want := SMTAlignmentError{RequestedCPUs: 8, CpusPerCore: 2, AvailablePhysicalCPUs: 6, CausedByPhysicalCPUs: true}
	if *smt != want {
		t.Errorf("got %+v, want %+v", *smt, want)
	}
	// 6 fits: whole cores 1-3.
	st, got, err := alloc(t, s, st, "p", "c", 6, 0)
	if err != nil {
		t.Fatal(err)
	}
	if want := mustParse(t, "1-3,5-7"); !got.Equals(want) {
		t.Errorf("got %s, want %s", got, want)
	}
	// Kubelet v1.37 returns the existing assignment before the SMT checks
	// (v1.36 checked first and refused both requests below): an odd count
	// and a second ask on the now full machine get the held CPUs back.
	for _, n := range []int{3, 6} {
		// Allocate directly: alloc insists on n CPUs, and the held set
		// is returned whatever the size asked.
		if _, again, err := s.Allocate(st, Request{Pod: "p", Container: "c", CPUs: n}, hints.Hint{}); err != nil || !again.Equals(got) {
			t.Errorf("asking %d again: got %s, %v; want the existing %s", n, again, err, got)
		}
	}
	// With room left, asking again returns the existing assignment.
	st = s.NewState()
	st, got, err = alloc(t, s, st, "p", "c", 2, 0)
	if err != nil || !got.Equals(mustParse(t, "1,5")) {
		t.Fatalf("got %s, %v; want 1,5", got, err)
	}
	if _, again, err := alloc(t, s, st, "p", "c", 2, 0); err != nil || !again.Equals(got) {
		t.Errorf("got %s, %v; want the existing %s", again, err, got)
	}
}

// KEP-4800's 16-core example: single socket, no SMT, two uncore caches of
// 8 cores (0-7, 8-15), reserved 0-1, three 4-CPU containers.
func TestUncoreKEP4800Example16(t *testing.T) {
	topo := build(t, specKEP4800_16)
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		// Packed: 2-5, then 6-9 (crosses the cache boundary), then 10-13.
		{"packed", Options{}, []string{"2-5", "6-9", "10-13"}},
		// Uncore: cache 0 (6 free) first: 2-5 fits. Container 2: cache 0
		// has only 6,7 left (2 != 4), cache 1: 8-11. Container 3: cache 0
		// still 2, cache 1 (4 free: 12-15).
		{"uncore", Options{PreferAlignByUncoreCache: true}, []string{"2-5", "8-11", "12-15"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, topo, tc.o, "0-1")
			st := s.NewState()
			for i, w := range tc.want {
				var got cpuset.CPUSet
				var err error
				st, got, err = alloc(t, s, st, "p", string(rune('a'+i)), 4, 0)
				if err != nil {
					t.Fatal(err)
				}
				if want := mustParse(t, w); !got.Equals(want) {
					t.Errorf("container %d: got %s, want %s", i+1, got, want)
				}
			}
		})
	}
}

// KEP-4800's 32-core example: single socket, NPS=1, no SMT, four uncore
// caches of 8 (0-7, 8-15, 16-23, 24-31), reserved 0-1; containers of 10,
// 8 and 6 CPUs.
//
// The KEP's narrative scans caches "in numerical order" and ends with
// 8-17, 24-31, 2-7. The kubelet (kubelet-rules §3.2) walks the caches by
// ascending free CPUs, the list computed once before the walk, and tries a
// partial take of every cache it visits after the full-cache step:
//   - 10 CPUs: walk = [cache 0 (6 free), 1, 2, 3]. At cache 0 the need
//     (10) >= 8 takes the free cache 1 (8-15); then the partial take of
//     cache 0 for the remaining 2: cores 2,3 -> 2-3,8-15.
//   - 8 CPUs: walk = [cache 0 (4 free), 2, 3]; need 8 >= 8 takes cache 2
//     (16-23).
//   - 6 CPUs: cache 0 has 4 free (4-7): 4 != 6; cache 3: 24-29.
func TestUncoreKEP4800Example32(t *testing.T) {
	topo := build(t, specKEP4800_32)
	tests := []struct {
		name string
		o    Options
		want []string
	}{
		// Packed: 10 CPUs 2-11, 8 CPUs 12-19, 6 CPUs 20-25.
		{"packed", Options{}, []string{"2-11", "12-19", "20-25"}},
		{"uncore", Options{PreferAlignByUncoreCache: true}, []string{"2-3,8-15", "16-23", "24-29"}},
	}
	sizes := []int{10, 8, 6}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, topo, tc.o, "0-1")
			st := s.NewState()
			for i, w := range tc.want {
				var got cpuset.CPUSet
				var err error
				st, got, err = alloc(t, s, st, "p", string(rune('a'+i)), sizes[i], 0)
				if err != nil {
					t.Fatal(err)
				}
				if want := mustParse(t, w); !got.Equals(want) {
					t.Errorf("container %d (%d CPUs): got %s, want %s", i+1, sizes[i], got, want)
				}
			}
		})
	}
}

func TestInsufficientCPUs(t *testing.T) {
	tests := []struct {
		name      string
		o         Options
		reserved  string
		n         int
		available int
	}{
		// 8 CPUs, 2 reserved: 6 assignable.
		{"beyond assignable", Options{}, "0,4", 7, 6},
		// No reservation: all 8 may go, as in the kubelet (the shared
		// pool empties).
		{"no reservation", Options{}, "", 9, 8},
		// Strict reservation: the 6 non-reserved CPUs may all go.
		{"strict", Options{StrictCPUReservation: true}, "0,4", 7, 6},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, build(t, specHT1S4C), tc.o, tc.reserved)
			st := s.NewState()
			_, _, err := alloc(t, s, st, "p", "c", tc.n, 0)
			var ie *InsufficientCPUsError
			if !errors.As(err, &ie) {
				t.Fatalf("got %v, want InsufficientCPUsError", err)
			}
			if ie.Requested != tc.n || ie.Available != tc.available {
				t.Errorf("got %+v, want requested %d available %d", *ie, tc.n, tc.available)
			}
			if reasonOf(err) != "InsufficientCPUs" {
				t.Errorf("reason %q", reasonOf(err))
			}
			// One less fits.
			if _, _, err := alloc(t, s, st, "p", "c", tc.available, 0); err != nil {
				t.Errorf("allocating %d: %v", tc.available, err)
			}
		})
	}
}

// The shared pool empties as in the kubelet when the reserved CPUs are
// outside it (strict-cpu-reservation) or none are reserved, and fills
// again on release.
func TestSharedPoolMayEmpty(t *testing.T) {
	topo := build(t, specHT1S4C) // cores {0,4} {1,5} {2,6} {3,7}
	t.Run("strict", func(t *testing.T) {
		s := newStatic(t, topo, Options{StrictCPUReservation: true}, "0,4")
		st := s.NewState() // shared 1-3,5-7
		// Whole cores, lowest id first: core 1.
		st, got, err := alloc(t, s, st, "p", "a", 2, 0)
		if err != nil || !got.Equals(mustParse(t, "1,5")) {
			t.Fatalf("a: got %s, %v; want 1,5", got, err)
		}
		// The 4 CPUs left: cores 2 and 3, the pool's last CPUs.
		st, got, err = alloc(t, s, st, "p", "b", 4, 0)
		if err != nil || !got.Equals(mustParse(t, "2-3,6-7")) {
			t.Fatalf("b: got %s, %v; want 2-3,6-7", got, err)
		}
		if !st.Default.IsEmpty() {
			t.Fatalf("shared pool %s, want empty", st.Default)
		}
		if _, _, err := alloc(t, s, st, "q", "c", 1, 0); err == nil || err.Error() != (&InsufficientCPUsError{Requested: 1, Available: 0}).Error() {
			t.Fatalf("with the pool empty: got %v, want InsufficientCPUs requested=1 available=0", err)
		}
		st = s.Release(st, "p", "a")
		if !st.Default.Equals(mustMask(t, "1,5")) {
			t.Errorf("after releasing a: shared %s, want 1,5", st.Default)
		}
		if err := s.Validate(st); err != nil {
			t.Error(err)
		}
	})
	t.Run("no reservation", func(t *testing.T) {
		s := newStatic(t, topo, Options{}, "")
		st, got, err := alloc(t, s, s.NewState(), "p", "a", 8, 0)
		if err != nil || !got.Equals(mustParse(t, "0-7")) || !st.Default.IsEmpty() {
			t.Fatalf("got %s (shared %s), %v; want 0-7 and an empty pool", got, st.Default, err)
		}
	})
	t.Run("assign", func(t *testing.T) {
		s := newStatic(t, topo, Options{StrictCPUReservation: true}, "0,4")
		st, err := s.Assign(s.NewState(), "p", "a", mustParse(t, "1-3,5-7"))
		if err != nil || !st.Default.IsEmpty() {
			t.Fatalf("got shared %s, %v; want an empty pool", st.Default, err)
		}
		if err := s.Validate(st); err != nil {
			t.Error(err)
		}
	})
}

func TestStrictReservation(t *testing.T) {
	s := newStatic(t, build(t, specHT1S4C), Options{StrictCPUReservation: true}, "0,4")
	st := s.NewState()
	if want := mustMask(t, "1-3,5-7"); !st.Default.Equals(want) {
		t.Errorf("shared pool %s, want %s", st.Default, want)
	}
	s2 := newStatic(t, build(t, specHT1S4C), Options{}, "0,4")
	if st2 := s2.NewState(); !st2.Default.Equals(mustMask(t, "0-7")) {
		t.Errorf("non-strict shared pool %s, want 0-7", st2.Default)
	}
}

// Allocation inside a hint: first from the hinted NUMA nodes, the rest from
// everything else.
func TestAllocateWithAffinity(t *testing.T) {
	topo := build(t, specHT2S4NUMA) // NUMA n = CPUs 10n..10n+9, 40+10n..
	tests := []struct {
		name string
		o    Options
		n    int
		aff  hints.Mask
		want string
	}{
		// Node 2 only: cores 20,21.
		{"inside node 2", Options{}, 4, hints.NewMask(2), "20-21,60-61"},
		// 24 CPUs hinted to node 3: all 20 of node 3, then 4 from the rest.
		// Sockets outnumbered by NUMA nodes: sockets first. Socket 1 (20
		// free) beats socket 0 (38 free), so node 2: cores 20,21.
		{"spill over", Options{}, 24, hints.NewMask(3), "20-21,30-39,60-61,70-79"},
		// align-by-socket widens node 1 to socket 0 (nodes 0,1): best fit
		// packs on node 0 (most used): cores 1,2.
		{"align by socket", Options{AlignBySocket: true}, 4, hints.NewMask(1), "1-2,41-42"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newStatic(t, topo, tc.o, "0,40")
			_, got, err := alloc(t, s, s.NewState(), "p", "c", tc.n, tc.aff)
			if err != nil {
				t.Fatal(err)
			}
			if want := mustParse(t, tc.want); !got.Equals(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}

// Released CPUs leave the pod's reuse set: back in the shared pool they
// are anyone's, and the reuse set names only CPUs the pod holds.
func TestReleaseDropsReusableCPUs(t *testing.T) {
	topo := build(t, specHT1S4C) // cores {0,4} {1,5} {2,6} {3,7}
	s := newStatic(t, topo, Options{}, "0,4")
	// init takes core 1 = {1,5}: the pod's reuse set.
	st, got, err := s.Allocate(s.NewState(), Request{Pod: "p", Container: "init", Type: Init, CPUs: 2}, hints.Hint{})
	if err != nil || !got.Equals(mustParse(t, "1,5")) || !st.Reusable.Equals(mustParse(t, "1,5")) {
		t.Fatalf("init: got %s reusable %s, %v; want 1,5 both", got, st.Reusable, err)
	}
	// app reuses one of them, 1 (the most used core first): 5 stays
	// reusable.
	st, got, err = s.Allocate(st, Request{Pod: "p", Container: "app", Type: App, CPUs: 1}, hints.Hint{})
	if err != nil || !got.Equals(mustParse(t, "1")) || !st.Reusable.Equals(mustParse(t, "5")) {
		t.Fatalf("app: got %s reusable %s, %v; want 1 and 5", got, st.Reusable, err)
	}
	// init goes: 5 is shared again (1 stays with app) and not reusable.
	st = s.Release(st, "p", "init")
	if !st.Default.Equals(mustMask(t, "0,2-7")) || !st.Reusable.IsEmpty() {
		t.Errorf("after init's release: shared %s reusable %s, want 0,2-7 and none", st.Default, st.Reusable)
	}
	if err := s.Validate(st); err != nil {
		t.Error(err)
	}
}

// Take partitions a given set with the topology walk, reading no state
// (a pod-level pod's slices, policy/podlevel.go). ht-2s-6c: core k =
// {k, k+12}, socket 0 = 0-5,12-17.
func TestTake(t *testing.T) {
	s := newStatic(t, build(t, specHT2S6C), Options{}, "0,12")
	for _, tc := range []struct {
		from string
		n    int
		want string
	}{
		// Two whole cores: 2 CPUs take one whole core, the lowest (1).
		{"1-2,13-14", 2, "1,13"},
		// One whole core and a lone thread: 1 CPU takes the lone thread,
		// keeping the core whole (takeRemainingCPUs prefers the CPU of the
		// core with the fewest free CPUs).
		{"1,2,14", 1, "1"},
		// The whole set.
		{"2,14", 2, "2,14"},
		// Offline CPUs (30) are ignored.
		{"3,15,30", 2, "3,15"},
	} {
		got, err := s.Take(mustParse(t, tc.from), tc.n, 0)
		if err != nil || got.String() != tc.want {
			t.Errorf("Take(%s, %d) = %s, %v; want %s", tc.from, tc.n, got, err, tc.want)
		}
	}
	_, err := s.Take(mustParse(t, "2,14,30"), 3, 0)
	var ins *InsufficientCPUsError
	if !errors.As(err, &ins) || ins.Requested != 3 || ins.Available != 2 {
		t.Errorf("Take(2,14,30, 3) = %v, want InsufficientCPUs{3, 2}", err)
	}
	if got, err := s.Take(mustParse(t, "1-3"), 0, 0); err != nil || !got.IsEmpty() {
		t.Errorf("Take(_, 0) = %s, %v; want empty", got, err)
	}
}
