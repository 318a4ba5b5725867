package persist

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubeletstate"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// Kubelet 1.37 writes cpu_manager_state as V4: the import reads the
// entries from "data" (the legacy fields beside it may be stale) and
// refuses a file whose dataChecksum does not match, naming the file.
func TestKubeletStateImportV4(t *testing.T) {
	e := policytest.EngineOf(t, "ht-2s-6c", fuzzConfig)
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

// FuzzKubeletState feeds arbitrary files to the kubelet-state importer
// (--import-kubelet-state). It must never panic; a file it refuses must be
// named in the error; what it imports must be a valid state (the entries
// it could not use skipped, never trusted).
func FuzzKubeletState(f *testing.F) {
	e := policytest.EngineOf(f, "ht-2s-6c", fuzzConfig)
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"0,12","entries":{"uid-a":{"c":"1-2,13-14"},"uid-b":{"x":"1"}},"checksum":1}`))
	f.Add([]byte(`{"policyName":"none","defaultCpuSet":"","checksum":0}`))
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"x"}`))
	f.Add([]byte(`{"policyName":"static","entries":{"p":{"c":"0-23"},"q":{"d":"99"}}}`))
	f.Add([]byte(`not json`))
	dir := f.TempDir()
	log := quietLogger()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "cpu_manager_state")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		st, n, err := importKubeletState(e, e.NewState(), path, log)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("import of %q: error %q does not name the file", data, err)
			}
			return
		}
		ks, _ := kubeletstate.ParseCPU(data)
		entries := 0
		for _, m := range ks.Entries {
			entries += len(m)
		}
		if n > entries {
			t.Fatalf("imported %d of %d entries", n, entries)
		}
		if err := invariant.Check(e, st, nil); err != nil {
			t.Fatalf("import of %q gave an invalid state: %v", data, err)
		}
	})
}

// Huge CPU ranges in the kubelet's state are refused or skipped, never
// expanded (cpuset.Parse would build billions of CPUs before failing).
func TestKubeletStateHugeRange(t *testing.T) {
	e := policytest.EngineOf(t, "ht-2s-6c", fuzzConfig)
	dir := t.TempDir()
	for _, tc := range []struct {
		doc     string
		wantErr bool
	}{
		{`{"policyName":"static","defaultCpuSet":"0-4000000000","entries":{}}`, true},
		{`{"policyName":"static","defaultCpuSet":"0","entries":{"p":{"c":"1-4000000000"}}}`, false},
	} {
		path := filepath.Join(dir, "state")
		if err := os.WriteFile(path, []byte(tc.doc), 0o600); err != nil {
			t.Fatal(err)
		}
		st, n, err := importKubeletState(e, e.NewState(), path, quietLogger())
		if tc.wantErr != (err != nil) || (err != nil && !strings.Contains(err.Error(), path)) {
			t.Errorf("%s: err = %v", tc.doc, err)
		}
		if n != 0 || len(st.Alloc.Assignments) != 0 {
			t.Errorf("%s: imported %d", tc.doc, n)
		}
	}
}

func TestKubeletMemoryPath(t *testing.T) {
	for in, want := range map[string]string{
		"/var/lib/kubelet/cpu_manager_state":              "/var/lib/kubelet/memory_manager_state",
		"/var/lib/nri-cpualign/kubelet-cpu_manager_state": "/var/lib/nri-cpualign/kubelet-memory_manager_state",
		"/tmp/cpu-state.json":                             "/tmp/memory_manager_state",
	} {
		if got := kubeletMemoryPath(in); got != want {
			t.Errorf("%s: %s, want %s", in, got, want)
		}
	}
}
