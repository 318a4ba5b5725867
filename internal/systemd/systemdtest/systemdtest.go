// Package systemdtest is a fake of systemd's D-Bus manager
// (internal/systemd.Manager) and a fake cgroup v2 root, for the tests of
// the packages that write through systemd (internal/applier,
// internal/daemon).
package systemdtest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// UnifiedRoot is a fake cgroup v2 root holding dirs.
func UnifiedRoot(t *testing.T, dirs ...string) string {
	t.Helper()
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// Fake records what the plugin asks of systemd. Each call is noted with
// what the cgroup file it concerns holds at that moment (File), so that a
// test sees whether systemd was asked before the file was written.
type Fake struct {
	// File, when set, is what the cgroup file of unit holds now.
	File func(unit string) string

	mu      sync.Mutex
	calls   []string
	lifted  map[string]bool // slice → systemd holds no quota
	setErr  error
	liftErr error             // the next LiftQuota's error only
	held    map[string]string // unit → the AllowedCPUs of the last SetCPUSet that succeeded
	version int
}

// New is a Fake of systemd version.
func New(version int) *Fake { return &Fake{version: version} }

func (f *Fake) note(format string, args ...any) {
	f.mu.Lock()
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

// SetCPUSet implements systemd.Manager.
func (f *Fake) SetCPUSet(_ context.Context, unit, cpus, mems string) error {
	held := ""
	if f.File != nil {
		held = f.File(unit)
	}
	f.note("SetCPUSet %s cpus=%s mems=%s file=%s", unit, cpus, mems, held)
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.setErr != nil {
		return f.setErr
	}
	if f.held == nil {
		f.held = map[string]string{}
	}
	f.held[unit] = cpus
	return nil
}

// LiftQuota implements systemd.Manager.
func (f *Fake) LiftQuota(_ context.Context, unit string) error {
	f.note("LiftQuota %s", unit)
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.liftErr; err != nil {
		f.liftErr = nil
		return err
	}
	if f.lifted == nil {
		f.lifted = map[string]bool{}
	}
	f.lifted[unit] = true
	return nil
}

// QuotaLifted implements systemd.Manager.
func (f *Fake) QuotaLifted(_ context.Context, unit string) (bool, error) {
	return f.Lifted(unit), nil
}

// Version implements systemd.Manager.
func (f *Fake) Version() int { return f.version }

// Calls are the calls so far, in order.
func (f *Fake) Calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.calls...)
}

// Allowed is what systemd holds for unit after the calls that succeeded.
func (f *Fake) Allowed(unit string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.held[unit]
}

// FailSets makes every SetCPUSet fail with err from now on (nil: succeed).
func (f *Fake) FailSets(err error) {
	f.mu.Lock()
	f.setErr = err
	f.mu.Unlock()
}

// FailNextLift makes the next LiftQuota fail with err.
func (f *Fake) FailNextLift(err error) {
	f.mu.Lock()
	f.liftErr = err
	f.mu.Unlock()
}

// Lifted reports whether systemd holds no quota for slice.
func (f *Fake) Lifted(slice string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lifted[slice]
}

// SetLifted says whether systemd holds no quota for slice (a test puts
// one back, as the kubelet's resize does).
func (f *Fake) SetLifted(slice string, lifted bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.lifted == nil {
		f.lifted = map[string]bool{}
	}
	f.lifted[slice] = lifted
}
