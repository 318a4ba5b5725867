package applier

import "github.com/containerd/nri/pkg/api"

// CPUUpdate moves a container to CPUs (and Mems, when not "").
type CPUUpdate struct{ ID, CPUs, Mems string }

// updateOpts says how cpusetUpdates builds its updates.
type updateOpts uint8

const (
	// ignoreFailure: the runtime goes on when one fails (a container may
	// be stopping); the reconcile loop repairs what is left.
	ignoreFailure updateOpts = 1 << iota
	// oneCPUSet: the targets share few cpusets (the shared pool's
	// fan-out: the node's pool, and pod-level pods' private pools): one
	// Linux part serves each run of targets with the same cpuset and no
	// mems. The updates must then
	// only be marshalled, never edited (withNoQuota edits exclusive
	// containers' updates, which never come from a fan-out).
	oneCPUSet
)

// cpusetUpdates is the one builder of the updates that give containers
// their cpuset: cpuset.cpus, and cpuset.mems when the target names them
// (a shared-pool container's mems are never set by the plugin). One block
// holds the updates. None for no targets.
func cpusetUpdates(targets []CPUUpdate, opts updateOpts) []*api.ContainerUpdate {
	if len(targets) == 0 {
		return nil
	}
	block := make([]api.ContainerUpdate, len(targets))
	out := make([]*api.ContainerUpdate, len(targets))
	var lin *api.LinuxContainerUpdate
	for i, t := range targets {
		if lin == nil || opts&oneCPUSet == 0 || lin.Resources.Cpu.Cpus != t.CPUs || lin.Resources.Cpu.Mems != t.Mems {
			cpu := &api.LinuxCPU{Cpus: t.CPUs, Mems: t.Mems}
			lin = &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: cpu}}
		}
		u := &block[i]
		u.SetContainerId(t.ID)
		u.Linux = lin
		if opts&ignoreFailure != 0 {
			u.SetIgnoreFailure()
		}
		out[i] = u
	}
	return out
}

// CPUSetUpdate is the update giving container id cpus and, unless it is
// empty, mems (cpusetUpdates of one).
func CPUSetUpdate(id, cpus, mems string) *api.ContainerUpdate {
	return cpusetUpdates([]CPUUpdate{{ID: id, CPUs: cpus, Mems: mems}}, 0)[0]
}
