package sysfs_test

import (
	"reflect"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

func mustParse(t *testing.T, s string) cpuset.CPUSet {
	t.Helper()
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatalf("bad test cpuset %q: %v", s, err)
	}
	return set
}

func ints(ids ...int) []int { return ids }

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}

// counts are the per-level numbers of a fixture, worked out by hand from its
// documented shape.
type counts struct {
	cpus, cores, sockets, numa, l3 int
	cpusPerCore, maxThreads        int
}

func TestFixtureCounts(t *testing.T) {
	want := map[string]counts{
		"ht-1s-4c":          {8, 4, 1, 1, 1, 2, 2},
		"ht-1s-4c-adjacent": {8, 4, 1, 1, 1, 2, 2},
		"ht-2s-6c":          {24, 12, 2, 2, 2, 2, 2},
		"ht-2s-4numa-80":    {80, 40, 2, 4, 2, 2, 2},   // one L3 per socket, not node-level
		"epyc-7702p-smt":    {128, 64, 1, 1, 16, 2, 2}, // 64 cores / 4 per CCX
		"epyc-7702p-nosmt":  {64, 64, 1, 1, 16, 1, 1},
		"epyc-7303-2p":      {64, 32, 2, 2, 8, 2, 2},    // 4 L3 per socket
		"epyc-9754":         {256, 128, 1, 1, 16, 2, 2}, // 128 cores / 8 per CCX
		"epyc-9654-2p-nps2": {192, 192, 2, 4, 24, 1, 1}, // 12 L3 per socket
		"xeon-8490h-2p-snc": {240, 120, 2, 8, 2, 2, 2},  // SNC4: 4 nodes per socket
		// 8 P-cores × 2 + 8 E-cores = 24 CPUs on 16 cores: average 24/16 = 1.
		"i7-12850hx":   {24, 16, 1, 1, 1, 1, 2},
		"ampere-altra": {128, 128, 1, 1, 16, 1, 1},
		"graviton3":    {64, 64, 1, 1, 1, 1, 1},
		// CPU 7 offline: 7 CPUs on 4 cores, average 7/4 = 1.
		"offline-cpu":      {7, 4, 1, 1, 1, 1, 2},
		"memory-only-node": {16, 8, 2, 2, 2, 2, 2},
		"isolated":         {8, 4, 1, 1, 1, 2, 2},
	}
	if got := sysfstest.Names(); len(got) != len(want) {
		t.Errorf("Names() = %v (%d fixtures), the table has %d", got, len(got), len(want))
	}
	for _, name := range sysfstest.Names() {
		t.Run(name, func(t *testing.T) {
			w, ok := want[name]
			if !ok {
				t.Fatalf("fixture %q has no expected counts", name)
			}
			topo := sysfstest.Load(t, name)
			got := counts{topo.NumCPUs(), topo.NumCores(), topo.NumSockets(), topo.NumNUMANodes(),
				topo.NumL3(), topo.CPUsPerCore(), topo.MaxThreadsPerCore()}
			if got != w {
				t.Errorf("counts = %+v, want %+v", got, w)
			}
			// Structural invariants every fixture must satisfy.
			for _, c := range topo.Details() {
				sib := topo.Siblings(c.CPU)
				if sib.List()[0] != c.Core {
					t.Errorf("cpu %d: core id %d is not the lowest of its siblings %s", c.CPU, c.Core, sib)
				}
			}
		})
	}
}

