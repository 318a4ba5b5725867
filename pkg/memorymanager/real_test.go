package memorymanager

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestImportRealKubeletFiles reads memory_manager_state files real kubelets
// wrote (testdata, copied from the kubelet suite's migration spec: the
// kubelet's Static memory manager, 1Mi reserved on node 0, one Guaranteed
// pod of 32Mi), so the layout is the kubelet's own. The v1.37.2 file is V3:
// "data" with "dataChecksum" beside the old fields. A changed byte in
// "data" must be refused.
func TestImportRealKubeletFiles(t *testing.T) {
	raw, err := os.ReadFile("testdata/kubelet-v1.37.2-memory_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ImportKubelet(raw)
	if err != nil {
		t.Fatalf("v1.37.2: %v", err)
	}
	want := map[string]map[string][]Block{"0c87e199581d50e5d133d02356c9ed06": {"app": {{NUMAAffinity: []int{0}, Type: "memory", Size: 32 << 20}}}}
	if !reflect.DeepEqual(st.Assignments, want) {
		t.Errorf("v1.37.2: assignments %+v, want %+v", st.Assignments, want)
	}
	mem, ok := st.Nodes[0].MemoryMap["memory"]
	if !ok || mem.SystemReserved != 1<<20 || mem.Reserved != 32<<20 || mem.Free != mem.Allocatable-32<<20 {
		t.Errorf("v1.37.2: node 0 memory %+v, want 1Mi system-reserved and 32Mi reserved", mem)
	}
	bad := strings.Replace(string(raw), `\"size\":33554432`, `\"size\":33554433`, 1)
	if bad == string(raw) {
		t.Fatal("the data entry to corrupt was not found")
	}
	if _, err := ImportKubelet([]byte(bad)); err == nil || !strings.Contains(err.Error(), "data checksum 311650566") {
		t.Errorf("v1.37.2 with data changed: got %v, want a data checksum error", err)
	}
}
