package daemon

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/internal/persist"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// overlapWatch records, at every cgroup write of the runtime, any CPU
// that a shared-pool container's cgroup and the resized container's
// cgroup would both hold: at the resized container's own write, its new
// value against every shared cgroup file; at a shared container's write,
// the new value against the resized container's file.
type overlapWatch struct {
	t       *testing.T
	rt      *fakeRuntime
	mu      sync.Mutex
	shared  []*api.Container
	excl    *api.Container
	overlap []string
}

func read(t *testing.T, path string) cpuset.CPUSet {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		return cpuset.New() // no cgroup yet
	}
	set, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		t.Errorf("cgroup file %s holds %q: %v", path, b, err)
	}
	return set
}

func (w *overlapWatch) before(c *api.Container, file, value string) {
	if file != "cpuset.cpus" {
		return
	}
	v, err := cpuset.Parse(value)
	if err != nil {
		w.t.Errorf("runtime writes %q into %s", value, c.Id)
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if c.Id == w.excl.Id {
		for _, s := range w.shared {
			if o := v.Intersection(read(w.t, w.rt.cgroupFile(s))); !o.IsEmpty() {
				w.overlap = append(w.overlap, "resized container given "+value+" while "+s.Name+" holds "+o.String())
			}
		}
		return
	}
	for _, s := range w.shared {
		if s.Id == c.Id {
			if o := v.Intersection(read(w.t, w.rt.cgroupFile(w.excl))); !o.IsEmpty() {
				w.overlap = append(w.overlap, s.Name+" given "+value+" while the resized container holds "+o.String())
			}
		}
	}
}

// check fails on any overlap seen so far and on one in the files now.
func (w *overlapWatch) check(when string) {
	w.t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	ex := read(w.t, w.rt.cgroupFile(w.excl))
	for _, s := range w.shared {
		if o := ex.Intersection(read(w.t, w.rt.cgroupFile(s))); !o.IsEmpty() {
			w.overlap = append(w.overlap, when+": "+s.Name+" and the resized container both hold "+o.String())
		}
	}
	if len(w.overlap) > 0 {
		w.t.Fatalf("%s: a shared-pool container shared CPUs with the resized one: %s", when, strings.Join(w.overlap, "; "))
	}
}

// TestResizeOrderAgainstSharedPool: on ht-1s-4c (core k = {k, k+4}, core
// 0 reserved) a 1-CPU container grows to 2 and 4 CPUs and back to 1, with
// two shared-pool containers running, under both shared_pool_updates
// modes. At no write of any cgroup does a shared-pool container hold a CPU
// the resized container holds: on an upsize the pool shrinks first, on a
// downsize it grows only once the container left the CPUs
// (PostUpdateContainer).
func TestResizeOrderAgainstSharedPool(t *testing.T) {
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) {
			topo := loadFixture(t, "ht-1s-4c")
			rt := startRuntime(t)
			stateDir := t.TempDir()
			r := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0+"shared_pool_updates = \""+mode+"\"\n"), topo)
			bu := rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"})
			s1, _, err := rt.create(bu, "s1", 500, 1000)
			if err != nil {
				t.Fatal(err)
			}
			s2, _, err := rt.create(bu, "s2", 200, 0)
			if err != nil {
				t.Fatal(err)
			}
			g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
			c, _, err := rt.create(g, "c", 1000, 1000)
			if err != nil {
				t.Fatal(err)
			}
			settle(t, r.d)
			w := &overlapWatch{t: t, rt: rt, excl: c, shared: []*api.Container{s1, s2}}
			rt.SetBeforeWrite(w.before)
			w.check("after admission")

			// One CPU: core 1's first thread, 1. Growing to 2 adds its
			// sibling 5 (the most used core first); to 4, core 2.
			// Back to 1: the baseline, CPU 1.
			for _, step := range []struct {
				milli      int64
				cpus, pool string
			}{
				{1000, "1", "0,2-7"},
				{2000, "1,5", "0,2-4,6-7"},
				{4000, "1-2,5-6", "0,3-4,7"},
				{2000, "1,5", "0,2-4,6-7"},
				{1000, "1", "0,2-7"},
			} {
				if err := rt.resize(c, step.milli, step.milli); err != nil {
					t.Fatalf("resize to %dm: %v", step.milli, err)
				}
				w.check("right after the resize to " + step.cpus)
				settle(t, r.d)
				w.check("once the worker settled")
				if got := read(t, rt.cgroupFile(c)).String(); got != step.cpus {
					t.Fatalf("resized container's cgroup %s; want %s", got, step.cpus)
				}
				for _, s := range []*api.Container{s1, s2} {
					if got := read(t, rt.cgroupFile(s)).String(); got != step.pool {
						t.Fatalf("%s's cgroup %s after the resize to %s; want the pool %s", s.Name, got, step.cpus, step.pool)
					}
				}
			}
			rt.SetBeforeWrite(nil)
		})
	}
}

