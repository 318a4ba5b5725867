package framework

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/cpuset"
)

// The systemd side of a node on the systemd cgroup driver (cgroup v2):
// systemd keeps each container scope's AllowedCPUs and each pod slice's
// CPU quota, and writes them back into the cgroup files at every
// daemon-reload and daemon-reexec. The suites read what systemd holds and
// run its re-applies through systemctl, as an operator would.

// SystemdMissing says why this node has no systemd as PID 1 running the
// cgroup v2 tree ("" when it has): systemd's record of a unit only
// matters there.
func SystemdMissing() string {
	if !Unified {
		return "cgroup v1 (systemd keeps no cpuset there)"
	}
	if fi, err := os.Stat("/run/systemd/system"); err != nil || !fi.IsDir() {
		return "systemd is not PID 1 (no /run/systemd/system)"
	}
	if _, err := exec.LookPath("systemctl"); err != nil {
		return "no systemctl in PATH"
	}
	return ""
}

// Systemctl runs systemctl with args and returns its output, trimmed.
func Systemctl(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "systemctl", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// UnitProperty is one property of unit as systemctl show prints it.
func UnitProperty(ctx context.Context, unit, prop string) (string, error) {
	return Systemctl(ctx, "show", "-p", prop, "--value", unit)
}

// AllowedCPUs is systemd's AllowedCPUs of unit (a container's scope): what
// it writes back into the scope's cpuset.cpus at a re-apply.
func AllowedCPUs(ctx context.Context, unit string) (cpuset.CPUSet, error) {
	out, err := UnitProperty(ctx, unit, "AllowedCPUs")
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	// systemd prints ranges separated by spaces ("0-1 4-7").
	set, err := cpuset.Parse(strings.Join(strings.Fields(out), ","))
	if err != nil {
		return cpuset.CPUSet{}, fmt.Errorf("AllowedCPUs of %s: %q: %w", unit, out, err)
	}
	return set, nil
}

// DaemonReexec runs systemctl daemon-reexec and returns once the new
// systemd answers on the bus again (systemctl returns before that).
func DaemonReexec(ctx context.Context) error {
	if _, err := Systemctl(ctx, "daemon-reexec"); err != nil {
		return err
	}
	var err error
	for {
		// The manager's own property: no unit named.
		if _, err = Systemctl(ctx, "show", "-p", "Version", "--value"); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("systemd did not answer after daemon-reexec: %w (last: %v)", ctx.Err(), err)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// CpusetSampler reads the cpuset.cpus of a set of cgroups every second,
// from its start until Stop, and notes every sample that holds one of the
// CPUs that are exclusive at that moment: what a re-apply of systemd's
// stale record would show, however briefly it lasted before something
// wrote it back.
type CpusetSampler struct {
	mu       sync.Mutex
	cgroups  map[string]string // name → cgroup path
	excl     cpuset.CPUSet
	samples  int
	overlaps []string
	stop     context.CancelFunc
	done     chan struct{}
}

// StartCpusetSampler samples cgroups (name → cgroup path, as ReadCpuset
// takes it) against the exclusive CPUs excl until ctx ends or Stop.
func StartCpusetSampler(ctx context.Context, cgroups map[string]string, excl cpuset.CPUSet) *CpusetSampler {
	ctx, stop := context.WithCancel(ctx)
	s := &CpusetSampler{cgroups: cgroups, excl: excl, stop: stop, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			s.sample()
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

func (s *CpusetSampler) sample() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for name, path := range s.cgroups {
		cs, err := ReadCpuset(path)
		if err != nil {
			continue // gone (its pod deleted) or between writes
		}
		s.samples++
		if both := cs.CPUs.Intersection(s.excl); !both.IsEmpty() {
			s.overlaps = append(s.overlaps, fmt.Sprintf("%s %s on %s (exclusive %s)", time.Now().Format(time.RFC3339), name, cs.CPUs, s.excl))
		}
	}
}

// SetExclusive changes the CPUs no sampled cgroup may hold from now on
// (a pod whose CPUs are given back takes them out before its deletion
// starts).
func (s *CpusetSampler) SetExclusive(excl cpuset.CPUSet) {
	s.mu.Lock()
	s.excl = excl
	s.mu.Unlock()
}

// Stop ends the sampling and returns how many cgroup reads it made and the
// samples that held an exclusive CPU.
func (s *CpusetSampler) Stop() (samples int, overlaps []string) {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.samples, append([]string(nil), s.overlaps...)
}
