package persist

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"maps"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// journalDaemon is a ledger on a store on dir, restored from it, as the
// daemon wires them, driven by steps rather than NRI events: the journal
// is what is tested.
type journalDaemon struct {
	led   *ledger.Ledger
	store *Store
	logs  *test.Hook
	rng   *rand.Rand
	n     int
}

func newJournalDaemon(t *testing.T, dir string, mode Mode, size int64) *journalDaemon {
	t.Helper()
	log, hook := test.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	d := &journalDaemon{logs: hook, rng: rand.New(rand.NewSource(int64(len(dir))))}
	d.led, d.store = newLedger(t, dir, "ht-2s-6c", fuzzConfig, mode, log)
	d.store.jnl.size = size
	if err := restore(d.led, d.store); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.store.Reset)
	return d
}

// newLedger is a ledger on a new store on dir, as the daemon wires them.
func newLedger(t testing.TB, dir, fixture, doc string, mode Mode, log *logrus.Logger) (*ledger.Ledger, *Store) {
	t.Helper()
	cfg, e := policytest.Engine(t, fixture, doc+fmt.Sprintf("state_dir = %q\n", dir))
	s := New(Options{Dir: dir, Mode: mode, Log: log})
	return ledger.New(cfg, e.Topology(), e, nil, ledger.Deps{Store: s, Obs: nopObserver{}, Log: log}), s
}

// restore loads the store into the ledger, as the daemon does before its
// first connection.
func restore(led *ledger.Ledger, s *Store) error {
	return led.Update(func(l *ledger.Tx) error {
		r, err := s.Load(l.Settings(), l.Topology(), l.Engine())
		if err != nil {
			return err
		}
		_, err = l.Commit(ledger.Change{Restore: &r})
		return err
	})
}

// persist saves (st, ctrs) as a whole new index without committing it
// (inside an Update).
func persist(l *ledger.Tx, s *Store, st policy.State, ctrs map[string]ledger.Record) error {
	return s.Save(ledger.Save{Cfg: l.Settings(), Topo: l.Topology(), Engine: l.Engine(), State: l.State(),
		Index: l.Index(), Next: st, Change: ledger.IndexChange{All: ctrs}})
}

// persist is persist in an Update of its own.
func (d *journalDaemon) persist(st policy.State, ctrs map[string]ledger.Record) error {
	return d.led.Update(func(l *ledger.Tx) error { return persist(l, d.store, st, ctrs) })
}

type nopObserver struct{}

func (nopObserver) CheckpointError()                                   {}
func (nopObserver) Gauges(e *policy.Engine, st policy.State, ctrs int) {}
func (nopObserver) PoolEmpty(empty bool)                               {}

// step admits a container (exclusive or shared, in a new pod or one of
// the pods there) or removes one, persists and commits, as the handlers
// do.
func (d *journalDaemon) step(t *testing.T) {
	t.Helper()
	_ = d.led.Update(func(l *ledger.Tx) error {
		d.stepIn(t, l)
		return nil
	})
}

func (d *journalDaemon) stepIn(t *testing.T, l *ledger.Tx) {
	st, recs := l.State(), l.Index()
	if ids := sortedKeys(recs); len(ids) > 0 && d.rng.Intn(3) == 0 {
		r := recs[ids[d.rng.Intn(len(ids))]]
		st = l.Engine().Remove(st, r.Pod, r.Name)
		delete(recs, r.ID)
	} else {
		d.n++
		pod := fmt.Sprintf("pod-%d", d.rng.Intn(8))
		req := policy.Request{Pod: pod, Container: fmt.Sprintf("c%d", d.n), QoS: policy.Guaranteed,
			CPURequestMilli: 1000 * int64(1+d.rng.Intn(2)), CPULimitMilli: 0}
		req.CPULimitMilli = req.CPURequestMilli
		if d.rng.Intn(3) == 0 {
			req.QoS, req.CPURequestMilli, req.CPULimitMilli = policy.Burstable, 500, 0
		}
		next, dec, err := l.Engine().Add(st, req)
		if err != nil {
			return // full: a refusal changes nothing
		}
		st = next
		id := fmt.Sprintf("id-%d", d.n)
		recs[id] = ledger.Record{ID: id, Pod: pod, PodName: "ns/" + pod, Name: req.Container, Exclusive: !dec.CPUs.IsEmpty() && req.QoS == policy.Guaranteed}
	}
	if err := persist(l, d.store, st, recs); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Commit(ledger.Change{Restore: &ledger.Restore{State: st, Index: recs}}); err != nil {
		t.Fatal(err)
	}
}

