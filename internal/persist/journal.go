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
	"reflect"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/jsonstr"
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

// Save makes v's next state and index durable; the ledger commits them
// only when it succeeds (ledger.Commit). It lives here, with everything
// a journal append runs, so that one decision's save is read (and runs)
// in this file alone; the snapshot store's path is snapshot.go's.
func (s *Store) Save(v ledger.Save) error {
	if s.jnl.mode == Snapshot {
		return s.saveSnapshot(v)
	}
	return s.persistJournal(v)
}

// persistJournal makes st and the index of c durable through the
// journal. The record is what differs from the state on disk; finding it
// costs a lookup per container changed (per container for a whole new
// index) and nothing for the engine's maps when they are the ones on disk.
func (sto *Store) persistJournal(v ledger.Save) error {
	s := &sto.jnl
	st, c := v.Next, v.Change
	// The same engine is the same fingerprint (Store.fingerprint is kept
	// per engine, and compact wrote the snapshot under it): an append
	// does not compute one.
	if s.j == nil || s.engine != v.Engine {
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

// appendTo appends the record as json.Marshal would write the
// journalRecord it stands for (TestRecordDeltaMatchesJSON), without
// reflection or maps: every decision encodes one, under the lock.
func (r *recordDelta) appendTo(b []byte) []byte {
	h := r.head
	b = append(b, `{"shared":`...)
	b = jsonstr.Append(b, h.shared)
	b = append(b, `,"reserved":`...)
	b = jsonstr.Append(b, h.reserved)
	if h.reusablePod != "" {
		b = append(b, `,"reusable_pod":`...)
		b = jsonstr.Append(b, h.reusablePod)
	}
	if h.reusable != "" {
		b = append(b, `,"reusable":`...)
		b = jsonstr.Append(b, h.reusable)
	}
	b = appendDelta(b, `,"assign":{`, r.assign, appendAssignment)
	b = appendDelta(b, `,"affinity":{`, r.aff, appendHint)
	b = appendDelta(b, `,"containers":{`, r.ctrs, appendRecord)
	b = appendDelta(b, `,"baseline":{`, r.base, appendAssignment)
	if len(r.mem) > 0 {
		b = append(b, `,"memory":`...)
		b = append(b, r.mem...)
	}
	b = appendDelta(b, `,"pod_shared":{`, r.podPool, appendNames)
	return append(b, '}')
}

// appendDelta appends one of the record's maps (sorted keys, null for a
// key gone), or nothing when it is empty (omitempty).
func appendDelta[V any](b []byte, open string, d []keyDelta[V], enc func([]byte, V) []byte) []byte {
	if len(d) == 0 {
		return b
	}
	b = append(b, open...)
	for i, kd := range d {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, kd.key)
		b = append(b, ':')
		if kd.gone {
			b = append(b, "null"...)
		} else {
			b = enc(b, kd.v)
		}
	}
	return append(b, '}')
}

// appendAssignment is policy.AssignmentTexts(sets) as JSON.
func appendAssignment(b []byte, sets map[string]cpuset.CPUSet) []byte {
	names := make([]string, 0, len(sets))
	for name := range sets {
		names = append(names, name)
	}
	slices.Sort(names)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, name)
		b = append(b, ':')
		b = jsonstr.Append(b, sets[name].String())
	}
	return append(b, '}')
}

// appendNames is a list of container names as JSON.
func appendNames(b []byte, names []string) []byte {
	b = append(b, '[')
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, n)
	}
	return append(b, ']')
}

// appendHint is policy.HintOf(h) as JSON.
func appendHint(b []byte, h hints.Hint) []byte {
	sh := policy.HintOf(h)
	b = append(b, `{"numa":`...)
	if sh.NUMA == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, n := range sh.NUMA {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"preferred":`...)
	b = strconv.AppendBool(b, sh.Preferred)
	return append(b, '}')
}

// appendRecord is a ledger.Record as JSON, its struct tags' rules included.
func appendRecord(b []byte, r ledger.Record) []byte {
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, r.ID)
	b = append(b, `,"pod":`...)
	b = jsonstr.Append(b, r.Pod)
	b = append(b, `,"pod_name":`...)
	b = jsonstr.Append(b, r.PodName)
	b = append(b, `,"name":`...)
	b = jsonstr.Append(b, r.Name)
	if r.CgroupsPath != "" {
		b = append(b, `,"cgroups_path":`...)
		b = jsonstr.Append(b, r.CgroupsPath)
	}
	b = append(b, `,"exclusive":`...)
	b = strconv.AppendBool(b, r.Exclusive)
	if r.Mems != "" {
		b = append(b, `,"mems":`...)
		b = jsonstr.Append(b, r.Mems)
	}
	if r.Since != "" {
		b = append(b, `,"since":`...)
		b = jsonstr.Append(b, r.Since)
	}
	return append(b, '}')
}

func sameSets(a, b map[string]cpuset.CPUSet) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !v.Equals(w) {
			return false
		}
	}
	return true
}
