package daemon

import (
	"context"
	"time"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// The daemon's side of the mode decision (internal/applier decides it):
// how it reaches systemd, and seeDriver's second look at the mode from
// the first container's cgroups path, with the swap of the applier and
// its worker.
//
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

// withRetryTimer replaces how the daemon waits before a retry of a
// failed systemd write (default time.AfterFunc): tests run the retry
// when they choose, with no wall-clock wait.
func withRetryTimer(after func(d time.Duration, f func())) Option {
	return func(o *options) { o.sdAfter = after }
}

// seeDriver has the mode decided again (applier.ChooseMode) from a container's
// cgroups path, the sure sign of its runtime's cgroup driver, where the
// start-up decision from the cgroup root may have been wrong: systemd
// scopes where the root showed no systemd (the plugin started before
// the kubelet, in a root without systemd's init.scope), or cgroupfs paths
// where it showed systemd. The first path decides, once: a node has one
// driver. A mode written in the configuration, and cgroup v1 (systemd
// holds no cpuset there), stay. When the mode changes, the ledger's
// configuration says so (ledger.SetMode) and the applier is swapped. It
// returns true once nothing but a Configure can change the mode: the
// adapter then stops calling it, so that an event's path does not pass
// through the daemon. Inside the event's Update.
func (d *Daemon) seeDriver(l *ledger.Tx, paths ...string) (settled bool) {
	cfg := l.Settings()
	if d.app.driverSeen || cfg.Line(config.KeySharedPoolUpdates) > 0 {
		return true // decided, or the configuration's word (a Configure may change that)
	}
	if l.Engine() == nil {
		return false
	}
	path := ""
	for _, p := range paths {
		if p != "" {
			path = p
			break
		}
	}
	if path == "" {
		return false
	}
	d.app.driverSeen = true
	a := d.applier()
	root := a.CgroupRoot()
	if !root.Unified() || systemd.IsSystemdPath(path) == root.SystemdManaged() {
		return true // the start-up decision went by the same sign
	}
	// Not in the configuration: the default, decided again.
	cfg.SharedPoolUpdates = config.SharedUpdatesDirect
	if err := applier.ChooseMode(&cfg, root, d.app.sd, path, d.log); err != nil || cfg.SharedPoolUpdates == a.Mode() {
		return true // an error only for a mode asked for, which stays
	}
	l.SetMode(cfg.SharedPoolUpdates)
	d.swapApplier(applier.For(cfg.SharedPoolUpdates, a))
	return true
}

// swapApplier replaces the applier and moves the worker to the new one,
// which then brings every shared-pool container to the current pool
// (under in-answer the runtime's record of them is stale). Inside an
// Update.
func (d *Daemon) swapApplier(next applier.Applier) {
	d.app.ref.Store(&applier.Ref{Applier: next})
	if !d.run.workerOn {
		return
	}
	d.run.cancel()
	d.startWorker(next)
	next.Kick()
}

// startWorker runs app's worker until Run ends or the applier is
// replaced. Inside an Update (d.run).
func (d *Daemon) startWorker(app applier.Applier) {
	ctx, cancel := context.WithCancel(d.run.ctx)
	stopped := make(chan struct{})
	d.run.cancel, d.run.stopped = cancel, stopped
	d.run.wg.Add(1)
	go func() {
		defer d.run.wg.Done()
		defer close(stopped)
		app.Run(ctx)
	}()
}
