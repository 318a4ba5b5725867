package daemon

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubeletstate"
)

// Kubelet 1.37 writes cpu_manager_state as V4: the import reads the
// entries from "data" (the legacy fields beside it may be stale) and
// refuses a file whose dataChecksum does not match, naming the file.
func TestKubeletStateImportV4(t *testing.T) {
	e := engineFor(t, "ht-2s-6c", fuzzConfig)
	data := `{"policyName":"static","defaultCpuSet":"0,3-12,15-23","entries":{"uid-a":{"c":"1-2,13-14"}}}`
	file := func(ck uint32) string {
		return `{"policyName":"static","defaultCpuSet":"0-23","checksum":0,"data":` + strconv.Quote(data) +
			`,"dataChecksum":` + strconv.FormatUint(uint64(ck), 10) + `}`
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu_manager_state")
	if err := os.WriteFile(path, []byte(file(kubeletstate.StringChecksum(data))), 0o600); err != nil {
		t.Fatal(err)
	}
	st, n, err := importKubeletState(e, e.NewState(), path, quietLogger())
	if err != nil || n != 1 {
		t.Fatalf("import: %d entries, %v; want 1", n, err)
	}
	if got := st.Alloc.Assignments["uid-a"]["c"].String(); got != "1-2,13-14" {
		t.Errorf("uid-a/c = %q, want 1-2,13-14", got)
	}
	if err := os.WriteFile(path, []byte(file(kubeletstate.StringChecksum(data)+1)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := importKubeletState(e, e.NewState(), path, quietLogger()); err == nil ||
		!strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "dataChecksum") {
		t.Errorf("import of a corrupt V4 file = %v, want an error naming the file and dataChecksum", err)
	}
}
