package applier

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd/systemdtest"
)

// sdDials are the ways to systemd a test gives the daemon: a working
// fake, or none (no bus socket), counting the dials.
func sdDial(f *systemdtest.Fake, dials *atomic.Int32) func(context.Context) (systemd.Manager, error) {
	return func(context.Context) (systemd.Manager, error) {
		dials.Add(1)
		if f == nil {
			return nil, errors.New("dial unix /run/dbus/system_bus_socket: connect: no such file or directory")
		}
		return f, nil
	}
}

// scopeRoot is a cgroup v2 root holding a container scope (cpuset.cpus
// 0-7) and its pod slice (cpu.max 400000: a 4-CPU quota).
func scopeRoot(t *testing.T) (root, ctrPath, scopeDir, podDir string) {
	t.Helper()
	podDir = "kubepods.slice/kubepods-pod1.slice"
	scopeDir = podDir + "/cri-containerd-abc.scope"
	root = systemdtest.UnifiedRoot(t, scopeDir)
	for f, v := range map[string]string{scopeDir + "/cpuset.cpus": "0-7\n", scopeDir + "/cpuset.mems": "0\n", podDir + "/cpu.max": "400000 100000\n"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte(v), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root, "kubepods-pod1.slice:cri-containerd:abc", scopeDir, podDir
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestWriteThroughSystemd: the applier's one write seam gives a systemd
// scope its cpuset through systemd first (systemd is asked while the file
// still holds the old value), then in the files; a scope systemd does not
// know still gets its files; a failure of systemd is reported after the
// files are written; cgroupfs paths and cgroup v1 never ask systemd.
func TestWriteThroughSystemd(t *testing.T) {
	root, path, scopeDir, _ := scopeRoot(t)
	fake := systemdtest.New(252)
	fake.File = func(unit string) string {
		if unit != "cri-containerd-abc.scope" {
			return "?"
		}
		return readFile(t, filepath.Join(root, scopeDir, "cpuset.cpus"))
	}
	u := newUpdater(nil, nil, nil, cgroups.New(root), logrus.New())
	u.sd = NewSysLink(func(context.Context) (systemd.Manager, error) { return fake, nil }, nil)

	if err := u.writeCPUSet(path, "2-3", "0"); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(root, scopeDir, "cpuset.cpus")); got != "2-3" {
		t.Errorf("cpuset.cpus %q, want 2-3", got)
	}
	want := []string{"SetCPUSet cri-containerd-abc.scope cpus=2-3 mems=0 file=0-7"}
	if got := fake.Calls(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("systemd calls %q, want %q", got, want)
	}

	fake.FailSets(fmt.Errorf("%w: Unit cri-containerd-abc.scope not found.", systemd.ErrNoUnit))
	if err := u.writeCPUSet(path, "4", ""); err != nil {
		t.Errorf("a unit systemd does not know: %v", err)
	}
	fake.FailSets(errors.New("Access denied"))
	if err := u.writeCPUSet(path, "5", ""); err == nil || !strings.Contains(err.Error(), "cri-containerd-abc.scope") {
		t.Errorf("systemd's failure not reported with the unit: %v", err)
	}
	if got := readFile(t, filepath.Join(root, scopeDir, "cpuset.cpus")); got != "5" {
		t.Errorf("cpuset.cpus %q after systemd failed, want 5 (the file is written anyway)", got)
	}
	if err := u.writeCPUSet("kubepods-pod1.slice:cri-containerd:gone", "1", ""); !errors.Is(err, cgroups.ErrGone) {
		t.Errorf("a scope without cgroup: %v, want ErrGone", err)
	}

	// cgroupfs path on v2, and a systemd path on v1: files only.
	n := len(fake.Calls())
	fsRoot := systemdtest.UnifiedRoot(t, "kubepods/pod1/abc")
	if err := os.WriteFile(filepath.Join(fsRoot, "kubepods/pod1/abc/cpuset.cpus"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	u.cg = cgroups.New(fsRoot)
	if err := u.writeCPUSet("/kubepods/pod1/abc", "1", ""); err != nil {
		t.Fatal(err)
	}
	v1 := t.TempDir()
	v1Scope := filepath.Join(v1, "cpuset/kubepods.slice/kubepods-pod1.slice/cri-containerd-abc.scope")
	if err := os.MkdirAll(v1Scope, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v1Scope, "cpuset.cpus"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	u.cg = cgroups.New(v1)
	if err := u.writeCPUSet(path, "1", ""); err != nil {
		t.Fatal(err)
	}
	if got := fake.Calls(); len(got) != n {
		t.Errorf("systemd asked for a cgroupfs path or under cgroup v1: %q", got[n:])
	}

	// No systemd at all: the files.
	u.cg = cgroups.New(root)
	u.sd = NewSysLink(sdDial(nil, new(atomic.Int32)), nil)
	if err := u.writeCPUSet(path, "6", ""); err != nil {
		t.Errorf("without systemd: %v", err)
	}
	if got := readFile(t, filepath.Join(root, scopeDir, "cpuset.cpus")); got != "6" {
		t.Errorf("cpuset.cpus %q, want 6", got)
	}
}

// TestWriteCPUsAt: a pass's write, into the container's cpuset.cpus as
// the passes keep it (cgroups.CPUsFile), goes the way writeCPUSet goes:
// systemd first for a scope on cgroup v2, then the file; ErrGone for a
// cgroup that is not there.
func TestWriteCPUsAt(t *testing.T) {
	root, path, scopeDir, _ := scopeRoot(t)
	fake := systemdtest.New(252)
	fake.File = func(string) string { return readFile(t, filepath.Join(root, scopeDir, "cpuset.cpus")) }
	u := newUpdater(nil, nil, nil, cgroups.New(root), logrus.New())
	u.sd = NewSysLink(func(context.Context) (systemd.Manager, error) { return fake, nil }, nil)

	f, err := u.cg.CPUsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, scopeDir, "cpuset.cpus"); f.Path() != want {
		t.Fatalf("CPUsFile(%q) = %q, want %q", path, f.Path(), want)
	}
	if err := u.writeCPUsAt(path, f, "2-3", true); err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := readFile(t, f.Path()); got != "2-3" {
		t.Errorf("cpuset.cpus %q, want 2-3", got)
	}
	want := []string{"SetCPUSet cri-containerd-abc.scope cpus=2-3 mems= file=0-7"}
	if got := fake.Calls(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("systemd calls %q, want %q", got, want)
	}
	fake.FailSets(errors.New("Access denied"))
	if err := u.writeCPUsAt(path, f, "5", true); err == nil || !strings.Contains(err.Error(), "cri-containerd-abc.scope") {
		t.Errorf("systemd's failure not reported with the unit: %v", err)
	}
	if got := readFile(t, f.Path()); got != "5" {
		t.Errorf("cpuset.cpus %q after systemd failed, want 5 (the file is written anyway)", got)
	}

	gone := "kubepods-pod1.slice:cri-containerd:gone"
	goneFile, err := u.cg.CPUsFile(gone)
	if err != nil {
		t.Fatal(err)
	}
	if err := u.writeCPUsAt(gone, goneFile, "1", true); !errors.Is(err, cgroups.ErrGone) {
		t.Errorf("a scope without cgroup: %v, want ErrGone", err)
	}
	if _, err := u.cg.CPUsFile(""); err == nil {
		t.Error("CPUsFile of no cgroups path: no error")
	}
}

// TestLiftQuotaThroughSystemd: a pod slice's quota is lifted in systemd
// (CPUQuota=infinity) and then in cpu.max; once systemd holds none,
// nothing more is sent.
func TestLiftQuotaThroughSystemd(t *testing.T) {
	root, path, _, podDir := scopeRoot(t)
	fake := systemdtest.New(252)
	u := newUpdater(nil, nil, nil, cgroups.New(root), logrus.New())
	u.sd = NewSysLink(func(context.Context) (systemd.Manager, error) { return fake, nil }, nil)

	res := u.liftPodQuota(path)
	if res.err != nil || !res.lifted || res.pod != "/kubepods.slice/kubepods-pod1.slice" {
		t.Fatalf("lift: %+v", res)
	}
	if got := readFile(t, filepath.Join(root, podDir, "cpu.max")); got != "max" {
		t.Errorf("cpu.max %q, want max", got)
	}
	if got := fake.Calls(); len(got) != 1 || got[0] != "LiftQuota kubepods-pod1.slice" {
		t.Errorf("systemd calls %q", got)
	}
	if res := u.liftPodQuota(path); res.err != nil || res.lifted {
		t.Errorf("second lift: %+v, want nothing to do", res)
	}
	if got := fake.Calls(); len(got) != 1 {
		t.Errorf("systemd asked again though it holds no quota: %q", got)
	}
	// systemd set the kubelet's quota again (a re-apply after a resize).
	fake.SetLifted("kubepods-pod1.slice", false)
	if res := u.liftPodQuota(path); res.err != nil || !res.lifted {
		t.Errorf("lift after systemd's quota came back: %+v", res)
	}
}
