package allocator

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator/take"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// The hand-worked examples use Go-literal machines; this proves each is
// the same machine as the fixture of that name (read through sysfs), so the
// examples hold on the fixtures too.
func TestLiteralTwinsMatchFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		s       spec
	}{
		{"ht-1s-4c", specHT1S4C},
		{"ht-1s-4c-adjacent", spec{sockets: 1, coresPerSocket: 4, threads: 2, adjacent: true}},
		{"ht-2s-6c", specHT2S6C},
		{"ht-2s-4numa-80", specHT2S4NUMA},
		{"epyc-7702p-smt", specEPYC7702P},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			got := sysfstest.Load(t, tc.fixture).Details()
			want := build(t, tc.s).Details()
			if len(got) != len(want) {
				t.Fatalf("%d CPUs, literal has %d", len(got), len(want))
			}
			for i := range got {
				g, w := key(got[i]), key(want[i])
				if g != w {
					t.Errorf("cpu %d: fixture %+v, literal %+v", got[i].CPU, g, w)
				}
			}
		})
	}
}

func key(c topology.CPUInfo) [5]int { return [5]int{c.CPU, c.Core, c.Socket, c.NUMA, c.L3} }

// BenchmarkTakeByTopology times the placement algorithm alone (bitsets in
// and out, no cpuset.CPUSet conversion, no state copy) for 8 CPUs on an
// idle EPYC 9754.
func BenchmarkTakeByTopology(b *testing.B) {
	topo := sysfstest.Load(b, "epyc-9754")
	m := take.NewMachine(topo)
	for _, mode := range []struct {
		name string
		o    Options
	}{
		{"packed", Options{}},
		{"uncore+full-pcpus-only", Options{PreferAlignByUncoreCache: true, FullPCPUsOnly: true}},
		{"across-numa", Options{DistributeCPUsAcrossNUMA: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			avail := m.All()
			b.ReportAllocs()
			for b.Loop() {
				if takeByTopology(m, mode.o, avail, 8, 0) == nil {
					b.Fatal("no result")
				}
			}
		})
	}
}

// prefer-align-cpus-by-uncorecache on the 2P EPYC 9654 NPS=2 fixture (no
// SMT; NUMA n = CPUs 48n..48n+47; L3 g = CPUs 8g..8g+7, six per node;
// sockets first since 2 sockets < 4 nodes). The reserved count of 2 with
// the option: the walk starts at node 0, L3 0, partial cores 0,1 -> 0-1.
func TestUncoreEPYC9654NPS2(t *testing.T) {
	topo := sysfstest.Load(t, "epyc-9654-2p-nps2")
	steps := []struct {
		n              int
		uncore, packed string
	}{
		// Walk: socket 0, node 0 (46 free), L3 0 (6 free) first; need 8 >=
		// 8 takes the first free cache in walk order, L3 1. Packed takes
		// the lowest cores of node 0: 2-9 (two caches).
		{8, "8-15", "2-9"},
		// L3 0 still has 2-7 free: the partial step fits 6 exactly. Packed:
		// 10-15.
		{6, "2-7", "10-15"},
		// 50 >= a node (48): node 1 (free, first among the free nodes in
		// socket order) whole, then 2 in node 0's first cache with free
		// CPUs, L3 2: 16,17. Packed: node 1 whole, then node 0's most-used
		// cores: 16,17.
		{50, "16-17,48-95", "16-17,48-95"},
	}
	for _, mode := range []struct {
		name string
		o    Options
	}{{"uncore", Options{PreferAlignByUncoreCache: true}}, {"packed", Options{}}} {
		t.Run(mode.name, func(t *testing.T) {
			reserved, err := ReservedByCount(topo, mode.o, 2)
			if err != nil || !reserved.Equals(mustParse(t, "0-1")) {
				t.Fatalf("reserved %s, %v; want 0-1", reserved, err)
			}
			s, err := NewStatic(topo, mode.o, reserved)
			if err != nil {
				t.Fatal(err)
			}
			st := s.NewState()
			for i, step := range steps {
				var got cpuset.CPUSet
				st, got, err = alloc(t, s, st, "p", string(rune('a'+i)), step.n, 0)
				if err != nil {
					t.Fatal(err)
				}
				want := step.packed
				if mode.o.PreferAlignByUncoreCache {
					want = step.uncore
				}
				if !got.Equals(mustParse(t, want)) {
					t.Errorf("step %d (%d CPUs): got %s, want %s", i, step.n, got, want)
				}
			}
		})
	}
}

// Machines where the machine-average CPUsPerCore (NumCPUs/NumCores) is 1
// although some cores have two threads: the whole-core step only counts
// cores with exactly one free CPU as free.
func TestAverageCPUsPerCoreAccidents(t *testing.T) {
	t.Run("i7-12850hx reserved count", func(t *testing.T) {
		// 24 CPUs / 16 cores = 1. P-cores {0,1}..{14,15} have 2 free, so
		// the single-thread E-cores 16-23 are the "free cores" taken first.
		topo := sysfstest.Load(t, "i7-12850hx")
		for n, want := range map[int]string{1: "16", 2: "16-17", 9: "16-23,0"} {
			got, err := ReservedByCount(topo, Options{}, n)
			if err != nil || !got.Equals(mustParse(t, want)) {
				t.Errorf("%d: got %s, %v; want %s", n, got, err, want)
			}
		}
	})
	t.Run("i7-12850hx half-used P-core", func(t *testing.T) {
		topo := sysfstest.Load(t, "i7-12850hx")
		// v1.37: core 0 now has one free CPU (0) = CPUsPerCore, so it
		// counts as a free core and comes first (fewest free). The kubelet
		// would add the whole core {0,1} — CPU 1 is held by x. Only its
		// free CPU is taken, then the next free core, E-core 17.
		// v1.38: core 0 is not free (1 of its 2 CPUs); the free cores with
		// the fewest CPUs are the E-cores, 16 reserved: 17 and 18.
		for _, c := range []struct {
			v    kubever.Version
			want string
		}{{kubever.V137, "0,17"}, {kubever.V138, "17-18"}} {
			s := newStatic(t, topo, Options{KubeletVersion: c.v}, "16")
			st, err := s.Assign(s.NewState(), "x", "c", mustParse(t, "1"))
			if err != nil {
				t.Fatal(err)
			}
			_, got, err := alloc(t, s, st, "p", "c", 2, 0)
			if err != nil || !got.Equals(mustParse(t, c.want)) {
				t.Errorf("%s: got %s, %v; want %s", c.v, got, err, c.want)
			}
		}
	})
	t.Run("offline-cpu reserved count", func(t *testing.T) {
		// 7 CPUs / 4 cores = 1: core 3 (CPU 7 offline, so just {3}) is the
		// only free core; then single CPUs in best-fit core order: cores
		// 0-2 tie at 2 free -> core 0, CPU 0.
		topo := sysfstest.Load(t, "offline-cpu")
		got, err := ReservedByCount(topo, Options{}, 2)
		if err != nil || !got.Equals(mustParse(t, "0,3")) {
			t.Errorf("got %s, %v; want 0,3", got, err)
		}
	})
}
