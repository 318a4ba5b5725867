package take

import (
	"slices"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Placements kubelet v1.38 changed, the rows that exercise the best fit
// itself (pkg/allocator's kubelet138_test.go has those of the static
// policy): the rows below are those of the kubelet's v1.38.0-beta.0
// pkg/kubelet/cm/cpumanager tests (cpu_assignment_test.go; read from the
// k8s.io/kubernetes@v1.38.0-beta.0 module) that v1.37.2 did not have or
// expects differently, with their inputs as written there. Each runs under
// both rule sets (Fit.V137): v1.38 expects the kubelet's row, v1.37 the
// value worked out by hand from v1.37.2's code, or pkg/allocator's
// documented deviation where v1.37 would hand out a busy CPU (its doc.go).

// cpuIDs maps positions to CPU ids, in order.
func cpuIDs(m *Machine, ps []int) []int {
	out := make([]int, len(ps))
	for i, p := range ps {
		out[i] = m.cpuID[p]
	}
	return out
}

// TestCPUAccumulatorFreeCPUsSpreadRoundRobin: the spread order of v1.38
// (sortAvailableCPUsSpread): per socket, cores by ascending free CPUs then
// id, one thread of each in turn. v1.37 listed each socket's free CPUs by
// id; the "first 4" column is what a 4-CPU spread take gives under each.
func TestCPUAccumulatorFreeCPUsSpreadRoundRobin(t *testing.T) {
	contiguous := coresTopo(t, []coreSpec{{0, 0, "0-1", -1}, {1, 0, "2-3", -1}, {2, 0, "4-5", -1}, {3, 0, "6-7", -1}})
	interleaved := sysfstest.Load(t, "ht-1s-4c") // topoSingleSocketHT: siblings {i, i+4}
	arbitrary := coresTopo(t, []coreSpec{{0, 0, "0,7", -1}, {1, 0, "2,11", -1}, {2, 0, "5,9", -1}, {3, 0, "1,14", -1}})
	var two []coreSpec
	for k := 0; k < 8; k++ {
		two = append(two, coreSpec{k, k / 4, cpuset.New(2*k, 2*k+1).String(), -1})
	}
	twoSockets := coresTopo(t, two)
	threeWay := coresTopo(t, []coreSpec{{0, 0, "0-2", -1}, {1, 0, "3-5", -1}, {2, 0, "6-8", -1}})
	multiNUMA := coresTopo(t, []coreSpec{{0, 0, "0-1", 0}, {1, 0, "2-3", 1}, {2, 1, "4-5", 2}, {3, 1, "6-7", 3}})
	for _, c := range []struct {
		name       string
		topo       *topology.Topology
		avail      string
		want       []int
		first4v137 string
		first4v138 string
	}{
		{"contiguous sibling CPU IDs", contiguous, "0-7", []int{0, 2, 4, 6, 1, 3, 5, 7}, "0-3", "0,2,4,6"},
		{"interleaved sibling CPU IDs", interleaved, "0-7", []int{0, 1, 2, 3, 4, 5, 6, 7}, "0-3", "0-3"},
		{"arbitrary logical CPU numbering", arbitrary, "0,1,2,5,7,9,11,14", []int{0, 2, 5, 1, 7, 11, 9, 14}, "0-2,5", "0-2,5"},
		{"multiple sockets", twoSockets, "0-15", []int{0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15}, "0-3", "0,2,4,6"},
		{"partially allocated cores", contiguous, "0,2,3,4,6,7", []int{0, 4, 2, 6, 3, 7}, "0,2-4", "0,2,4,6"},
		{"more than two CPUs per core", threeWay, "0-8", []int{0, 3, 6, 1, 4, 7, 2, 5, 8}, "0-3", "0-1,3,6"},
		{"spread across multi-NUMA sockets", multiNUMA, "0-7", []int{0, 2, 1, 3, 4, 6, 5, 7}, "0-3", "0-3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := NewMachine(c.topo)
			avail := m.ToBits(mustParse(t, c.avail))
			a := m.newAccumulator(avail, 0, false)
			got := cpuIDs(m, a.spreadOrder())
			a.finish(false)
			if !slices.Equal(got, c.want) {
				t.Errorf("v1.38 order %v, want %v", got, c.want)
			}
			for _, v := range []struct {
				v137 bool
				want string
			}{{true, c.first4v137}, {false, c.first4v138}} {
				if got := m.Packed(avail, 4, Fit{Spread: true, V137: v.v137}); got == nil || !m.ToSet(got).Equals(mustParse(t, v.want)) {
					t.Errorf("%s: 4 spread CPUs %v, want %s", versionName(v.v137), got, v.want)
				}
			}
		})
	}
}

