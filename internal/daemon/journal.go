package daemon

// The journal store: every decision is one record appended to
// <state_dir>/cpualign_state.json.journal and made durable with one
// fdatasync; the snapshot (cpualign_state.json, the checkpoint format of
// pkg/checkpoint) is rewritten only when the journal is full, after a
// restart or a configuration change, and after a failed append. The
// snapshot names the journal (its id) and the last record it holds, and
// is envelope version 2 so that builds from before the journal refuse it
// rather than read it alone; a restart loads the snapshot and applies the
// records after that one.
//
// A record holds what changed since the state on disk: the engine's
// head (shared pool, reserved CPUs, the reusable init-container CPUs), and
// per pod and per container the new value or null for a removal. Values
// are whole, so a record applied to a snapshot that already holds it
// changes nothing.

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"reflect"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// Store is how the daemon makes its state durable before it answers.
type Store string

const (
	// StoreJournal appends one record per decision (one fdatasync) and
	// rewrites the snapshot now and then. The default.
	StoreJournal Store = "journal"
	// StoreSnapshot rewrites the whole snapshot on every decision (write,
	// fsync, rename, fsync of the directory), as before the journal.
	StoreSnapshot Store = "snapshot"
)

// WithStore chooses how the state is made durable (default StoreJournal;
// the benchmarks compare both). Either store reads what the other wrote.
func WithStore(s Store) Option { return func(o *options) { o.store = s } }

// journalMark is the snapshot's reference to its journal.
type journalMark struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"` // the last record the snapshot holds
}

// journalRecord is one record's payload.
type journalRecord struct {
	Shared      string                          `json:"shared"`
	Reserved    string                          `json:"reserved"`
	ReusablePod string                          `json:"reusable_pod,omitempty"`
	Reusable    string                          `json:"reusable,omitempty"`
	Assign      map[string]*map[string]string   `json:"assign,omitempty"`
	Affinity    map[string]*policy.SnapshotHint `json:"affinity,omitempty"`
	Ctrs        map[string]*ctrRecord           `json:"containers,omitempty"`
}

type journalHead struct{ shared, reserved, reusablePod, reusable string }

// journalStore is the journal's side of the daemon, under Daemon.mu.
type journalStore struct {
	mode Store
	size int64 // of a new journal file; tests shrink it
	j    *checkpoint.Journal
	// The state on disk (snapshot and records), valid when engine is
	// non-nil. The maps are the store's own.
	engine *policy.Engine
	fp     string
	head   journalHead
	assign map[string]map[string]cpuset.CPUSet
	aff    map[string]hints.Hint
	ctrs   map[string]ctrRecord
	rec    journalRecord // scratch
}

// reset forgets the state on disk and closes the journal (restore reads
// them again).
func (s *journalStore) reset() {
	if s.j != nil {
		_ = s.j.Close()
	}
	s.j, s.engine = nil, nil
}

func headOf(e *policy.Engine, st policy.State) journalHead {
	h := journalHead{shared: e.SharedPool(st).String(), reserved: e.Reserved().String()}
	// SnapshotExceptAssignments' rule for the reusable CPUs.
	if st.Alloc.ReusablePod != "" && st.Alloc.Reusable.Size() > 0 {
		h.reusablePod, h.reusable = st.Alloc.ReusablePod, st.Alloc.Reusable.String()
	}
	return h
}

// persistJournal makes (st, ctrs) durable through the journal.
func (d *Daemon) persistJournal(st policy.State, ctrs map[string]ctrRecord) error {
	s := &d.jnl
	fp := d.fingerprint()
	if s.j == nil || s.engine != d.engine || s.fp != fp {
		return d.compact(st, ctrs)
	}
	head := headOf(d.engine, st)
	r := &s.rec
	*r = journalRecord{Shared: head.shared, Reserved: head.reserved, ReusablePod: head.reusablePod, Reusable: head.reusable}
	changed := head != s.head
	r.Assign = diffKeys(r.Assign, st.Alloc.Assignments, s.assign, func(old, sets map[string]cpuset.CPUSet) bool {
		// The allocator copies a pod's map to change it: the same map is
		// the same assignment, without comparing its sets.
		return sameMap(old, sets) || sameSets(old, sets)
	}, func(sets map[string]cpuset.CPUSet) *map[string]string {
		texts := policy.AssignmentTexts(sets)
		return &texts
	})
	r.Affinity = diffKeys(r.Affinity, st.PodAffinity, s.aff, func(a, b hints.Hint) bool { return a == b },
		func(h hints.Hint) *policy.SnapshotHint { sh := policy.HintOf(h); return &sh })
	// Only a changed record escapes to the heap.
	r.Ctrs = diffKeys(r.Ctrs, ctrs, s.ctrs, func(a, b ctrRecord) bool { return a == b },
		func(c ctrRecord) *ctrRecord { return &c })
	if !changed && r.Assign == nil && r.Affinity == nil && r.Ctrs == nil {
		return nil // the disk holds this state already
	}
	payload, err := json.Marshal(r)
	if err != nil {
		return fmt.Errorf("encode journal record: %w", err)
	}
	switch err := s.j.Append(payload); {
	case errors.Is(err, checkpoint.ErrJournalFull):
		return d.compact(st, ctrs)
	case err != nil:
		// What reached the disk is unknown: a new journal next time.
		s.reset()
		return err
	}
	s.head = head
	applyKeys(s.assign, st.Alloc.Assignments, r.Assign)
	applyKeys(s.aff, st.PodAffinity, r.Affinity)
	applyKeys(s.ctrs, ctrs, r.Ctrs)
	return nil
}

