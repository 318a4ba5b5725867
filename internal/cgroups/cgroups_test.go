package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestExpandSlice(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"kubepods-burstable-pod12_34.slice", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice"},
		{"kubepods-pod12_34.slice", "/kubepods.slice/kubepods-pod12_34.slice"},
		{"kubepods.slice", "/kubepods.slice"},
		{"-.slice", ""},
		{"", ""},
	} {
		if got := ExpandSlice(tc.in); got != tc.want {
			t.Errorf("ExpandSlice(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestCgroupDir(t *testing.T) {
	v1 := Root{root: "/host/cgroup"}
	v2 := Root{root: "/host/cgroup", unified: true}
	for _, tc := range []struct {
		name string
		r    Root
		path string
		want string
	}{
		{"v1 cgroupfs", v1, "/kubepods/podu/abc", "/host/cgroup/cpuset/kubepods/podu/abc"},
		{"v2 cgroupfs", v2, "/kubepods/burstable/podu/abc", "/host/cgroup/kubepods/burstable/podu/abc"},
		{"v2 systemd", v2, "kubepods-burstable-podu.slice:cri-containerd:abc",
			"/host/cgroup/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-podu.slice/cri-containerd-abc.scope"},
		{"v1 systemd", v1, "kubepods-podu.slice:crio:abc", "/host/cgroup/cpuset/kubepods.slice/kubepods-podu.slice/crio-abc.scope"},
		// A path cannot climb out of the root.
		{"dot-dot", v2, "/../../etc", "/host/cgroup/etc"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.r.Dir(tc.path)
			if err != nil || got != tc.want {
				t.Errorf("dir(%q) = %q, %v; want %q", tc.path, got, err, tc.want)
			}
		})
	}
	if _, err := v1.Dir(""); err == nil {
		t.Error("empty cgroups path accepted")
	}
}

func TestCgroupReadV2(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := New(root)
	if !r.unified {
		t.Fatal("cgroup.controllers at the root not detected as v2")
	}
	dir := filepath.Join(root, "kubepods", "podu", "c1")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte("2-3,6\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "cpuset.mems"), []byte("0\n"), 0o644)
	cpus, mems, err := r.Read("/kubepods/podu/c1")
	if err != nil || cpus.String() != "2-3,6" || mems.String() != "0" {
		t.Errorf("read = %s, %s, %v", cpus, mems, err)
	}
	if _, _, err := r.Read("/kubepods/podu/gone"); !errors.Is(err, ErrGone) {
		t.Errorf("vanished cgroup: %v, want ErrGone", err)
	}
	os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte("x-y\n"), 0o644)
	if _, _, err := r.Read("/kubepods/podu/c1"); err == nil || errors.Is(err, ErrGone) {
		t.Errorf("garbage cpuset.cpus: %v", err)
	}
	if v1 := New(t.TempDir()); v1.unified {
		t.Error("a root without cgroup.controllers detected as v2")
	}
}

// The cgroupsPath values are those the runtimes hand NRI under the systemd
// cgroup driver (containerd 2.x with SystemdCgroup, CRI-O's default) and
// under cgroupfs.
func TestScopeUnit(t *testing.T) {
	for _, tc := range []struct {
		path, unit string
		ok         bool
	}{
		{"kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice:cri-containerd:3f9a0c1b2d4e", "cri-containerd-3f9a0c1b2d4e.scope", true},
		{"kubepods-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice:crio:7c6b5a4d3e2f", "crio-7c6b5a4d3e2f.scope", true},
		{"kubepods-besteffort-podu.slice:docker:abc", "docker-abc.scope", true},
		{"/kubepods/burstable/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/3f9a0c1b2d4e", "", false},
		{"/kubepods/podu/crio-7c6b5a4d3e2f", "", false},
		{"", "", false},
	} {
		unit, ok := ScopeUnit(tc.path)
		if unit != tc.unit || ok != tc.ok {
			t.Errorf("ScopeUnit(%q) = %q, %v; want %q, %v", tc.path, unit, ok, tc.unit, tc.ok)
		}
	}
}

// TestSystemdManaged: a cgroup v2 root holding systemd's init.scope is
// systemd's, before the kubelet made its slice too; one holding only the
// kubelet's systemd slice as well; cgroup v1 never.
func TestSystemdManaged(t *testing.T) {
	mk := func(t *testing.T, unified bool, dirs ...string) Root {
		root := t.TempDir()
		if unified {
			if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, d := range dirs {
			if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		return New(root)
	}
	for _, tc := range []struct {
		name    string
		unified bool
		dirs    []string
		want    bool
	}{
		{"v2 systemd driver", true, []string{"kubepods.slice/kubepods-burstable.slice", "system.slice"}, true},
		{"v2 systemd, no kubelet yet", true, []string{"init.scope", "system.slice"}, true},
		{"v2 without systemd", true, []string{"kubepods/burstable"}, false},
		{"v2 slice without init.scope", true, []string{"system.slice"}, false},
		{"v1 systemd driver", false, []string{"cpuset/kubepods.slice", "kubepods.slice"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := mk(t, tc.unified, tc.dirs...).SystemdManaged(); got != tc.want {
				t.Errorf("SystemdManaged() = %v, want %v", got, tc.want)
			}
		})
	}
	// Files of those names are not systemd's cgroups.
	r := mk(t, true)
	for _, name := range []string{"kubepods.slice", "init.scope"} {
		if err := os.WriteFile(filepath.Join(r.root, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if r.SystemdManaged() {
		t.Error("files named kubepods.slice and init.scope detected as systemd's cgroups")
	}
}

// TestCPUsFile: a cpuset.cpus kept open takes one value after another
// (a plain file is truncated, as cgroupfs replaces the value); a cgroup
// removed while its file is open is ErrGone, and one made again at the
// same path is written through a fresh open; without keep nothing stays
// open.
func TestCPUsFile(t *testing.T) {
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "kubepods/pod1/abc")
	mk := func() {
		t.Helper()
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte("0-63\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func() string {
		t.Helper()
		b, err := os.ReadFile(filepath.Join(dir, "cpuset.cpus"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	r := New(root)
	f, err := r.CPUsFile("/kubepods/pod1/abc")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Write("1", true); !errors.Is(err, ErrGone) {
		t.Fatalf("write before the cgroup exists: %v, want ErrGone", err)
	}
	mk()
	for _, v := range []string{"0-31", "3", "4-5", "6-7", "8-15", "9"} { // shorter, longer, as long
		if err := f.Write(v, true); err != nil {
			t.Fatal(err)
		}
		if got := read(); got != v {
			t.Errorf("after writing %q the file holds %q", v, got)
		}
	}
	if !f.Open() {
		t.Error("not kept open")
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := f.Write("6", true); !errors.Is(err, ErrGone) {
		t.Errorf("write into a removed cgroup: %v, want ErrGone", err)
	}
	if f.Open() {
		t.Error("still open after ErrGone")
	}
	mk()
	if err := f.Write("7", true); err != nil || read() != "7" {
		t.Errorf("the cgroup made again: %v, file %q, want 7", err, read())
	}

	g, err := r.CPUsFile("/kubepods/pod1/abc")
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Write("2", false); err != nil || read() != "2" || g.Open() {
		t.Errorf("write without keep: %v, file %q, open %v; want 2, not open", err, read(), g.Open())
	}
}