// quadSocketFourWayHT is the kubelet's topoQuadSocketFourWayHT (policy_test.go):
// 288 CPUs, 4 sockets (= NUMA nodes) of 18 four-thread cores, with the
// scattered numbering of the original machine: core id, socket, CPUs.
var quadSocketFourWayHT = []struct {
	core, socket int
	cpus         string
}{
	{0, 0, "0,109,169,229"},
	{1, 0, "50,110,170,230"},
	{2, 1, "51,111,171,231"},
	{3, 1, "52,112,172,232"},
	{4, 2, "53,113,173,233"},
	{5, 2, "54,114,174,234"},
	{6, 3, "55,115,175,235"},
	{7, 3, "56,116,176,236"},
	{8, 0, "57,117,177,237"},
	{9, 0, "58,118,178,238"},
	{10, 1, "59,119,179,239"},
	{11, 1, "60,120,180,240"},
	{12, 2, "61,121,181,241"},
	{13, 2, "62,122,182,242"},
	{14, 3, "63,123,183,243"},
	{15, 3, "64,124,184,244"},
	{18, 1, "65,125,185,245"},
	{19, 1, "66,126,186,246"},
	{20, 2, "67,127,187,247"},
	{21, 2, "68,128,188,248"},
	{22, 3, "69,129,189,249"},
	{23, 3, "70,130,190,250"},
	{24, 0, "71,131,191,251"},
	{25, 0, "72,132,192,252"},
	{26, 1, "73,133,193,253"},
	{27, 1, "74,134,194,254"},
	{28, 2, "75,135,195,255"},
	{29, 2, "76,136,196,256"},
	{30, 3, "77,137,197,257"},
	{31, 3, "78,138,198,258"},
	{32, 0, "79,139,199,259"},
	{33, 0, "80,140,200,260"},
	{34, 1, "81,141,201,261"},
	{35, 1, "82,142,202,262"},
	{36, 2, "83,143,203,263"},
	{37, 2, "84,144,204,264"},
	{38, 3, "85,145,205,265"},
	{39, 3, "86,146,206,266"},
	{40, 0, "87,147,207,267"},
	{41, 0, "88,148,208,268"},
	{42, 1, "89,149,209,269"},
	{43, 1, "90,150,210,270"},
	{44, 2, "91,151,211,271"},
	{45, 2, "92,152,212,272"},
	{46, 3, "93,153,213,273"},
	{47, 3, "94,154,214,274"},
	{48, 0, "95,155,215,275"},
	{49, 0, "96,156,216,276"},
	{50, 1, "97,157,217,277"},
	{51, 1, "98,158,218,278"},
	{52, 2, "99,159,219,279"},
	{53, 2, "100,160,220,280"},
	{54, 3, "101,161,221,281"},
	{55, 3, "102,162,222,282"},
	{56, 0, "103,163,223,283"},
	{57, 0, "104,164,224,284"},
	{60, 2, "105,165,225,285"},
	{61, 2, "106,166,226,286"},
	{62, 3, "107,167,227,287"},
	{63, 3, "37,108,168,228"},
	{64, 0, "1,13,25,38"},
	{65, 0, "2,14,26,39"},
	{66, 1, "3,15,27,40"},
	{67, 1, "4,16,28,41"},
	{68, 2, "5,17,29,42"},
	{69, 2, "6,18,30,43"},
	{70, 3, "7,19,31,44"},
	{71, 3, "8,20,32,45"},
	{72, 0, "9,21,33,46"},
	{73, 0, "10,22,34,47"},
	{74, 1, "11,23,35,48"},
	{75, 1, "12,24,36,49"},
}

