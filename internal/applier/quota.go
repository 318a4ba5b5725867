package applier

import (
	"errors"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
)

// The applier's side of "no CFS quota on exclusive CPUs" (the adapter's
// quota.go says why): the pod cgroup's quota, which the kubelet owns and
// the runtime never touches, is lifted by the plugin itself through the
// cpusetWriter, at the events and every reconcile period, and tried again
// promptly after a transient systemd failure.

// LiftPodQuota removes the quota of rec's pod cgroup, logging what it did.
// A lift that failed in systemd for a transient reason (the call timed
// out, the bus closed) has the whole ReconcileQuota run again off the
// request path, as a failed write of the shared pool is (direct's
// settleRetries): until systemd holds no quota, its next re-apply
// (daemon-reload) puts the kubelet's back, and the reconcile loop may be
// off.
func (u *updater) LiftPodQuota(rec ledger.Record, why string) {
	res := u.liftPodQuota(rec.CgroupsPath)
	logPodQuota(u.log, rec, why, res)
	if systemd.Transient(res.err) {
		u.retryQuota()
	}
}

// retryRun is a run of prompt retries after transient systemd failures:
// at most SystemdRetries in a row, the first SystemdRetryFirst after the failure,
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
	if r.pending || r.n >= SystemdRetries {
		return 0
	}
	wait := SystemdRetryFirst << r.n
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

// retryQuota schedules ReconcileQuota after the run's next wait.
func (u *updater) retryQuota() {
	wait := u.quotaRetry.next()
	if wait == 0 {
		return
	}
	u.log.WithField("retry_in", wait.String()).Debug("lifting pod quotas again after a transient systemd failure")
	u.sd.later(wait, func() {
		u.quotaRetry.ran()
		u.ReconcileQuota()
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

// ReconcileQuota lifts the quota of every pod cgroup holding an exclusive
// container where something (the kubelet's resize) wrote one again.
func (u *updater) ReconcileQuota() {
	var recs []ledger.Record
	u.l.Read(func(tx *ledger.Tx) {
		if !tx.QuotaOff() || tx.Syncs() == 0 {
			return
		}
		for _, r := range tx.Records() {
			if r.Exclusive {
				recs = append(recs, r)
			}
		}
	})
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
