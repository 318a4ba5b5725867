package persist

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
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// Mode is how the state is made durable before the daemon answers.
type Mode string

const (
	// Journal appends one record per decision (one fdatasync) and
	// rewrites the snapshot now and then. The default.
	Journal Mode = "journal"
	// Snapshot rewrites the whole snapshot on every decision (write,
	// fsync, rename, fsync of the directory), as before the journal.
	Snapshot Mode = "snapshot"
)

// journalMark is the snapshot's reference to its journal.
type journalMark struct {
	ID  string `json:"id"`
	Seq uint64 `json:"seq"` // the last record the snapshot holds
}

// journalRecord is one record's payload as replay decodes it;
// recordDelta.appendTo writes the same JSON without reflection.
type journalRecord struct {
	Shared      string                          `json:"shared"`
	Reserved    string                          `json:"reserved"`
	ReusablePod string                          `json:"reusable_pod,omitempty"`
	Reusable    string                          `json:"reusable,omitempty"`
	Assign      map[string]*map[string]string   `json:"assign,omitempty"`
	Affinity    map[string]*policy.SnapshotHint `json:"affinity,omitempty"`
	Ctrs        map[string]*ledger.Record       `json:"containers,omitempty"`
	// Baseline: the pods whose resize baselines changed (policy.State.Baseline).
	Baseline map[string]*map[string]string `json:"baseline,omitempty"`
	// Memory: the memory manager's whole state when it changed
	// (policy.Snapshot.Memory; memory_manager_policy Static only).
	Memory json.RawMessage `json:"memory,omitempty"`
	// PodShared: the pod-level pods whose pool containers changed
	// (policy.State.PodShared, pod_level_resource_managers).
	PodShared map[string]*[]string `json:"pod_shared,omitempty"`
}

type journalHead struct{ shared, reserved, reusablePod, reusable string }

// journalStore is the journal's side of the store, under the ledger's lock.
type journalStore struct {
	mode Mode
	size int64 // of a new journal file; tests shrink it
	j    *checkpoint.Journal
	onDisk
	delta recordDelta // scratch
	buf   []byte      // scratch: the encoded record
}

// onDisk is the state on disk (snapshot and records), valid when engine
// is non-nil. assign and aff are the engine's own maps, which it never
// changes in place (a change is a new map): the same map is the same
// content. ctrs is the store's copy.
type onDisk struct {
	engine   *policy.Engine
	fp       string
	head     journalHead
	pool     cpumask.Mask  // head.shared's set
	reusable cpuset.CPUSet // head.reusable's set
	assign   map[string]map[string]cpuset.CPUSet
	aff      map[string]hints.Hint
	base     map[string]map[string]cpuset.CPUSet
	podPool  map[string][]string // policy.State.PodShared
	ctrs     map[string]ledger.Record
	// mem is the memory manager's state on disk, memText its encoding
	// (see memDelta).
	mem     memorymanager.State
	memText []byte
}

// reset forgets the state on disk and closes the journal (restore reads
// them again).
func (s *journalStore) reset() {
	if s.j != nil {
		_ = s.j.Close()
	}
	s.j, s.engine = nil, nil
}

// headFor is st's head, reusing the texts of the head on disk for sets
// that did not change: a decision that leaves a set alone does not pay
// for printing it again.
func (s *journalStore) headFor(e *policy.Engine, st policy.State) (journalHead, cpumask.Mask) {
	pool := e.SharedPool(st)
	h := s.head
	if s.engine != e || !pool.Equals(s.pool) {
		h.shared = pool.String()
	}
	if s.engine != e {
		h.reserved = e.Reserved().String()
	}
	// SnapshotExceptAssignments' rule for the reusable CPUs.
	h.reusablePod, h.reusable = "", ""
	if st.Alloc.ReusablePod != "" && st.Alloc.Reusable.Size() > 0 {
		h.reusablePod = st.Alloc.ReusablePod
		if s.engine == e && s.head.reusable != "" && st.Alloc.Reusable.Equals(s.reusable) {
			h.reusable = s.head.reusable
		} else {
			h.reusable = st.Alloc.Reusable.String()
		}
	}
	return h, pool
}

