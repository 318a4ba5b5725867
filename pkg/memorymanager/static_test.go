package memorymanager

import (
	"errors"
	"reflect"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

func TestNotGuaranteed(t *testing.T) {
	st := state2(t)
	pod := Pod{UID: "bu", Containers: []Container{ctr("c", Request{Memory: Gi})}}
	h, err := Hints(st, pod, "c", kubever.V137)
	if err != nil || h != nil {
		t.Errorf("Hints = %v, %v; want nil (no preference)", h, err)
	}
	if h, err := PodHints(st, pod, kubever.V138); err != nil || h != nil {
		t.Errorf("PodHints = %v, %v; want nil", h, err)
	}
	next, a, err := Allocate(st, pod, "c", hint(true, 0))
	if err != nil || a.Blocks != nil || !a.Mems.IsEmpty() || !reflect.DeepEqual(next, st) {
		t.Errorf("Allocate = %+v, %v; want no assignment and the state unchanged", a, err)
	}
}

func TestSingleNodeFit(t *testing.T) {
	st := state2(t)
	pod := guaranteed("p", ctr("c", Request{Memory: 4 * Gi}))
	// 4Gi fits the 12Gi of either node: both single nodes are preferred,
	// the pair is not.
	h, err := Hints(st, pod, "c", kubever.V137)
	if err != nil {
		t.Fatal(err)
	}
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 0), hint(true, 1), hint(false, 0, 1)}})

	next, a := mustAllocate(t, st, pod, "c", hint(true, 1))
	wantBlocks := []Block{{NUMAAffinity: []int{1}, Type: Memory, Size: 4 * Gi}}
	if !reflect.DeepEqual(a.Blocks, wantBlocks) || a.Mems != mask(1) {
		t.Errorf("assignment = %+v, want %v on node 1", a, wantBlocks)
	}
	wantTable(t, next, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 4*Gi))
	wantTable(t, next, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 0))
	wantNode(t, next, 1, 1, 1)
	wantNode(t, next, 0, 0, 0)
	if next.Mems("p", "c") != mask(1) {
		t.Errorf("Mems = %v", next.Mems("p", "c"))
	}
	// st itself is untouched.
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 0))

	// Allocate again: the same blocks, the same state.
	again, a2 := mustAllocate(t, next, pod, "c", hint(true, 0))
	if !reflect.DeepEqual(a2.Blocks, wantBlocks) || !reflect.DeepEqual(again, next) {
		t.Errorf("second Allocate = %+v; want the first one's blocks, state unchanged", a2)
	}
	// Its hints are now its blocks.
	h, _ = Hints(next, pod, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 1)}})
	// A request that no longer matches the blocks: no preference.
	changed := guaranteed("p", ctr("c", Request{Memory: 5 * Gi}))
	if h, _ := Hints(next, changed, "c", kubever.V137); h != nil {
		t.Errorf("hints for a changed request = %v, want nil", h)
	}
}

func TestDefaultAffinity(t *testing.T) {
	st := state2(t)
	pod := guaranteed("p", ctr("c", Request{Memory: 4 * Gi}))
	// No merged affinity (topology manager policy none): the best of the
	// container's hints, the first narrowest preferred one, node 0.
	_, a := mustAllocate(t, st, pod, "c", hints.Hint{})
	if a.Mems != mask(0) {
		t.Errorf("mems = %v, want 0", a.Mems)
	}
}

