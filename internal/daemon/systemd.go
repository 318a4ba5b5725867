package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// On a node whose container cgroups systemd manages (cgroup v2, the
// runtime's systemd cgroup driver), systemd keeps each container scope's
// AllowedCPUs / AllowedMemoryNodes and each pod slice's CPU quota, and
// writes them back into the files whenever it re-applies the units
// (daemon-reload, daemon-reexec). The plugin then changes them the way
// runc's systemd driver does: the unit property through systemd's D-Bus
// API first, the cgroup file after it. "direct" stays the mode there.
// Without a reachable systemd (no bus socket mounted) the runtime applies
// the shared pool instead ("in-answer"): its OCI runtime goes through
// systemd.

// sdTimeout bounds one call to systemd: CreateContainer lifts a pod's
// quota under the ledger's lock, and must answer well within the
// runtime's request timeout even when systemd is busy reloading.
const sdTimeout = time.Second

// WithSystemd replaces how the daemon reaches systemd (default: the
// system bus, systemd.Dial). Tests pass a recording fake, or a dial that
// fails as a node without the bus socket does.
func WithSystemd(dial func(ctx context.Context) (systemd.Manager, error)) Option {
	return func(o *options) { o.sdDial = dial }
}

func dialSystemd(ctx context.Context) (systemd.Manager, error) {
	c, err := systemd.Dial(ctx)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// A write of the shared pool that failed in systemd for a transient
// reason (systemd.Transient: the call ran out of sdTimeout while systemd
// was busy, as during a daemon-reload on a loaded node, or found the bus
// closed) is tried again by the worker sdRetryFirst later, doubling up to
// sdRetries times in a row (0.25 s to 8 s, 16 s in all: longer than a
// reload takes on the emulated test node). It does not wait for the
// reconcile loop, which may be off, nor for the next pool change, which
// may never come: until systemd holds the pool, its next re-apply puts
// the old cpuset back. Bounded, so a systemd that stays away costs a few
// passes rather than a busy loop; the reconcile round and the next pass
// still try after that.
const (
	sdRetryFirst = 250 * time.Millisecond
	sdRetries    = 6
)

// withRetryTimer replaces how the daemon waits before a retry of a
// failed systemd write (default time.AfterFunc): tests run the retry
// when they choose, with no wall-clock wait.
func withRetryTimer(after func(d time.Duration, f func())) Option {
	return func(o *options) { o.sdAfter = after }
}

// sysLink is the daemon's way to systemd, dialed when first needed: a
// node without systemd never dials. A failed dial is tried again at a
// need sdRedial later (the bus may come up), not at every write of a
// pass. Its mutex is a leaf.
type sysLink struct {
	dial     func(ctx context.Context) (systemd.Manager, error)
	after    func(d time.Duration, f func()) // runs f after d (retries)
	mu       sync.Mutex
	mgr      systemd.Manager
	err      error // the last dial's
	failedAt time.Time
}

// sdRedial is how long a failed dial stands for the next ones.
const sdRedial = 10 * time.Second

func newSysLink(dial func(ctx context.Context) (systemd.Manager, error)) *sysLink {
	return &sysLink{dial: dial}
}

// later runs f after d, off the caller's path (time.AfterFunc unless a
// test replaced it).
func (s *sysLink) later(d time.Duration, f func()) {
	if s != nil && s.after != nil {
		s.after(d, f)
		return
	}
	time.AfterFunc(d, f)
}

func (s *sysLink) get() (systemd.Manager, error) {
	if s == nil || s.dial == nil {
		return nil, errors.New("no systemd client")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mgr != nil {
		return s.mgr, nil
	}
	if s.err != nil && time.Since(s.failedAt) < sdRedial {
		return nil, s.err
	}
	ctx, cancel := context.WithTimeout(context.Background(), sdTimeout)
	defer cancel()
	m, err := s.dial(ctx)
	if err != nil {
		s.err, s.failedAt = err, time.Now()
		return nil, err
	}
	s.mgr = m
	return m, nil
}

// cpusetWriter is the appliers' one seam to the cgroups they write:
// every cpuset the plugin writes itself (direct's passes, start check and
// reconcile) and every pod quota it lifts goes through it. On a systemd
// node it changes systemd's record first, as runc's systemd driver does,
// then the file; elsewhere only the file (cgroups.Root). The updater
// embeds it: cg is also the root the appliers read.
type cpusetWriter struct {
	cg cgroups.Root
	sd *sysLink // nil: systemd is never asked (tests)
}

// writeCPUSet gives the container at cgroupsPath cpus and, when not "",
// mems. A systemd scope on cgroup v2 gets them through systemd first, so
// that systemd's record agrees and a re-apply keeps them; the files
// follow in every case (ErrGone when the cgroup is not there). A scope
// systemd does not know holds nothing it could bring back; when systemd
// cannot be reached at all the mode decision said so (chooseMode), and
// the files are all there is.
func (w cpusetWriter) writeCPUSet(cgroupsPath, cpus, mems string) error {
	var sdErr error
	if unit, ok := systemd.ScopeUnit(cgroupsPath); ok && w.cg.Unified() {
		if m, err := w.sd.get(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), sdTimeout)
			err = m.SetCPUSet(ctx, unit, cpus, mems)
			cancel()
			if err != nil && !errors.Is(err, systemd.ErrNoUnit) {
				sdErr = fmt.Errorf("systemd unit %s: %w", unit, err)
			}
		}
	}
	err := w.cg.WriteCPUs(cgroupsPath, cpus)
	if err == nil && mems != "" {
		err = w.cg.WriteMems(cgroupsPath, mems)
	}
	if err != nil {
		return err
	}
	return sdErr
}

