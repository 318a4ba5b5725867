package allocator

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Conformance with the kubelet's own published expectations: the cases
// below are the inputs and expected CPU sets of the kubelet's cpumanager
// unit tests (cpu_assignment_test.go: takeByTopologyNUMAPacked, the spread
// variant and takeByTopologyNUMADistributed), run against this
// implementation. They are an external oracle, not output of this code.
// The machines are rebuilt from their published descriptions.

// kubeletTopo builds a machine from per-CPU (socket, core, numa, l3).
func kubeletTopo(t testing.TB, n int, f func(cpu int) (socket, core, numa, l3 int)) *topology.Topology {
	t.Helper()
	var cpus []topology.CPUInfo
	for i := 0; i < n; i++ {
		s, c, nn, l := f(i)
		cpus = append(cpus, topology.CPUInfo{CPU: i, Core: c, Socket: s, NUMA: nn, L3: l})
	}
	return mustTopo(t, cpus)
}

func TestKubeletTakeByTopologyCases(t *testing.T) {
	// topoSingleSocketHT: 8 CPUs, siblings {i, i+4}.
	single := build(t, specHT1S4C)
	// topoDualSocketHT: 12 CPUs, siblings {i, i+6}; socket (= NUMA node)
	// 0 holds the even CPUs. Its uncore id is 0 for every CPU.
	dual := kubeletTopo(t, 12, func(i int) (int, int, int, int) { return i % 2, i % 6, i % 2, 0 })
	// topoDualSocketNoHT: 8 CPUs, socket 0 = 0-3.
	dualNoHT := kubeletTopo(t, 8, func(i int) (int, int, int, int) { return i / 4, i, i / 4, i / 4 })
	// topoDualSocketMultiNumaPerSocketHT = the ht-2s-4numa-80 fixture.
	multi := build(t, specHT2S4NUMA)
	// topoDualSocketMultiNumaPerSocketHTLarge: 256 CPUs, siblings {i,
	// i+128}, 8 NUMA nodes of 16 cores, 4 per socket.
	large := build(t, spec{sockets: 2, numaPerSocket: 4, coresPerSocket: 64, threads: 2})
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
				m := newMachine(c.topo)
				avail := m.toBits(mustParse(t, c.avail))
				var got bitset
				switch c.mode {
				case "packed":
					got = m.takePacked(avail, c.n, fit{v137: v137})
				case "spread":
					got = m.takePacked(avail, c.n, fit{spread: true, v137: v137})
				case "uncore":
					got = m.takePacked(avail, c.n, fit{uncore: true, v137: v137})
				case "distributed":
					got = m.takeDistributed(avail, c.n, c.group, fit{v137: v137})
				}
				if c.fail {
					if got != nil {
						t.Fatalf("got %s, want no result", m.toSet(got))
					}
					return
				}
				if got == nil {
					t.Fatal("no result")
				}
				if want := mustParse(t, c.expect); !m.toSet(got).Equals(want) {
					t.Errorf("got %s, want %s", m.toSet(got), want)
				}
			})
		}
	}
}

