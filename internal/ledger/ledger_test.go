package ledger

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

type fakeStore struct {
	saves int
	err   error
}

func (s *fakeStore) Save(Save) error {
	s.saves++
	return s.err
}

type fakeObs struct {
	errs  int
	empty []bool
}

func (o *fakeObs) CheckpointError()     { o.errs++ }
func (o *fakeObs) PoolEmpty(empty bool) { o.empty = append(o.empty, empty) }

type fixture struct {
	l       *Ledger
	store   *fakeStore
	obs     *fakeObs
	changed int // Changed signals taken (changes)
	cfg     config.Config
}

// changes counts the Changed signals taken so far, taking the pending one.
func (f *fixture) changes() int {
	select {
	case <-f.l.Changed():
		f.changed++
	default:
	}
	return f.changed
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	cfg, e := policytest.Engine(t, "ht-1s-4c", "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n")
	f := &fixture{store: &fakeStore{}, obs: &fakeObs{}, cfg: cfg}
	log := logrus.New()
	log.SetOutput(io.Discard)
	f.l = New(cfg, e.Topology(), e, nil, Deps{Store: f.store, Obs: f.obs, Log: log})
	return f
}

func admit(t *testing.T, l *Tx, pod, name string, cpus int) (policy.State, Record) {
	t.Helper()
	milli := int64(cpus) * 1000
	next, dec, err := l.Engine().Add(l.State(), policy.Request{Pod: pod, Container: name, QoS: policy.Guaranteed,
		CPURequestMilli: milli, CPULimitMilli: milli})
	if err != nil {
		t.Fatal(err)
	}
	return next, Record{ID: pod + "/" + name, Pod: pod, Name: name, Exclusive: dec.Exclusive}
}

// A commit is saved first; a failed save changes nothing and is counted.
func TestCommitFailedSaveChangesNothing(t *testing.T) {
	f := newFixture(t)
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	l := &f.l.tx
	next, rec := admit(t, l, "p", "c", 2)
	f.store.err = errors.New("disk full")
	_, err := l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}, Life: Life{AwaitStart: rec.ID}})
	if err == nil || f.obs.errs != 1 {
		t.Fatalf("commit with a failing store: err %v, checkpoint errors %d", err, f.obs.errs)
	}
	if l.Len() != 0 || l.Gen() != 0 || l.AwaitingStart(rec.ID) || f.changes() != 0 {
		t.Errorf("a failed save changed the ledger: %d records, gen %d, awaiting %v, changed %d", l.Len(), l.Gen(), l.AwaitingStart(rec.ID), f.changed)
	}
	f.store.err = nil
	poolChanged, err := l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}, Life: Life{AwaitStart: rec.ID}})
	if err != nil || !poolChanged {
		t.Fatalf("commit: pool changed %v, err %v", poolChanged, err)
	}
	if v := l.View(); l.Len() != 1 || l.Gen() != 1 || !l.AwaitingStart(rec.ID) || f.changes() != 1 || v.Gen != 1 || len(v.Ctrs) != 1 {
		t.Errorf("after commit: %d records, gen %d, awaiting %v, changed %d, view's gen %d and %d records (the gauges')", l.Len(), l.Gen(), l.AwaitingStart(rec.ID), f.changed, v.Gen, len(v.Ctrs))
	}
}

