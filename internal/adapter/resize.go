package adapter

import (
	"errors"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// In-place resizes of exclusive CPUs (KEP-5554's rules, decided by
// policy.Engine.Resize). What matters here is the order against the shared
// pool, so that no shared-pool container ever runs on a CPU the resized
// container runs on:
//
//   - upsize: the added CPUs leave the shared pool in a commit before the
//     answer: under in-answer the answer carries the shared-pool
//     containers' updates, which the runtime applies before the resized
//     container's own; under direct the answer waits, as the start barrier
//     does, for the pass that writes the new pool. Only then does the
//     answer give the container its new cpuset.
//   - downsize: the answer narrows the container, and nothing is
//     committed yet: the state keeps the CPUs it gives back as its own
//     (shrinking holds what will be committed). PostUpdateContainer, which
//     the runtime sends once the OCI runtime has applied the update,
//     commits the downsize, and the CPUs join the shared pool; the worker
//     brings the shared-pool containers to it.
//
// A refusal, a failed commit or an update the runtime never completes
// leaves the state as it was: a downsize not followed by its
// PostUpdateContainer keeps its CPUs assigned to the container until the
// container goes or is resized again.

// resize handles an update of a known container's CPU request: the
// exclusive resizes above; a shared-pool container staying shared keeps
// its CPUs (nil, nil). It takes the ledger's lock itself: under direct an upsize
// waits for the applier's pass after releasing it.
func (p *plugin) resize(id string, req policy.Request) ([]*api.ContainerUpdate, error) {
	d := p.d
	l, a := d.led, d.applier()
	l.Lock()
	r, ok := l.Record(id)
	if !ok || l.Engine() == nil {
		l.Unlock()
		return nil, nil
	}
	req.Pod, req.Container = r.Pod, r.Name
	entry := d.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id})
	next, rd, err := l.Engine().Resize(l.State(), req)
	if err == nil && rd.Kind == policy.ResizeUp {
		err = stranding(l.Engine(), req, next, policy.Decision{Exclusive: true, CPUs: rd.CPUs}, l.SharedOthers(id))
	}
	if err != nil {
		cpus := l.RightCPUs(r)
		l.Unlock()
		err = admissionError(err)
		reason := reasonOf(err)
		entry.WithError(err).WithFields(logrus.Fields{"reason": reason, "cpus": cpus.String(),
			"request_milli": req.CPURequestMilli}).Info("resize refused: the container keeps its CPUs")
		d.obs.refusals.WithLabelValues(reason).Inc()
		return nil, err
	}
	if !r.Exclusive || rd.Kind == policy.ResizeNone {
		l.Unlock()
		return nil, nil // the CPUs stay as they are
	}
	// A new decision replaces one not committed.
	_, _ = l.Commit(ledger.Change{Life: ledger.Life{ShrinkDone: id}}) // nothing durable: cannot fail
	fields := logrus.Fields{"cpus": rd.CPUs.String(), "mems": rd.Mems.String(), "baseline": rd.Baseline.String(),
		"before": rd.Before.String(), "kind": rd.Kind}
	var updates []*api.ContainerUpdate
	switch rd.Kind {
	case policy.ResizeUp:
		rec := r
		rec.Mems = rd.Mems.String()
		poolChanged, err := l.Commit(ledger.Change{Next: &next, Index: ledger.IndexChange{Edit: ledger.Edit{Put: []ledger.Record{rec}}}})
		if err != nil {
			l.Unlock()
			entry.WithError(err).WithField("reason", "PersistError").Error("cannot write the checkpoint; the resize is refused and the container keeps its CPUs")
			d.obs.refusals.WithLabelValues("PersistError").Inc()
			return nil, err
		}
		if poolChanged {
			updates = a.PoolChanged(id)
		}
		fields["added"] = rd.Added.String()
		fields["updates"] = len(updates)
	case policy.ResizeDown:
		_, _ = l.Commit(ledger.Change{Life: ledger.Life{Shrink: map[string]ledger.Shrink{id: {From: rd.Before, Req: req, To: rd.CPUs}}}})
		fields["released"] = rd.Released.String()
	}
	l.Unlock()
	if rd.Kind == policy.ResizeUp {
		d.obs.resizes.WithLabelValues(policy.ResizeUp).Inc()
		// direct: the new pool is in every shared-pool cgroup before the
		// container may run on the added CPUs (in-answer: no-op, the
		// updates above go first).
		a.StartBarrier(id)
	}
	entry.WithFields(fields).Info("container resized")
	return append(updates, applier.CPUSetUpdate(id, rd.CPUs.String(), rd.Mems.String())), nil
}

// resized is PostUpdateContainer's part for a downsize answered by
// resize: the container has left the CPUs it gave back, which now join
// the shared pool (committed; the worker moves the shared-pool containers
// to it). A decision that no longer holds (the container's CPUs changed
// since) is dropped. A failed commit keeps the CPUs assigned to the
// container and the shrink pending, for a later update to finish.
func (p *plugin) resized(id string) {
	d := p.d
	l, a := d.led, d.applier()
	l.Lock()
	s, ok := l.Shrinking(id)
	r, known := l.Record(id)
	if !ok || !known {
		_, _ = l.Commit(ledger.Change{Life: ledger.Life{ShrinkDone: id}}) // nothing durable: cannot fail
		l.Unlock()
		return
	}
	entry := d.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id})
	cur, _ := l.Engine().Assignment(l.State(), r.Pod, r.Name)
	next, rd, err := l.Engine().Resize(l.State(), s.Req)
	if err == nil && (!cur.Equals(s.From) || rd.Kind != policy.ResizeDown || !rd.CPUs.Equals(s.To)) {
		err = errStaleShrink
	}
	if err != nil {
		_, _ = l.Commit(ledger.Change{Life: ledger.Life{ShrinkDone: id}}) // nothing durable: cannot fail
		l.Unlock()
		entry.WithError(err).WithField("cpus", cur.String()).Warn("downsize not committed: the container keeps its CPUs")
		return
	}
	rec := r
	rec.Mems = rd.Mems.String()
	// The shrink stays pending when the save fails, for a later update.
	changed, err := l.Commit(ledger.Change{Next: &next, Index: ledger.IndexChange{Edit: ledger.Edit{Put: []ledger.Record{rec}}}, Life: ledger.Life{ShrinkDone: id}})
	if err != nil {
		l.Unlock()
		entry.WithError(err).WithField("reason", "PersistError").Error("cannot write the checkpoint; the CPUs given back stay assigned to the container until its next update")
		return
	}
	d.obs.resizes.WithLabelValues(policy.ResizeDown).Inc()
	shared := l.Engine().SharedMask(l.State()).String()
	l.Unlock()
	if changed {
		a.Kick()
	}
	entry.WithFields(logrus.Fields{"cpus": rd.CPUs.String(), "released": rd.Released.String(), "shared": shared}).
		Info("downsize done: the CPUs given back joined the shared pool")
}

var errStaleShrink = errors.New("the container's CPUs changed between the downsize's answer and its completion")