func TestCrossNUMAGroup(t *testing.T) {
	st := state2(t)
	big := guaranteed("big", ctr("c", Request{Memory: 20 * Gi}))
	// 20Gi exceeds either node's 12Gi: only the pair, preferred (the
	// narrowest size that can hold it is 2).
	h, _ := Hints(st, big, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 0, 1)}})

	st, a := mustAllocate(t, st, big, "c", hint(true, 0, 1))
	if a.Mems != mask(0, 1) {
		t.Errorf("mems = %v", a.Mems)
	}
	// Taken in node order: 12Gi of node 0, the other 8Gi of node 1.
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 12*Gi))
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 8*Gi))
	wantNode(t, st, 0, 1, 0, 1)
	wantNode(t, st, 1, 1, 0, 1)

	// A 2Gi container: single nodes are in the group and get no hint;
	// the group's 4Gi free holds it, but not preferred, since one node
	// could hold 2Gi.
	small := guaranteed("small", ctr("c", Request{Memory: 2 * Gi}))
	h, _ = Hints(st, small, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(false, 0, 1)}})

	// Node 1 alone (what a CPU hint could narrow the group to): node 1
	// has 4Gi free, but it is in a group. Refused (the kubelet would
	// place it there; see doc.go).
	_, _, err := Allocate(st, small, "c", hint(false, 1))
	wantErr(t, err, "[memorymanager] preferred hint violates NUMA node allocation")

	st, a = mustAllocate(t, st, small, "c", hint(false, 0, 1))
	// Node 0 has nothing free: all 2Gi from node 1 (8+2 = 10Gi reserved).
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 12*Gi))
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 10*Gi))
	wantNode(t, st, 0, 2, 0, 1)
	wantNode(t, st, 1, 2, 0, 1)
	if a.Mems != mask(0, 1) {
		t.Errorf("mems = %v", a.Mems)
	}
}

func TestNodeUsedAloneRefusesGroup(t *testing.T) {
	st := state2(t)
	st, _ = mustAllocate(t, st, guaranteed("a", ctr("c", Request{Memory: Gi})), "c", hint(true, 0))
	big := guaranteed("big", ctr("c", Request{Memory: 20 * Gi}))
	// Node 0 is used alone, so the pair cannot form: no hint at all, an
	// empty map (no preference to the merge).
	h, _ := Hints(st, big, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{})
	_, _, err := Allocate(st, big, "c", hints.Hint{})
	wantErr(t, err, "[memorymanager] failed to get the default NUMA affinity, no NUMA nodes with enough memory is available")
	// The merge may still hand the pair (from other providers).
	_, _, err = Allocate(st, big, "c", hint(true, 0, 1))
	wantErr(t, err, "[memorymanager] preferred hint violates NUMA node allocation")
	// Or node 1 alone, which cannot hold 20Gi and cannot be widened.
	_, _, err = Allocate(st, big, "c", hint(true, 1))
	wantErr(t, err, "[memorymanager] failed to find NUMA nodes to extend the current topology hint")
	var e *Error
	if !errors.As(err, &e) || e.Pod != "big" || e.Container != "c" || e.Reason() != "UnexpectedAdmissionError" ||
		e.AdmitMessage() != "Allocate failed due to [memorymanager] failed to find NUMA nodes to extend the current topology hint, which is unexpected" {
		t.Errorf("refusal %#v: want an *Error for big/c with the kubelet's reason and message", err)
	}
}

func TestHugepages(t *testing.T) {
	st := state2(t)
	pod := guaranteed("p", ctr("c", Request{Memory: Gi, hp2M: 256 * Mi, hp1G: Gi}))
	h, _ := Hints(st, pod, "c", kubever.V137)
	all := []hints.Hint{hint(true, 0), hint(true, 1), hint(false, 0, 1)}
	wantHints(t, h, map[string][]hints.Hint{"memory": all, "hugepages-2Mi": all, "hugepages-1Gi": all})

	st, a := mustAllocate(t, st, pod, "c", hint(true, 1))
	want := []Block{
		{NUMAAffinity: []int{1}, Type: hp1G, Size: Gi},
		{NUMAAffinity: []int{1}, Type: hp2M, Size: 256 * Mi},
		{NUMAAffinity: []int{1}, Type: Memory, Size: Gi},
	}
	if !reflect.DeepEqual(a.Blocks, want) {
		t.Errorf("blocks = %+v, want %+v", a.Blocks, want)
	}
	wantTable(t, st, 1, hp1G, tbl(2*Gi, 0, 2*Gi, Gi))
	wantTable(t, st, 1, hp2M, tbl(Gi, 512*Mi, 512*Mi, 256*Mi))
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, Gi))
	// Three blocks: three assignments on node 1.
	wantNode(t, st, 1, 3, 1)

	// 3Gi of 1Gi pages: 2Gi per node, so only the pair, preferred.
	pages := guaranteed("pages", ctr("c", Request{Memory: Gi, hp1G: 3 * Gi}))
	h, _ = Hints(state2(t), pages, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 0, 1)}, "hugepages-1Gi": {hint(true, 0, 1)}})
	// On st node 1 is used alone: the pair cannot form any more.
	h, _ = Hints(st, pages, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{})
}