func sortedKeys(m map[string]ledger.Record) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	// Sorted for a reproducible choice.
	for i := 1; i < len(keys); i++ {
		for j := i; j > 0 && keys[j] < keys[j-1]; j-- {
			keys[j], keys[j-1] = keys[j-1], keys[j]
		}
	}
	return keys
}

// sameState fails unless b restored exactly a's committed state.
func sameState(t *testing.T, when string, a, b *journalDaemon) {
	t.Helper()
	sa, ia := a.committed()
	sb, ib := b.committed()
	if !reflect.DeepEqual(sa, sb) {
		t.Fatalf("%s: restored engine state\n %+v\nwant\n %+v", when, sb, sa)
	}
	if !maps.Equal(ia, ib) {
		t.Fatalf("%s: restored containers\n %v\nwant\n %v", when, ib, ia)
	}
}

// committed is the ledger's engine state (as a snapshot) and index, read
// in one Read.
func (d *journalDaemon) committed() (snap policy.Snapshot, index map[string]ledger.Record) {
	d.led.Read(func(l *ledger.Tx) { snap, index = l.Engine().Snapshot(l.State()), l.Index() })
	return snap, index
}

// Decisions go to the journal (the snapshot is left alone) and a restart
// finds them all, through journal files filling up, being rewound after a
// snapshot and reopened after restarts.
func TestJournalRestoresEveryDecision(t *testing.T) {
	dir := t.TempDir()
	size := int64(12 * 512) // full after a few records: many rewinds
	d := newJournalDaemon(t, dir, Journal, size)
	snap := filepath.Join(dir, CheckpointName)
	compactions := 0
	for round := 0; round < 12; round++ {
		for i := 0; i < 15; i++ {
			before, _ := os.ReadFile(snap)
			d.step(t)
			after, _ := os.ReadFile(snap)
			if !bytes.Equal(before, after) {
				compactions++
			}
		}
		d.store.Reset() // a kill: nothing written on the way out
		d2 := newJournalDaemon(t, dir, Journal, size)
		sameState(t, fmt.Sprintf("restart %d", round), d, d2)
		d2.rng, d2.n = d.rng, d.n
		d = d2
	}
	// One snapshot per restart (the first decision after it) and one per
	// full journal; most decisions were one record each.
	if steps := 12 * 15; compactions == 0 || compactions > steps/2 {
		t.Errorf("%d snapshots written in %d decisions; want some (full journal, restarts), far fewer than decisions", compactions, steps)
	}
	if _, err := os.Stat(checkpoint.JournalPath(dir, CheckpointName)); err != nil {
		t.Errorf("no journal file: %v", err)
	}
}

