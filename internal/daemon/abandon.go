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

// WithNow replaces the wall clock that stamps when a container got its
// CPUs (/state's since; test hook).
func WithNow(now func() time.Time) Option { return func(o *options) { o.now = now } }

type wallClock struct{}

func (wallClock) AfterFunc(d time.Duration, f func()) func() bool { return time.AfterFunc(d, f).Stop }

// startWait is one container waiting for its StartContainer.
type startWait struct {
	seq  uint64 // tells a stale timer from the current one
	stop func() bool
}

// startTimedOut gives back the CPUs of a container that did not start
// within container_start_timeout (the start timer's event).
func (p *plugin) startTimedOut(id string, seq uint64) {
	d := p.d
	l := d.led
	l.mu.Lock()
	if !l.takeTimedOut(id, seq) {
		l.mu.Unlock()
		return
	}
	r, ok := l.ctrs[id]
	if !ok {
		l.mu.Unlock()
		return
	}
	cpus := l.rightCPUs(r)
	changed, err := p.release(r)
	if err != nil {
		// The checkpoint could not be written; the CPUs stay assigned.
		// Try again after another timeout rather than never.
		d.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id}).
			Error("cannot release a container that never started; retrying after container_start_timeout")
		l.armStartTimer(id)
		l.mu.Unlock()
		return
	}
	l.gaveUp[id] = r.Pod
	p.logAbandoned(r, cpus.String(), l.engine.SharedMask(l.st).String(),
		"no StartContainer within container_start_timeout ("+time.Duration(l.cfg.ContainerStartTimeout).String()+")",
		"container never started: CPUs given back")
	l.mu.Unlock()
	if changed {
		d.applier().kick()
	}
}

// logAbandoned writes the one line and counts the metric for a container
// given up as never started; shared is the shared pool it leaves.
func (p *plugin) logAbandoned(r ctrRecord, cpus, shared, why, msg string) {
	d := p.d
	d.obs.abandoned.Inc()
	d.log.WithFields(logrus.Fields{
		"pod": r.PodName, "container": r.Name, "id": r.ID, "cpus": cpus, "exclusive": r.Exclusive,
		"reason": reasonNeverStarted, "detail": why, "shared": shared,
	}).Warn(msg)
}

// lateStartInput is what StartContainer reads, without the ledger's lock, for
// a container its start timer may have given up: its request with the
// device hints, and the CPUs the runtime says it runs on.
type lateStartInput struct {
	pod    *api.PodSandbox
	ctr    *api.Container
	req    policy.Request
	nodes  []int
	devErr error
}

func (p *plugin) lateRequest(pod *api.PodSandbox, ctr *api.Container) lateStartInput {
	in := lateStartInput{pod: pod, ctr: ctr, req: requestFor(pod, ctr)}
	in.nodes, in.devErr = p.deviceReader().nodes(ctr)
	return in
}

// startedLate places again a container given up by its start timer that
// starts after all (a runtime slower than container_start_timeout): it
// keeps the exclusive CPUs it runs on when they are still free, else it
// is admitted afresh and the reconcile loop moves its cgroup to the new
// assignment. It reports whether the shared pool changed. l.mu is held.
func (p *plugin) startedLate(in lateStartInput) bool {
	d := p.d
	l := d.led
	pod, ctr := in.pod, in.ctr
	id := ctr.GetId()
	if _, ok := l.gaveUp[id]; !ok || l.engine == nil {
		return false
	}
	delete(l.gaveUp, id)
	entry := d.log.WithFields(logrus.Fields{"pod": podName(pod), "container": ctr.GetName(), "id": id})
	req := withDeviceHints(l.engine, in.req, in.nodes, in.devErr, entry)
	rec := ctrRecord{ID: id, Pod: req.Pod, PodName: podName(pod), Name: ctr.GetName(), CgroupsPath: ctr.GetLinux().GetCgroupsPath(), Since: l.stamp()}
	late := planLateStart(l.engine, l.st, l.static(), req, ctr.GetLinux().GetResources().GetCpu().GetCpus())
	if err := late.Err; err != nil {
		// It runs on what it was created with, which another container
		// may own by now: tracked as a shared-pool container, the kick
		// below moves it to the pool with the others.
		if _, cerr := l.commit(l.st, indexChange{edit: ctrEdit{put: []ctrRecord{rec}}}); cerr != nil {
			entry.WithError(cerr).Error("cannot write the checkpoint; the late container stays untracked")
			return false
		}
		entry.WithError(err).WithFields(logrus.Fields{"reason": reasonOf(err), "cpus": l.engine.SharedCPUs(l.st).String()}).
			Warn("container started after its CPUs were given back and cannot be placed again; moved to the shared pool")
		return true
	}
	rec.Exclusive, rec.Mems = late.Exclusive, late.Mems
	changed, err := l.commit(late.State, indexChange{edit: ctrEdit{put: []ctrRecord{rec}}})
	if err != nil {
		entry.WithError(err).Error("cannot write the checkpoint; the late container stays untracked")
		return false
	}
	entry.WithFields(logrus.Fields{"cpus": l.rightCPUs(rec).String(), "exclusive": rec.Exclusive, "kept_cpus": late.Kept}).
		Warn("container started after container_start_timeout had given its CPUs back; placed again (raise container_start_timeout if this runtime is that slow)")
	return changed
}