func TestReservedHugepagesPerNode(t *testing.T) {
	st := state2(t)
	// 768Mi of 2Mi pages: node 0 has 1Gi, node 1 only 512Mi after its
	// reservation; the pair has 1.5Gi. Narrowest that fits is 1 node.
	pod := guaranteed("p", ctr("c", Request{Memory: Gi, hp2M: 768 * Mi}))
	h, _ := Hints(st, pod, "c", kubever.V137)
	want := []hints.Hint{hint(true, 0), hint(false, 0, 1)}
	wantHints(t, h, map[string][]hints.Hint{"memory": want, "hugepages-2Mi": want})
	// The CPU side picked node 1: widened to the best hint holding it, the
	// pair, not preferred while the merged hint was: refused.
	_, _, err := Allocate(st, pod, "c", hint(true, 1))
	wantErr(t, err, "[memorymanager] failed to find the extended preferred hint")
	// Not preferred: widened to the pair; 2Mi pages: 512Mi from node 0?
	// No: node order, node 0's 1Gi first holds all 768Mi.
	st, a := mustAllocate(t, st, pod, "c", hint(false, 1))
	if a.Mems != mask(0, 1) {
		t.Errorf("mems = %v, want 0-1", a.Mems)
	}
	wantTable(t, st, 0, hp2M, tbl(Gi, 0, Gi, 768*Mi))
	wantTable(t, st, 1, hp2M, tbl(Gi, 512*Mi, 512*Mi, 0))
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, Gi))
	wantNode(t, st, 0, 2, 0, 1)
	wantNode(t, st, 1, 2, 0, 1)
}

func TestFourNodes(t *testing.T) {
	st := state4(t)
	a := guaranteed("a", ctr("c", Request{Memory: 12 * Gi}))
	// 12Gi needs two nodes of 7.5Gi: the six pairs are preferred, the four
	// triples and the quad are not.
	h, _ := Hints(st, a, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {
		hint(true, 0, 1), hint(true, 0, 2), hint(true, 0, 3), hint(true, 1, 2), hint(true, 1, 3), hint(true, 2, 3),
		hint(false, 0, 1, 2), hint(false, 0, 1, 3), hint(false, 0, 2, 3), hint(false, 1, 2, 3), hint(false, 0, 1, 2, 3),
	}})
	st, _ = mustAllocate(t, st, a, "c", hint(true, 1, 2))
	// Node 1 gives all its 7.5Gi, node 2 the other 4.5Gi.
	wantTable(t, st, 1, Memory, tbl(8*Gi, 512*Mi, 7680*Mi, 7680*Mi))
	wantTable(t, st, 2, Memory, tbl(8*Gi, 512*Mi, 7680*Mi, 4608*Mi))

	// A second 12Gi: any mask with node 1 or 2 but not equal to {1,2} is
	// out, and {1,2} has 3Gi free: only {0,3}.
	b := guaranteed("b", ctr("c", Request{Memory: 12 * Gi}))
	h, _ = Hints(st, b, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 0, 3)}})
	// The CPU side said node 0: 7.5Gi cannot hold 12Gi, widened to {0,3}.
	st, asg := mustAllocate(t, st, b, "c", hint(true, 0))
	if asg.Mems != mask(0, 3) {
		t.Fatalf("mems = %v, want 0,3", asg.Mems)
	}
	wantTable(t, st, 0, Memory, tbl(8*Gi, 512*Mi, 7680*Mi, 7680*Mi))
	wantTable(t, st, 3, Memory, tbl(8*Gi, 512*Mi, 7680*Mi, 4608*Mi))
	wantNode(t, st, 0, 1, 0, 3)
	wantNode(t, st, 3, 1, 0, 3)

	// Node 3 alone is refused (it is in {0,3}), even with 3Gi free.
	c := guaranteed("c", ctr("c", Request{Memory: Gi}))
	_, _, err := Allocate(st, c, "c", hint(true, 3))
	wantErr(t, err, "[memorymanager] preferred hint violates NUMA node allocation")
	// Within its group it fits: {1,2} has node 2's 3Gi free.
	h, _ = Hints(st, c, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(false, 0, 3), hint(false, 1, 2)}})
	st, _ = mustAllocate(t, st, c, "c", hint(false, 1, 2))
	wantTable(t, st, 1, Memory, tbl(8*Gi, 512*Mi, 7680*Mi, 7680*Mi))
	wantTable(t, st, 2, Memory, tbl(8*Gi, 512*Mi, 7680*Mi, 5632*Mi))
	wantNode(t, st, 1, 2, 1, 2)
}

