package daemon

import (
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// A container the plugin placed in CreateContainer can die before it ever
// runs: the OCI runtime fails after the plugin's answer (a command missing
// from the image, a bad mount). Neither runtime tells plugins reliably:
// CRI-O runs `runc create` inside CreateContainer and, when it fails,
// sends no StopContainer or RemoveContainer at all; containerd runs it at
// StartContainer, before the NRI StartContainer event, and sends nothing
// either until the kubelet removes the dead container, which it keeps for
// its restart count. Both send StartContainer once `runc create` has
// succeeded. So a container that has not reached StartContainer within
// container_start_timeout is taken for dead and its CPUs go back to the
// shared pool; one whose pod and name are created again before that (the
// kubelet's retry, with a new ID) is dead at once.

// reasonNeverStarted is the reason word logged for such a container.
const reasonNeverStarted = "ContainerNeverStarted"

// clock arms the start timers; tests replace it so that no test waits on
// the wall clock.
type clock interface {
	// AfterFunc calls f in its own goroutine after d, unless the returned
	// stop is called first.
	AfterFunc(d time.Duration, f func()) (stop func() bool)
}

// withClock replaces the wall clock of the start timers (tests).
func withClock(c clock) Option { return func(o *options) { o.clock = c } }

type wallClock struct{}

func (wallClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// startWait is one container waiting for its StartContainer.
type startWait struct {
	seq  uint64 // tells a stale timer from the current one
	stop func() bool
}

// awaitStart arms the start timer of a container just placed (or found
// created but not started at Synchronize). d.mu is held.
func (d *Daemon) awaitStart(id string) {
	d.started(id)
	timeout := time.Duration(d.cfg.ContainerStartTimeout)
	if timeout <= 0 {
		return
	}
	d.startSeq++
	seq := d.startSeq
	d.starting[id] = startWait{seq: seq, stop: d.clock.AfterFunc(timeout, func() { d.startTimedOut(id, seq) })}
}

// started disarms the container's start timer, if any: it started, stopped
// or is gone. d.mu is held.
func (d *Daemon) started(id string) {
	if w, ok := d.starting[id]; ok {
		w.stop()
		delete(d.starting, id)
	}
}

// awaitingStart reports whether the container was placed and has not
// started yet. d.mu is held.
func (d *Daemon) awaitingStart(id string) bool {
	_, ok := d.starting[id]
	return ok
}

// startTimedOut gives back the CPUs of a container that did not start
// within container_start_timeout.
func (d *Daemon) startTimedOut(id string, seq uint64) {
	d.mu.Lock()
	w, ok := d.starting[id]
	if !ok || w.seq != seq {
		d.mu.Unlock()
		return
	}
	delete(d.starting, id)
	r, ok := d.ctrs[id]
	if !ok {
		d.mu.Unlock()
		return
	}
	cpus := d.rightCPUs(r)
	changed, err := d.drop(id)
	if err != nil {
		// The checkpoint could not be written; the CPUs stay assigned.
		// Try again after another timeout rather than never.
		d.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id}).
			Error("cannot release a container that never started; retrying after container_start_timeout")
		d.awaitStart(id)
		d.mu.Unlock()
		return
	}
	d.gaveUp[id] = r.Pod
	d.logAbandoned(r, cpus.String(), "no StartContainer within container_start_timeout ("+time.Duration(d.cfg.ContainerStartTimeout).String()+")",
		"container never started: CPUs given back")
	d.mu.Unlock()
	if changed {
		d.kick()
	}
}

// logAbandoned writes the one line and counts the metric for a container
// given up as never started. d.mu is held.
func (d *Daemon) logAbandoned(r ctrRecord, cpus, why, msg string) {
	d.metrics.abandoned.Inc()
	d.log.WithFields(logrus.Fields{
		"pod": r.PodName, "container": r.Name, "id": r.ID, "cpus": cpus, "exclusive": r.Exclusive,
		"reason": reasonNeverStarted, "detail": why, "shared": d.engine.SharedMask(d.st).String(),
	}).Warn(msg)
}

// startedLate places again a container given up by its start timer that
// starts after all (a runtime slower than container_start_timeout): it
// keeps the exclusive CPUs it runs on when they are still free, else it
// is admitted afresh and the reconcile loop moves its cgroup to the new
// assignment. It reports whether the shared pool changed. d.mu is held.
func (d *Daemon) startedLate(pod *api.PodSandbox, ctr *api.Container) bool {
	id := ctr.GetId()
	if _, ok := d.gaveUp[id]; !ok || d.engine == nil {
		return false
	}
	delete(d.gaveUp, id)
	entry := d.log.WithFields(logrus.Fields{"pod": podName(pod), "container": ctr.GetName(), "id": id})
	req := d.withDeviceHints(requestFor(pod, ctr), ctr, entry)
	rec := ctrRecord{ID: id, Pod: req.Pod, PodName: podName(pod), Name: ctr.GetName(), CgroupsPath: ctr.GetLinux().GetCgroupsPath()}
	late := planLateStart(d.engine, d.st, d.cfg.CPUManagerPolicy == policy.CPUPolicyStatic, req, ctr.GetLinux().GetResources().GetCpu().GetCpus())
	if err := late.Err; err != nil {
		entry.WithError(err).WithField("reason", reasonOf(err)).
			Warn("container started after its CPUs were given back and cannot be placed again; it stays in the shared pool")
		return false
	}
	st, kept := late.State, late.Kept
	rec.Exclusive, rec.Mems = late.Exclusive, late.Mems
	edit := ctrEdit{put: []ctrRecord{rec}}
	if err := d.persistEdit(st, edit); err != nil {
		entry.WithError(err).Error("cannot write the checkpoint; the late container stays untracked")
		return false
	}
	prevShared := d.engine.SharedMask(d.st)
	d.st = st
	d.commitEdit(edit)
	d.gen++
	d.metrics.updateGauges()
	entry.WithFields(logrus.Fields{"cpus": d.rightCPUs(rec).String(), "exclusive": rec.Exclusive, "kept_cpus": kept}).
		Warn("container started after container_start_timeout had given its CPUs back; placed again (raise container_start_timeout if this runtime is that slow)")
	return !prevShared.Equals(d.engine.SharedMask(d.st))
}

// forgetGaveUp drops the given-up entries of a container, or of a whole
// pod when id is "". d.mu is held.
func (d *Daemon) forgetGaveUp(id, pod string) {
	if id != "" {
		delete(d.gaveUp, id)
		return
	}
	for k, p := range d.gaveUp {
		if p == pod {
			delete(d.gaveUp, k)
		}
	}
}
