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
		{"restored from a non-zero NUMA node", guaranteed("p", ctr("c1", Request{Memory: 100 * Mi})), 1,
			map[string][]hints.Hint{"memory": {hint(true, 1)}}, map[string][]hints.Hint{"memory": {hint(true, 1)}}},
		{"restored from a multi-container pod allocation", guaranteed("p", ctr("c1", Request{Memory: 50 * Mi}), ctr("c2", Request{Memory: 50 * Mi})), 0,
			nil, map[string][]hints.Hint{"memory": {hint(true, 0)}}},
		{"container-level pod", guaranteed("p", ctr("c1", Request{Memory: 100 * Mi}), ctr("c2", Request{Memory: 100 * Mi})), 0,
			nil, map[string][]hints.Hint{"memory": {hint(true, 0)}}},
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
