package adapter

import (
	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
)

// No CFS quota on exclusive CPUs, as the kubelet does under its feature
// gate DisableCPUQuotaWithExclusiveCPUs (beta, on by default since 1.33;
// key disable_cpu_quota_with_exclusive_cpus): a container with exclusive
// CPUs runs with quota -1 (kuberuntime's generateLinuxContainerResources),
// and so does the cgroup of a pod as soon as any of its containers has
// exclusive CPUs (cm's podHasExclusiveCPUs: "any", init containers
// included). A pod's quota stays lifted when its exclusive containers are
// gone, as the kubelet decides it once, when it creates the pod cgroup.
//
// The container's quota goes through the runtime: the CreateContainer
// adjustment, and an update at Synchronize (a container created while the
// key was off or by an earlier release) and at UpdateContainer (the
// kubelet's resize sends its quota again). The pod's cgroup is the
// kubelet's, which the runtime never touches, so the plugin writes it
// itself at the same events, and every reconcile period. At an in-place
// resize the kubelet rewrites the pod's quota: before the containers'
// update when it reads the pod's as lifted (-1 is below any limit), so
// UpdateContainer lifts it again; after it for a shrink of a pod whose
// quota was still set, where no NRI event follows.

// noQuota is the runtime's "no CFS quota" (OCI linux.resources.cpu.quota).
const noQuota = -1

// quotaAtSync adds to Synchronize's updates the quota removal of every
// running or created exclusive container the runtime reports with a quota,
// and lifts their pods' quota. Inside Synchronize's Update.
func (p *plugin) quotaAtSync(l *ledger.Tx, ctrs []*api.Container, updates []*api.ContainerUpdate) []*api.ContainerUpdate {
	if !l.QuotaOff() {
		return updates
	}
	for _, c := range ctrs {
		r, ok := l.Record(c.GetId())
		if !ok || !r.Exclusive || c.GetState() == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		p.liftPodQuota(r, "synchronize")
		// 0 or absent is no quota too: the kubelet's cpuCFSQuota off.
		if c.GetLinux().GetResources().GetCpu().GetQuota().GetValue() > 0 {
			updates = withNoQuota(updates, c.GetId())
		}
	}
	return updates
}

// quotaAtUpdate is UpdateContainer's part: the resize the kubelet sends
// carries the container's quota again, and the kubelet may have written
// the pod's already (a growing limit goes to the pod first). It returns
// updates with the container's quota removed when r, known to the ledger
// with disable_cpu_quota_with_exclusive_cpus on (off), is exclusive after
// the update, and lifts its pod's. Outside any Update (answerUpdate read
// r and off).
func (p *plugin) quotaAtUpdate(r ledger.Record, off bool, updates []*api.ContainerUpdate) []*api.ContainerUpdate {
	if !off || !r.Exclusive {
		return updates
	}
	p.liftPodQuota(r, "container updated")
	return withNoQuota(updates, r.ID)
}

// withNoQuota sets quota -1 in the update of container id, adding one when
// updates has none.
func withNoQuota(updates []*api.ContainerUpdate, id string) []*api.ContainerUpdate {
	for _, u := range updates {
		if u.GetContainerId() == id {
			u.SetLinuxCPUQuota(noQuota)
			return updates
		}
	}
	u := &api.ContainerUpdate{}
	u.SetContainerId(id)
	u.SetLinuxCPUQuota(noQuota)
	u.SetIgnoreFailure()
	return append(updates, u)
}

// liftPodQuota removes the quota of rec's pod cgroup through the applier,
// which logs it and retries a transient systemd failure.
func (p *plugin) liftPodQuota(rec ledger.Record, why string) {
	p.d.Applier.Load().LiftPodQuota(rec, why)
}