// TestTakeByTopologyWithSpreadPhysicalCPUsPreferredOption row "take a
// socket of cpus from quad socket four way with HT, 12 cpus": v1.38 takes
// one thread of each of the 12 lowest-id cores of socket 0; v1.37 took
// socket 0's 12 lowest CPU ids.
func TestKubelet138SpreadQuadSocket(t *testing.T) {
	var specs []coreSpec
	for _, c := range quadSocketFourWayHT {
		specs = append(specs, coreSpec{c.core, c.socket, c.cpus, -1})
	}
	topo := coresTopo(t, specs)
	if topo.NumCPUs() != 288 {
		t.Fatalf("%d CPUs, want 288", topo.NumCPUs())
	}
	m := NewMachine(topo)
	for _, c := range []struct {
		v137 bool
		want string
	}{{true, "0-2,9-10,13-14,21-22,25-26,33"}, {false, "0,50,57-58,71-72,79-80,87-88,95-96"}} {
		got := m.Packed(m.All(), 12, Fit{Spread: true, V137: c.v137})
		if got == nil || !m.ToSet(got).Equals(mustParse(t, c.want)) {
			t.Errorf("%s: got %v, want %s", versionName(c.v137), m.ToSet(got), c.want)
		}
	}
}

// hybrid is the kubelet's topoSingleSocketSingleNumaPerSocketPCoreHTECoreST
// (an i7-14700): P-cores 0,4,...,28 holding CPUs {0,1},...,{14,15}, and
// E-cores 32..43 holding CPUs 16..27.
func hybrid(t testing.TB) *topology.Topology {
	var specs []coreSpec
	for k := 0; k < 8; k++ {
		specs = append(specs, coreSpec{4 * k, 0, cpuset.New(2*k, 2*k+1).String(), -1})
	}
	for k := 0; k < 12; k++ {
		specs = append(specs, coreSpec{32 + k, 0, cpuset.New(16 + k).String(), -1})
	}
	return coresTopo(t, specs)
}

// mixedChips is the kubelet's topoDualSocketMultiNumaPerSocketMixedChips
// (an EPYC 9005): core i = {i, i+48}; socket 0 = cores 0-15 (NUMA 0: 0-7,
// NUMA 1: 8-15), socket 1 = cores 16-47 (NUMA 2: 16-31, NUMA 3: 32-47).
func mixedChips(t testing.TB) *topology.Topology {
	var specs []coreSpec
	for i := 0; i < 48; i++ {
		sock, numa := 0, i/8
		if i >= 16 {
			sock, numa = 1, 2+(i-16)/16
		}
		specs = append(specs, coreSpec{i, sock, cpuset.New(i, i+48).String(), numa})
	}
	return coresTopo(t, specs)
}

// freeCoreIDs is the kubelet's freeCores(): the free cores in best-fit
// order, as core ids.
func freeCoreIDs(m *Machine, avail Bits, v137 bool) []int {
	a := m.newAccumulator(avail, 0, v137)
	defer a.finish(false)
	out := []int{}
	a.walkCores(func(c int) bool {
		if a.coreIsFree(c) {
			out = append(out, m.cores.ids[c])
		}
		return true
	})
	return out
}

// freeSocketIDs is the kubelet's freeSockets(), as socket ids.
func freeSocketIDs(m *Machine, avail Bits, v137 bool) []int {
	a := m.newAccumulator(avail, 0, v137)
	defer a.finish(false)
	out := []int{}
	for _, g := range a.freeGroups(a.sortedSockets(), a.sockFree, a.socketFull) {
		out = append(out, m.socks.ids[g])
	}
	return out
}

