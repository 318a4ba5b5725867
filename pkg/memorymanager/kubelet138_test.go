package memorymanager

import (
	"reflect"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// Memory manager rules kubelet v1.38 changed (v1.38.0-beta.0's
// memorymanager tests), under both rule sets.

// TestMemoryManagerRestoreState, the container-level rows (#141070): after
// a restart the pod-scope hints are regenerated from the first allocated
// container's blocks against that container's own request. v1.37 checked
// them against the pod's total: with several containers the sizes differ
// and it returned nil (no preference).
func TestMemoryManagerRestoreState(t *testing.T) {
	for _, c := range []struct {
		name       string
		pod        Pod
		node       int
		v137, v138 map[string][]hints.Hint
	}{
		// v1.38 scores: 100Mi or 200Mi used of a node's 12Gi, under 1%: 1.
		{"restored from a non-zero NUMA node", guaranteed("p", ctr("c1", Request{Memory: 100 * Mi})), 1,
			map[string][]hints.Hint{"memory": {hint(true, 1)}}, map[string][]hints.Hint{"memory": {scoredHint(1, true, 1)}}},
		{"restored from a multi-container pod allocation", guaranteed("p", ctr("c1", Request{Memory: 50 * Mi}), ctr("c2", Request{Memory: 50 * Mi})), 0,
			nil, map[string][]hints.Hint{"memory": {scoredHint(1, true, 0)}}},
		{"container-level pod", guaranteed("p", ctr("c1", Request{Memory: 100 * Mi}), ctr("c2", Request{Memory: 100 * Mi})), 0,
			nil, map[string][]hints.Hint{"memory": {scoredHint(1, true, 0)}}},
	} {
		st := state2(t)
		for _, ctn := range c.pod.Containers {
			st, _ = mustAllocate(t, st, c.pod, ctn.Name, hint(true, c.node))
		}
		for _, v := range []struct {
			v    kubever.Version
			want map[string][]hints.Hint
		}{{kubever.V137, c.v137}, {kubever.V138, c.v138}} {
			h, err := PodHints(st, c.pod, v.v)
			if err != nil {
				t.Fatalf("%s %s: %v", c.name, v.v, err)
			}
			if v.want == nil {
				if h != nil {
					t.Errorf("%s %s: %v, want nil", c.name, v.v, h)
				}
				continue
			}
			wantHints(t, h, v.want)
		}
	}
}

// Test_getPodRequestedResources row "resource requested only by a regular
// init container" (#140816): app memory 1Gi; init memory 1Gi and
// hugepages-1Gi 2Gi. v1.38 counts the init container's hugepages; v1.37
// listed the app containers' resources only.
func Test_getPodRequestedResources(t *testing.T) {
	pod := Pod{UID: "p", Guaranteed: true,
		InitContainers: []Container{ctr("init", Request{Memory: Gi, hp1G: 2 * Gi})},
		Containers:     []Container{ctr("app", Request{Memory: Gi})},
	}
	if got, want := PodRequest(pod, kubever.V138), (Request{Memory: Gi, hp1G: 2 * Gi}); !reflect.DeepEqual(got, want) {
		t.Errorf("v1.38: %v, want %v", got, want)
	}
	if got, want := PodRequest(pod, kubever.V137), (Request{Memory: Gi}); !reflect.DeepEqual(got, want) {
		t.Errorf("v1.37: %v, want %v", got, want)
	}
}

// TestCalculateHintsScore: kubelet v1.38's rows (#141796). Each machine
// state is given as it is there (allocatable, free per node); a hint's
// Score is the share of its nodes' summed allocatable that is not free,
// per resource. Under v1.37 no Score.
func TestCalculateHintsScore(t *testing.T) {
	node := func(cells []int, tables map[Resource]MemoryTable) NodeState {
		return NodeState{MemoryMap: tables, Cells: cells}
	}
	mem := func(alloc, free uint64) map[Resource]MemoryTable {
		return map[Resource]MemoryTable{Memory: {Allocatable: alloc, Free: free, Reserved: alloc - free}}
	}
	type scores = map[Resource]map[hints.Mask]int64
	m0, m1, m01 := mask(0), mask(1), mask(0, 1)
	for _, c := range []struct {
		name  string
		nodes map[int]NodeState
		req   Request
		want  scores
	}{
		{"nothing assigned, symmetric NUMA, all scores are 1",
			map[int]NodeState{0: node([]int{0}, mem(2*Gi, 2*Gi)), 1: node([]int{1}, mem(2*Gi, 2*Gi))},
			Request{Memory: Gi}, scores{Memory: {m0: 1, m1: 1, m01: 1}}},
		{"half assigned on NUMA 0, score reflects utilization",
			map[int]NodeState{0: node([]int{0}, mem(2*Gi, Gi)), 1: node([]int{1}, mem(2*Gi, 2*Gi))},
			Request{Memory: Gi}, scores{Memory: {m0: 50, m1: 1, m01: 25}}},
		{"asymmetric allocatable, partial assignment",
			map[int]NodeState{0: node([]int{0}, mem(Gi, 512*Mi)), 1: node([]int{1}, mem(3*Gi, 3*Gi))},
			Request{Memory: 512 * Mi}, scores{Memory: {m0: 50, m1: 1, m01: 12}}},
		{"allocatable zero leaves score 0",
			map[int]NodeState{0: node([]int{0}, mem(0, 0)), 1: node([]int{1}, mem(2*Gi, 2*Gi))},
			Request{Memory: Gi}, scores{Memory: {m1: 1, m01: 1}}},
		{"multi-resource scores computed independently",
			map[int]NodeState{0: node([]int{0}, map[Resource]MemoryTable{
				Memory: {Allocatable: 4 * Gi, Free: Gi, Reserved: 3 * Gi}, hp1G: {Allocatable: 2 * Gi, Free: Gi, Reserved: Gi}})},
			Request{Memory: Gi, hp1G: Gi}, scores{Memory: {m0: 75}, hp1G: {m0: 50}}},
	} {
		st := State{Nodes: c.nodes}
		for _, v := range []kubever.Version{kubever.V137, kubever.V138} {
			got := calculateHints(st, "p", c.req, v)
			for name, want := range c.want {
				hs := got[string(name)]
				if len(hs) != len(want) {
					t.Errorf("%s %s: %s hints %v, want masks of %v", c.name, v, name, hs, want)
					continue
				}
				for _, h := range hs {
					w, ok := want[h.Affinity]
					if v == kubever.V137 {
						w = 0
					}
					if !ok || h.Score != w {
						t.Errorf("%s %s: %s hint %s Score %d, want %d", c.name, v, name, h.Affinity, h.Score, w)
					}
				}
			}
		}
	}
}