// Lifecycle facts alone are not saved and do not bump the generation (the
// applier compares generations: a StartContainer must not look like a
// new state).
func TestCommitLifeOnly(t *testing.T) {
	f := newFixture(t)
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	l := &f.l.tx
	if _, err := l.Commit(Change{Life: Life{AwaitStart: "a", Stopped: map[string]PodContainer{"b": {Pod: "p", Name: "c"}},
		Sandbox: &PodSandbox{Pod: "p", ID: "s1"}}}); err != nil {
		t.Fatal(err)
	}
	if f.store.saves != 0 || l.Gen() != 0 || f.changes() != 0 {
		t.Errorf("lifecycle facts saved %d times, gen %d, changed %d", f.store.saves, l.Gen(), f.changed)
	}
	if !l.AwaitingStart("a") || !l.PodHasContainers("p", "") {
		t.Error("lifecycle facts not applied")
	}
	if sb, _ := l.Sandbox("p"); sb != "s1" {
		t.Errorf("sandbox %q", sb)
	}
	if _, err := l.Commit(Change{Life: Life{Started: "a", Removed: "b", SandboxGone: "p"}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Sandbox("p"); l.AwaitingStart("a") || l.PodHasContainers("p", "") || ok {
		t.Error("lifecycle facts not forgotten")
	}
}

// A pod's end is one change: its durable part and its lifecycle facts
// (sandbox gone, stops forgotten, a removal, a downsize dropped) are one
// save, and when it fails none of them is applied.
func TestCommitFailedSaveKeepsLifecycle(t *testing.T) {
	f := newFixture(t)
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	l := &f.l.tx
	next, rec := admit(t, l, "p", "c", 2)
	shrink := map[string]Shrink{rec.ID: {Req: policy.Request{Pod: "p", Container: "c"}}}
	if _, err := l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}, Life: Life{Shrink: shrink,
		Stopped: map[string]PodContainer{"old": {Pod: "p", Name: "init"}}, Sandbox: &PodSandbox{Pod: "p", ID: "s1"}}}); err != nil {
		t.Fatal(err)
	}
	end := l.Engine().RemovePod(l.State(), "p")
	f.store.err = errors.New("disk full")
	saves := f.store.saves
	_, err := l.Commit(Change{Next: &end, Index: IndexChange{Edit: Edit{Del: []string{rec.ID}}},
		Life: Life{SandboxGone: "p", PodStopped: "p", Removed: "old", ShrinkDone: rec.ID}})
	if err == nil || f.store.saves-saves != 1 {
		t.Fatalf("commit with a failing store: err %v, %d saves", err, f.store.saves-saves)
	}
	_, stopped := l.StoppedAs("old")
	_, shrinking := l.Shrinking(rec.ID)
	sb, _ := l.Sandbox("p")
	if _, ok := l.Record(rec.ID); !ok || !stopped || !shrinking || sb != "s1" || l.Gen() != 1 {
		t.Errorf("a failed save changed the ledger: record %v, stopped %v, shrinking %v, sandbox %q, gen %d", ok, stopped, shrinking, sb, l.Gen())
	}
	f.store.err = nil
	if _, err := l.Commit(Change{Next: &end, Index: IndexChange{Edit: Edit{Del: []string{rec.ID}}},
		Life: Life{SandboxGone: "p", PodStopped: "p", Removed: "old", ShrinkDone: rec.ID}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := l.Sandbox("p"); l.PodHasContainers("p", "") || ok || f.store.saves-saves != 2 {
		t.Errorf("the pod's end not applied in one save: has containers %v, sandbox %v, %d saves", l.PodHasContainers("p", ""), ok, f.store.saves-saves)
	}
}

// SetMode (the update mode the first container's cgroups path settled)
// changes the configuration's shared_pool_updates only: nothing is saved
// and the generation stays (no state changed).
func TestSetMode(t *testing.T) {
	f := newFixture(t)
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	l := &f.l.tx
	l.SetMode(config.SharedUpdatesInAnswer)
	if got := l.Settings().SharedPoolUpdates; got != config.SharedUpdatesInAnswer {
		t.Errorf("shared_pool_updates %q after SetMode, want %q", got, config.SharedUpdatesInAnswer)
	}
	if f.store.saves != 0 || l.Gen() != 0 || f.changes() != 0 {
		t.Errorf("SetMode saved %d times, gen %d, changed %d", f.store.saves, l.Gen(), f.changed)
	}
	if _, err := l.Commit(Change{}); err != nil || l.Settings().SharedPoolUpdates != config.SharedUpdatesInAnswer {
		t.Errorf("an empty change changed the mode: %q, %v", l.Settings().SharedPoolUpdates, err)
	}
}

// Reconfigure and Restore are commits like any other: the generation,
// the view the gauges read, the pool check and Changed follow them at once.
func TestReconfigureAndRestoreNotify(t *testing.T) {
	f := newFixture(t)
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	l := &f.l.tx
	if _, err := l.Commit(Change{Restore: &Restore{State: l.Engine().NewState()}}); err != nil {
		t.Fatal(err)
	}
	if v := l.View(); !l.Restored() || l.Gen() != 1 || f.changes() != 1 || v.Gen != 1 || f.store.saves != 0 {
		t.Errorf("restore: restored %v, gen %d, changed %d, view's gen %d (the gauges'), saves %d", l.Restored(), l.Gen(), f.changed, v.Gen, f.store.saves)
	}
	cfg, e := policytest.Engine(t, "ht-1s-4c", "cpu_manager_policy = \"static\"\nreserved_cpu_count = 0\n")
	if _, err := l.Commit(Change{Reconfigure: &Reconfigure{Cfg: cfg, Topo: e.Topology(), Engine: e, State: e.NewState()}}); err != nil {
		t.Fatal(err)
	}
	if v := l.View(); l.Engine() != e || l.Gen() != 2 || f.changes() != 2 || v.Gen != 2 || v.Engine.Reserved().Size() != 0 {
		t.Errorf("reconfigure: new engine %v, gen %d, changed %d, view's gen %d and reserved CPUs %d (the gauges')", l.Engine() == e, l.Gen(), f.changed, v.Gen, v.Engine.Reserved().Size())
	}
	// Every CPU exclusive with none reserved: the pool check reports it.
	next, rec := admit(t, l, "p", "c", 8)
	if _, err := l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}}); err != nil {
		t.Fatal(err)
	}
	if len(f.obs.empty) != 1 || !f.obs.empty[0] {
		t.Errorf("pool emptiness reports %v, want [true]", f.obs.empty)
	}
}