// TestFixtureShapes spot-checks sibling sets, groups, L3 ids and distances
// against the numbering documented for each fixture.
func TestFixtureShapes(t *testing.T) {
	type group struct {
		kind string // socket, numa, l3
		id   int
		cpus string
	}
	type dist struct{ a, b, d int }
	tests := []struct {
		name     string
		siblings map[int]string // cpu -> its core's threads
		groups   []group
		cores    []int // expected machine-wide core ids (nil: skip)
		dists    []dist
		check    func(t *testing.T, topo *topology.Topology)
	}{
		{
			name:     "ht-1s-4c",
			siblings: map[int]string{0: "0,4", 1: "1,5", 4: "0,4", 7: "3,7"},
			groups:   []group{{"socket", 0, "0-7"}, {"numa", 0, "0-7"}, {"l3", 0, "0-7"}},
			cores:    ints(0, 1, 2, 3),
			dists:    []dist{{0, 0, 10}},
		},
		{
			name:     "ht-1s-4c-adjacent",
			siblings: map[int]string{0: "0,1", 1: "0,1", 3: "2,3", 6: "6,7"},
			groups:   []group{{"numa", 0, "0-7"}},
			cores:    ints(0, 2, 4, 6), // core id = lowest thread
		},
		{
			name:     "ht-2s-6c",
			siblings: map[int]string{0: "0,12", 6: "6,18", 17: "5,17", 23: "11,23"},
			groups: []group{{"socket", 0, "0-5,12-17"}, {"socket", 1, "6-11,18-23"},
				{"numa", 0, "0-5,12-17"}, {"numa", 1, "6-11,18-23"},
				// L3 per socket = node-level -> socket ids.
				{"l3", 0, "0-5,12-17"}, {"l3", 1, "6-11,18-23"}},
			cores: seq(0, 11),
			dists: []dist{{0, 0, 10}, {0, 1, 21}, {1, 0, 21}},
			check: func(t *testing.T, topo *topology.Topology) {
				c, _ := topo.Info(18)
				// cpu 18 is the second thread of socket 1's first core:
				// sysfs core_id 0 (repeats across sockets), core id 6.
				if c.Core != 6 || c.SysfsCoreID != 0 || c.Socket != 1 || c.NUMA != 1 {
					t.Errorf("Info(18) = %+v", c)
				}
			},
		},
		{
			name:     "ht-2s-4numa-80",
			siblings: map[int]string{10: "10,50", 79: "39,79", 40: "0,40"},
			groups: []group{{"numa", 0, "0-9,40-49"}, {"numa", 1, "10-19,50-59"},
				{"numa", 2, "20-29,60-69"}, {"numa", 3, "30-39,70-79"},
				{"socket", 1, "20-39,60-79"}, {"l3", 0, "0-19,40-59"}, {"l3", 1, "20-39,60-79"}},
			dists: []dist{{0, 1, 11}, {0, 2, 21}, {3, 2, 11}, {1, 3, 21}},
			check: func(t *testing.T, topo *topology.Topology) {
				if got := topo.NUMANodesInSocket(1); !reflect.DeepEqual(got, ints(2, 3)) {
					t.Errorf("NUMANodesInSocket(1) = %v, want [2 3]", got)
				}
			},
		},
		{
			name:     "epyc-7702p-smt",
			siblings: map[int]string{64: "0,64", 5: "5,69"},
			groups:   []group{{"l3", 0, "0-3,64-67"}, {"l3", 1, "4-7,68-71"}, {"l3", 15, "60-63,124-127"}},
			cores:    seq(0, 63),
		},
		{
			name:     "epyc-7702p-nosmt",
			siblings: map[int]string{5: "5"},
			groups:   []group{{"l3", 15, "60-63"}, {"numa", 0, "0-63"}},
		},
		{
			name:     "epyc-7303-2p",
			siblings: map[int]string{17: "17,49", 32: "0,32"},
			groups: []group{{"socket", 1, "16-31,48-63"}, {"numa", 1, "16-31,48-63"},
				{"l3", 3, "12-15,44-47"}, {"l3", 4, "16-19,48-51"}},
			dists: []dist{{0, 1, 32}},
		},
		{
			name:     "epyc-9754",
			siblings: map[int]string{200: "72,200"},
			groups:   []group{{"l3", 0, "0-7,128-135"}, {"l3", 15, "120-127,248-255"}},
		},
		{
			name: "epyc-9654-2p-nps2",
			groups: []group{{"numa", 0, "0-47"}, {"numa", 2, "96-143"}, {"socket", 1, "96-191"},
				{"l3", 12, "96-103"}, {"l3", 23, "184-191"}},
			dists: []dist{{0, 1, 11}, {1, 2, 32}, {2, 3, 11}},
			check: func(t *testing.T, topo *topology.Topology) {
				// Six CCDs per NPS=2 node: node 1 = CPUs 48-95 = L3 6..11.
				if got := topo.L3GroupsOf(topo.CPUsInNUMANodes(1)); !reflect.DeepEqual(got, seq(6, 11)) {
					t.Errorf("L3 groups of node 1 = %v, want 6..11", got)
				}
			},
		},
		{
			name:     "xeon-8490h-2p-snc",
			siblings: map[int]string{60: "60,180", 0: "0,120", 179: "59,179"},
			groups: []group{{"socket", 0, "0-59,120-179"}, {"numa", 0, "0-14,120-134"},
				{"numa", 3, "45-59,165-179"}, {"numa", 4, "60-74,180-194"}, {"numa", 7, "105-119,225-239"},
				{"l3", 0, "0-59,120-179"}, {"l3", 1, "60-119,180-239"}},
			dists: []dist{{0, 0, 10}, {0, 3, 12}, {0, 4, 21}, {7, 4, 12}},
			check: func(t *testing.T, topo *topology.Topology) {
				if got := topo.NUMANodesInSocket(1); !reflect.DeepEqual(got, seq(4, 7)) {
					t.Errorf("NUMANodesInSocket(1) = %v, want 4..7", got)
				}
				if got := topo.NUMANodesOf(topo.CPUsInL3Groups(1)); !reflect.DeepEqual(got, seq(4, 7)) {
					t.Errorf("L3 1 spans nodes %v, want 4..7", got)
				}
			},
		},
		{
			name:     "i7-12850hx",
			siblings: map[int]string{0: "0,1", 3: "2,3", 15: "14,15", 16: "16", 23: "23"},
			groups:   []group{{"l3", 0, "0-23"}, {"numa", 0, "0-23"}},
			cores:    ints(0, 2, 4, 6, 8, 10, 12, 14, 16, 17, 18, 19, 20, 21, 22, 23),
		},
		{
			name:   "ampere-altra",
			groups: []group{{"l3", 0, "0-7"}, {"l3", 15, "120-127"}},
		},
		{
			name:   "graviton3",
			groups: []group{{"l3", 0, "0-63"}},
		},
		{
			name:     "offline-cpu",
			siblings: map[int]string{3: "3", 0: "0,4", 7: ""},
			groups:   []group{{"numa", 0, "0-6"}, {"l3", 0, "0-6"}},
		},
		{
			name:     "memory-only-node",
			siblings: map[int]string{4: "4,12", 11: "3,11"},
			groups:   []group{{"socket", 0, "0-3,8-11"}, {"numa", 1, "4-7,12-15"}, {"numa", 2, ""}},
			dists:    []dist{{0, 1, 21}, {0, 2, 14}, {2, 1, 24}, {2, 2, 10}},
			check: func(t *testing.T, topo *topology.Topology) {
				if got := topo.MemoryNodes(); !reflect.DeepEqual(got, ints(0, 1, 2)) {
					t.Errorf("MemoryNodes() = %v, want [0 1 2]", got)
				}
				if got := topo.NUMANodes(); !reflect.DeepEqual(got, ints(0, 1)) {
					t.Errorf("NUMANodes() = %v, want [0 1] (node 2 has no CPUs)", got)
				}
				if got := topo.MemTotal(2); got != 16384<<20 {
					t.Errorf("MemTotal(2) = %d, want 16 GiB", got)
				}
			},
		},
		{
			name: "isolated",
			check: func(t *testing.T, topo *topology.Topology) {
				if got := topo.Isolated(); !got.Equals(mustParse(t, "2-3,6-7")) {
					t.Errorf("Isolated() = %s, want 2-3,6-7", got)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo := sysfstest.Load(t, tc.name)
			for cpu, want := range tc.siblings {
				if got := topo.Siblings(cpu); !got.Equals(mustParse(t, want)) {
					t.Errorf("Siblings(%d) = %q, want %q", cpu, got, want)
				}
			}
			for _, g := range tc.groups {
				var got cpuset.CPUSet
				switch g.kind {
				case "socket":
					got = topo.CPUsInSockets(g.id)
				case "numa":
					got = topo.CPUsInNUMANodes(g.id)
				case "l3":
					got = topo.CPUsInL3Groups(g.id)
				}
				if !got.Equals(mustParse(t, g.cpus)) {
					t.Errorf("%s %d = %q, want %q", g.kind, g.id, got, g.cpus)
				}
			}
			if tc.cores != nil {
				if got := topo.Cores(); !reflect.DeepEqual(got, tc.cores) {
					t.Errorf("Cores() = %v, want %v", got, tc.cores)
				}
			}
			for _, d := range tc.dists {
				if got, ok := topo.Distance(d.a, d.b); !ok || got != d.d {
					t.Errorf("Distance(%d,%d) = %d, %v; want %d", d.a, d.b, got, ok, d.d)
				}
			}
			if tc.check != nil {
				tc.check(t, topo)
			}
		})
	}
}
