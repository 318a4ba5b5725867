//go:build testhooks

// Test hooks for tests outside this package that drive the daemon in-process
// (test/churn: the model-based churn test and the concurrency test;
// test/bench: the CreateContainer round trip). They expose nothing the daemon
// does not already hold and change nothing, but they are not part of the
// plugin's behaviour: the build tag keeps them out of the binary and out of
// the package's API, so no tool can come to depend on them. Tests that use
// them carry the same tag; the Makefile passes -tags testhooks wherever it
// builds, vets or tests them (docs/testing.md).
package daemon

import (
	"context"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// EngineState returns the engine and the committed engine state, read
// together under the daemon's lock (test hook: the invariant checker needs
// both, consistently).
func (d *Daemon) EngineState() (*policy.Engine, policy.State) {
	var (
		e  *policy.Engine
		st policy.State
	)
	d.led.Read(func(l *ledger.Tx) { e, st = l.Engine(), l.State() })
	return e, st
}

// Handlers are the plugin's NRI event handlers. Configure is there too: NRI
// hands a configuration only to a plugin it launches, so a test of an
// external plugin can send one only through this hook.
type Handlers interface {
	Configure(ctx context.Context, cfg, runtime, version string) (api.EventMask, error)
	CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error)
	StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error)
	RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error
}

// Handlers returns the plugin's event handlers (test hook: the concurrency
// test calls them from many goroutines at once, without the serialization
// of NRI's runtime side, to show the daemon's own locking suffices).
func (d *Daemon) Handlers() Handlers { return d.handlers() }

// ReconcileQuotaNow runs the reconcile loop's quota pass, which the loop
// runs after its cpuset pass every reconcile_period (test hook: the churn
// runs no clock).
func (d *Daemon) ReconcileQuotaNow() { d.applier().ReconcileQuota() }

// Settle waits until the update worker has pushed the shared pool for
// every kick so far, the re-pushes of stale pushes included, and the
// runtime has answered each push (test hook: the runtime's cpusets equal
// the state only then), or until ctx ends.
func (d *Daemon) Settle(ctx context.Context) error { return d.applier().Kicks().Wait(ctx) }

// Settled reports without waiting whether every kick so far has been
// served (test hook: a benchmark spins on it between timed calls, where
// reading back every cgroup would load the measured process's collector).
func (d *Daemon) Settled() bool { return d.applier().Kicks().Settled() }

// StopWorker stops the update worker and returns once it has (test hook:
// test/paths counts the files one event runs statements in, and a pass
// the event's kick started would run beside it at no fixed moment). Kicks
// after it are asked and never served.
func (d *Daemon) StopWorker() {
	var stopped chan struct{}
	_ = d.led.Update(func(*ledger.Tx) error {
		if d.run.cancel != nil {
			d.run.cancel()
		}
		stopped = d.run.stopped
		return nil
	})
	if stopped != nil {
		<-stopped
	}
}

// NRT is the NodeResourceTopology object the exporter would publish now
// for node (test hook: the exporter itself needs an API server).
func (d *Daemon) NRT(node string) (nrt.Object, error) { return observe.NRTObject(d.led.View(), node) }