// Removing a container from the index forgets its lifecycle facts but
// its stop.
func TestIndexRemovalForgetsLifecycle(t *testing.T) {
	f := newFixture(t)
	f.l.mu.Lock()
	defer f.l.mu.Unlock()
	l := &f.l.tx
	next, rec := admit(t, l, "p", "c", 2)
	_, _ = l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}},
		Life: Life{AwaitStart: rec.ID, Devices: map[string][]DeviceView{rec.ID: {{Device: "d", NUMA: []int{0}}}},
			Shrink: map[string]Shrink{rec.ID: {}}}})
	_, _ = l.Commit(Change{Index: IndexChange{Edit: Edit{Del: []string{rec.ID}}}, Life: Life{Stopped: map[string]PodContainer{rec.ID: {Pod: "p", Name: "c"}}}})
	if _, ok := l.Shrinking(rec.ID); l.AwaitingStart(rec.ID) || ok || len(l.life.devices) != 0 {
		t.Error("a container left the index with its lifecycle facts")
	}
	if _, ok := l.StoppedAs(rec.ID); !ok {
		t.Error("the stop of a container leaving the index was lost")
	}
}

// A pod-level pod's shared containers run on its private pool, everyone
// else's on the node's: RightCPUs and Pools agree, and a commit that
// changes only a pod's pool reports a pool change. ht-2s-6c, core 0
// (0,12) reserved, node 0 = 0-5,12-17, core k = {k, k+12}: p's block of
// 4 is 1-2,13-14, a's slice 1,13, b's pool 2,14; c's slice takes 2, b's
// pool is then 14 while the node's pool stays 0,3-12,15-23.
func TestPodPools(t *testing.T) {
	cfg, e := policytest.Engine(t, "ht-2s-6c", "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,12\"\n"+
		"topology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\npod_level_resource_managers = true\n")
	log := logrus.New()
	log.SetOutput(io.Discard)
	led := New(cfg, e.Topology(), e, nil, Deps{Store: &fakeStore{}, Obs: &fakeObs{}, Log: log})
	led.mu.Lock()
	defer led.mu.Unlock()
	l := &led.tx
	add := func(name string, req, lim int64) (bool, Record) {
		t.Helper()
		next, dec, err := e.Add(l.State(), policy.Request{Pod: "p", Container: name, QoS: policy.Guaranteed,
			CPURequestMilli: req, CPULimitMilli: lim, PodCPURequestMilli: 4000, PodCPULimitMilli: 4000})
		if err != nil {
			t.Fatal(err)
		}
		r := Record{ID: "p/" + name, Pod: "p", Name: name, Exclusive: dec.Exclusive}
		changed, err := l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{r}}}})
		if err != nil {
			t.Fatal(err)
		}
		return changed, r
	}
	other := Record{ID: "be/x", Pod: "be", Name: "x"}
	_, a := add("a", 2000, 2000)
	_, b := add("b", 500, 1000)
	for _, tc := range []struct {
		r    Record
		want string
	}{{a, "1,13"}, {b, "2,14"}, {other, "0,3-12,15-23"}} {
		if got := l.RightCPUs(tc.r).String(); got != tc.want {
			t.Errorf("RightCPUs(%s) = %s, want %s", tc.r.Name, got, tc.want)
		}
	}
	if got, want := l.Pools().Of(b)+" "+l.Pools().Of(other), "2,14 0,3-12,15-23"; got != want {
		t.Errorf("Pools: %q, want %q", got, want)
	}
	changed, _ := add("c", 1000, 1000)
	if !changed || l.Pools().Of(b) != "14" || l.Pools().Node != "0,3-12,15-23" {
		t.Errorf("c's slice: pool changed %v, b's pool %q, node's %q; want true, 14, 0,3-12,15-23", changed, l.Pools().Of(b), l.Pools().Node)
	}
}