// TestCPUAccumulatorFreeCores and TestCPUAccumulatorFreeSockets, the
// non-uniform rows (#140498): a core or socket is free when all its CPUs
// are (v1.38), not when its free CPUs equal the machine average (v1.37).
func TestKubelet138FreeCoresAndSockets(t *testing.T) {
	h := NewMachine(hybrid(t))
	for _, c := range []struct {
		name       string
		avail      string
		v137, v138 []int
	}{
		// 28 CPUs / 20 cores: the v1.37 average is 1.
		{"7 HT cores free (1 partially consumed) + 4 ST cores free", "1-15,24-27",
			[]int{0, 40, 41, 42, 43}, []int{40, 41, 42, 43, 4, 8, 12, 16, 20, 24, 28}},
		{"0 HT cores free (8 partially consumed) + 12 ST cores free", "0,2,4,6,8,10,12,14,16-27",
			[]int{0, 4, 8, 12, 16, 20, 24, 28, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43},
			[]int{32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43}},
	} {
		avail := h.ToBits(mustParse(t, c.avail))
		if got := freeCoreIDs(h, avail, true); !slices.Equal(got, c.v137) {
			t.Errorf("free cores %s v1.37: %v, want %v", c.name, got, c.v137)
		}
		if got := freeCoreIDs(h, avail, false); !slices.Equal(got, c.v138) {
			t.Errorf("free cores %s v1.38: %v, want %v", c.name, got, c.v138)
		}
	}
	mc := NewMachine(mixedChips(t))
	for _, c := range []struct {
		name       string
		avail      string
		v137, v138 []int
	}{
		// 96 CPUs / 2 sockets: the v1.37 average is 48, neither size.
		{"1 socket free", "4-47,52-95", []int{}, []int{1}},
		{"0 socket free", "4-15,17-47,52-63,65-95", []int{}, []int{}},
	} {
		avail := mc.ToBits(mustParse(t, c.avail))
		if got := freeSocketIDs(mc, avail, true); !slices.Equal(got, c.v137) {
			t.Errorf("free sockets %s v1.37: %v, want %v", c.name, got, c.v137)
		}
		if got := freeSocketIDs(mc, avail, false); !slices.Equal(got, c.v138) {
			t.Errorf("free sockets %s v1.38: %v, want %v", c.name, got, c.v138)
		}
	}
}

// TestTakeByTopologyNUMAPacked row "allocate 2 cpus from non-uniform
// topology with 1 cpu reserved": hybrid, CPU 0 reserved, 2 CPUs.
//   - v1.38: P-core 0 is not free (CPU 0 is busy); the free cores by
//     ascending free CPUs are the E-cores 32, 33: CPUs 16-17.
//   - v1.37: the average is 1, so P-core 0 (one free CPU) is "free" and
//     first; the kubelet takes the whole core, 0-1, CPU 0 included. This
//     package takes its free CPU only (pkg/allocator/doc.go), then E-core
//     32: 1,16.
func TestKubelet138PackedNonUniform(t *testing.T) {
	m := NewMachine(hybrid(t))
	avail := m.ToBits(mustParse(t, "1-27"))
	for _, c := range []struct {
		v137 bool
		want string
	}{{true, "1,16"}, {false, "16-17"}} {
		got := m.Packed(avail, 2, Fit{V137: c.v137})
		if got == nil || !m.ToSet(got).Equals(mustParse(t, c.want)) {
			t.Errorf("%s: got %v, want %s", versionName(c.v137), m.ToSet(got), c.want)
		}
	}
}