func TestDefaultHintNotPreferred(t *testing.T) {
	st := state4(t)
	// {2,3} grouped with 3Gi free; nodes 0 and 1 alone with 7Gi of
	// their 7.5Gi used, 512Mi free each.
	st, _ = mustAllocate(t, st, guaranteed("g", ctr("c", Request{Memory: 12 * Gi})), "c", hint(true, 2, 3))
	st, _ = mustAllocate(t, st, guaranteed("a", ctr("c", Request{Memory: 7 * Gi})), "c", hint(true, 0))
	st, _ = mustAllocate(t, st, guaranteed("b", ctr("c", Request{Memory: 7 * Gi})), "c", hint(true, 1))
	// 2Gi: a single node could hold it once emptied, so the only fit,
	// {2,3}, is not preferred.
	pod := guaranteed("p", ctr("c", Request{Memory: 2 * Gi}))
	h, _ := Hints(st, pod, "c", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(false, 2, 3)}})
	_, _, err := Allocate(st, pod, "c", hints.Hint{Preferred: true})
	wantErr(t, err, "[memorymanager] failed to find the default preferred hint")
	_, _, err = Allocate(st, pod, "c", hint(true, 0))
	wantErr(t, err, "[memorymanager] failed to find NUMA nodes to extend the current topology hint")
	_, a := mustAllocate(t, st, pod, "c", hints.Hint{})
	if a.Mems != mask(2, 3) {
		t.Errorf("mems = %v", a.Mems)
	}
}

func TestInitContainerReuse(t *testing.T) {
	st := state2(t)
	pod := Pod{UID: "p", Guaranteed: true,
		InitContainers: []Container{ctr("init", Request{Memory: 6 * Gi})},
		Containers:     []Container{ctr("app", Request{Memory: 4 * Gi}), ctr("app2", Request{Memory: 3 * Gi})},
	}
	st, _ = mustAllocate(t, st, pod, "init", hint(true, 0))
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 6*Gi))

	// app's 4Gi comes out of init's 6Gi: nothing more reserved; init's
	// block shrinks to 6-4 = 2Gi, and 2Gi stay reusable.
	st, _ = mustAllocate(t, st, pod, "app", hint(true, 0))
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 6*Gi))
	wantNode(t, st, 0, 2, 0)
	if got := st.Blocks("p", "init"); !reflect.DeepEqual(got, []Block{{NUMAAffinity: []int{0}, Type: Memory, Size: 2 * Gi}}) {
		t.Errorf("init blocks = %+v, want 2Gi", got)
	}
	if got := st.Reusable["p"][mask(0)][Memory]; got != 2*Gi {
		t.Errorf("reusable = %d, want 2Gi", got)
	}

	// app2's 3Gi: free 6Gi + reusable 2Gi count for the hint; 2Gi reused,
	// 1Gi taken (7Gi reserved); init's block goes to 0.
	h, _ := Hints(st, pod, "app2", kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 0), hint(true, 1)}})
	st, _ = mustAllocate(t, st, pod, "app2", hint(true, 0))
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 7*Gi))
	wantNode(t, st, 0, 3, 0)
	if got := st.Blocks("p", "init"); got[0].Size != 0 {
		t.Errorf("init block = %d, want 0", got[0].Size)
	}
	if got := st.Reusable["p"][mask(0)][Memory]; got != 0 {
		t.Errorf("reusable = %d, want 0", got)
	}
	// The pod's blocks sum to what it holds: 0 + 4 + 3 = 7Gi.

	// Removing the pod frees all 7Gi and forgets the reusable memory.
	st = RemovePod(st, "p")
	if !reflect.DeepEqual(st.Nodes, state2(t).Nodes) || len(st.Assignments) != 0 || st.Reusable["p"] != nil {
		t.Errorf("after RemovePod: %+v", st)
	}
}

