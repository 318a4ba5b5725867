package allocator

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Placements kubelet v1.37 changed: the rows below are those of the
// kubelet's v1.37.2 pkg/kubelet/cm/cpumanager/policy_static_test.go (read
// from the k8s.io/kubernetes@v1.37.2 module) that v1.36.3 did not have,
// with their inputs as written there. Each expected set is worked out by
// hand below from the kubelet's v1.37.2 code (policy_static.go
// allocateForAdd; cpu_assignment.go takeByTopologyNUMADistributed), and
// equals the kubelet's own expectation.

// kubeletState is the kubelet test's mockState: default is the shared set
// as the row gives it (reserved CPUs included), assignments are the
// row's; every other CPU is held by an unnamed pod so that the state
// accounts for the whole machine, as this package's State must.
func kubeletState(t *testing.T, s *Static, def string, assigned map[string]map[string]cpuset.CPUSet) State {
	t.Helper()
	st := s.NewState()
	st.Default = mustMask(t, def)
	st.Assignments = map[string]map[string]cpuset.CPUSet{}
	held := mustParse(t, def)
	for p, cs := range assigned {
		st.Assignments[p] = cs
		for _, c := range cs {
			held = held.Union(c)
		}
	}
	if rest := s.topo.CPUs().Difference(held); !rest.IsEmpty() {
		st.Assignments["other"] = map[string]cpuset.CPUSet{"rest": rest}
	}
	if err := s.Validate(st); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestStaticPolicyAdd rows "GuPodManyCores, DualSocketHT, ExpectReAllocCPUs"
// and "GuPodManyCores, DualSocketHT, NotEnoughAvailable, NoAlloc" (new in
// v1.37): full-pcpus-only on topoDualSocketHT (12 CPUs, core k = {k, k+6},
// socket = NUMA node = CPU parity), reserved 0,1,6,7 (cores 0 and 1).
func TestKubelet137RestoredBeforeSMTCheck(t *testing.T) {
	dual := kubeletTopo(t, 12, func(i int) (int, int, int, int) { return i % 2, i % 6, i % 2, 0 })
	s := newStatic(t, dual, Options{FullPCPUsOnly: true}, "0-1,6-7")

	// ExpectReAllocCPUs: fakePod/fakeContainer holds 2-4,8-10 (cores 2, 3,
	// 4) and asks its 6 CPUs again; the default set is 0-1,5-7,11. Free
	// and not reserved: 5,11 = core 5, 2 physical CPUs. v1.37 returns the
	// held CPUs before counting (v1.36 refused: SMTAlignmentError,
	// requested 6, available physical CPUs 2).
	st := kubeletState(t, s, "0-1,5-7,11", map[string]map[string]cpuset.CPUSet{
		"fakePod": {"fakeContainer": mustParse(t, "2-4,8-10")},
	})
	next, got, err := alloc(t, s, st, "fakePod", "fakeContainer", 6, 0)
	if err != nil {
		t.Fatalf("ExpectReAllocCPUs: %v", err)
	}
	if want := mustParse(t, "2-4,8-10"); !got.Equals(want) || !next.Default.CPUSet().Equals(mustParse(t, "0-1,5-7,11")) {
		t.Errorf("ExpectReAllocCPUs: got %s, shared %s; want 2-4,8-10, shared 0-1,5-7,11", got, next.Default.CPUSet())
	}

	// NotEnoughAvailable, NoAlloc: nothing assigned, every CPU in the
	// default set, 10 asked. Available physical CPUs: 12 less the
	// reserved cores' 4 = 8 < 10, so SMTAlignmentError and no assignment.
	st = kubeletState(t, s, "0-11", nil)
	next, got, err = alloc(t, s, st, "fakePod", "fakeContainer", 10, 0)
	want := SMTAlignmentError{RequestedCPUs: 10, CpusPerCore: 2, AvailablePhysicalCPUs: 8, CausedByPhysicalCPUs: true}
	if e, ok := err.(*SMTAlignmentError); !ok || *e != want || !got.IsEmpty() {
		t.Errorf("NoAlloc: got %s, %v; want %v", got, err, want)
	}
	if _, held := next.Assignments["fakePod"]["fakeContainer"]; held {
		t.Errorf("NoAlloc: an assignment was recorded")
	}
}

// topoType2 is the kubelet's topoDualSocketMultiNumaPerSocketHTType2: 80
// CPUs, core k = {k, k+40} (k = 0..39), socket = k mod 2, NUMA node = k
// mod 4, so NUMA ids interleave across sockets: socket 0 = NUMA 0 and 2,
// socket 1 = NUMA 1 and 3. The kubelet's table sets no uncore id (0 for
// every CPU); no row here uses the uncore options.
func topoType2(t testing.TB) *topology.Topology {
	return kubeletTopo(t, 80, func(i int) (int, int, int, int) {
		k := i % 40
		return k % 2, k, k % 4, 0
	})
}

// TestPolicyWithAlignBySocketAndDistributeCPUsAcrossNUMAEnabled (new in
// v1.37): its 4 rows on topoType2, nothing reserved, no hint, 6 CPUs
// asked from the row's default set (the only free CPUs). Group size 1
// (no full-pcpus-only). How the kubelet decides, as read in v1.37.2:
//   - NUMA order (socketsFirst, as the machine has more NUMA nodes than
//     sockets): sockets by ascending free CPUs, ties by id, and inside
//     each its NUMA nodes by ascending free CPUs, ties by id. Only nodes
//     with a free CPU are listed.
//   - Sizes k from 1 (20 CPUs per node) to min(6, listed nodes); no row
//     has a node with 6 free, so k = 1 finds nothing and pairs decide.
//   - A pair's even share is 3; under align-by-socket it is capped at the
//     free CPUs of the pair's emptiest node, the rest (remainder) going to
//     the pair's nodes with CPUs left. Balance: the population standard
//     deviation, to 3 decimals, of the free counts of the listed nodes
//     after the allocation.
//   - Under align-by-socket a pair within one socket beats any pair that
//     crosses sockets, and balance decides within each kind; without it,
//     the first pair with the lowest balance wins.
//
// Every free CPU is the only free thread of its core, so the packed fit
// inside a node takes its lowest ids.
func TestKubelet137AlignBySocketDistribute(t *testing.T) {
	topo := topoType2(t)
	both := Options{DistributeCPUsAcrossNUMA: true, AlignBySocket: true}
	numaOnly := Options{DistributeCPUsAcrossNUMA: true}
	for _, c := range []struct {
		name string
		o    Options
		free string // the row's default set; every other CPU is held
		want string
	}{
		// Free 1-15: NUMA 0 = 4,8,12 (3), 1 = 1,5,9,13 (4), 2 =
		// 2,6,10,14 (4), 3 = 3,7,11,15 (4); socket 0 has 7, socket 1 8.
		// Order 0,2,1,3. Pairs, share 3, no remainder:
		//   {0,2} one socket: left 0,1,4,4 -> 1.785, best so far.
		//   {0,1} {0,3} {2,1} {2,3} cross: never replace a one-socket pair.
		//   {1,3} one socket: left 3,4,1,1 -> 1.299 < 1.785: best.
		// NUMA 1 gives 1,5,9, NUMA 3 gives 3,7,11. (Issue 34's case: 65
		// CPUs taken; v1.36 and the plugin before took {2,1}, the first
		// pair at 1.299: 1-2,5-6,9-10.)
		{"AlignBySocket and DistributeCPUsAcrossNUMA both enabled", both, "1-15", "1,3,5,7,9,11"},
		// The same CPUs without align-by-socket (not a kubelet row; the
		// v1.36 rule): {2,1} is the first pair at 1.299.
		{"the first row without AlignBySocket", numaOnly, "1-15", "1-2,5-6,9-10"},
		// Free 1-9,12,13,16,17: NUMA 0 = 4,8,12,16 (4), 1 = 1,5,9,13,17
		// (5), 2 = 2,6 (2), 3 = 3,7 (2); socket 0 has 6, socket 1 7.
		// Order 2,0,3,1.
		//   {2,0} one socket: share capped at 2, left 0,2 (and 2,5),
		//     remainder 2 on NUMA 0, the only one with CPUs left: left
		//     0,0,2,5 -> 2.046, best so far.
		//   {2,3} {2,1} {0,3} {0,1} cross: not better.
		//   {3,1} one socket: share 2, left 2,4,0,3, remainder 2 on NUMA 1:
		//     left 2,4,0,1 -> 1.479 < 2.046: best.
		// NUMA 3 gives 3,7, NUMA 1 gives 1,5, then 9 and 13.
		{"AlignBySocket takes priority over DistributeCPUsAcrossNUMA", both, "1-9,12-13,16-17", "1,3,5,7,9,13"},
		// The same CPUs without align-by-socket: no cap, so a pair with a
		// 2-CPU node cannot take 3 there: {2,0} {2,1} {0,3} {3,1} skipped,
		// {2,3} has 4 < 6; {0,1}: left 2,1,2,2 -> 0.433.
		// NUMA 0 gives 4,8,12, NUMA 1 gives 1,5,9.
		{"AlignBySocket isn't enabled", numaOnly, "1-9,12-13,16-17", "1,4-5,8-9,12"},
		// Free 1-5,8,9,12,13: NUMA 0 = 4,8,12 (3), 1 = 1,5,9,13 (4), 2 =
		// 2 (1), 3 = 3 (1); socket 0 has 4, socket 1 5. Order 2,0,3,1.
		// Only {0,1} has 6 free CPUs ({3,1}, the one-socket pair that
		// comes closest, has 5): cross-socket, share 3, left 1,0,1,1 ->
		// 0.433. NUMA 0 gives 4,8,12, NUMA 1 gives 1,5,9.
		{"No assignment that satisfy AlignBySocket", both, "1-5,8-9,12-13", "1,4-5,8-9,12"},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := newStatic(t, topo, c.o, "")
			st := kubeletState(t, s, c.free, nil)
			_, got, err := alloc(t, s, st, "fakePod", "fakeContainer", 6, hints.Mask(0))
			if err != nil {
				t.Fatal(err)
			}
			if want := mustParse(t, c.want); !got.Equals(want) {
				t.Errorf("got %s, want %s", got, want)
			}
		})
	}
}