func sameMap(a, b map[string]cpuset.CPUSet) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// diffKeys adds to out every key of cur that disk lacks or holds
// differently (as conv of its value) and every key of disk that cur lacks
// (as nil). The pass for removals runs only when the first did not meet
// every key on disk: with 500 containers a lookup is most of the cost.
func diffKeys[V, R any](out map[string]*R, cur, disk map[string]V, same func(a, b V) bool, conv func(V) *R) map[string]*R {
	met := 0
	for k, v := range cur {
		old, ok := disk[k]
		if ok {
			met++
		}
		if !ok || !same(old, v) {
			out = put(out, k, conv(v))
		}
	}
	if met < len(disk) {
		for k := range disk {
			if _, ok := cur[k]; !ok {
				out = put(out, k, nil)
			}
		}
	}
	return out
}

// applyKeys brings disk to cur for the keys a record carried.
func applyKeys[V, R any](disk, cur map[string]V, keys map[string]*R) {
	for k := range keys {
		if v, ok := cur[k]; ok {
			disk[k] = v
		} else {
			delete(disk, k)
		}
	}
}

func put[V any](m map[string]*V, k string, v *V) map[string]*V {
	if m == nil {
		m = map[string]*V{}
	}
	m[k] = v
	return m
}

// compact writes the snapshot of (st, ctrs), naming the journal and its
// last record, and starts the journal again at its first slot. A journal
// file is created first when there is none to reuse.
func (d *Daemon) compact(st policy.State, ctrs map[string]ctrRecord) error {
	s := &d.jnl
	s.engine = nil // until the snapshot is known to be on disk
	fp := d.fingerprint()
	if s.j == nil {
		// A journal file there may hold records the snapshot on disk
		// needs (after a failed append): the committed state goes into a
		// snapshot of its own before the new journal replaces that file.
		if _, err := os.Lstat(checkpoint.JournalPath(d.ckpt.Dir(), CheckpointName)); err == nil {
			data, err := d.enc.encode(fp, d.engine, d.st, d.ctrs)
			if err == nil {
				err = d.ckpt.SaveCompact(data)
			}
			if err != nil {
				return err
			}
		}
		size := s.size
		if size == 0 {
			size = checkpoint.DefaultJournalSize
		}
		j, err := checkpoint.CreateJournal(d.ckpt.Dir(), CheckpointName, size, 1)
		if err != nil {
			return err
		}
		s.j = j
	}
	data, err := d.enc.encode(fp, d.engine, st, ctrs)
	if err != nil {
		return err
	}
	mark, err := json.Marshal(journalMark{ID: s.j.ID(), Seq: s.j.Next() - 1})
	if err != nil {
		return err
	}
	// data ends with the payload's closing brace; the mark goes before it.
	data = append(append(append(data[:len(data)-1], `,"journal":`...), mark...), '}')
	d.enc.buf = data
	if err := d.ckpt.SaveCompactVersion(data, checkpoint.VersionJournal); err != nil {
		return err
	}
	s.j.Rewind()
	s.engine, s.fp, s.head = d.engine, fp, headOf(d.engine, st)
	s.assign = maps.Clone(st.Alloc.Assignments)
	if s.assign == nil {
		s.assign = map[string]map[string]cpuset.CPUSet{}
	}
	s.aff = maps.Clone(st.PodAffinity)
	if s.aff == nil {
		s.aff = map[string]hints.Hint{}
	}
	s.ctrs = cloneRecords(ctrs)
	return nil
}

// replayJournal applies the journal's records after p's mark to p. A
// journal that cannot be trusted (missing, another id, a damaged record
// before the tail, a record that does not parse) is a
// *checkpoint.CorruptError: the caller sets it aside with the snapshot.
// Under StoreJournal the journal stays open for the next records.
func (d *Daemon) replayJournal(p *payload) error {
	j, n, torn, err := replay(d.ckpt.Dir(), p)
	if err != nil {
		return err
	}
	fields := logrus.Fields{"file": j.Path(), "records": n}
	if torn != nil {
		d.log.WithFields(fields).WithFields(logrus.Fields{"offset": torn.Offset, "record": torn.Seq}).
			Warn("journal ends with a torn record (an append cut short, never answered); dropped")
	} else if n > 0 {
		d.log.WithFields(fields).Info("journal replayed")
	}
	if d.jnl.mode == StoreSnapshot {
		return j.Close()
	}
	d.jnl.j = j
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
func (d *Daemon) setAsideJournal(entry *logrus.Entry) *logrus.Entry {
	aside, err := checkpoint.SetAsideJournal(d.ckpt.Dir(), CheckpointName)
	switch {
	case errors.Is(err, checkpoint.ErrNotFound):
		return entry
	case err != nil:
		return entry.WithField("journal_set_aside_error", err.Error())
	}
	return entry.WithField("journal_set_aside_as", aside)
}