// TestSortAvailableUncoreCaches: an uncore cache spanning NUMA nodes is
// listed once under v1.38 (under its first node), once per node under
// v1.37.
func TestKubelet138SortAvailableUncoreCaches(t *testing.T) {
	// topoDualSocketMultiNumaPerSocketHT with its one (default) uncore id.
	multi := kubeletTopo(t, 80, func(i int) (int, int, int, int) { k := i % 40; return k / 20, k, k / 10, 0 })
	// topoDualSocketSubNumaPerSocketHTMonolithicUncore: 2 sockets of 60
	// cores, siblings {i, i+120}, 2 NUMA nodes of 30 cores per socket, one
	// uncore cache per socket.
	mono := sysfstest.LoadSpec(t, sysfstest.Spec{Sockets: 2, NUMAPerSocket: 2, CoresPerSocket: 60, ThreadsPerCore: 2})
	for _, c := range []struct {
		name       string
		topo       *topology.Topology
		avail      string
		v137, v138 []int
	}{
		{"1 (default) uncore cache, 0 cpus reserved", multi, "0-79", []int{0, 0, 0, 0}, []int{0}},
		{"2 uncore caches, multi numa per uncore, 2 cpus reserved", mono, "1-119,121-239", []int{0, 0, 1, 1}, []int{0, 1}},
	} {
		m := NewMachine(c.topo)
		avail := m.ToBits(mustParse(t, c.avail))
		for _, v := range []struct {
			v137 bool
			want []int
		}{{true, c.v137}, {false, c.v138}} {
			a := m.newAccumulator(avail, 0, v.v137)
			var got []int
			for _, u := range a.sortedUncore() {
				got = append(got, m.l3s.ids[u])
			}
			a.finish(false)
			if !slices.Equal(got, v.want) {
				t.Errorf("%s %s: %v, want %v", c.name, versionName(v.v137), got, v.want)
			}
		}
	}
}

// The whole-cache pass of prefer-align-cpus-by-uncorecache checks each
// cache against its own size under v1.38. Worked by hand (no kubelet
// row): 8 single-thread CPUs, caches {0,1} and {2-7} (average 4), 3 CPUs.
//   - v1.38: cache 0 (2 free, fewest) is free and 3 >= 2: 0-1; then the
//     partial pass takes 1 CPU in cache 1, its lowest core: 2.
//   - v1.37: 3 < the average 4, so no whole cache; the partial take of
//     cache 0 finds 2 CPUs, not 3; of cache 1, its 3 lowest cores: 2-4.
func TestKubelet138UncoreCachesOfDifferentSizes(t *testing.T) {
	topo := kubeletTopo(t, 8, func(i int) (int, int, int, int) {
		if i < 2 {
			return 0, i, 0, 0
		}
		return 0, i, 0, 1
	})
	m := NewMachine(topo)
	for _, c := range []struct {
		v137 bool
		want string
	}{{true, "2-4"}, {false, "0-2"}} {
		got := m.Packed(m.All(), 3, Fit{Uncore: true, V137: c.v137})
		if got == nil || !m.ToSet(got).Equals(mustParse(t, c.want)) {
			t.Errorf("%s: got %v, want %s", versionName(c.v137), m.ToSet(got), c.want)
		}
	}
}

// numaIDsOf is the NUMA node ids holding cpus.
func numaIDsOf(topo *topology.Topology, cpus cpuset.CPUSet) []int {
	seen := map[int]bool{}
	var out []int
	for _, c := range topo.Details() {
		if cpus.Contains(c.CPU) && !seen[c.NUMA] {
			seen[c.NUMA] = true
			out = append(out, c.NUMA)
		}
	}
	slices.Sort(out)
	return out
}