// liftPodQuota removes the CFS quota of the pod holding the container
// whose cgroups path is ctrPath: in systemd's record of the pod slice
// first (the kubelet set its CPUQuota there, and systemd writes it back
// at every re-apply), then in the cgroup file. It reports whether either
// had one (lifted) and the pod's cgroups path.
func (w cpusetWriter) liftPodQuota(ctrPath string) podQuotaResult {
	pod, err := cgroups.PodCgroupsPath(ctrPath)
	if err != nil {
		return podQuotaResult{err: err}
	}
	var res podQuotaResult
	res.pod = pod
	if slice, ok := systemd.SliceUnit(ctrPath); ok {
		if m, err := w.sd.get(); err == nil {
			res.lifted, res.err = liftSliceQuota(m, slice)
		}
	}
	unlimited, err := w.cg.QuotaUnlimited(pod)
	if err != nil {
		res.err = errors.Join(err, res.err)
		return res
	}
	if !unlimited {
		res.lifted = true
		res.err = errors.Join(w.cg.RemoveQuota(pod), res.err)
	}
	return res
}

// liftSliceQuota lifts a slice's CPUQuota in systemd unless systemd holds
// none; a read first, so that the reconcile loop writes nothing while
// nothing changed.
func liftSliceQuota(m systemd.Manager, slice string) (bool, error) {
	ctx, cancel := context.WithTimeout(context.Background(), sdTimeout)
	defer cancel()
	lifted, err := m.QuotaLifted(ctx, slice)
	if err == nil && lifted {
		return false, nil
	}
	if err = m.LiftQuota(ctx, slice); err != nil {
		if errors.Is(err, systemd.ErrNoUnit) {
			return false, nil
		}
		return false, fmt.Errorf("systemd unit %s: %w", slice, err)
	}
	return true, nil
}

// seeDriver has the mode decided again (chooseMode) from a container's
// cgroups path, the sure sign of its runtime's cgroup driver, where the
// start-up decision from the cgroup root may have been wrong: systemd
// scopes where the root showed no systemd (the plugin started before
// the kubelet, in a root without systemd's init.scope), or cgroupfs paths
// where it showed systemd. The first path decides, once: a node has one
// driver. A mode written in the configuration, and cgroup v1 (systemd
// holds no cpuset there), stay. When the mode changes, the ledger's
// configuration says so (ledger.SetMode) and the applier is swapped.
// The ledger is locked.
func (d *Daemon) seeDriver(paths ...string) {
	l := d.led
	cfg := l.Settings()
	if d.app.driverSeen || cfg.Line(config.KeySharedPoolUpdates) > 0 || l.Engine() == nil {
		return
	}
	path := ""
	for _, p := range paths {
		if p != "" {
			path = p
			break
		}
	}
	if path == "" {
		return
	}
	d.app.driverSeen = true
	a := d.applier()
	root := a.cgroupRoot()
	if !root.Unified() || systemd.IsSystemdPath(path) == root.SystemdManaged() {
		return // the start-up decision went by the same sign
	}
	// Not in the configuration: the default, decided again.
	cfg.SharedPoolUpdates = config.SharedUpdatesDirect
	if err := chooseMode(&cfg, root, d.app.sd, path, d.log); err != nil || cfg.SharedPoolUpdates == a.mode() {
		return // an error only for a mode asked for, which stays
	}
	l.SetMode(cfg.SharedPoolUpdates)
	d.swapApplier(applierFor(cfg.SharedPoolUpdates, a.base()))
}

// swapApplier replaces the applier and moves the worker to the new one,
// which then brings every shared-pool container to the current pool
// (under in-answer the runtime's record of them is stale). The ledger is
// locked.
func (d *Daemon) swapApplier(next applier) {
	d.app.ref.Store(&applierRef{next})
	if !d.run.workerOn {
		return
	}
	d.run.cancel()
	d.startWorker(next)
	next.kick()
}

// startWorker runs app's worker until Run ends or the applier is
// replaced. The ledger is locked.
func (d *Daemon) startWorker(app applier) {
	ctx, cancel := context.WithCancel(d.run.ctx)
	d.run.cancel = cancel
	d.run.wg.Add(1)
	go func() {
		defer d.run.wg.Done()
		app.run(ctx)
	}()
}
