package daemon

import (
	"context"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// Under shared_pool_updates = "after-answer", the shared pool push that a
// new exclusive container's CreateContainer makes necessary waits for that
// container's PostStartContainer. Both runtimes apply a plugin's
// UpdateContainers one container at a time (an OCI runtime update each,
// ~10-20 ms here) and containerd holds its NRI lock meanwhile, which its
// PostCreateContainer, StartContainer and PostStartContainer events wait
// for: a push that starts right after the answer makes the new container's
// CreateContainer+StartContainer wait for every shared container's update.
// Pushed after PostStartContainer, the start is not delayed, and the new
// container's exclusive CPUs are still in the shared containers' cpusets
// from its start until the last update is applied (the documented window).
//
// A container that never reports its start does not hold the push for
// ever: its StopContainer/RemoveContainer releases the CPUs (a push of its
// own), the start timeout gives them back, and any other kick pushes the
// current pool meanwhile, which already leaves its CPUs out.

var _ stub.PostStartContainerInterface = (*plugin)(nil)

// pushAfterStart notes that the shared pool changed for id's sake and is
// pushed once id has started.
// d.mu is held.
func (d *Daemon) pushAfterStart(id string) {
	if d.pushOnStart == nil {
		d.pushOnStart = map[string]struct{}{}
	}
	d.pushOnStart[id] = struct{}{}
}

// dropPushAfterStart forgets a deferred push (the container went away:
// whoever released its CPUs pushes). d.mu is held.
func (d *Daemon) dropPushAfterStart(id string) { delete(d.pushOnStart, id) }

// PostStartContainer pushes the shared pool that id's creation changed,
// now that id runs and the runtime's start path is done.
func (p *plugin) PostStartContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.d.metrics.timeEvent("PostStartContainer")()
	d := p.d
	d.mu.Lock()
	_, deferred := d.pushOnStart[ctr.GetId()]
	delete(d.pushOnStart, ctr.GetId())
	d.mu.Unlock()
	if deferred {
		d.kick()
	}
	return nil
}

// sharedPoolShrunk is what id's CreateContainer answer carries after it
// took CPUs from the shared pool: under in-answer the updates of every
// shared-pool container, under after-answer nothing, with the push noted
// for id's PostStartContainer when some shared-pool container must follow,
// under direct nothing, with the worker woken to write the cgroups.
// d.mu is held.
func (d *Daemon) sharedPoolShrunk(id string) []*api.ContainerUpdate {
	switch d.cfg.SharedPoolUpdates {
	case config.SharedUpdatesInAnswer:
		return d.sharedUpdates(id)
	case config.SharedUpdatesDirect:
		// Written by the worker while the OCI runtime creates id; id's
		// StartContainer waits for it (direct.go).
		return d.sharedPoolChanged(id)
	}
	for other, r := range d.ctrs {
		if other != id && !r.Exclusive {
			d.pushAfterStart(id)
			break
		}
	}
	return nil
}