// The kubelet's static-policy Allocate expectations (policy_static_test.go,
// TestStaticPolicyAdd) on the machines above: state, reservation (a count
// of 1 reserves CPU 0 on these machines), request, hint -> CPUs or error.
func TestKubeletStaticPolicyAddCases(t *testing.T) {
	single := build(t, specHT1S4C)
	dual := kubeletTopo(t, 12, func(i int) (int, int, int, int) { return i % 2, i % 6, i % 2, 0 })
	dualNoHT := kubeletTopo(t, 8, func(i int) (int, int, int, int) { return i / 4, i, i / 4, i / 4 })
	multi := build(t, specHT2S4NUMA)
	type tc struct {
		name      string
		topo      *topology.Topology
		opts      []Options // run under each
		reserved  string
		assigned  map[string]string // container -> CPUs, pod "fakePod"
		def       string
		container string
		n         int
		hint      []int
		want      string
		err       error
	}
	both := []Options{{}, {FullPCPUsOnly: true}}
	dflt := []Options{{}}
	full := []Options{{FullPCPUsOnly: true}}
	cases := []tc{
		{"one core", single, both, "0", map[string]string{"c100": "2-3,6-7"}, "0-1,4-5", "c3", 2, nil, "1,5", nil},
		{"one socket", dual, both, "0", map[string]string{"c100": "2"}, "0-1,3-11", "c3", 6, nil, "1,3,5,7,9,11", nil},
		{"three cores", dual, both, "0", map[string]string{"c100": "1,5"}, "0,2-4,6-11", "c3", 6, nil, "2-4,8-10", nil},
		{"one socket no HT", dualNoHT, both, "0", nil, "0-1,3-7", "c1", 4, nil, "4-7", nil},
		{"four cores no HT", dualNoHT, both, "0", map[string]string{"c100": "4-5"}, "0-1,3,6-7", "c1", 4, nil, "1,3,6-7", nil},
		{"one socket one core", dual, both, "0", map[string]string{"c100": "2"}, "0-1,3-11", "c3", 8, nil, "1,3-5,7,9-11", nil},
		{"sibling of the partial core", single, dflt, "0", nil, "0-7", "c2", 1, nil, "4", nil},
		{"too many", single, dflt, "0", nil, "0-7", "c2", 8, nil, "", &InsufficientCPUsError{Requested: 8, Available: 7}},
		{"same allocation", single, dflt, "0", map[string]string{"c3": "2-3,6-7"}, "0-1,4-5", "c3", 4, nil, "2-3,6-7", nil},
		{"too many, dual", dual, dflt, "0", map[string]string{"c100": "1-3"}, "0,4-11", "c5", 10, nil, "", &InsufficientCPUsError{Requested: 10, Available: 8}},
		{"too many, one left", single, dflt, "0", map[string]string{"c100": "1-6"}, "0,7", "c5", 2, nil, "", &InsufficientCPUsError{Requested: 2, Available: 1}},
		{"full-pcpus-only odd", single, full, "0", nil, "0-7", "c2", 1, nil, "", &SMTAlignmentError{RequestedCPUs: 1, CpusPerCore: 2}},
		{"full-pcpus-only reserved siblings", dual, full, "1,6", nil, "0,2-5,7-11", "c", 10, nil, "", &SMTAlignmentError{RequestedCPUs: 10, CpusPerCore: 2, AvailablePhysicalCPUs: 8, CausedByPhysicalCPUs: true}},
		// "AutoReserve, ExpectAllocAllCPUs" and "ExpectAllocAllCPUs": a
		// count of 2 reserves core 0 = {0,6} here, as the explicit set
		// does; the state holds no reserved CPU in the shared pool, so the
		// 10 CPUs asked for are every shared CPU and the pool empties.
		{"alloc all CPUs", dual, both, "0,6", nil, "1-5,7-11", "fakeContainerBug113537_2", 10, nil, "1-5,7-11", nil},
		{"align-by-socket widens the hint", multi, []Options{{AlignBySocket: true}}, "0", nil, "2,11,21-22", "c2", 2, []int{0, 2}, "2,11", nil},
		{"without align-by-socket", multi, dflt, "0", nil, "2,11,21-22", "c2", 2, []int{0, 2}, "2,21", nil},
	}
	for _, c := range cases {
		for _, o := range c.opts {
			t.Run(c.name+"/"+optName(o), func(t *testing.T) {
				s := newStatic(t, c.topo, o, c.reserved)
				st := State{Default: mustMask(t, c.def), Assignments: map[string]map[string]cpuset.CPUSet{"fakePod": {}}}
				for ctr, cpus := range c.assigned {
					st.Assignments["fakePod"][ctr] = mustParse(t, cpus)
				}
				_, got, err := s.Allocate(st, Request{Pod: "fakePod", Container: c.container, CPUs: c.n}, hints.Hint{Affinity: hints.NewMask(c.hint...)})
				if c.err != nil {
					if err == nil || err.Error() != c.err.Error() {
						t.Fatalf("got %s, %v; want error %v", got, err, c.err)
					}
					return
				}
				if err != nil {
					t.Fatal(err)
				}
				if want := mustParse(t, c.want); !got.Equals(want) {
					t.Errorf("got %s, want %s", got, want)
				}
			})
		}
	}
}

