package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// The pod cgroup of a container, in the four forms the runtimes report
// (containerd and CRI-O, cgroupfs and systemd drivers), and refusals of
// anything the kubelet did not make for a pod.
func TestPodCgroupsPath(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/kubepods/burstable/pod0b7c-11/3f2a", "/kubepods/burstable/pod0b7c-11"},
		{"/kubepods/pod0b7c-11/3f2a", "/kubepods/pod0b7c-11"},
		{"/kubepods/besteffort/pod0b7c-11/crio-3f2a", "/kubepods/besteffort/pod0b7c-11"},
		{"kubepods-burstable-pod0b7c_11.slice:cri-containerd:3f2a",
			"/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0b7c_11.slice"},
		{"kubepods-pod0b7c_11.slice:crio:3f2a", "/kubepods.slice/kubepods-pod0b7c_11.slice"},
	} {
		got, err := PodCgroupsPath(tc.in)
		if err != nil || got != tc.want {
			t.Errorf("PodCgroupsPath(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{
		"",
		"/system.slice/containerd.service/3f2a", // not a pod's
		"/kubepods/3f2a",                        // directly under kubepods
		"/3f2a",                                 // parent is the root
		"/kubepods/pod/3f2a",                    // "pod" with no uid
		"system.slice:cri-containerd:3f2a",      // a slice that is not kubepods'
		"kubepods-burstable.slice:crio:3f2a",    // the QoS slice, not a pod's
		"kubepods-pod.slice:crio:3f2a",          // "pod" with no uid
	} {
		if got, err := PodCgroupsPath(in); err == nil {
			t.Errorf("PodCgroupsPath(%q) = %q, want an error", in, got)
		}
	}
}

func TestCPUDir(t *testing.T) {
	v1 := Root{root: "/host/cgroup"}
	v2 := Root{root: "/host/cgroup", unified: true}
	for _, tc := range []struct {
		r          Root
		path, want string
	}{
		{v1, "/kubepods/podu", "/host/cgroup/cpu/kubepods/podu"},
		{v2, "/kubepods.slice/kubepods-podu.slice", "/host/cgroup/kubepods.slice/kubepods-podu.slice"},
		{v2, "/../../etc", "/host/cgroup/etc"},
	} {
		if got := tc.r.cpuDir(tc.path); got != tc.want {
			t.Errorf("cpuDir(%q) = %q, want %q", tc.path, got, tc.want)
		}
	}
}

// RemoveQuota writes the version's "no quota" and QuotaUnlimited reads
// both forms; the v2 period is left as it was.
func TestQuotaFiles(t *testing.T) {
	write := func(t *testing.T, path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	read := func(t *testing.T, path string) string {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Run("v1", func(t *testing.T) {
		root := t.TempDir()
		r := Root{root: root}
		file := filepath.Join(root, "cpu", "kubepods", "podu", "cpu.cfs_quota_us")
		write(t, file, "100000\n")
		if un, err := r.QuotaUnlimited("/kubepods/podu"); un || err != nil {
			t.Fatalf("QuotaUnlimited(100000) = %t, %v; want false", un, err)
		}
		if err := r.RemoveQuota("/kubepods/podu"); err != nil {
			t.Fatal(err)
		}
		if got := read(t, file); got != "-1" {
			t.Errorf("cpu.cfs_quota_us = %q, want -1", got)
		}
		if un, err := r.QuotaUnlimited("/kubepods/podu"); !un || err != nil {
			t.Errorf("QuotaUnlimited(-1) = %t, %v; want true", un, err)
		}
	})
	t.Run("v2", func(t *testing.T) {
		root := t.TempDir()
		r := Root{root: root, unified: true}
		file := filepath.Join(root, "kubepods.slice", "kubepods-podu.slice", "cpu.max")
		write(t, file, "200000 100000\n")
		if un, err := r.QuotaUnlimited("/kubepods.slice/kubepods-podu.slice"); un || err != nil {
			t.Fatalf("QuotaUnlimited(200000 100000) = %t, %v; want false", un, err)
		}
		if err := r.RemoveQuota("/kubepods.slice/kubepods-podu.slice"); err != nil {
			t.Fatal(err)
		}
		// The kernel keeps the period when only the quota is written; a
		// plain file shows what was written.
		if got := read(t, file); got != "max" {
			t.Errorf("cpu.max = %q, want max", got)
		}
		write(t, file, "max 100000\n")
		if un, err := r.QuotaUnlimited("/kubepods.slice/kubepods-podu.slice"); !un || err != nil {
			t.Errorf("QuotaUnlimited(max 100000) = %t, %v; want true", un, err)
		}
		write(t, file, "lots 100000\n")
		if _, err := r.QuotaUnlimited("/kubepods.slice/kubepods-podu.slice"); err == nil || errors.Is(err, ErrGone) {
			t.Errorf("garbage cpu.max: %v, want a parse error", err)
		}
	})
	t.Run("gone", func(t *testing.T) {
		r := Root{root: t.TempDir(), unified: true}
		if _, err := r.QuotaUnlimited("/kubepods/podu"); !errors.Is(err, ErrGone) {
			t.Errorf("QuotaUnlimited of a missing cgroup: %v, want ErrGone", err)
		}
		if err := r.RemoveQuota("/kubepods/podu"); !errors.Is(err, ErrGone) {
			t.Errorf("RemoveQuota of a missing cgroup: %v, want ErrGone", err)
		}
	})
}
