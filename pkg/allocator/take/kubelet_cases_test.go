package take

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Conformance with the kubelet's own published expectations: the cases
// below are the inputs and expected CPU sets of the kubelet's cpumanager
// unit tests (cpu_assignment_test.go: takeByTopologyNUMAPacked, the spread
// variant and takeByTopologyNUMADistributed), run against this
// implementation. They are an external oracle, not output of this code.
// The machines are rebuilt from their published descriptions.

func TestKubeletTakeByTopologyCases(t *testing.T) {
	// topoSingleSocketHT: 8 CPUs, siblings {i, i+4}.
	single := sysfstest.Load(t, "ht-1s-4c")
	// topoDualSocketHT: 12 CPUs, siblings {i, i+6}; socket (= NUMA node)
	// 0 holds the even CPUs. Its uncore id is 0 for every CPU.
	dual := kubeletTopo(t, 12, func(i int) (int, int, int, int) { return i % 2, i % 6, i % 2, 0 })
	// topoDualSocketNoHT: 8 CPUs, socket 0 = 0-3.
	dualNoHT := kubeletTopo(t, 8, func(i int) (int, int, int, int) { return i / 4, i, i / 4, i / 4 })
	// topoDualSocketMultiNumaPerSocketHT = the ht-2s-4numa-80 fixture.
	multi := sysfstest.Load(t, "ht-2s-4numa-80")
	// topoDualSocketMultiNumaPerSocketHTLarge: 256 CPUs, siblings {i,
	// i+128}, 8 NUMA nodes of 16 cores, 4 per socket.
	large := sysfstest.LoadSpec(t, sysfstest.Spec{Sockets: 2, NUMAPerSocket: 4, CoresPerSocket: 64, ThreadsPerCore: 2})
	// topoUncoreSingleSocketNoSMT: 16 CPUs, uncore caches of 4.
	uncoreSingle := kubeletTopo(t, 16, func(i int) (int, int, int, int) { return 0, i, 0, i / 4 })
	// topoUncoreDualSocketNoSMT: 2 sockets (= NUMA nodes) of 8, caches of 4.
	uncoreDual := kubeletTopo(t, 16, func(i int) (int, int, int, int) { return i / 8, i, i / 8, i / 4 })
	// topoUncoreSingleSocketSMT: 16 CPUs, siblings {i, i+8}, two caches of
	// 4 cores.
	uncoreSMT := kubeletTopo(t, 16, func(i int) (int, int, int, int) { return 0, i % 8, 0, (i % 8) / 4 })

	type tc struct {
		name   string
		topo   *topology.Topology
		mode   string // "packed", "spread", "uncore", "distributed"
		group  int    // distributed group size
		avail  string
		n      int
		expect string // "" with fail = no result
		fail   bool
	}
	common := []tc{
		{"more than available", single, "", 1, "0,2,4,6", 5, "", true},
		{"zero", single, "", 1, "0-7", 0, "", false},
		{"one", single, "", 1, "0-7", 1, "0", false},
		{"one, some taken", single, "", 1, "1,3,5-7", 1, "6", false},
		{"two", single, "", 1, "0-7", 2, "0,4", false},
		{"all", single, "", 1, "0-7", 8, "0-7", false},
		{"two, one core free", single, "", 1, "0-3,6", 2, "2,6", false},
		{"a socket of dual HT", dual, "", 1, "0-11", 6, "0,2,4,6,8,10", false},
		{"a socket of multi-NUMA", multi, "", 1, "0-79", 40, "0-19,40-59", false},
		{"a NUMA node of multi-NUMA", multi, "", 1, "0-79", 20, "0-9,40-49", false},
		{"a NUMA node, one taken", multi, "", 1, "10-39,50-79", 20, "10-19,50-59", false},
		{"a socket and a NUMA node", multi, "", 1, "0-79", 60, "0-29,40-69", false},
		{"a socket and a NUMA node, a core taken", multi, "", 1, "1-39,41-79", 60, "10-39,50-79", false},
	}
	var cases []tc
	for _, c := range common {
		c.mode = "packed"
		cases = append(cases, c)
		c.mode = "distributed"
		cases = append(cases, c)
	}
	cases = append(cases, []tc{
		{"one from socket 0", dual, "packed", 1, "1-5,7-11", 1, "2", false},
		{"4 cores, 3 filling node 0", dual, "packed", 1, "0-11", 8, "0-2,4,6-8,10", false},
		{"32 cores, 3 nodes filled", multi, "packed", 1, "0-79", 64, "0-31,40-71", false},
		{"uncore: two full + partial", uncoreSingle, "uncore", 1, "1-15", 10, "1-2,4-11", false},
		{"uncore: one from socket 0", dual, "uncore", 1, "1-5,7-11", 1, "1", false},
		{"uncore: first cache of first socket", uncoreDual, "uncore", 1, "0-15", 4, "0-3", false},
		{"uncore: all available of first socket", uncoreDual, "uncore", 1, "2-15", 6, "2-7", false},
		{"uncore: first cache of second socket", uncoreDual, "uncore", 1, "8-15", 4, "8-11", false},
		{"uncore: best cache, SMT", uncoreSMT, "uncore", 1, "2-7,10-15", 6, "4-6,12-14", false},
		{"uncore: several caches, SMT", uncoreSMT, "uncore", 1, "1-7,9-15", 10, "1,4-7,9,12-15", false},
		{"spread 3 single HT", single, "spread", 1, "0-7", 3, "0-2", false},
		{"spread 2 dual HT", dual, "spread", 1, "0-11", 2, "0,2", false},
		{"spread 3 dual HT", dual, "spread", 1, "0-11", 3, "0,2,4", false},
		{"spread 6 dual HT", dual, "spread", 1, "0-11", 6, "0,2,4,6,8,10", false},
		{"spread 8 dual HT", dual, "spread", 1, "0-11", 8, "0-4,6,8,10", false},
		{"spread 2 dual no HT", dualNoHT, "spread", 1, "0-7", 2, "0-1", false},
		{"spread 8 multi-NUMA", multi, "spread", 1, "0-79", 8, "0-7", false},
		{"distributed 4 cores over 2 nodes", dual, "distributed", 1, "0-11", 8, "0-3,6-9", false},
		{"distributed 32 cores over 4 nodes", multi, "distributed", 1, "0-79", 64, "0-7,10-17,20-27,30-37,40-47,50-57,60-67,70-77", false},
		{"distributed 24 cores over 3 nodes", multi, "distributed", 1, "0-79", 48, "0-7,10-17,20-27,40-47,50-57,60-67", false},
		{"distributed 24, first node short", multi, "distributed", 1, "1-29,32-39,41-69,72-79", 48, "1-8,10-17,20-27,41-48,50-57,60-67", false},
		{"distributed 24 over the last 3", multi, "distributed", 1, "2-29,31-39,42-69,71-79", 48, "10-17,20-27,31-38,50-57,60-67,71-78", false},
		{"distributed 8 cores, 2 per node", multi, "distributed", 1, "0-2,10-12,20-22,30-32,40-41,50-51,60-61,70-71", 16, "0-1,10-11,20-21,30-31,40-41,50-51,60-61,70-71", false},
		{"distributed one", dual, "distributed", 1, "1-5,7-11", 1, "1", false},
		{"distributed one, group 2", dual, "distributed", 2, "1-5,7-11", 1, "2", false},
		{"distributed 13 cores", multi, "distributed", 1, "0-79", 26, "0-6,10-16,40-45,50-55", false},
		{"distributed 13 cores, group 2", multi, "distributed", 2, "0-79", 26, "0-6,10-15,40-46,50-55", false},
		{"distributed 31 cores", multi, "distributed", 1, "0-79", 62, "0-7,10-17,20-27,30-37,40-47,50-57,60-66,70-76", false},
		{"distributed 31 cores, group 2", multi, "distributed", 2, "0-79", 62, "0-7,10-17,20-27,30-36,40-47,50-57,60-67,70-76", false},
		{"distributed 31 cores, keep balance", multi, "distributed", 1, "0-8,10-18,20-39,40-48,50-58,60-79", 62, "0-7,10-17,20-27,30-37,40-46,50-56,60-67,70-77", false},
		{"distributed 31 cores, keep balance, group 2", multi, "distributed", 2, "0-8,10-18,20-39,40-48,50-58,60-79", 62, "0-7,10-16,20-27,30-37,40-47,50-56,60-67,70-77", false},
		{"distributed best remainder has room", multi, "distributed", 1, "0-3,10-13,20-23,30-36,40-43,50-53,60-63,70-76", 34, "0-3,10-13,20-23,30-34,40-43,50-53,60-63,70-74", false},
		{"distributed live-machine failure", large, "distributed", 1, "0,128,30,31,158,159,43-47,171-175,62,63,190,191,75-79,203-207,94,96,222,223,101-111,229-239,126,127,254,255", 28, "43-47,75-79,96,101-105,171-174,203-206,229-232", false},
	}...)
	for _, c := range cases {
		for _, v137 := range []bool{true, false} {
			t.Run(c.mode+"/"+c.name+versionName(v137), func(t *testing.T) {
				m := NewMachine(c.topo)
				avail := m.ToBits(mustParse(t, c.avail))
				var got Bits
				switch c.mode {
				case "packed":
					got = m.Packed(avail, c.n, Fit{V137: v137})
				case "spread":
					got = m.Packed(avail, c.n, Fit{Spread: true, V137: v137})
				case "uncore":
					got = m.Packed(avail, c.n, Fit{Uncore: true, V137: v137})
				case "distributed":
					got = m.Distributed(avail, c.n, c.group, Fit{V137: v137})
				}
				if c.fail {
					if got != nil {
						t.Fatalf("got %s, want no result", m.ToSet(got))
					}
					return
				}
				if got == nil {
					t.Fatal("no result")
				}
				if want := mustParse(t, c.expect); !m.ToSet(got).Equals(want) {
					t.Errorf("got %s, want %s", m.ToSet(got), want)
				}
			})
		}
	}
}
