package daemon

import (
	"errors"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
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

// exclusiveQuota takes the quota off a new exclusive container, in its
// adjustment, and off its pod's cgroup. the ledger is locked.
func (p *plugin) exclusiveQuota(adj *api.ContainerAdjustment, rec ledger.Record) {
	if !rec.Exclusive || !p.d.led.QuotaOff() {
		return
	}
	adj.SetLinuxCPUQuota(noQuota)
	p.liftPodQuota(rec, "container created")
}

// quotaAtSync adds to Synchronize's updates the quota removal of every
// running or created exclusive container the runtime reports with a quota,
// and lifts their pods' quota. the ledger is locked.
func (p *plugin) quotaAtSync(ctrs []*api.Container, updates []*api.ContainerUpdate) []*api.ContainerUpdate {
	l := p.d.led
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
// updates with the container's quota removed when it is exclusive after
// the update. the ledger is not locked.
func (p *plugin) quotaAtUpdate(ctr *api.Container, updates []*api.ContainerUpdate) []*api.ContainerUpdate {
	l := p.d.led
	l.Lock()
	r, ok := l.Record(ctr.GetId())
	off := l.QuotaOff()
	l.Unlock()
	if !ok || !r.Exclusive || !off {
		return updates
	}
	p.liftPodQuota(r, "container updated")
	return withNoQuota(updates, ctr.GetId())
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

// liftPodQuota removes the quota of rec's pod cgroup, logging what it did.
// A lift that failed in systemd for a transient reason (the call timed
// out, the bus closed) has the whole reconcileQuota run again off the
// request path, as a failed write of the shared pool is (direct's
// settleRetries): until systemd holds no quota, its next re-apply
// (daemon-reload) puts the kubelet's back, and the reconcile loop may be
// off.
func (p *plugin) liftPodQuota(rec ledger.Record, why string) {
	d := p.d
	res := d.applier().liftPodQuota(rec.CgroupsPath)
	logPodQuota(d.log, rec, why, res)
	if systemd.Transient(res.err) {
		d.applier().base().retryQuota()
	}
}

// retryRun is a run of prompt retries after transient systemd failures:
// at most sdRetries in a row, the first sdRetryFirst after the failure,
// each wait double the last. Its mutex is a leaf.
type retryRun struct {
	mu      sync.Mutex
	n       int  // retries scheduled in this run
	pending bool // one is scheduled and has not run yet
}

// next returns the wait before the next retry, or 0 when one is
// pending already or the run is used up; the caller schedules it.
func (r *retryRun) next() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.pending || r.n >= sdRetries {
		return 0
	}
	wait := sdRetryFirst << r.n
	r.n++
	r.pending = true
	return wait
}

// ran notes that the scheduled retry runs now.
func (r *retryRun) ran() {
	r.mu.Lock()
	r.pending = false
	r.mu.Unlock()
}

// end ends the run: everything it retried went through.
func (r *retryRun) end() {
	r.mu.Lock()
	r.n = 0
	r.mu.Unlock()
}

// retryQuota schedules reconcileQuota after the run's next wait.
func (u *updater) retryQuota() {
	wait := u.quotaRetry.next()
	if wait == 0 {
		return
	}
	u.log.WithField("retry_in", wait.String()).Debug("lifting pod quotas again after a transient systemd failure")
	u.sd.later(wait, func() {
		u.quotaRetry.ran()
		u.reconcileQuota()
	})
}

type podQuotaResult struct {
	pod    string
	lifted bool
	err    error
}

// logPodQuota logs a pod quota removal (info) or its failure (warning; a
// pod cgroup that is gone is the pod going away: debug).
func logPodQuota(log *logrus.Logger, rec ledger.Record, why string, res podQuotaResult) {
	entry := log.WithFields(logrus.Fields{"pod": rec.PodName, "container": rec.Name, "id": rec.ID, "pod_cgroup": res.pod, "reason": why})
	switch {
	case errors.Is(res.err, cgroups.ErrGone):
		entry.Debug("pod cgroup is gone; no CFS quota to lift")
	case res.err != nil:
		entry.WithError(res.err).Warn("cannot lift the CFS quota of the pod of an exclusive container (disable_cpu_quota_with_exclusive_cpus)")
	case res.lifted:
		entry.Info("CFS quota of the pod lifted: it has a container with exclusive CPUs")
	}
}

// reconcileQuota lifts the quota of every pod cgroup holding an exclusive
// container where something (the kubelet's resize) wrote one again.
func (u *updater) reconcileQuota() {
	l := u.l
	l.Lock()
	if !l.QuotaOff() || l.Syncs() == 0 {
		l.Unlock()
		return
	}
	var recs []ledger.Record
	for _, r := range l.Records() {
		if r.Exclusive {
			recs = append(recs, r)
		}
	}
	l.Unlock()
	seen := make(map[string]bool, len(recs))
	transient := false
	for _, r := range recs {
		pod, err := cgroups.PodCgroupsPath(r.CgroupsPath)
		if err != nil || seen[pod] {
			continue
		}
		seen[pod] = true
		res := u.liftPodQuota(r.CgroupsPath)
		if res.lifted || (res.err != nil && !errors.Is(res.err, cgroups.ErrGone)) {
			logPodQuota(u.log, r, "reconcile", res)
		}
		transient = transient || systemd.Transient(res.err)
	}
	if transient {
		u.retryQuota()
	} else {
		u.quotaRetry.end()
	}
}
