package memorymanager

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// The memory hints go into the topology manager's merge as they are.
func TestHintsMerge(t *testing.T) {
	numa, err := hints.NewNUMAInfo([]int{0, 1}, nil, hints.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	m, err := hints.NewMerger(hints.PolicySingleNUMANode, numa, hints.DefaultOptions())
	if err != nil {
		t.Fatal(err)
	}
	st := state2(t)
	pod := guaranteed("p", ctr("c", Request{Memory: 4 * Gi, hp2M: 256 * Mi}))
	mem, err := Hints(st, pod, "c", kubever.V137)
	if err != nil {
		t.Fatal(err)
	}
	// CPUs fit node 1 only: memory {0},{1},{0,1} and hugepages the same
	// AND {1} gives node 1, preferred.
	cpu := map[string][]hints.Hint{"cpu": {hint(true, 1), hint(false, 0, 1)}}
	best := m.Merge(cpu, mem)
	if best != hint(true, 1) {
		t.Fatalf("merged %v, want node 1 preferred", best)
	}
	if !m.Admits(best) {
		t.Fatal("not admitted")
	}
	_, a := mustAllocate(t, st, pod, "c", best)
	if a.Mems != mask(1) {
		t.Errorf("mems = %v, want 1", a.Mems)
	}

	// 20Gi needs both nodes: single-numa-node cannot admit it.
	big := guaranteed("big", ctr("c", Request{Memory: 20 * Gi}))
	mem, _ = Hints(st, big, "c", kubever.V137)
	if best := m.Merge(cpu, mem); m.Admits(best) {
		t.Errorf("merged %v admitted under single-numa-node", best)
	}
}
