package daemon

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

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

// sysLink is the daemon's way to systemd, dialed when first needed: a
// node without systemd never dials. A failed dial is tried again at a
// need sdRedial later (the bus may come up), not at every write of a
// pass. Its mutex is a leaf.
type sysLink struct {
	dial     func(ctx context.Context) (systemd.Manager, error)
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

// writeCPUSet gives the container at cgroupsPath cpus and, when not "",
// mems. A systemd scope on cgroup v2 gets them through systemd first, so
// that systemd's record agrees and a re-apply keeps them; the files
// follow in every case (ErrGone when the cgroup is not there). A scope
// systemd does not know holds nothing it could bring back; when systemd
// cannot be reached at all the mode decision said so, and the files are
// all there is.
func (u *updater) writeCPUSet(cgroupsPath, cpus, mems string) error {
	var sdErr error
	if unit, ok := systemd.ScopeUnit(cgroupsPath); ok && u.cg.Unified() {
		if m, err := u.sd.get(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), sdTimeout)
			err = m.SetCPUSet(ctx, unit, cpus, mems)
			cancel()
			if err != nil && !errors.Is(err, systemd.ErrNoUnit) {
				sdErr = fmt.Errorf("systemd unit %s: %w", unit, err)
			}
		}
	}
	err := u.cg.WriteCPUs(cgroupsPath, cpus)
	if err == nil && mems != "" {
		err = u.cg.WriteMems(cgroupsPath, mems)
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
func (u *updater) liftPodQuota(ctrPath string) podQuotaResult {
	pod, err := cgroups.PodCgroupsPath(ctrPath)
	if err != nil {
		return podQuotaResult{err: err}
	}
	var res podQuotaResult
	res.pod = pod
	if slice, ok := systemd.SliceUnit(ctrPath); ok {
		if m, err := u.sd.get(); err == nil {
			res.lifted, res.err = liftSliceQuota(m, slice)
		}
	}
	unlimited, err := u.cg.QuotaUnlimited(pod)
	if err != nil {
		res.err = errors.Join(err, res.err)
		return res
	}
	if !unlimited {
		res.lifted = true
		res.err = errors.Join(u.cg.RemoveQuota(pod), res.err)
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

// onSystemd is the mode on a node whose container cgroups systemd
// manages (evidence says what showed it): "direct" through systemd when
// systemd answers on D-Bus; otherwise "in-answer", unless "direct" was
// asked for in so many words (kept, with a warning). It logs the one
// line saying which and why, and sets cfg.SharedPoolUpdates to it.
func onSystemd(cfg *config.Config, u *updater, evidence string, log *logrus.Logger) applier {
	fields := logrus.Fields{"key": config.KeySharedPoolUpdates, "cgroup_root": cfg.CgroupRoot, "evidence": evidence}
	m, err := u.sd.get()
	if err == nil {
		fields["using"], fields["systemd_version"] = config.SharedUpdatesDirect, m.Version()
		log.WithFields(fields).Info("systemd manages the container cgroups (cgroup v2, systemd cgroup driver): the plugin changes cpusets " +
			"and pod quotas through systemd's D-Bus API (a scope's AllowedCPUs, a pod slice's CPUQuota), then in the cgroup files, " +
			"as runc's systemd driver does, so that systemd's re-apply (daemon-reload) keeps them")
		cfg.SharedPoolUpdates = config.SharedUpdatesDirect
		return newDirect(u)
	}
	fields["error"] = err.Error()
	if cfg.Line(config.KeySharedPoolUpdates) > 0 {
		fields["using"] = config.SharedUpdatesDirect
		log.WithFields(fields).Warn("systemd manages the container cgroups (cgroup v2, systemd cgroup driver) but cannot be reached on D-Bus: " +
			"the plugin writes cpusets into the cgroup files only, and systemd writes a scope's AllowedCPUs back when it re-applies " +
			"the unit (daemon-reload) until the reconcile loop restores them; mount the host's /run/dbus/system_bus_socket " +
			"read-write, or leave shared_pool_updates unset to have the runtime apply the pool through systemd")
		return newDirect(u)
	}
	fields["using"] = config.SharedUpdatesInAnswer
	log.WithFields(fields).Warn("systemd manages the container cgroups (cgroup v2, systemd cgroup driver) but cannot be reached on D-Bus: " +
		"the runtime applies the shared pool instead, through systemd (each exclusive admission then waits for one OCI runtime update " +
		"per shared-pool container); mount the host's /run/dbus/system_bus_socket read-write for the faster \"direct\"")
	cfg.SharedPoolUpdates = config.SharedUpdatesInAnswer
	a := newInAnswer(u)
	a.systemdFallback = true
	return a
}

// seeDriver decides the mode again from a container's cgroups path, the
// sure sign of its runtime's cgroup driver, where the start-up guess
// from the cgroup root may have been wrong: systemd scopes under "direct"
// chosen without systemd in sight need systemd (else "in-answer"), and
// cgroupfs paths under the "in-answer" chosen because systemd was in
// sight but out of reach need nothing of it (back to "direct"). The
// first path decides, once: a node has one driver. A mode written in the
// configuration stays. l.mu is held.
func (d *Daemon) seeDriver(paths ...string) {
	l := d.led
	if d.driverSeen || l.cfg.Line(config.KeySharedPoolUpdates) > 0 {
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
	d.driverSeen = true
	a := d.applier()
	if !a.cgroupRoot().Unified() {
		return // systemd holds no cpuset under cgroup v1
	}
	scope, isSystemd := systemd.ScopeUnit(path)
	switch cur := a.(type) {
	case *direct:
		if isSystemd && !a.cgroupRoot().SystemdManaged() {
			// Still "direct" when systemd answers: the running applier
			// goes on, now writing through systemd.
			if next := onSystemd(&l.cfg, cur.updater, "container cgroup "+scope, d.log); next.mode() != cur.mode() {
				d.swapApplier(next)
			}
		}
	case *inAnswer:
		if !isSystemd && cur.systemdFallback {
			d.log.WithFields(logrus.Fields{"key": config.KeySharedPoolUpdates, "cgroup_root": l.cfg.CgroupRoot, "cgroups_path": path,
				"using": config.SharedUpdatesDirect}).
				Info("the runtime uses the cgroupfs driver (container cgroups are no systemd scopes): the plugin writes the shared pool into the cgroups itself")
			l.cfg.SharedPoolUpdates = config.SharedUpdatesDirect
			d.swapApplier(newDirect(cur.updater))
		}
	}
}

// swapApplier replaces the applier and moves the worker to the new one,
// which then brings every shared-pool container to the current pool
// (under in-answer the runtime's record of them is stale). l.mu is held.
func (d *Daemon) swapApplier(next applier) {
	d.app.Store(&applierRef{next})
	if !d.workerOn {
		return
	}
	d.workerCancel()
	d.startWorker(next)
	next.kick()
}

// startWorker runs app's worker until Run ends or the applier is
// replaced. l.mu is held.
func (d *Daemon) startWorker(app applier) {
	ctx, cancel := context.WithCancel(d.runCtx)
	d.workerCancel = cancel
	d.runWG.Add(1)
	go func() {
		defer d.runWG.Done()
		app.run(ctx)
	}()
}