// TestTakeByTopologyNUMADistributedWithMinNUMAHint (#139456): on
// topoDualSocketMultiNumaPerSocketHT (NUMA n = CPUs 10n..10n+9 and
// 40+10n..), the distributed fit called with the hint's NUMA count.
// v1.37 takes no hint: its column is the row's hint-less answer, worked
// out from v1.37's minimum (one node holds 20 CPUs, so 10 CPUs need 1 and
// 30 need 2; the first node of equal ones wins).
func TestTakeByTopologyNUMADistributedWithMinNUMAHint(t *testing.T) {
	topo := sysfstest.Load(t, "ht-2s-4numa-80")
	m := NewMachine(topo)
	for _, c := range []struct {
		name       string
		avail      string
		n, group   int
		bySocket   bool
		hint       int
		v137, v138 []int
	}{
		{"30 CPUs with 4-NUMA hint", "0-79", 30, 1, false, 4, []int{0, 1}, []int{0, 1, 2, 3}},
		{"30 CPUs without hint", "0-79", 30, 1, false, 0, []int{0, 1}, []int{0, 1}},
		{"10 CPUs with 4-NUMA hint", "0-79", 10, 1, false, 4, []int{0}, []int{0, 1, 2, 3}},
		{"hint exceeds max NUMA nodes", "0-79", 30, 1, false, 8, []int{0, 1}, []int{0, 1}},
		{"hint smaller than min NUMA nodes", "0-79", 30, 1, false, 1, []int{0, 1}, []int{0, 1}},
		{"cpuGroupSize=2 with 4-NUMA hint", "0-79", 20, 2, false, 4, []int{0}, []int{0, 1, 2, 3}},
		{"cpuGroupSize=2 without hint", "0-79", 20, 2, false, 0, []int{0}, []int{0}},
		{"alignBySocket with 4-NUMA hint", "0-79", 40, 1, true, 4, []int{0, 1}, []int{0, 1, 2, 3}},
		{"NUMA subset with hint=3", "10-39,50-79", 15, 1, false, 3, []int{1}, []int{1, 2, 3}},
	} {
		for _, v := range []struct {
			v137 bool
			want []int
		}{{true, c.v137}, {false, c.v138}} {
			got := m.Distributed(m.ToBits(mustParse(t, c.avail)), c.n, c.group, Fit{BySocket: c.bySocket, V137: v.v137, HintNUMAs: c.hint})
			if got == nil || got.Count() != c.n {
				t.Errorf("%s %s: got %v, want %d CPUs", c.name, versionName(v.v137), got, c.n)
				continue
			}
			if nodes := numaIDsOf(topo, m.ToSet(got)); !slices.Equal(nodes, v.want) {
				t.Errorf("%s %s: NUMA nodes %v (%s), want %v", c.name, versionName(v.v137), nodes, m.ToSet(got), v.want)
			}
		}
	}
}

// TestTakeByTopologyNUMADistributed rows of #141238 on
// topoDualSocketMultiNumaPerSocketHTLarge (8 NUMA nodes of 16 cores,
// siblings {i, i+128}), align-by-socket. The kubelet v1.37.2 aliased the
// combination slices of 4 or more nodes and allocated on other nodes than
// it scored best (0,1,3,6 and 0,1,2,7 here); this package keeps the best
// combination under both rule sets (pkg/allocator/doc.go).
func TestKubelet138DistributeAliasing(t *testing.T) {
	topo := sysfstest.LoadSpec(t, sysfstest.Spec{Sockets: 2, NUMAPerSocket: 4, CoresPerSocket: 64, ThreadsPerCore: 2})
	m := NewMachine(topo)
	for _, c := range []struct {
		name  string
		avail string
		n     int
		want  string
	}{
		{"120 CPUs across 4 NUMA nodes within socket 0", "0-62,64-126,128-190,192-254", 120, "0-14,16-30,32-46,48-62,128-142,144-158,160-174,176-190"},
		{"128 CPUs across all NUMA nodes within socket 0", "0-255", 128, "0-63,128-191"},
	} {
		for _, v137 := range []bool{true, false} {
			got := m.Distributed(m.ToBits(mustParse(t, c.avail)), c.n, 1, Fit{BySocket: true, V137: v137})
			if got == nil || !m.ToSet(got).Equals(mustParse(t, c.want)) {
				t.Errorf("%s %s: got %v, want %s", c.name, versionName(v137), m.ToSet(got), c.want)
			}
		}
	}
}
