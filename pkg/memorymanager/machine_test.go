package memorymanager

import (
	"reflect"
	"testing"
)

func TestFormatBytes(t *testing.T) {
	for n, want := range map[uint64]string{
		0: "0", 1000: "1000", 1024: "1Ki", 2 * Mi: "2Mi", Gi: "1Gi", 1536 * Mi: "1536Mi",
		1636 * Mi: "1636Mi", 3 * Gi: "3Gi", 1 << 60: "1Ei", 1 << 62: "4Ei",
	} {
		if got := FormatBytes(n); got != want {
			t.Errorf("FormatBytes(%d) = %q, want %q", n, got, want)
		}
	}
	if got := HugepagesResource(2 * Mi); got != hp2M {
		t.Errorf("HugepagesResource(2Mi) = %q", got)
	}
	if got := HugepagesResource(Gi); got != hp1G {
		t.Errorf("HugepagesResource(1Gi) = %q", got)
	}
}

func TestNewStateTwoNodes(t *testing.T) {
	st := state2(t)
	// See state2's comment for the arithmetic.
	want := map[int]NodeState{
		0: {MemoryMap: map[Resource]MemoryTable{
			Memory: tbl(16*Gi, Gi, 12*Gi, 0),
			hp2M:   tbl(Gi, 0, Gi, 0),
			hp1G:   tbl(2*Gi, 0, 2*Gi, 0),
		}, Cells: []int{0}},
		1: {MemoryMap: map[Resource]MemoryTable{
			Memory: tbl(16*Gi, Gi, 12*Gi, 0),
			hp2M:   tbl(Gi, 512*Mi, 512*Mi, 0),
			hp1G:   tbl(2*Gi, 0, 2*Gi, 0),
		}, Cells: []int{1}},
	}
	if !reflect.DeepEqual(st.Nodes, want) {
		t.Errorf("nodes = %+v\nwant %+v", st.Nodes, want)
	}
	if err := Check(st); err != nil {
		t.Error(err)
	}
}

func TestNewStateRefuses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		machine  []NodeCapacity
		reserved []Reservation
		err      string
	}{
		{"no memory reserved", machine2(), []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{hp2M: 2 * Mi}}},
			"[memorymanager] you should specify the system reserved memory"},
		{"unknown node", machine2(), []Reservation{{NUMANode: 2, Limits: map[Resource]uint64{Memory: Gi}}},
			"the reserved memory configuration references a NUMA node 2 that does not exist on this machine"},
		{"reserved above total", machine2(), []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi, hp1G: 3 * Gi}}},
			"NUMA node 0: reserved 3Gi of hugepages-1Gi exceeds its 2Gi"},
		{"page size the node lacks", machine2(), []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi, "hugepages-16Gi": 16 * Gi}}},
			"NUMA node 0: reserved 16Gi of hugepages-16Gi, which the node does not have"},
		// 16Gi - 14Gi reserved = 2Gi, less than the 3Gi of pools.
		{"pools and reservation above MemTotal", machine2(), []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: 14 * Gi}}},
			"NUMA node 0: hugepage pools (3Gi) leave no room for the memory reservation (14Gi of 16Gi)"},
		{"duplicate", machine2(), []Reservation{
			{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi}}, {NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi}}},
			`invalid configuration: the reserved memory has a duplicate value for NUMA node 0 and resource "memory"`},
		{"node twice", append(machine2(), NodeCapacity{ID: 1, Memory: Gi}), reserved2(), "NUMA node 1 listed twice"},
		{"node id out of range", []NodeCapacity{{ID: 64, Memory: Gi}}, nil, "NUMA node id 64 out of range [0, 64)"},
		{"no nodes", nil, reserved2(), "no NUMA nodes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewState(tc.machine, tc.reserved)
			wantErr(t, err, tc.err)
		})
	}
}

func TestValidateReservations(t *testing.T) {
	errs := ValidateReservations([]Reservation{
		{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi, "cpu": 1}},
		{NUMANode: 1, Limits: map[Resource]uint64{hp2M: 0}},
		{NUMANode: 1, Limits: map[Resource]uint64{hp2M: 2 * Mi}},
	})
	want := []string{
		`invalid configuration: the limit type "cpu" for NUMA node 0 is not supported, only [memory hugepages-<HugePageSize>] is accepted`,
		`invalid configuration: reserved memory may not be zero for NUMA node 1 and resource "hugepages-2Mi"`,
		`invalid configuration: the reserved memory has a duplicate value for NUMA node 1 and resource "hugepages-2Mi"`,
	}
	if len(errs) != len(want) {
		t.Fatalf("errors = %v, want %d", errs, len(want))
	}
	for i := range want {
		if errs[i].Error() != want[i] {
			t.Errorf("error %d = %q, want %q", i, errs[i], want[i])
		}
	}
	if errs := ValidateReservations(reserved2()); errs != nil {
		t.Errorf("reserved2: %v", errs)
	}
}

func TestValidateReservedTotals(t *testing.T) {
	nodes := []int{0, 1}
	for _, tc := range []struct {
		name      string
		reserved  []Reservation
		allocated map[Resource]uint64
		err       string
	}{
		// kube-reserved 512Mi + system-reserved 1Gi + eviction-hard
		// 100Mi = 1636Mi; the reservations sum to 1Gi + 1Gi = 2Gi.
		{"memory differs", reserved2(), map[Resource]uint64{Memory: 512*Mi + Gi + 100*Mi, hp2M: 512 * Mi},
			`the total amount "2Gi" of type "memory" is not equal to the value "1636Mi" determined by Node Allocatable feature`},
		{"equal", reserved2(), map[Resource]uint64{Memory: 2 * Gi, hp2M: 512 * Mi}, ""},
		// Node Allocatable holds back 2Mi pages no reservation names.
		{"hugepages not reserved", []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: Gi}}},
			map[Resource]uint64{Memory: Gi, hp2M: 4 * Mi},
			`the total amount "0" of type "hugepages-2Mi" is not equal to the value "4Mi" determined by Node Allocatable feature`},
		{"reserved, Node Allocatable not set", []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: 12}}}, nil,
			`the total amount "12" of type "memory" is not equal to the value "0" determined by Node Allocatable feature`},
		{"unknown node", []Reservation{{NUMANode: 0, Limits: map[Resource]uint64{Memory: 12}}, {NUMANode: 2, Limits: map[Resource]uint64{Memory: 5}}},
			map[Resource]uint64{Memory: 17}, "the reserved memory configuration references a NUMA node 2 that does not exist on this machine"},
		{"cpu in Node Allocatable is not a memory type", []Reservation{{NUMANode: 1, Limits: map[Resource]uint64{Memory: Gi}}},
			map[Resource]uint64{Memory: Gi, "cpu": 1000}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateReservedTotals(nodes, tc.reserved, tc.allocated)
			if tc.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantErr(t, err, tc.err)
		})
	}
}
