package applier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
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

// A write of the shared pool that failed in systemd for a transient
// reason (systemd.Transient: the call ran out of sdTimeout while systemd
// was busy, as during a daemon-reload on a loaded node, or found the bus
// closed) is tried again by the worker SystemdRetryFirst later, doubling up to
// SystemdRetries times in a row (0.25 s to 8 s, 16 s in all: longer than a
// reload takes on the emulated test node). It does not wait for the
// reconcile loop, which may be off, nor for the next pool change, which
// may never come: until systemd holds the pool, its next re-apply puts
// the old cpuset back. Bounded, so a systemd that stays away costs a few
// passes rather than a busy loop; the reconcile round and the next pass
// still try after that.
const (
	SystemdRetryFirst = 250 * time.Millisecond
	SystemdRetries    = 6
)

// SysLink is the way to systemd, dialed when first needed: a
// node without systemd never dials. A failed dial is tried again at a
// need sdRedial later (the bus may come up), not at every write of a
// pass. Its mutex is a leaf.
type SysLink struct {
	dial     func(ctx context.Context) (systemd.Manager, error)
	after    func(d time.Duration, f func()) // runs f after d (retries)
	mu       sync.Mutex
	mgr      systemd.Manager
	err      error // the last dial's
	failedAt time.Time
}

// sdRedial is how long a failed dial stands for the next ones.
const sdRedial = 10 * time.Second

// NewSysLink is a SysLink that dials with dial when first needed, and
// runs a retry after its wait with after (nil: time.AfterFunc; tests run
// it when they choose, with no wall-clock wait).
func NewSysLink(dial func(ctx context.Context) (systemd.Manager, error), after func(d time.Duration, f func())) *SysLink {
	return &SysLink{dial: dial, after: after}
}

// later runs f after d, off the caller's path (time.AfterFunc unless a
// test replaced it).
func (s *SysLink) later(d time.Duration, f func()) {
	if s != nil && s.after != nil {
		s.after(d, f)
		return
	}
	time.AfterFunc(d, f)
}

func (s *SysLink) get() (systemd.Manager, error) {
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

// cpusetWriter is the appliers' one seam to the cgroups they write:
// every cpuset the plugin writes itself (direct's passes, start check and
// reconcile) and every pod quota it lifts goes through it. On a systemd
// node it changes systemd's record first, as runc's systemd driver does,
// then the file; elsewhere only the file (cgroups.Root). The updater
// embeds it: cg is also the root the appliers read.
type cpusetWriter struct {
	cg cgroups.Root
	sd *SysLink // nil: systemd is never asked (tests)
}

// writeCPUSet gives the container at cgroupsPath cpus and, when not "",
// mems. A systemd scope on cgroup v2 gets them through systemd first, so
// that systemd's record agrees and a re-apply keeps them; the files
// follow in every case (ErrGone when the cgroup is not there). A scope
// systemd does not know holds nothing it could bring back; when systemd
// cannot be reached at all the mode decision said so (ChooseMode), and
// the files are all there is.
func (w cpusetWriter) writeCPUSet(cgroupsPath, cpus, mems string) error {
	sdErr := w.tellSystemd(cgroupsPath, cpus, mems)
	err := w.cg.WriteCPUs(cgroupsPath, cpus)
	if err == nil && mems != "" {
		err = w.cg.WriteMems(cgroupsPath, mems)
	}
	if err != nil {
		return err
	}
	return sdErr
}

// writeCPUsAt is writeCPUSet of cpus alone, into f: the container's
// cpuset.cpus as the passes keep it (cgroups.CPUsFile; keep: it may stay
// open).
func (w cpusetWriter) writeCPUsAt(cgroupsPath string, f *cgroups.CPUsFile, cpus string, keep bool) error {
	sdErr := w.tellSystemd(cgroupsPath, cpus, "")
	if err := f.Write(cpus, keep); err != nil {
		return err
	}
	return sdErr
}

// tellSystemd gives a systemd scope on cgroup v2 cpus and, when not "",
// mems in systemd's record; nothing for any other cgroup, or a unit
// systemd does not know.
func (w cpusetWriter) tellSystemd(cgroupsPath, cpus, mems string) error {
	unit, ok := systemd.ScopeUnit(cgroupsPath)
	if !ok || !w.cg.Unified() {
		return nil
	}
	m, err := w.sd.get()
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), sdTimeout)
	defer cancel()
	if err := m.SetCPUSet(ctx, unit, cpus, mems); err != nil && !errors.Is(err, systemd.ErrNoUnit) {
		return fmt.Errorf("systemd unit %s: %w", unit, err)
	}
	return nil
}

// liftPodQuota removes the CFS quota of the pod holding the container
// whose cgroups path is ctrPath: in systemd's record of the pod slice
// first (the kubelet set its CPUQuota there, and systemd writes it back
// at every re-apply), then in the cgroup file. It reports whether either
// had one (lifted) and the pod's cgroups path.
func (w cpusetWriter) liftPodQuota(ctrPath string) podQuotaResult {
	pod, err := cgroups.PodCgroupsPath(ctrPath)
	if err != nil {
		return podQuotaResult{err: err}
	}
	var res podQuotaResult
	res.pod = pod
	if slice, ok := systemd.SliceUnit(ctrPath); ok {
		if m, err := w.sd.get(); err == nil {
			res.lifted, res.err = liftSliceQuota(m, slice)
		}
	}
	unlimited, err := w.cg.QuotaUnlimited(pod)
	if err != nil {
		res.err = errors.Join(err, res.err)
		return res
	}
	if !unlimited {
		res.lifted = true
		res.err = errors.Join(w.cg.RemoveQuota(pod), res.err)
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