// The kubelet's CPU hint expectations (topology_hints_test.go): a 12-CPU
// dual-socket machine (node 0 = cores {0,6},{1,7},{2,8}, node 1 =
// {3,9},{4,10},{5,11}), no reserved CPUs; and the align-by-socket pod hints
// on the 80-CPU four-node machine. Container and pod scope agree here
// (single-container pods).
func TestKubeletTopologyHintCases(t *testing.T) {
	dual := kubeletTopo(t, 12, func(i int) (int, int, int, int) { n := (i % 6) / 3; return n, i % 6, n, n })
	multi := build(t, specHT2S4NUMA)
	// Scores are kubelet v1.38's (#141796): the share of the mask's
	// unreserved CPUs not in the shared pool.
	h := func(pref bool, score int64, nodes ...int) hints.Hint {
		return hints.Hint{Affinity: hints.NewMask(nodes...), Preferred: pref, Score: score}
	}
	type tc struct {
		name     string
		topo     *topology.Topology
		o        Options
		def      string
		assigned string // the container's own assignment, "" = none
		n        int
		want     []hints.Hint
	}
	cases := []tc{
		{"2 of 4+6", dual, Options{}, "2-11", "", 2, []hints.Hint{h(true, 33, 0), h(true, 1, 1), h(false, 16, 0, 1)}},
		{"5 of 4+6", dual, Options{}, "2-11", "", 5, []hints.Hint{h(true, 1, 1), h(false, 16, 0, 1)}},
		{"7 of 4+6", dual, Options{}, "2-11", "", 7, []hints.Hint{h(true, 16, 0, 1)}},
		{"11 of 4+6", dual, Options{}, "2-11", "", 11, []hints.Hint{}},
		{"2 of 1+1", dual, Options{}, "0,3", "", 2, []hints.Hint{h(false, 83, 0, 1)}},
		{"more than available", dual, Options{}, "0-3", "", 5, []hints.Hint{}},
		{"regenerate node 0", dual, Options{}, "", "0,6", 2, []hints.Hint{h(true, 100, 0), h(false, 100, 0, 1)}},
		{"regenerate node 1", dual, Options{}, "", "3,9", 2, []hints.Hint{h(true, 100, 1), h(false, 100, 0, 1)}},
		{"regenerate cross-NUMA", dual, Options{}, "", "0-10", 11, []hints.Hint{h(true, 100, 0, 1)}},
		{"less than allocated", dual, Options{}, "", "0,3,6,9", 2, []hints.Hint{}},
		{"more than allocated", dual, Options{}, "", "0,3,6,9", 11, []hints.Hint{}},
		{"align-by-socket off", multi, Options{}, "2-3,11", "", 2, []hints.Hint{
			h(true, 90, 0), h(false, 92, 0, 1), h(false, 95, 0, 2), h(false, 95, 0, 3), h(false, 95, 0, 1, 2), h(false, 95, 0, 1, 3), h(false, 96, 0, 2, 3), h(false, 96, 0, 1, 2, 3)}},
		{"align-by-socket on", multi, Options{AlignBySocket: true}, "2-3,11", "", 2, []hints.Hint{
			h(true, 90, 0), h(true, 92, 0, 1), h(false, 95, 0, 2), h(false, 95, 0, 3), h(false, 95, 0, 1, 2), h(false, 95, 0, 1, 3), h(false, 96, 0, 2, 3), h(false, 96, 0, 1, 2, 3)}},
		{"align-by-socket across sockets", multi, Options{AlignBySocket: true}, "0-28,40-57", "", 41, []hints.Hint{h(true, 21, 0, 1, 2), h(true, 41, 0, 1, 2, 3)}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newStatic(t, c.topo, c.o, "")
			st := State{Default: mustMask(t, c.def), Assignments: map[string]map[string]cpuset.CPUSet{}}
			if c.assigned != "" {
				st.Assignments["fakePod"] = map[string]cpuset.CPUSet{"fakeContainer": mustParse(t, c.assigned)}
			}
			got := s.CPUHints(st, Request{Pod: "fakePod", Container: "fakeContainer", CPUs: c.n})
			if got == nil || !equalHints(got, c.want) {
				t.Errorf("container scope: got %v, want %v", got, c.want)
			}
			pod := s.PodCPUHintsFor(st, "fakePod", c.n, map[string]int{"fakeContainer": c.n})
			if pod == nil || !equalHints(pod, c.want) {
				t.Errorf("pod scope: got %v, want %v", pod, c.want)
			}
		})
	}
}
