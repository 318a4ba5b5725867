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
// its CPUs (nil, nil). Its Update ends before the wait: under direct an
// upsize waits for the applier's pass outside it.
func (p *plugin) resize(id string, req policy.Request) ([]*api.ContainerUpdate, error) {
	d := p.d
	a := d.Applier.Load()
	var (
		rd      policy.ResizeDecision
		updates []*api.ContainerUpdate
		entry   *logrus.Entry
		fields  logrus.Fields // set once the resize is committed
	)
	err := d.Ledger.Update(func(l *ledger.Tx) error {
		r, ok := l.Record(id)
		if !ok || l.Engine() == nil {
			return nil
		}
		req.Pod, req.Container = r.Pod, r.Name
		entry = d.Log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id})
		var (
			next policy.State
			err  error
		)
		next, rd, err = l.Engine().Resize(l.State(), req)
		if err == nil && rd.Kind == policy.ResizeUp {
			err = stranding(l.Engine(), req, next, policy.Decision{Exclusive: true, CPUs: rd.CPUs}, func() int { return l.SharedOthers(id) })
		}
		if err != nil {
			cpus := l.RightCPUs(r)
			err = admissionError(err)
			reason := reasonOf(err)
			entry.WithError(err).WithFields(logrus.Fields{"reason": reason, "cpus": cpus.String(),
				"request_milli": req.CPURequestMilli}).Info("resize refused: the container keeps its CPUs")
			d.Metrics.refusals.WithLabelValues(reason).Inc()
			return err
		}
		if !r.Exclusive || rd.Kind == policy.ResizeNone {
			return nil // the CPUs stay as they are
		}
		// One change: a new decision replaces one not committed (ShrinkDone),
		// and an upsize is durable, a downsize only noted (Shrink).
		c := ledger.Change{Life: ledger.Life{ShrinkDone: id}}
		switch rd.Kind {
		case policy.ResizeUp:
			rec := r
			rec.Mems = rd.Mems.String()
			c.Next, c.Index.Edit.Put = &next, []ledger.Record{rec}
		case policy.ResizeDown:
			c.Life.Shrink = map[string]ledger.Shrink{id: {From: rd.Before, Req: req, To: rd.CPUs}}
		}
		poolChanged, err := l.Commit(c)
		if err != nil {
			entry.WithError(err).WithFields(logrus.Fields{"reason": "PersistError", "kind": rd.Kind}).
				Error("cannot write the checkpoint; the resize is refused and the container keeps its CPUs")
			d.Metrics.refusals.WithLabelValues("PersistError").Inc()
			return err
		}
		fields = logrus.Fields{"cpus": rd.CPUs.String(), "mems": rd.Mems.String(), "baseline": rd.Baseline.String(),
			"before": rd.Before.String(), "kind": rd.Kind}
		switch rd.Kind {
		case policy.ResizeUp:
			if poolChanged {
				updates = a.PoolChanged(l, id)
			}
			fields["added"] = rd.Added.String()
			fields["updates"] = len(updates)
		case policy.ResizeDown:
			fields["released"] = rd.Released.String()
		}
		return nil
	})
	if err != nil || fields == nil {
		return nil, err
	}
	if rd.Kind == policy.ResizeUp {
		d.Metrics.resizes.WithLabelValues(policy.ResizeUp).Inc()
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
	_ = p.d.Ledger.Update(func(l *ledger.Tx) error {
		if p.shrink(l, id) {
			p.d.Applier.Load().Freed(l)
		}
		return nil // logged: PostUpdateContainer goes on
	})
}

// shrink is resized inside its Update; it reports whether the shared pool
// changed.
func (p *plugin) shrink(l *ledger.Tx, id string) bool {
	d := p.d
	s, ok := l.Shrinking(id)
	r, known := l.Record(id)
	if !ok || !known {
		if _, err := l.Commit(ledger.Change{Life: ledger.Life{ShrinkDone: id}}); err != nil {
			d.Log.WithError(err).WithField("id", id).Error("cannot forget a downsize of a container not known")
		}
		return false
	}
	entry := d.Log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id})
	cur, _ := l.Engine().Assignment(l.State(), r.Pod, r.Name)
	next, rd, err := l.Engine().Resize(l.State(), s.Req)
	if err == nil && (!cur.Equals(s.From) || rd.Kind != policy.ResizeDown || !rd.CPUs.Equals(s.To)) {
		err = errStaleShrink
	}
	if err != nil {
		if _, cerr := l.Commit(ledger.Change{Life: ledger.Life{ShrinkDone: id}}); cerr != nil {
			entry.WithError(cerr).Error("cannot forget a downsize no longer valid")
		}
		entry.WithError(err).WithField("cpus", cur.String()).Warn("downsize not committed: the container keeps its CPUs")
		return false
	}
	rec := r
	rec.Mems = rd.Mems.String()
	// The shrink stays pending when the save fails, for a later update.
	changed, err := l.Commit(ledger.Change{Next: &next, Index: ledger.IndexChange{Edit: ledger.Edit{Put: []ledger.Record{rec}}}, Life: ledger.Life{ShrinkDone: id}})
	if err != nil {
		entry.WithError(err).WithField("reason", "PersistError").Error("cannot write the checkpoint; the CPUs given back stay assigned to the container until its next update")
		return false
	}
	d.Metrics.resizes.WithLabelValues(policy.ResizeDown).Inc()
	entry.WithFields(logrus.Fields{"cpus": rd.CPUs.String(), "released": rd.Released.String(), "shared": l.Engine().SharedMask(l.State()).String()}).
		Info("downsize done: the CPUs given back joined the shared pool")
	return changed
}

var errStaleShrink = errors.New("the container's CPUs changed between the downsize's answer and its completion")