func TestReuseOnlyOnTheSameAffinity(t *testing.T) {
	st := state2(t)
	pod := Pod{UID: "p", Guaranteed: true,
		InitContainers: []Container{ctr("init", Request{Memory: 6 * Gi})},
		Containers:     []Container{ctr("app", Request{Memory: 4 * Gi})},
	}
	st, _ = mustAllocate(t, st, pod, "init", hint(true, 0))
	// app on node 1: init's memory is on node 0, nothing to reuse.
	st, _ = mustAllocate(t, st, pod, "app", hint(true, 1))
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 4*Gi))
	if got := st.Blocks("p", "init"); got[0].Size != 6*Gi {
		t.Errorf("init block = %d, want 6Gi", got[0].Size)
	}
}

func TestSidecarNotReused(t *testing.T) {
	st := state2(t)
	pod := Pod{UID: "p", Guaranteed: true,
		InitContainers: []Container{{Name: "side", Request: Request{Memory: 2 * Gi}, Restartable: true}},
		Containers:     []Container{ctr("app", Request{Memory: 2 * Gi})},
	}
	st, _ = mustAllocate(t, st, pod, "side", hint(true, 0))
	st, _ = mustAllocate(t, st, pod, "app", hint(true, 0))
	// The sidecar keeps running: 2 + 2 = 4Gi.
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 4*Gi))
	if got := st.Blocks("p", "side"); got[0].Size != 2*Gi {
		t.Errorf("sidecar block = %d, want 2Gi", got[0].Size)
	}
}

func TestPodScope(t *testing.T) {
	// KEP-753's sum: sidecar 1Gi, then init 6Gi (with the sidecar: 7Gi),
	// apps 4Gi + 3Gi (with the sidecar: 8Gi): max(7, 8) = 8Gi.
	pod := Pod{UID: "p", Guaranteed: true,
		InitContainers: []Container{
			{Name: "side", Request: Request{Memory: Gi}, Restartable: true},
			ctr("init", Request{Memory: 6 * Gi, hp2M: 512 * Mi}),
		},
		Containers: []Container{ctr("app", Request{Memory: 4 * Gi}), ctr("app2", Request{Memory: 3 * Gi})},
	}
	// hugepages-2Mi: no app container asks for it, so the v1.37 kubelet's
	// pod request leaves it out; v1.38 counts the init container's 512Mi.
	if got := PodRequest(pod, kubever.V137); !reflect.DeepEqual(got, Request{Memory: 8 * Gi}) {
		t.Errorf("PodRequest v1.37 = %v, want memory 8Gi", got)
	}
	if got := PodRequest(pod, kubever.V138); !reflect.DeepEqual(got, Request{Memory: 8 * Gi, hp2M: 512 * Mi}) {
		t.Errorf("PodRequest v1.38 = %v, want memory 8Gi, hugepages-2Mi 512Mi", got)
	}
	st := state2(t)
	h, _ := PodHints(st, pod, kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 0), hint(true, 1), hint(false, 0, 1)}})

	// 4 apps of 4Gi = 16Gi: more than a node's 12Gi.
	wide := guaranteed("w", ctr("a", Request{Memory: 4 * Gi}), ctr("b", Request{Memory: 4 * Gi}),
		ctr("c", Request{Memory: 4 * Gi}), ctr("d", Request{Memory: 4 * Gi}))
	h, _ = PodHints(st, wide, kubever.V138)
	wantHints(t, h, map[string][]hints.Hint{"memory": {scoredHint(1, true, 0, 1)}})
	// Every container then allocates on the pod's affinity: 16Gi over
	// {0,1}, node 0 full (12Gi), node 1 4Gi.
	for _, name := range []string{"a", "b", "c", "d"} {
		st, _ = mustAllocate(t, st, wide, name, hint(true, 0, 1))
	}
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 12*Gi))
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 4*Gi))
	wantNode(t, st, 0, 4, 0, 1)
	// Once allocated, the pod's hints come from its first container's
	// blocks: v1.37 checks them (4Gi) against the pod's 16Gi, which
	// differ: no preference; v1.38 against the container's own 4Gi: its
	// blocks' nodes, preferred.
	if h, _ := PodHints(st, wide, kubever.V137); h != nil {
		t.Errorf("PodHints v1.37 after allocation = %v, want nil", h)
	}
	h, _ = PodHints(st, wide, kubever.V138)
	// Score: 16Gi used of the two nodes' 24Gi.
	wantHints(t, h, map[string][]hints.Hint{"memory": {scoredHint(66, true, 0, 1)}})
	one := guaranteed("one", ctr("a", Request{Memory: 2 * Gi}))
	st, _ = mustAllocate(t, state2(t), one, "a", hint(true, 1))
	h, _ = PodHints(st, one, kubever.V137)
	wantHints(t, h, map[string][]hints.Hint{"memory": {hint(true, 1)}})
}

