package daemon

// Test hooks for tests outside this package that drive the daemon in-process
// (test/churn: the model-based churn test and the concurrency test). They
// expose nothing the daemon does not already hold and change nothing; they
// are not part of the plugin's behaviour and tools should not use them.

import (
	"context"
	"time"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// EngineState returns the engine and the committed engine state, read
// together under the daemon's lock (test hook: the invariant checker needs
// both, consistently).
func (d *Daemon) EngineState() (*policy.Engine, policy.State) {
	d.led.mu.Lock()
	defer d.led.mu.Unlock()
	return d.led.engine, d.led.st
}

// Handlers are the plugin's NRI event handlers.
type Handlers interface {
	CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error)
	StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error)
	RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error
}

// Handlers returns the plugin's event handlers (test hook: the concurrency
// test calls them from many goroutines at once, without the serialization
// of NRI's runtime side, to show the daemon's own locking suffices).
func (d *Daemon) Handlers() Handlers { return &plugin{d: d} }

// Settle waits until the update worker has pushed the shared pool for
// every kick so far, the re-pushes of stale pushes included, and the
// runtime has answered each push (test hook: the runtime's cpusets equal
// the state only then), or until ctx ends.
func (d *Daemon) Settle(ctx context.Context) error { return d.applier().kickLedger().wait(ctx) }

// Settled reports without waiting whether every kick so far has been
// served (test hook: a benchmark spins on it between timed calls, where
// reading back every cgroup would load the measured process's collector).
func (d *Daemon) Settled() bool { return d.applier().kickLedger().settled() }

// WithStartTimers replaces the wall clock of the start timers
// (container_start_timeout) with afterFunc, which arms a timer that calls
// f after d unless its stop is called first (test hook: the churn test
// fires the timers itself instead of waiting).
func WithStartTimers(afterFunc func(d time.Duration, f func()) (stop func() bool)) Option {
	return withClock(clockFunc(afterFunc))
}

type clockFunc func(d time.Duration, f func()) func() bool

func (c clockFunc) AfterFunc(d time.Duration, f func()) func() bool { return c(d, f) }