// TestResizeRefusalsKeepCPUs: below the baseline, exclusive to shared and
// shared to exclusive are refused with InPlaceResizeRejected naming the
// rule; nothing moves and the refusal is counted.
func TestResizeRefusalsKeepCPUs(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo)
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		milli int64
		rule  string
	}{
		{1000, "below-baseline"},
		{1500, "exclusive-to-shared"},
	} {
		err := rt.resize(c2, tc.milli, tc.milli)
		if err == nil || !strings.Contains(err.Error(), "InPlaceResizeRejected: ") || !strings.Contains(err.Error(), tc.rule) {
			t.Errorf("resize 2 CPUs -> %dm = %v; want InPlaceResizeRejected naming %s", tc.milli, err, tc.rule)
		}
	}
	g2 := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
	half, _, err := rt.create(g2, "half", 500, 500)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.resize(half, 1000, 1000); err == nil || !strings.Contains(err.Error(), "shared-to-exclusive") {
		t.Errorf("resize 500m -> 1 CPU = %v; want InPlaceResizeRejected naming shared-to-exclusive", err)
	}
	bu := rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"})
	b, _, err := rt.create(bu, "b", 500, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.resize(b, 700, 2000); err != nil {
		t.Errorf("resize of a burstable container = %v", err)
	}
	if got := rt.cpus(c2); got != "1,5" {
		t.Errorf("c2 cpus changed to %q", got)
	}
	if got := gatherByLabels(t, r.d, "nri_cpualign_admission_errors_total"); got["InPlaceResizeRejected"] != 3 {
		t.Errorf("refusals %v; want 3 InPlaceResizeRejected", got)
	}
}

