package memorymanager

import (
	"reflect"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

const (
	Mi = uint64(1) << 20
	Gi = uint64(1) << 30
)

const (
	hp2M Resource = "hugepages-2Mi"
	hp1G Resource = "hugepages-1Gi"
)

// machine2 has two nodes of 16Gi MemTotal, each with 512 pages of 2Mi
// (1Gi) and 2 pages of 1Gi (2Gi).
func machine2() []NodeCapacity {
	return []NodeCapacity{
		{ID: 0, Memory: 16 * Gi, Hugepages: map[uint64]uint64{2 * Mi: 512, Gi: 2}},
		{ID: 1, Memory: 16 * Gi, Hugepages: map[uint64]uint64{2 * Mi: 512, Gi: 2}},
	}
}

// reserved2 keeps 1Gi of memory on each node and 512Mi of 2Mi pages on
// node 1.
func reserved2() []Reservation {
	return []Reservation{
		{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi}},
		{NUMANode: 1, Limits: map[Resource]uint64{Memory: Gi, hp2M: 512 * Mi}},
	}
}

// state2 is machine2 with reserved2, nothing assigned:
//
//	memory:        total 16Gi, reserved 1Gi, pools 1Gi+2Gi: allocatable 16-1-3 = 12Gi
//	hugepages-2Mi: node 0: 1Gi allocatable; node 1: 1Gi - 512Mi = 512Mi
//	hugepages-1Gi: 2Gi allocatable on each
func state2(t *testing.T) State {
	t.Helper()
	st, err := NewState(machine2(), reserved2())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// machine4 has four nodes of 8Gi, no hugepages; 512Mi reserved on each
// leaves 7.5Gi (7680Mi) allocatable per node.
func state4(t *testing.T) State {
	t.Helper()
	var m []NodeCapacity
	var r []Reservation
	for id := 0; id < 4; id++ {
		m = append(m, NodeCapacity{ID: id, Memory: 8 * Gi})
		r = append(r, Reservation{NUMANode: id, Limits: map[Resource]uint64{Memory: 512 * Mi}})
	}
	st, err := NewState(m, r)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// tbl is a MemoryTable with Free = allocatable - reserved.
func tbl(total, sysReserved, allocatable, reserved uint64) MemoryTable {
	return MemoryTable{TotalMemSize: total, SystemReserved: sysReserved, Allocatable: allocatable, Reserved: reserved, Free: allocatable - reserved}
}

func mask(nodes ...int) hints.Mask { return hints.NewMask(nodes...) }

func hint(pref bool, nodes ...int) hints.Hint {
	return hints.Hint{Affinity: mask(nodes...), Preferred: pref}
}

// scoredHint is hint with kubelet v1.38's Score.
func scoredHint(score int64, pref bool, nodes ...int) hints.Hint {
	h := hint(pref, nodes...)
	h.Score = score
	return h
}

func guaranteed(uid string, ctrs ...Container) Pod {
	return Pod{UID: uid, Guaranteed: true, Containers: ctrs}
}

func ctr(name string, r Request) Container { return Container{Name: name, Request: r} }

// mustAllocate allocates and fails the test on error.
func mustAllocate(t *testing.T, st State, pod Pod, name string, merged hints.Hint) (State, Assignment) {
	t.Helper()
	next, a, err := Allocate(st, pod, name, merged)
	if err != nil {
		t.Fatalf("Allocate %s/%s on %v: %v", pod.UID, name, merged, err)
	}
	if err := Check(next); err != nil {
		t.Fatalf("state after Allocate %s/%s is inconsistent: %v", pod.UID, name, err)
	}
	return next, a
}

func wantTable(t *testing.T, st State, node int, r Resource, want MemoryTable) {
	t.Helper()
	if got := st.Nodes[node].MemoryMap[r]; got != want {
		t.Errorf("node %d %s = %+v, want %+v", node, r, got, want)
	}
}

func wantNode(t *testing.T, st State, node, assignments int, cells ...int) {
	t.Helper()
	n := st.Nodes[node]
	if n.NumberOfAssignments != assignments || !reflect.DeepEqual(n.Cells, cells) {
		t.Errorf("node %d: %d assignments, cells %v; want %d, %v", node, n.NumberOfAssignments, n.Cells, assignments, cells)
	}
}

func wantHints(t *testing.T, got map[string][]hints.Hint, want map[string][]hints.Hint) {
	t.Helper()
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hints = %v, want %v", got, want)
	}
}

func wantErr(t *testing.T, err error, text string) {
	t.Helper()
	if err == nil || err.Error() != text {
		t.Fatalf("error = %v, want %q", err, text)
	}
}