// Changed coalesces: commits nobody has read yet leave one signal, and a
// commit never waits on a reader; a commit that changes no state signals
// nothing.
func TestChangedCoalesces(t *testing.T) {
	f := newFixture(t)
	for _, name := range []string{"a", "b"} {
		if err := f.l.Update(func(tx *Tx) error {
			next, rec := admit(t, tx, "p", name, 1)
			_, err := tx.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}})
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	f.changes()
	if n := f.changes(); n != 1 {
		t.Errorf("two commits unread: %d signals taken, want 1", n)
	}
	if err := f.l.Update(func(tx *Tx) error {
		_, err := tx.Commit(Change{Life: Life{Started: "p/a"}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if n := f.changes(); n != 1 {
		t.Errorf("a lifecycle-only commit signalled Changed: %d signals taken, want 1", n)
	}
}

// The pod index and the shared count (byPod, shared) answer what a walk
// of the whole index answers, through edits that put, replace (a record
// turning exclusive), delete and re-put records, and after a whole new
// index and a restore.
func TestIndexQueriesMatchAWalk(t *testing.T) {
	f := newFixture(t)
	rng := rand.New(rand.NewPCG(42, 7))
	pods, names := []string{"a", "b", "c"}, []string{"x", "y"}
	check := func(step int) {
		t.Helper()
		f.l.Read(func(l *Tx) {
			for _, pod := range pods {
				for _, name := range names {
					want := false
					for _, r := range l.Records() {
						want = want || (r.Pod == pod && r.Name == name)
					}
					if got := l.Tracks(pod, name); got != want {
						t.Fatalf("step %d: Tracks(%s, %s) = %v, a walk says %v", step, pod, name, got, want)
					}
				}
				n := 0
				for id, r := range l.PodRecords(pod) {
					if r.Pod != pod || r.ID != id {
						t.Fatalf("step %d: PodRecords(%s) gave %s: %+v", step, pod, id, r)
					}
					n++
				}
				want := 0
				for _, r := range l.Records() {
					if r.Pod == pod {
						want++
					}
				}
				if n != want || l.PodHasContainers(pod, "") != (want > 0) {
					t.Fatalf("step %d: pod %s: %d records by the index, %d by a walk", step, pod, n, want)
				}
			}
			for _, skip := range []string{"", "a/x#0", "b/y#1", "c/x#2"} {
				want := 0
				for id, r := range l.Records() {
					if id != skip && !r.Exclusive {
						want++
					}
				}
				if got := l.SharedOthers(skip); got != want {
					t.Fatalf("step %d: SharedOthers(%q) = %d, a walk says %d", step, skip, got, want)
				}
			}
		})
	}
	rec := func() Record {
		pod, name := pods[rng.IntN(len(pods))], names[rng.IntN(len(names))]
		return Record{ID: fmt.Sprintf("%s/%s#%d", pod, name, rng.IntN(3)), Pod: pod, Name: name, Exclusive: rng.IntN(2) == 0}
	}
	for step := range 400 {
		var c Change
		switch k := rng.IntN(20); {
		case k == 0:
			all := map[string]Record{}
			for range rng.IntN(6) {
				r := rec()
				all[r.ID] = r
			}
			c.Index = IndexChange{All: all}
		case k == 1:
			idx := map[string]Record{}
			for range rng.IntN(6) {
				r := rec()
				idx[r.ID] = r
			}
			c.Restore = &Restore{State: f.l.View().St, Index: idx}
		default:
			var e Edit
			for range rng.IntN(3) {
				e.Del = append(e.Del, rec().ID)
			}
			for range rng.IntN(3) {
				e.Put = append(e.Put, rec())
			}
			c.Index = IndexChange{Edit: e}
		}
		if err := f.l.Update(func(l *Tx) error { _, err := l.Commit(c); return err }); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
		check(step)
	}
}
