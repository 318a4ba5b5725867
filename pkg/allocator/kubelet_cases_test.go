package allocator

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Conformance with the kubelet's own published expectations: the cases
// below are the inputs and expected results of the kubelet's cpumanager
// unit tests (policy_static_test.go, topology_hints_test.go; those of
// cpu_assignment_test.go, the best fit alone, are in
// take/kubelet_cases_test.go), run against this implementation. They are
// an external oracle, not output of this code. The machines are rebuilt
// from their published descriptions.

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

// The kubelet's static-policy Allocate expectations (policy_static_test.go,
// TestStaticPolicyAdd) on its test machines: state, reservation (a count
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