// persistJournal makes st and the index of c durable through the
// journal. The record is what differs from the state on disk; finding it
// costs a lookup per container changed (per container for a whole new
// index) and nothing for the engine's maps when they are the ones on disk.
func (sto *Store) persistJournal(v ledger.Save) error {
	s := &sto.jnl
	st, c := v.Next, v.Change
	fp := sto.fingerprint(v.Cfg, v.Engine, v.Topo)
	if s.j == nil || s.engine != v.Engine || s.fp != fp {
		return sto.compact(v, c.Index(v.Index))
	}
	head, pool := s.deltaFor(v.Engine, st, c)
	r := &s.delta
	if head == s.head && r.empty() {
		return nil // the disk holds this state already
	}
	s.buf = r.appendTo(s.buf[:0])
	switch err := s.j.Append(s.buf); {
	case errors.Is(err, checkpoint.ErrJournalFull):
		return sto.compact(v, c.Index(v.Index))
	case err != nil:
		// What reached the disk is unknown: a new journal next time.
		s.reset()
		return err
	}
	s.head, s.pool, s.reusable = head, pool, st.Alloc.Reusable
	s.assign, s.aff, s.base, s.podPool = st.Alloc.Assignments, st.PodAffinity, st.Baseline, st.PodShared
	s.mem = st.Memory
	if r.mem != nil {
		s.memText = r.mem
	}
	for _, c := range r.ctrs {
		if c.gone {
			delete(s.ctrs, c.key)
		} else {
			s.ctrs[c.key] = c.v
		}
	}
	return nil
}

// deltaFor fills s.delta with what st and c's index change from the state
// on disk and returns the record's head and the shared pool it was
// printed from. The engine's maps are compared only when they are not the
// ones on disk; of the index, an edit's records only (the rest is on disk
// as committed).
func (s *journalStore) deltaFor(e *policy.Engine, st policy.State, c ledger.IndexChange) (journalHead, cpumask.Mask) {
	head, pool := s.headFor(e, st)
	r := &s.delta
	r.reset(head)
	if !sameMap(st.Alloc.Assignments, s.assign) {
		diffAssign(&r.assign, st.Alloc.Assignments, s.assign)
	}
	if !sameMap(st.PodAffinity, s.aff) {
		diffEqual(&r.aff, st.PodAffinity, s.aff)
	}
	if !sameMap(st.Baseline, s.base) {
		diffAssign(&r.base, st.Baseline, s.base)
	}
	if !sameMap(st.PodShared, s.podPool) {
		diffNames(&r.podPool, st.PodShared, s.podPool)
	}
	r.mem = s.memDelta(e, st)
	if c.All != nil {
		diffEqual(&r.ctrs, c.All, s.ctrs)
	} else {
		diffEdit(&r.ctrs, c.Edit, s.ctrs)
	}
	return head, pool
}

// memDelta is st's memory manager state encoded when it differs from the
// one on disk, else nil. Its functions return the State they were given
// when nothing changes and new maps otherwise: the same maps are the same
// content, so an event that leaves memory alone encodes nothing.
func (s *journalStore) memDelta(e *policy.Engine, st policy.State) []byte {
	m := st.Memory
	if !e.MemoryStatic() || (sameMap(m.Nodes, s.mem.Nodes) && sameMap(m.Assignments, s.mem.Assignments) && sameMap(m.Reusable, s.mem.Reusable)) {
		return nil
	}
	text := e.MemorySnapshot(st)
	if bytes.Equal(text, s.memText) {
		return nil
	}
	return text
}