// Either store reads what the other wrote: switching is a restart.
func TestJournalAndSnapshotStoresReadEachOther(t *testing.T) {
	dir := t.TempDir()
	d := newJournalDaemon(t, dir, Journal, 0)
	for i := 0; i < 20; i++ {
		d.step(t)
	}
	// A snapshot a journal completes is version 2: a build from before
	// the journal refuses it (and rebuilds from the runtime) rather than
	// read it without the journal's decisions.
	if raw, _ := os.ReadFile(filepath.Join(dir, CheckpointName)); !bytes.Contains(raw, []byte(`"version": 2`)) {
		t.Errorf("journal store's snapshot is not version 2:\n%.200s", raw)
	}
	d.store.Reset()
	s := newJournalDaemon(t, dir, Snapshot, 0)
	sameState(t, "journal -> snapshot", d, s)
	s.rng, s.n = d.rng, d.n
	for i := 0; i < 10; i++ {
		s.step(t)
	}
	j := newJournalDaemon(t, dir, Journal, 0)
	sameState(t, "snapshot -> journal", s, j)
	// The snapshot-only store's snapshot names no journal: the stale
	// journal file is ignored, not replayed.
	raw, _ := os.ReadFile(filepath.Join(dir, CheckpointName))
	if bytes.Contains(raw, []byte(`"journal"`)) || !bytes.Contains(raw, []byte(`"version": 1`)) {
		t.Errorf("the snapshot store wrote a journal mark or not version 1: %.200s", raw)
	}
}

// An append cut short (a crash in the middle of the write, before the
// answer) is dropped with a warning; every decision before it is kept.
func TestJournalTornTailDropped(t *testing.T) {
	dir := t.TempDir()
	d := newJournalDaemon(t, dir, Journal, 0)
	for i := 0; i < 10; i++ {
		d.step(t)
	}
	// The next record's header and half its payload.
	hdr := make([]byte, 40)
	copy(hdr, "NCJ1")
	binary.LittleEndian.PutUint32(hdr[4:], 300)
	binary.LittleEndian.PutUint64(hdr[8:], d.store.jnl.j.Next())
	copy(hdr[20:], `{"shared":"0-3","res`)
	writeAt(t, checkpoint.JournalPath(dir, CheckpointName), d.store.jnl.j, hdr)
	d.store.Reset()
	d2 := newJournalDaemon(t, dir, Journal, 0)
	sameState(t, "torn tail", d, d2)
	if !loggedAt(d2.logs, logrus.WarnLevel, "torn record") {
		t.Error("no warning about the torn record")
	}
}

// writeAt writes b where j's next record goes.
func writeAt(t *testing.T, path string, j *checkpoint.Journal, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, j.Offset()); err != nil {
		t.Fatal(err)
	}
}

func loggedAt(h *test.Hook, level logrus.Level, text string) bool {
	for _, e := range h.AllEntries() {
		if e.Level == level && strings.Contains(e.Message, text) {
			return true
		}
	}
	return false
}

// A damaged record before the tail (an answered decision lost, later
// ones intact) is a corrupt checkpoint: snapshot and journal are set
// aside and the state is rebuilt from the runtime (here: empty).
func TestJournalDamagedRecordSetAside(t *testing.T) {
	dir := t.TempDir()
	d := newJournalDaemon(t, dir, Journal, 0)
	for i := 0; i < 10; i++ {
		d.step(t)
	}
	path := checkpoint.JournalPath(dir, CheckpointName)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	// The first record after the snapshot taken at the first decision.
	first := bytes.Index(raw[512:], []byte("NCJ1")) + 512
	raw[first+30] ^= 0x20
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	d.store.Reset()
	d2 := newJournalDaemon(t, dir, Journal, 0)
	if v := d2.led.View(); len(v.Ctrs) != 0 || len(v.St.Alloc.Assignments) != 0 {
		t.Errorf("state restored from a damaged journal: %d containers", len(v.Ctrs))
	}
	for _, f := range []string{CheckpointName + ".corrupt-1", CheckpointName + ".journal.corrupt-1"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("%s not set aside: %v", f, err)
		}
	}
	if !loggedAt(d2.logs, logrus.ErrorLevel, "corrupt") {
		t.Error("no error logged")
	}
	// A snapshot naming a journal that is gone is the same.
	d2.step(t)
	d2.step(t)
	d2.store.Reset()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	d3 := newJournalDaemon(t, dir, Journal, 0)
	if n := len(d3.led.View().Ctrs); n != 0 || !loggedAt(d3.logs, logrus.ErrorLevel, "corrupt") {
		t.Errorf("missing journal: %d containers restored, error logged %v", n, loggedAt(d3.logs, logrus.ErrorLevel, "corrupt"))
	}
}

