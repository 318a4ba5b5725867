package sysfs_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

func readWarn(t *testing.T, files map[string]string) (*topology.Topology, []sysfs.Warning) {
	t.Helper()
	m := fstest.MapFS{}
	for p, c := range files {
		m[p] = &fstest.MapFile{Data: []byte(c)}
	}
	topo, warns, err := sysfs.ReadFSWithWarnings(m)
	if err != nil {
		t.Fatalf("a tree the kubelet runs on was refused: %v", err)
	}
	return topo, warns
}

// cores lists each CPU's core id (lowest thread), CPU order.
func cores(topo *topology.Topology) []int {
	var out []int
	for _, c := range topo.Details() {
		out = append(out, c.Core)
	}
	return out
}

// thread_siblings_list disagreeing with core_id does not stop discovery:
// cores follow core_id and physical_package_id as cAdvisor's do, and a
// warning names the files. ht-1s-4c: core_id k on CPUs k and k+4.
func TestSiblingsDisagreeWarn(t *testing.T) {
	// Firmware pairing neighbours instead: 0-1, 2-3, 4-5, 6-7.
	f := files(t, "ht-1s-4c")
	for cpu, sib := range []string{"0-1", "0-1", "2-3", "2-3", "4-5", "4-5", "6-7", "6-7"} {
		f[cpuDir+"cpu"+string(rune('0'+cpu))+"/topology/thread_siblings_list"] = sib + "\n"
	}
	topo, warns := readWarn(t, f)
	// By core_id: {0,4} {1,5} {2,6} {3,7}, core id = lowest thread.
	if got, want := cores(topo), []int{0, 1, 2, 3, 0, 1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("core of each CPU %v, want %v", got, want)
	}
	if topo.CPUsPerCore() != 2 {
		t.Errorf("CPUs per core %d, want 2", topo.CPUsPerCore())
	}
	// Every core disagrees: one warning each, in core order.
	if len(warns) != 4 {
		t.Fatalf("%d warnings, want 4: %v", len(warns), warns)
	}
	w := warns[0]
	wantFiles := []string{
		cpuDir + "cpu0/topology/core_id", cpuDir + "cpu4/topology/core_id",
		cpuDir + "cpu0/topology/thread_siblings_list", cpuDir + "cpu4/topology/thread_siblings_list",
	}
	if !reflect.DeepEqual(w.Files, wantFiles) {
		t.Errorf("files %q, want %q", w.Files, wantFiles)
	}
	for _, s := range []string{"CPUs 0,4 share core_id 0 on package 0, node 0", `cpu 0: "0-1"`, `cpu 4: "4-5"`, "the core is 0,4"} {
		if !strings.Contains(w.Msg, s) {
			t.Errorf("warning %q lacks %q", w.Msg, s)
		}
	}
	if !strings.Contains(warns[3].Msg, "CPUs 3,7 share core_id 3") {
		t.Errorf("last warning %q is not core 3's", warns[3].Msg)
	}
}

// One CPU claiming one wrong sibling, one unreadable list: the other
// cores stay quiet, the machine is read.
func TestSiblingsOddOnes(t *testing.T) {
	f := files(t, "ht-1s-4c")
	f[cpuDir+"cpu1/topology/thread_siblings_list"] = "5\n"    // not itself
	f[cpuDir+"cpu2/topology/thread_siblings_list"] = "2,,6\n" // garbage
	delete(f, cpuDir+"cpu7/topology/thread_siblings_list")    // missing
	topo, warns := readWarn(t, f)
	if got, want := cores(topo), []int{0, 1, 2, 3, 0, 1, 2, 3}; !reflect.DeepEqual(got, want) {
		t.Errorf("core of each CPU %v, want %v", got, want)
	}
	// Unreadable lists first (found while reading CPUs 2 and 7), then the
	// disagreement of core 1.
	if len(warns) != 3 {
		t.Fatalf("%d warnings, want 3: %v", len(warns), warns)
	}
	if !reflect.DeepEqual(warns[0].Files, []string{cpuDir + "cpu2/topology/thread_siblings_list"}) || !strings.Contains(warns[0].Msg, "cpu 2: thread siblings unknown") {
		t.Errorf("warning 0 = %v", warns[0])
	}
	if !reflect.DeepEqual(warns[1].Files, []string{cpuDir + "cpu7/topology/thread_siblings_list"}) || !strings.Contains(warns[1].Msg, "cpu 7: thread siblings unknown") {
		t.Errorf("warning 1 = %v", warns[1])
	}
	if w := warns[2]; !strings.Contains(w.Msg, `CPUs 1,5 share core_id 1`) || !strings.Contains(w.Msg, `cpu 1: "5"`) || strings.Contains(w.Msg, "cpu 5:") ||
		!reflect.DeepEqual(w.Files, []string{cpuDir + "cpu1/topology/core_id", cpuDir + "cpu5/topology/core_id", cpuDir + "cpu1/topology/thread_siblings_list"}) {
		t.Errorf("warning 2 = %v", w)
	}
}

// Read on a directory names the files by their full path.
func TestSiblingsWarningFullPath(t *testing.T) {
	dir := t.TempDir()
	if err := sysfstest.WriteNamed(dir, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "devices/system/cpu/cpu0/topology/thread_siblings_list")
	if err := os.WriteFile(p, []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, warns, err := sysfs.ReadWithWarnings(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 1 || warns[0].Files[2] != p || !strings.Contains(warns[0].String(), p) {
		t.Fatalf("warnings %v, want one naming %s", warns, p)
	}
}