func TestRemoveFrees(t *testing.T) {
	st := state2(t)
	big := guaranteed("big", ctr("c", Request{Memory: 20 * Gi}))
	small := guaranteed("small", ctr("c", Request{Memory: 2 * Gi}))
	st, _ = mustAllocate(t, st, big, "c", hint(true, 0, 1))
	st, _ = mustAllocate(t, st, small, "c", hint(false, 0, 1))
	// node 0: 12Gi reserved, node 1: 8 + 2 = 10Gi.

	st = Remove(st, "big", "c")
	// 20Gi returned in node order: node 0's 12Gi, then 8 of node 1's 10.
	wantTable(t, st, 0, Memory, tbl(16*Gi, Gi, 12*Gi, 0))
	wantTable(t, st, 1, Memory, tbl(16*Gi, Gi, 12*Gi, 2*Gi))
	wantNode(t, st, 0, 1, 0, 1)
	wantNode(t, st, 1, 1, 0, 1)
	if err := Check(st); err != nil {
		t.Fatal(err)
	}
	if again := Remove(st, "big", "c"); !reflect.DeepEqual(again, st) {
		t.Error("removing twice changed the state")
	}
	st = Remove(st, "small", "c")
	// Nothing left: every node alone again, everything free.
	if !reflect.DeepEqual(st.Nodes, state2(t).Nodes) || len(st.Assignments) != 0 {
		t.Errorf("after removing all: %+v", st)
	}
	// Node 0 can now be used alone.
	_, a := mustAllocate(t, st, small, "c", hint(true, 0))
	if a.Mems != mask(0) {
		t.Errorf("mems = %v", a.Mems)
	}
}

func TestAllocateRefusesBadInput(t *testing.T) {
	st := state2(t)
	pod := guaranteed("p", ctr("c", Request{Memory: Gi, "cpu": 2}))
	_, _, err := Allocate(st, pod, "c", hint(true, 0))
	wantErr(t, err, `pod p container "c": resource "cpu" is neither memory nor hugepages-<size>`)
	_, _, err = Allocate(st, pod, "nope", hint(true, 0))
	wantErr(t, err, `pod p has no container "nope"`)
	ok := guaranteed("p", ctr("c", Request{Memory: Gi}))
	_, _, err = Allocate(st, ok, "c", hint(true, 5))
	wantErr(t, err, `pod p container "c": affinity 5 names NUMA node 5, which the memory manager does not know`)
	if _, err := Hints(st, pod, "c", kubever.V137); err == nil {
		t.Error("Hints accepted a cpu request")
	}
}