// After a failed append the journal is replaced by a new one; the
// records the old one held reach a snapshot first, so that a crash in
// between (here: the new journal cannot be created) loses no committed
// decision.
func TestJournalReplacedAfterFailedAppend(t *testing.T) {
	dir := t.TempDir()
	d := newJournalDaemon(t, dir, Journal, 0)
	for i := 0; i < 12; i++ {
		d.step(t)
	}
	var id string
	_ = d.led.Update(func(*ledger.Tx) error {
		id = d.store.jnl.j.ID()
		return d.store.jnl.j.Close() // the next append fails
	})
	committed := func() *journalDaemon {
		c := *d
		return &c
	}()
	path := checkpoint.JournalPath(dir, CheckpointName)
	_ = d.led.Update(func(l *ledger.Tx) error {
		next, _, err := l.Engine().Add(l.State(), policy.Request{Pod: "late", Container: "c", QoS: policy.Guaranteed, CPURequestMilli: 1000, CPULimitMilli: 1000})
		if err != nil {
			t.Fatal(err)
		}
		recs := l.Index()
		if err := persist(l, d.store, next, recs); err == nil {
			t.Error("persist after a failed append's journal was closed succeeded")
		}
		// The new journal cannot be created: a symbolic link in its place.
		if err := os.Rename(path, path+".old"); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(path+".old", path); err != nil {
			t.Fatal(err)
		}
		if err := persist(l, d.store, next, recs); err == nil || !strings.Contains(err.Error(), "symbolic link") {
			t.Errorf("persist with a symlink for the journal = %v", err)
		}
		return nil
	})
	d.store.Reset()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	d2 := newJournalDaemon(t, dir, Journal, 0)
	sameState(t, "after the failed replacement", committed, d2)
	d2.rng, d2.n = d.rng, d.n
	d2.step(t)
	d2.step(t)
	if d2.store.jnl.j.ID() == id {
		t.Error("the journal was not replaced")
	}
	d2.store.Reset()
	d3 := newJournalDaemon(t, dir, Journal, 0)
	sameState(t, "new journal", d2, d3)
}

