package kubeletstate

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestParseRealKubeletFiles reads cpu_manager_state files real kubelets
// wrote (testdata, copied from the kubelet suite's migration spec:
// kubelet's static policy, CPU 0 reserved, one Guaranteed 1-CPU pod on
// CPU 1), so the layout is the kubelet's and not this package's idea of
// it. The v1.37.2 file is V4: "data" with "dataChecksum" beside the old
// fields. A changed byte in "data" must be refused.
func TestParseRealKubeletFiles(t *testing.T) {
	raw, err := os.ReadFile("testdata/kubelet-v1.37.2-cpu_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseCPU(raw)
	if err != nil {
		t.Fatalf("v1.37.2: %v", err)
	}
	want := CPUState{Version: 4, PolicyName: "static", DefaultCPUSet: "0",
		Entries: map[string]map[string]string{"0c87e199581d50e5d133d02356c9ed06": {"app": "1"}}}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("v1.37.2: got %+v, want %+v", st, want)
	}
	// Inside "data" the CPU list is \"1\"; make it \"0\".
	bad := strings.Replace(string(raw), `{\"app\":\"1\"}`, `{\"app\":\"0\"}`, 1)
	if bad == string(raw) {
		t.Fatal("the data entry to corrupt was not found")
	}
	if _, err := ParseCPU([]byte(bad)); err == nil || !strings.Contains(err.Error(), "dataChecksum") {
		t.Errorf("v1.37.2 with data changed: got %v, want a dataChecksum error", err)
	}
}
