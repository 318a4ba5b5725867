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