// BenchmarkPersist is one decision made durable with 500 containers (one
// in five exclusive) in the state, on tmpfs when there is one: the
// store's own work without the disk's flush.
func BenchmarkPersist(b *testing.B) {
	for _, store := range []Mode{Journal, Snapshot} {
		b.Run("store="+string(store), func(b *testing.B) {
			dir, err := os.MkdirTemp("/dev/shm", "persist-")
			if err != nil {
				dir = b.TempDir()
			}
			defer os.RemoveAll(dir)
			led, sto := newLedger(b, dir, "epyc-9754", "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\n", store, quietLogger())
			defer sto.Reset()
			d := &journalDaemon{led: led, store: sto}
			var e *policy.Engine
			d.led.Read(func(l *ledger.Tx) { e = l.Engine() })
			st, recs := e.NewState(), map[string]ledger.Record{}
			add := func(st policy.State, i int, excl bool) (policy.State, ledger.Record) {
				req := policy.Request{Pod: fmt.Sprintf("pod-%d", i), Container: "c", QoS: policy.Burstable, CPURequestMilli: 100}
				if excl {
					req.QoS, req.CPURequestMilli, req.CPULimitMilli = policy.Guaranteed, 2000, 2000
				}
				next, _, err := e.Add(st, req)
				if err != nil {
					b.Fatal(err)
				}
				id := fmt.Sprintf("%064d", i)
				return next, ledger.Record{ID: id, Pod: req.Pod, PodName: "default/" + req.Pod, Name: "c", CgroupsPath: "/kubepods/" + req.Pod + "/" + id, Exclusive: excl}
			}
			for i := 0; i < 500; i++ {
				var r ledger.Record
				st, r = add(st, i, i%5 == 0)
				recs[r.ID] = r
			}
			if err := d.persist(st, recs); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				// Alternately add and remove a 2-CPU container, as the
				// round-trip benchmark does.
				next, r := add(st, 1000, true)
				with := ledger.CloneRecords(recs)
				with[r.ID] = r
				if err := d.persist(next, with); err != nil {
					b.Fatal(err)
				}
				if err := d.persist(st, recs); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestRecordDeltaMatchesJSON: through random admissions, removals and
// record changes, under the container and the pod scope (pod affinities),
// a journal record written by recordDelta.appendTo is the bytes
// encoding/json writes for the journalRecord it stands for, so replay
// (json.Unmarshal) reads it as before, names JSON must escape included.
func TestRecordDeltaMatchesJSON(t *testing.T) {
	for _, doc := range []string{
		fuzzConfig,
		"cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"restricted\"\ntopology_manager_scope = \"pod\"\n",
		memoryStaticConfig,
		podLevelTOML,
	} {
		e := policytest.EngineOf(t, "ht-2s-6c", doc)
		rng := rand.New(rand.NewSource(11))
		names := []string{"app", "side<car>", "init&1", "quote\"d", "ünï", "bad\xffutf8", "tab\there", "back\\slash"}
		var s journalStore
		st, ctrs := e.NewState(), map[string]ledger.Record{}
		var seen [5]int                   // deltas of each map
		s.head, s.pool = s.headFor(e, st) // before s.engine is set: every text printed
		s.engine, s.assign, s.aff, s.base, s.ctrs = e, st.Alloc.Assignments, st.PodAffinity, st.Baseline, ledger.CloneRecords(ctrs)
		s.podPool = st.PodShared
		s.mem, s.memText = st.Memory, e.MemorySnapshot(st)
		memChanges := 0
		for step := 0; step < 800; step++ {
			next := ledger.CloneRecords(ctrs)
			for range 1 + rng.Intn(3) {
				pod := fmt.Sprintf("uid-%d", rng.Intn(6))
				name := names[rng.Intn(len(names))]
				st = randomEvent(rng, e, st, next, pod, name, func(id string) string { return []string{"", "/kubepods/" + id}[rng.Intn(2)] })
			}
			ctrs = next

			head, pool := s.deltaFor(e, st, ledger.IndexChange{All: ctrs})
			r := &s.delta
			got := string(r.appendTo(nil))
			seen[0] += len(r.assign)
			seen[1] += len(r.aff)
			seen[2] += len(r.ctrs)
			seen[3] += len(r.base)
			seen[4] += len(r.podPool)

			snap := e.Snapshot(st)
			want := journalRecord{Shared: snap.Shared, Reserved: snap.Reserved, ReusablePod: snap.ReusablePod, Reusable: snap.Reusable}
			for _, kd := range r.assign {
				want.Assign = putKey(want.Assign, kd.key, (*map[string]string)(nil))
				if !kd.gone {
					texts := snap.Assignments[kd.key]
					want.Assign[kd.key] = &texts
				}
			}
			for _, kd := range r.aff {
				want.Affinity = putKey(want.Affinity, kd.key, (*policy.SnapshotHint)(nil))
				if !kd.gone {
					sh := snap.PodAffinity[kd.key]
					want.Affinity[kd.key] = &sh
				}
			}
			for _, kd := range r.ctrs {
				want.Ctrs = putKey(want.Ctrs, kd.key, (*ledger.Record)(nil))
				if !kd.gone {
					c := ctrs[kd.key]
					want.Ctrs[kd.key] = &c
				}
			}
			for _, kd := range r.base {
				want.Baseline = putKey(want.Baseline, kd.key, (*map[string]string)(nil))
				if !kd.gone {
					texts := snap.Baseline[kd.key]
					want.Baseline[kd.key] = &texts
				}
			}
			for _, kd := range r.podPool {
				want.PodShared = putKey(want.PodShared, kd.key, (*[]string)(nil))
				if !kd.gone {
					names := snap.PodShared[kd.key]
					want.PodShared[kd.key] = &names
				}
			}
			if !bytes.Equal(snap.Memory, s.memText) {
				want.Memory = snap.Memory
				memChanges++
			}
			wantJSON, err := json.Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(wantJSON) {
				t.Fatalf("step %d: appendTo wrote\n%s\nencoding/json wrote\n%s", step, got, wantJSON)
			}
			// Applied to the state on disk, the record gives st (both
			// through JSON, which replaces invalid UTF-8).
			p := roundTrip(t, payload{Engine: e.Snapshot(policy.State{Alloc: allocator.State{Assignments: s.assign}, PodAffinity: s.aff, Baseline: s.base, Memory: s.mem,
				PodShared: s.podPool}),
				Containers: s.ctrs})
			var dec journalRecord
			if err := json.Unmarshal([]byte(got), &dec); err != nil {
				t.Fatal(err)
			}
			applyRecord(&p, &dec)
			w := roundTrip(t, payload{Engine: snap, Containers: ctrs})
			if len(p.Engine.Assignments) == 0 {
				p.Engine.Assignments = nil
			}
			if len(w.Engine.Assignments) == 0 {
				w.Engine.Assignments = nil
			}
			if len(p.Engine.Baseline) == 0 {
				p.Engine.Baseline = nil // a record removing the last baseline leaves an empty map
			}
			if len(p.Engine.PodShared) == 0 {
				p.Engine.PodShared = nil // likewise the last pod-level pod's pool
			}
			if !reflect.DeepEqual(p.Engine, w.Engine) || !reflect.DeepEqual(p.Containers, w.Containers) {
				t.Fatalf("step %d: the record applied gives\n%+v %v\nwant\n%+v %v", step, p.Engine, p.Containers, w.Engine, w.Containers)
			}
			s.head, s.pool, s.reusable = head, pool, st.Alloc.Reusable
			s.assign, s.aff, s.base, s.ctrs = st.Alloc.Assignments, st.PodAffinity, st.Baseline, ledger.CloneRecords(ctrs)
			s.podPool = st.PodShared
			s.mem, s.memText = st.Memory, snap.Memory
		}
		if doc == memoryStaticConfig && memChanges == 0 {
			t.Errorf("no record changed the memory manager's state: the test missed it")
		}
		if doc == podLevelTOML && seen[4] == 0 {
			t.Errorf("no record changed the pod pools' containers: the test missed them")
		}
		// A slice is not resized (RulePodLevelSlice): no baselines there.
		if seen[0] == 0 || seen[2] == 0 || (seen[3] == 0 && doc != podLevelTOML) || (strings.Contains(doc, "pod") && seen[1] == 0) {
			t.Errorf("%s: records with %d assignments, %d affinities, %d containers, %d baselines: the test missed a kind", doc, seen[0], seen[1], seen[2], seen[3])
		}
	}
}

// TestRecordFieldsKnown guards the hand-written field lists of
// recordDelta.appendTo: a new field of a journal record or a container
// record must be written there too.
func TestRecordFieldsKnown(t *testing.T) {
	for typ, want := range map[reflect.Type]string{
		reflect.TypeOf(journalRecord{}):       "shared reserved reusable_pod,omitempty reusable,omitempty assign,omitempty affinity,omitempty containers,omitempty baseline,omitempty memory,omitempty pod_shared,omitempty",
		reflect.TypeOf(ledger.Record{}):       "id pod pod_name name cgroups_path,omitempty exclusive mems,omitempty since,omitempty",
		reflect.TypeOf(policy.SnapshotHint{}): "numa preferred",
	} {
		var tags []string
		for i := 0; i < typ.NumField(); i++ {
			tags = append(tags, typ.Field(i).Tag.Get("json"))
		}
		if got := strings.Join(tags, " "); got != want {
			t.Errorf("%s has JSON fields %q; recordDelta.appendTo writes %q: update it", typ, got, want)
		}
	}
}

func putKey[V any](m map[string]*V, k string, v *V) map[string]*V {
	if m == nil {
		m = map[string]*V{}
	}
	m[k] = v
	return m
}
