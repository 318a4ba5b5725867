package persist

// Reading the journal back: a restart (Store.Load) and ReadState apply
// the records after the snapshot's mark to the snapshot.

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// replayJournal applies the journal's records after p's mark to p. A
// journal that cannot be trusted (missing, another id, a damaged record
// before the tail, a record that does not parse) is a
// *checkpoint.CorruptError: the caller sets it aside with the snapshot.
// Under Journal the journal stays open for the next records.
func (s *Store) replayJournal(p *payload) error {
	j, n, torn, err := replay(s.ckpt.Dir(), p)
	if err != nil {
		return err
	}
	fields := logrus.Fields{"file": j.Path(), "records": n}
	if torn != nil {
		s.log.WithFields(fields).WithFields(logrus.Fields{"offset": torn.Offset, "record": torn.Seq}).
			Warn("journal ends with a torn record (an append cut short, never answered); dropped")
	} else if n > 0 {
		s.log.WithFields(fields).Info("journal replayed")
	}
	if s.jnl.mode == Snapshot {
		return j.Close()
	}
	s.jnl.j = j
	return nil
}

// replay applies the records of the journal in dir after p's mark to p
// and returns the open journal and how many records it applied.
func replay(dir string, p *payload) (*checkpoint.Journal, int, *checkpoint.TornTail, error) {
	j, recs, torn, err := checkpoint.OpenJournal(dir, CheckpointName, p.Journal.ID, p.Journal.Seq)
	if errors.Is(err, checkpoint.ErrNotFound) {
		return nil, 0, nil, &checkpoint.CorruptError{Path: checkpoint.JournalPath(dir, CheckpointName),
			Reason: fmt.Sprintf("the snapshot names journal %s up to record %d, and there is no journal file", p.Journal.ID, p.Journal.Seq)}
	}
	if err != nil {
		return nil, 0, nil, err
	}
	for _, rec := range recs {
		var r journalRecord
		if err := json.Unmarshal(rec.Payload, &r); err != nil {
			j.Close()
			return nil, 0, nil, &checkpoint.CorruptError{Path: j.Path(), Reason: fmt.Sprintf("record %d: %v", rec.Seq, err)}
		}
		applyRecord(p, &r)
	}
	return j, len(recs), torn, nil
}

// ReadState reads the engine state in stateDir as a restart does
// (snapshot, then the journal's records), before any reconciling (test
// hook: test/churn compares it with the state in memory).
func ReadState(stateDir string) (policy.Snapshot, error) {
	var p payload
	if err := checkpoint.New(stateDir, CheckpointName).Load(&p); err != nil {
		return policy.Snapshot{}, err
	}
	if p.Journal != nil {
		j, _, _, err := replay(stateDir, &p)
		if err != nil {
			return policy.Snapshot{}, err
		}
		j.Close()
	}
	return p.Engine, nil
}

func applyRecord(p *payload, r *journalRecord) {
	e := &p.Engine
	e.Shared, e.Reserved, e.ReusablePod, e.Reusable = r.Shared, r.Reserved, r.ReusablePod, r.Reusable
	e.Assignments = apply(e.Assignments, r.Assign)
	e.PodAffinity = apply(e.PodAffinity, r.Affinity)
	e.Baseline = apply(e.Baseline, r.Baseline)
	e.PodShared = apply(e.PodShared, r.PodShared)
	if r.Memory != nil {
		e.Memory = r.Memory
	}
	p.Containers = apply(p.Containers, r.Ctrs)
}

func apply[V any](m map[string]V, delta map[string]*V) map[string]V {
	if m == nil && len(delta) > 0 {
		m = map[string]V{}
	}
	for k, v := range delta {
		if v == nil {
			delete(m, k)
		} else {
			m[k] = *v
		}
	}
	return m
}

// setAsideJournal moves an untrusted or orphaned journal out of the way
// (with its snapshot), for an operator to inspect.
func (s *Store) setAsideJournal(entry *logrus.Entry) *logrus.Entry {
	aside, err := checkpoint.SetAsideJournal(s.ckpt.Dir(), CheckpointName)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return entry
	case err != nil:
		return entry.WithField("journal_set_aside_error", err.Error())
	}
	return entry.WithField("journal_set_aside_as", aside)
}