// diffEdit appends to out the records of e that differ from disk's.
func diffEdit(out *[]keyDelta[ledger.Record], e ledger.Edit, disk map[string]ledger.Record) {
	for _, id := range e.Del {
		if _, ok := disk[id]; ok && !slices.ContainsFunc(e.Put, func(r ledger.Record) bool { return r.ID == id }) {
			*out = append(*out, keyDelta[ledger.Record]{key: id, gone: true})
		}
	}
	for _, r := range e.Put {
		if old, ok := disk[r.ID]; !ok || old != r {
			*out = append(*out, keyDelta[ledger.Record]{key: r.ID, v: r})
		}
	}
	sortDelta(*out)
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// keyDelta is one key of a record: its new value, or gone.
type keyDelta[V any] struct {
	key  string
	v    V
	gone bool
}

// recordDelta is a record before encoding: the head and, per map, the
// keys that changed, sorted (encoding/json's order for map keys).
type recordDelta struct {
	head    journalHead
	assign  []keyDelta[map[string]cpuset.CPUSet]
	aff     []keyDelta[hints.Hint]
	ctrs    []keyDelta[ledger.Record]
	base    []keyDelta[map[string]cpuset.CPUSet]
	podPool []keyDelta[[]string]
	mem     []byte // the memory manager's state, nil when unchanged
}

func (r *recordDelta) reset(h journalHead) {
	clear(r.assign) // drop references to old maps
	clear(r.base)
	clear(r.podPool)
	r.head, r.assign, r.aff, r.ctrs, r.base, r.podPool, r.mem = h, r.assign[:0], r.aff[:0], r.ctrs[:0], r.base[:0], r.podPool[:0], nil
}

func (r *recordDelta) empty() bool {
	return len(r.assign)+len(r.aff)+len(r.ctrs)+len(r.base)+len(r.podPool)+len(r.mem) == 0
}

// diffNames is diffAssign for the pod-level pods' pool containers.
func diffNames(out *[]keyDelta[[]string], cur, disk map[string][]string) {
	for k, v := range cur {
		if old, ok := disk[k]; !ok || !slices.Equal(old, v) {
			*out = append(*out, keyDelta[[]string]{key: k, v: v})
		}
	}
	for k := range disk {
		if _, ok := cur[k]; !ok {
			*out = append(*out, keyDelta[[]string]{key: k, gone: true})
		}
	}
	sortDelta(*out)
}

// diffAssign appends to out the pods whose assignments differ between cur
// and disk.
func diffAssign(out *[]keyDelta[map[string]cpuset.CPUSet], cur, disk map[string]map[string]cpuset.CPUSet) {
	met := 0
	for k, v := range cur {
		old, ok := disk[k]
		if ok {
			met++
			// The allocator copies a pod's map to change it: the same
			// map is the same assignment, without comparing its sets.
			if sameMap(old, v) || sameSets(old, v) {
				continue
			}
		}
		*out = append(*out, keyDelta[map[string]cpuset.CPUSet]{key: k, v: v})
	}
	if met < len(disk) {
		for k := range disk {
			if _, ok := cur[k]; !ok {
				*out = append(*out, keyDelta[map[string]cpuset.CPUSet]{key: k, gone: true})
			}
		}
	}
	sortDelta(*out)
}

// diffEqual is diffAssign for values compared with ==: the pod
// affinities and the container index (with 500 containers the latter is
// most of the store's work, hence == rather than a comparison function).
func diffEqual[V comparable](out *[]keyDelta[V], cur, disk map[string]V) {
	met := 0
	for k, v := range cur {
		old, ok := disk[k]
		if ok {
			met++
			if old == v {
				continue
			}
		}
		*out = append(*out, keyDelta[V]{key: k, v: v})
	}
	if met < len(disk) {
		for k := range disk {
			if _, ok := cur[k]; !ok {
				*out = append(*out, keyDelta[V]{key: k, gone: true})
			}
		}
	}
	sortDelta(*out)
}

func sortDelta[V any](d []keyDelta[V]) {
	if len(d) > 1 {
		slices.SortFunc(d, func(a, b keyDelta[V]) int { return strings.Compare(a.key, b.key) })
	}
}

// compact writes the snapshot of (st, ctrs), naming the journal and its
// last record, and starts the journal again at its first slot. A journal
// file is created first when there is none to reuse.
func (sto *Store) compact(v ledger.Save, ctrs map[string]ledger.Record) error {
	s := &sto.jnl
	st := v.Next
	s.engine = nil // until the snapshot is known to be on disk
	fp := sto.fingerprint(v.Cfg, v.Engine, v.Topo)
	if s.j == nil {
		// A journal file there may hold records the snapshot on disk
		// needs (after a failed append): the committed state goes into a
		// snapshot of its own before the new journal replaces that file.
		if _, err := os.Lstat(checkpoint.JournalPath(sto.ckpt.Dir(), CheckpointName)); err == nil {
			data, err := sto.enc.encode(fp, v.Engine, v.State, v.Index)
			if err == nil {
				err = sto.ckpt.SaveCompact(data)
			}
			if err != nil {
				return err
			}
		}
		size := s.size
		if size == 0 {
			size = checkpoint.DefaultJournalSize
		}
		j, err := checkpoint.CreateJournal(sto.ckpt.Dir(), CheckpointName, size, 1)
		if err != nil {
			return err
		}
		s.j = j
	}
	data, err := sto.enc.encode(fp, v.Engine, st, ctrs)
	if err != nil {
		return err
	}
	mark, err := json.Marshal(journalMark{ID: s.j.ID(), Seq: s.j.Next() - 1})
	if err != nil {
		return err
	}
	// data ends with the payload's closing brace; the mark goes before it.
	data = append(append(append(data[:len(data)-1], `,"journal":`...), mark...), '}')
	sto.enc.buf = data
	if err := sto.ckpt.SaveCompactVersion(data, checkpoint.VersionJournal); err != nil {
		return err
	}
	s.j.Rewind()
	s.head, s.pool = s.headFor(v.Engine, st) // s.engine is nil: every text printed
	s.engine, s.fp, s.reusable = v.Engine, fp, st.Alloc.Reusable
	s.assign, s.aff, s.base, s.podPool = st.Alloc.Assignments, st.PodAffinity, st.Baseline, st.PodShared
	s.mem, s.memText = st.Memory, v.Engine.MemorySnapshot(st)
	s.ctrs = ledger.CloneRecords(ctrs)
	return nil
}

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
