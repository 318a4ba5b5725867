package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A tree whose thread_siblings_list disagrees with core_id is printed (the
// kubelet runs there), with the warning on stderr naming the file.
func TestTopologySiblingsWarning(t *testing.T) {
	root := simFixture(t, "ht-1s-4c")
	p := filepath.Join(root, "devices/system/cpu/cpu0/topology/thread_siblings_list")
	if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr bytes.Buffer
	if code := cmdTopology([]string{"--sysfs-root", root, "--output", "json"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "warning: CPUs 0,4 share core_id 0") || !strings.Contains(stderr.String(), p) {
		t.Errorf("stderr %q lacks the warning naming %s", stderr.String(), p)
	}
	// Core 0 is still {0,4}: 4 cores of 2 threads.
	if !strings.Contains(stdout.String(), `"cores": 4`) || !strings.Contains(stdout.String(), `"threads_per_core": 2`) {
		t.Errorf("stdout:\n%s", stdout.String())
	}
}
