// Package adapter is the NRI adapter (docs/architecture.md): it turns the
// runtime's events into plans on the ledger's values and ledger commits,
// and the results into NRI answers. It holds no state of its own and
// knows the daemon only through Deps: the ledger, the applier, the NRI
// connection, the logger, its metrics, the kubelet's PodResources link,
// and the daemon's Configure and cgroup driver hooks.
package adapter

import (
	"context"
	"sync/atomic"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
)

// Deps is what the adapter uses of the daemon that runs it.
type Deps struct {
	Ledger *ledger.Ledger
	// Applier is the current applier (the daemon may swap it: seeDriver).
	Applier *atomic.Pointer[applier.Ref]
	Conn    *applier.Connection
	Log     *logrus.Logger
	Metrics *Metrics
	// PodResources asks the kubelet for a new container's devices.
	PodResources *request.PodResources
	// SeeDriver tells the daemon the cgroups paths an event carries,
	// inside the event's transaction (the first one may change the
	// applier). It returns true once the mode is settled: the adapter
	// then stops asking until the next Configure.
	SeeDriver func(tx *ledger.Tx, paths ...string) (settled bool)
	// Configure builds and commits the engine of the runtime's
	// configuration (a runtime's Configure).
	Configure func(cfg string) error
	// Synced is closed at the first Synchronize; Connected is set by
	// every Synchronize.
	Synced    chan struct{}
	Connected *atomic.Bool
}

// Handlers are the NRI events the adapter answers; the NRI stub finds
// them on the value New returns.
type Handlers interface {
	Configure(ctx context.Context, cfg, runtime, version string) (api.EventMask, error)
	Shutdown(ctx context.Context)
	Synchronize(ctx context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error)
	CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error)
	StartContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	UpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error)
	PostUpdateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	StopContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error)
	RemoveContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) error
	StopPodSandbox(ctx context.Context, pod *api.PodSandbox) error
	RemovePodSandbox(ctx context.Context, pod *api.PodSandbox) error
}

// New returns the adapter's handlers over d.
func New(d Deps) Handlers {
	return &plugin{d: &d}
}
