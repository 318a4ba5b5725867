package allocator

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// scoreState is a State whose shared pool is shared; the CPUs in none of
// shared, own or reuse are held by another pod. own is held by pod p
// container c, reuse by p's finished init container i (the reuse set).
func scoreState(t *testing.T, s *Static, shared, own, reuse string) State {
	t.Helper()
	st := State{Default: mustMask(t, shared), Assignments: map[string]map[string]cpuset.CPUSet{}}
	rest := s.topo.CPUs().Difference(mustParse(t, shared))
	if own != "" {
		st.Assignments["p"] = map[string]cpuset.CPUSet{"c": mustParse(t, own)}
		rest = rest.Difference(mustParse(t, own))
	}
	if reuse != "" {
		if st.Assignments["p"] == nil {
			st.Assignments["p"] = map[string]cpuset.CPUSet{}
		}
		st.Assignments["p"]["i"] = mustParse(t, reuse)
		st.ReusablePod, st.Reusable = "p", mustParse(t, reuse)
		rest = rest.Difference(mustParse(t, reuse))
	}
	if !rest.IsEmpty() {
		st.Assignments["other"] = map[string]cpuset.CPUSet{"x": rest}
	}
	if err := s.Validate(st); err != nil {
		t.Fatal(err)
	}
	return st
}

// topoDualSocketNoHT: NUMA node 0 = socket 0 = CPUs 0-3, node 1 = 4-7,
// one thread per core.
func dualSocketNoHT(t testing.TB) *topology.Topology {
	return kubeletTopo(t, 8, func(cpu int) (int, int, int, int) { return cpu / 4, cpu, cpu / 4, cpu / 4 })
}

// TestGenerateCPUTopologyHintsScore: kubelet v1.38's rows (#141796),
// each input (reserved, usable, reusable, free, request) met through
// CPUHints: usable = free = the shared pool less the reserved CPUs, the
// reusable CPUs an init container's of the same pod, and in the last row
// (regeneration) usable = the container's own CPUs. Under v1.37 no hint
// has a Score.
func TestGenerateCPUTopologyHintsScore(t *testing.T) {
	type hs = map[hints.Mask]int64
	m0, m1, m01 := hints.NewMask(0), hints.NewMask(1), hints.NewMask(0, 1)
	for _, c := range []struct {
		name                         string
		topo                         *topology.Topology
		reserved, shared, own, reuse string
		request                      int
		want                         hs
	}{
		{"nothing assigned, symmetric NUMA, all scores are 1", dualSocketNoHT(t), "", "0-7", "", "", 1, hs{m0: 1, m1: 1, m01: 1}},
		{"2 of 4 assigned on NUMA 0, score reflects utilization", dualSocketNoHT(t), "", "2-7", "", "", 1, hs{m0: 50, m1: 1, m01: 25}},
		// The span is one pool: 1 of 6 unreserved CPUs assigned, 16, not
		// the mean of 50 and 1.
		{"asymmetric reserved CPUs, partial assignment", dualSocketNoHT(t), "0-1", "0-1,3-7", "", "", 1, hs{m0: 50, m1: 1, m01: 16}},
		{"full utilization via reusable CPUs, score 100", build(t, specHT1S4C), "", "", "", "0-7", 1, hs{m0: 100}},
		{"3 of 4 assigned on each NUMA, high utilization", dualSocketNoHT(t), "", "3,7", "", "", 1, hs{m0: 75, m1: 75, m01: 75}},
		// The container's own CPUs are usable but assigned: node 0 is full.
		{"regeneration, usable set differs from free set", dualSocketNoHT(t), "", "4-7", "0-1", "", 2, hs{m0: 100, m01: 50}},
	} {
		for _, v := range bothVersions {
			s := newStatic(t, c.topo, Options{KubeletVersion: v}, c.reserved)
			st := scoreState(t, s, c.shared, c.own, c.reuse)
			got := s.CPUHints(st, Request{Pod: "p", Container: "c", CPUs: c.request})
			if len(got) != len(c.want) {
				t.Errorf("%s %s: hints %v, want one for each of %v", c.name, v, got, c.want)
				continue
			}
			for _, h := range got {
				want, ok := c.want[h.Affinity]
				if v == kubever.V137 {
					want = 0
				}
				if !ok || h.Score != want {
					t.Errorf("%s %s: hint %s Score %d, want %d (%t)", c.name, v, h.Affinity, h.Score, want, ok)
				}
			}
		}
	}
}

// TestRegeneratedCPUTopologyHintsScore: kubelet v1.38's row. The
// container holds 0-1, another pod 2-3, the shared pool is 4-7: under both
// scopes the regenerated hints are {0} preferred 100 and {0,1} not
// preferred 50 (node 0 is full, the span half used); none on node 1.
func TestRegeneratedCPUTopologyHintsScore(t *testing.T) {
	for _, v := range bothVersions {
		s := newStatic(t, dualSocketNoHT(t), Options{KubeletVersion: v}, "")
		st := scoreState(t, s, "4-7", "0-1", "")
		want := []hints.Hint{{Affinity: hints.NewMask(0), Preferred: true, Score: 100}, {Affinity: hints.NewMask(0, 1), Score: 50}}
		if v == kubever.V137 {
			want[0].Score, want[1].Score = 0, 0
		}
		for scope, got := range map[string][]hints.Hint{
			"container": s.CPUHints(st, Request{Pod: "p", Container: "c", CPUs: 2}),
			"pod":       s.PodCPUHints(st, "p", 2),
		} {
			if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
				t.Errorf("%s scope %s: %+v, want %+v", scope, v, got, want)
			}
		}
	}
}