// TestResizeBaselineSurvivesRestart: the baseline is in the checkpoint: a
// daemon started again on the same state refuses a downsize below the
// CPUs the container was admitted with, not below its current ones.
func TestResizeBaselineSurvivesRestart(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, reserveCore0)
	r := startDaemon(t, rt, cfg, topo)
	g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
	c, _, err := rt.create(g, "c", 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.resize(c, 3000, 3000); err != nil {
		t.Fatal(err)
	}
	// 1 -> 3: CPU 1, then core 2 whole (2,6). /state and the metrics show
	// the baseline beside the CPUs.
	var view observe.ContainerView
	for _, cv := range r.d.State().Containers {
		if cv.ID == c.Id {
			view = cv
		}
	}
	if view.CPUs != "1-2,6" || view.Baseline != "1" {
		t.Errorf("/state cpus %q baseline %q; want 1-2,6 and 1", view.CPUs, view.Baseline)
	}
	if got := gatherByLabels(t, r.d, "nri_cpualign_resized_cpus"); got[""] != 2 {
		t.Errorf("resized_cpus %v; want 2", got)
	}
	if got := gatherByLabels(t, r.d, "nri_cpualign_resizes_total"); got["upsize"] != 1 {
		t.Errorf("resizes_total %v; want upsize 1", got)
	}
	r.stop(t)
	r = startDaemon(t, rt, cfg, topo)
	if err := rt.resize(c, 2000, 2000); err != nil {
		t.Fatalf("downsize 3 -> 2 after a restart: %v", err)
	}
	if err := rt.resize(c, 1000, 1000); err != nil {
		t.Fatalf("downsize 2 -> 1 (the baseline) after a restart: %v", err)
	}
	if got := rt.cpus(c); got != "1" {
		t.Errorf("cpus %q; want the baseline 1", got)
	}
	snap, err := persist.ReadState(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(snap.Baseline) != 0 || snap.Assignments[request.PodKey(g)]["c"] != "1" {
		t.Errorf("state assignments %v baseline %v; want c on 1 and no baseline", snap.Assignments, snap.Baseline)
	}
	if got := gatherByLabels(t, r.d, "nri_cpualign_resizes_total"); got["downsize"] != 2 {
		t.Errorf("resizes_total %v; want downsize 2", got)
	}
}

// TestResizeBaselineOfImportedKubeletState: a container adopted from the
// kubelet's cpu_manager_state has the imported CPUs as its baseline: a
// downsize below them is refused, an upsize keeps them.
func TestResizeBaselineOfImportedKubeletState(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	kubelet := filepath.Join(t.TempDir(), "cpu_manager_state")
	doc := `{"policyName":"static","defaultCpuSet":"0,3-4,7","entries":{"uid-g1":{"c2":"1-2,5-6"}},"checksum":0}`
	if err := os.WriteFile(kubelet, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	g1 := rt.addPod(podSpec{uid: "uid-g1", name: "g1", qos: "guaranteed"})
	c2 := rt.createAway(g1, "c2", 4000, 4000)
	rt.SetCPUs(c2, "1-2,5-6", "")
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo, WithKubeletState(kubelet))
	if err := rt.resize(c2, 2000, 2000); err == nil || !strings.Contains(err.Error(), "below-baseline") {
		t.Errorf("resize of the imported 4 CPUs to 2 = %v; want InPlaceResizeRejected below-baseline", err)
	}
	// +2: the last free core, 3.
	if err := rt.resize(c2, 6000, 6000); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "1-3,5-7" {
		t.Errorf("c2 %q after the upsize; want 1-3,5-7", got)
	}
	for _, cv := range r.d.State().Containers {
		if cv.ID == c2.Id && cv.Baseline != "1-2,5-6" {
			t.Errorf("/state baseline %q; want the imported 1-2,5-6", cv.Baseline)
		}
	}
}

// TestResizePersistFailure: an upsize that cannot be written is refused
// with PersistError and changes nothing; a downsize whose completion
// cannot be written keeps the CPUs given back assigned to the container
// (never shared while it may run on them), and its next resize finishes
// it.
func TestResizePersistFailure(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	r := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0), topo, WithStore(persist.Journal))
	path := filepath.Join(stateDir, CheckpointName)
	breakStore := func() {
		// A directory in the checkpoint's place makes the snapshot's
		// rename fail; the journal forgotten (as after a failed append)
		// makes the next save a snapshot.
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o700); err != nil {
			t.Fatal(err)
		}
		_ = r.d.led.Update(func(*ledger.Tx) error { r.d.store.Reset(); return nil })
	}
	fixStore := func() {
		if err := os.RemoveAll(path); err != nil {
			t.Fatal(err)
		}
	}
	g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
	c, _, err := rt.create(g, "c", 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	breakStore()
	if err := rt.resize(c, 2000, 2000); err == nil || !strings.Contains(err.Error(), "PersistError") {
		t.Fatalf("upsize with an unwritable checkpoint = %v; want PersistError", err)
	}
	if v := r.d.State(); v.Shared != "0,2-7" || rt.cpus(c) != "1" {
		t.Fatalf("after a failed upsize: shared %q, c on %q; want 0,2-7 and 1", v.Shared, rt.cpus(c))
	}
	fixStore()
	if err := rt.resize(c, 2000, 2000); err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c); got != "1,5" {
		t.Fatalf("c on %q after the upsize; want 1,5", got)
	}
	breakStore()
	if err := rt.resize(c, 1000, 1000); err != nil {
		t.Fatalf("downsize: %v", err) // the answer needs no write
	}
	e, st := r.d.engineState()
	if held, _ := e.Assignment(st, "g", "c"); held.String() != "1,5" || rt.cpus(c) != "1" || e.SharedPool(st).String() != "0,2-4,6-7" {
		t.Fatalf("after a downsize whose completion failed: assignment %s, c on %q, pool %s; want 1,5, 1 and 0,2-4,6-7",
			held, rt.cpus(c), e.SharedPool(st))
	}
	fixStore()
	if err := rt.resize(c, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	settle(t, r.d)
	e, st = r.d.engineState()
	if held, _ := e.Assignment(st, "g", "c"); held.String() != "1" || e.SharedPool(st).String() != "0,2-7" {
		t.Fatalf("after the retried downsize: assignment %s, pool %s; want 1 and 0,2-7", held, e.SharedPool(st))
	}
}
