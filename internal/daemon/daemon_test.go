package daemon

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/internal/persist"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// The machine of these tests is the fixture ht-1s-4c: one socket, one NUMA
// node, one L3, 4 cores with 2 threads, siblings N and N+4, so core k is
// {k, k+4}. reserved_system_cpus = "0,4" reserves core 0. Exclusive CPUs
// come from the free cores in ascending order (the kubelet's packed
// allocation takes whole cores first, lowest id first), and the shared pool
// is every CPU not held exclusively (the reserved ones included).
const reserveCore0 = "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n"

func TestCreateStopMoveSharedContainers(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	// The answers' updates are what this test reads (direct's answers
	// carry none: TestSharedUpdatesDirect).
	r := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0+"shared_pool_updates = \"in-answer\"\n"), topo)

	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	be1, ups, err := rt.create(bePod, "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Alone on the machine: the whole machine is the shared pool.
	if got := rt.cpus(be1); got != "0-7" || len(ups) != 0 {
		t.Fatalf("be1 cpus %q, updates %q; want 0-7 and none", got, rt.describe(ups))
	}

	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, ups, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	// 2 CPUs = one whole core, the lowest free one: core 1 = {1,5}; the
	// shared pool shrinks to 0,2-4,6-7 and be1 follows.
	if got := rt.cpus(c2); got != "1,5" {
		t.Errorf("c2 cpus %q, want 1,5", got)
	}
	if got := rt.describe(ups); got != "be1=0,2-4,6-7" {
		t.Errorf("updates after c2: %q, want be1=0,2-4,6-7", got)
	}
	// One NUMA node with memory: cpuset.mems is node 0.
	if got := rt.mems(c2); got != "0" {
		t.Errorf("c2 mems %q, want 0", got)
	}

	g2 := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
	c4, ups, err := rt.create(g2, "c4", 4000, 4000)
	if err != nil {
		t.Fatal(err)
	}
	// 4 CPUs = cores 2 and 3 = {2,3,6,7}; only the reserved core 0 is left
	// shared.
	if got := rt.cpus(c4); got != "2-3,6-7" {
		t.Errorf("c4 cpus %q, want 2-3,6-7", got)
	}
	if got := rt.describe(ups); got != "be1=0,4" {
		t.Errorf("updates after c4: %q, want be1=0,4", got)
	}

	buPod := rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"})
	bu, ups, err := rt.create(buPod, "bu", 250, 500)
	if err != nil {
		t.Fatal(err)
	}
	// A burstable container joins the shared pool, which does not change:
	// no updates.
	if got := rt.cpus(bu); got != "0,4" || len(ups) != 0 {
		t.Errorf("bu cpus %q, updates %q; want 0,4 and none", got, rt.describe(ups))
	}

	// No CPU left outside the reservation: 1 more exclusive CPU is refused
	// and the error starts with the reason word.
	g3 := rt.addPod(podSpec{uid: "g3", name: "g3", qos: "guaranteed"})
	_, _, err = rt.create(g3, "one", 1000, 1000)
	if err == nil {
		t.Fatal("creating a 1-CPU container on a full machine succeeded")
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	if !strings.HasPrefix(msg, "InsufficientCPUs") {
		t.Errorf("rejection %q does not start with InsufficientCPUs", msg)
	}

	// Stopping c2 gives nothing back: its pod lives and holds core 1 for
	// its restart (no updates).
	ups = rt.stop(c2)
	if len(ups) != 0 {
		t.Errorf("updates after stopping c2: %q, want none", rt.describe(ups))
	}
	if v := r.d.State(); v.Shared != "0,4" || len(v.Held) != 1 || v.Held[0].CPUs != "1,5" {
		t.Errorf("after c2's stop: shared %s held %+v, want 0,4 and 1,5 held for g1/c2", v.Shared, v.Held)
	}
	// Removing its pod gives core 1 back: the worker pushes 0-1,4-5.
	rt.removePod(g1)
	rt.remove(c2) // idempotent, after its pod
	settle(t, r.d)
	if be, b := rt.cpus(be1), rt.cpus(bu); be != "0-1,4-5" || b != "0-1,4-5" {
		t.Errorf("shared containers on %q and %q after g1's removal, want 0-1,4-5", be, b)
	}

	// Removing pod g2 without stopping c4 first (RemovePodSandbox cannot
	// return updates): the worker pushes the whole machine to the shared
	// containers.
	rt.removePod(g2)
	rt.removePod(g2) // idempotent
	settle(t, r.d)
	if be, b := rt.cpus(be1), rt.cpus(bu); be != "0-7" || b != "0-7" {
		t.Errorf("shared containers on %q and %q after the push, want 0-7", be, b)
	}

	v := r.d.State()
	if v.Shared != "0-7" || v.Reserved != "0,4" || len(v.Containers) != 2 {
		t.Errorf("state = %+v", v)
	}
	if _, err := os.Stat(filepath.Join(stateDir, CheckpointName)); err != nil {
		t.Errorf("no checkpoint: %v", err)
	}
	// Five admissions (be1, c2, c4, bu, one), three of them asking for
	// exclusive CPUs (c2, c4, one), one refused (one).
	srv := httptest.NewServer(r.d.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/metrics")
	for _, line := range []string{
		"topology_manager_admission_requests_total 5",
		"topology_manager_admission_errors_total 1",
		"cpu_manager_pinning_requests_total 3",
		"cpu_manager_pinning_errors_total 1",
		"nri_cpualign_exclusive_cpus 0",
		"nri_cpualign_shared_cpus 8",
		"nri_cpualign_containers 2",
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

func TestRestartKeepsAssignments(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, reserveCore0)

	r1 := startDaemon(t, rt, cfg, topo)
	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	be1, _, err := rt.create(bePod, "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	r1.stop(t)

	// While the plugin is away: a 1-CPU container is created (no cpuset)
	// and be1 goes away.
	g3 := rt.addPod(podSpec{uid: "g3", name: "g3", qos: "guaranteed"})
	one := rt.createAway(g3, "one", 1000, 1000)
	rt.removeAway(be1)

	r2 := startDaemon(t, rt, cfg, topo)
	// c2 keeps core 1; "one" is placed on the lowest free CPU of the lowest
	// free core, 2; nothing else needed changing.
	if got := rt.cpus(c2); got != "1,5" {
		t.Errorf("c2 after restart: %q, want 1,5", got)
	}
	if got := rt.cpus(one); got != "2" {
		t.Errorf("one after restart: %q, want 2", got)
	}
	syncUps := rt.SyncUpdates()
	if got := rt.describe(syncUps); got != "one=2" {
		t.Errorf("Synchronize updates %q, want one=2", got)
	}
	v2 := r2.d.State()
	if v2.Shared != "0,3-4,6-7" {
		t.Errorf("shared after restart %q, want 0,3-4,6-7", v2.Shared)
	}
	r2.stop(t)

	// A third start from the checkpoint: same assignments, no updates.
	r3 := startDaemon(t, rt, cfg, topo)
	syncUps = rt.SyncUpdates()
	if len(syncUps) != 0 {
		t.Errorf("Synchronize after a clean restart sent updates: %s", rt.describe(syncUps))
	}
	v3 := r3.d.State()
	v2.Connected, v3.Connected = false, false
	if !reflect.DeepEqual(v2, v3) {
		t.Errorf("state changed across restart:\n%+v\n%+v", v2, v3)
	}
}

func TestCorruptCheckpointSetAside(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t, nritest.WithUnpinnedCPUs("0-7"))
	stateDir := t.TempDir()
	path := filepath.Join(stateDir, CheckpointName)
	if err := os.WriteFile(path, []byte(`{"version":1,"checksum":"sha256:00","data":{"trunc`), 0o600); err != nil {
		t.Fatal(err)
	}
	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	be1 := rt.createAway(bePod, "be1", 0, 0)
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2 := rt.createAway(g1, "c2", 2000, 2000)

	r := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0), topo)
	// Rebuilt from the runtime, oldest first: be1 shared, c2 core 1
	// (through the answer); be1's cgroup written by the plugin.
	if got := rt.cpus(c2); got != "1,5" {
		t.Errorf("c2 %q, want 1,5", got)
	}
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Errorf("be1 %q, want 0,2-4,6-7", got)
	}
	b, err := os.ReadFile(path + ".corrupt-1")
	if err != nil || !strings.Contains(string(b), `"trunc`) {
		t.Errorf("corrupt checkpoint not kept as %s.corrupt-1: %q, %v", path, b, err)
	}
	var p struct { // the checkpoint's payload (internal/persist)
		Engine     policy.Snapshot          `json:"engine"`
		Containers map[string]ledger.Record `json:"containers"`
	}
	if err := checkpoint.New(stateDir, CheckpointName).Load(&p); err != nil {
		t.Fatalf("new checkpoint unreadable: %v", err)
	}
	if len(p.Containers) != 2 || p.Engine.Assignments["g1"]["c2"] != "1,5" {
		t.Errorf("new checkpoint payload %+v", p)
	}
	if !r.d.State().Synchronized {
		t.Error("not synchronized")
	}
}

func TestKubeletStateImport(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	// What the kubelet's static policy left: c2 of pod uid-g1 on cores 1
	// and 2, a pod that no longer runs on core 3, and an entry on the
	// reserved core that the plugin must refuse.
	kubelet := filepath.Join(t.TempDir(), "cpu_manager_state")
	doc := `{"policyName":"static","defaultCpuSet":"0,4","entries":{
		"uid-g1":{"c2":"1-2,5-6"},
		"uid-gone":{"x":"3,7"},
		"uid-bad":{"y":"0"}},"checksum":0}`
	if err := os.WriteFile(kubelet, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	bePod := rt.addPod(podSpec{uid: "uid-be", name: "be", qos: "besteffort"})
	be1 := rt.createAway(bePod, "be1", 0, 0)
	g1 := rt.addPod(podSpec{uid: "uid-g1", name: "g1", qos: "guaranteed"})
	c2 := rt.createAway(g1, "c2", 4000, 4000)
	rt.SetCPUs(c2, "1-2,5-6", "")
	rt.SetCPUs(be1, "0,3-4,7", "")

	r := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0), topo, WithKubeletState(kubelet))
	// c2 keeps its kubelet CPUs; uid-gone's core 3 went back to the shared
	// pool, so be1 grows to 0,3-4,7 (it already had that: no update for it).
	if got := rt.cpus(c2); got != "1-2,5-6" {
		t.Errorf("c2 %q, want 1-2,5-6", got)
	}
	if got := rt.cpus(be1); got != "0,3-4,7" {
		t.Errorf("be1 %q, want 0,3-4,7", got)
	}
	v := r.d.State()
	if v.Shared != "0,3-4,7" {
		t.Errorf("shared %q, want 0,3-4,7", v.Shared)
	}
	// The next 2-CPU container gets the remaining free core 3 = {3,7}.
	g2 := rt.addPod(podSpec{uid: "uid-g2", name: "g2", qos: "guaranteed"})
	n, _, err := rt.create(g2, "new", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(n); got != "3,7" {
		t.Errorf("new %q, want 3,7", got)
	}
}

func TestKubeletStateImportErrors(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	bad := filepath.Join(t.TempDir(), "cpu_manager_state")
	if err := os.WriteFile(bad, []byte("not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := New(testConfig(t, rt, t.TempDir(), reserveCore0), WithTopology(topo), WithLogger(testLogger(t)), WithKubeletState(bad))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Run(t.Context()); err == nil || !strings.Contains(err.Error(), bad) {
		t.Errorf("Run with a bad kubelet state file = %v, want an error naming it", err)
	}

	// A missing file is a node that never ran the kubelet's static
	// policy: nothing to import, the daemon starts empty.
	missing := filepath.Join(t.TempDir(), "cpu_manager_state")
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo, WithKubeletState(missing))
	if v := r.d.State(); len(v.Containers) != 0 || v.Shared != "0-7" {
		t.Errorf("state after a missing kubelet state file: %d containers, shared %q; want none and 0-7", len(v.Containers), v.Shared)
	}
}

func TestConfigErrorsNameTheKey(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	for _, tc := range []struct {
		name string
		doc  string
		want []string
	}{
		{"static without reservation", "cpu_manager_policy = \"static\"\n", []string{`key "cpu_manager_policy"`, "reserved_system_cpus or reserved_cpu_count"}},
		{"reserved CPU offline", "reserved_system_cpus = \"0,64\"\n", []string{`line 2: key "reserved_system_cpus"`, "not online"}},
		{"bad topology option", "reserved_cpu_count = 2\n[topology_manager_policy_options]\nmax-allowable-numa-nodes = \"many\"\n", []string{`key "topology_manager_policy_options"`}},
		{"reserving every CPU", "reserved_cpu_count = 8\n", []string{`line 2: key "reserved_cpu_count"`}},
		{"none with options", "cpu_manager_policy = \"none\"\n[cpu_manager_policy_options]\nfull-pcpus-only = true\n", []string{`key "cpu_manager_policy_options"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Before the document: its tables would capture a later key.
			cfg, err := config.Load([]byte(offHostCgroups(t) + tc.doc))
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			_, err = New(cfg, WithTopology(topo), WithLogger(testLogger(t)))
			if err == nil {
				t.Fatal("New succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
	// The none policy needs no reservation.
	cfg, _ := config.Load([]byte("cpu_manager_policy = \"none\"\n" + offHostCgroups(t)))
	if _, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t))); err != nil {
		t.Errorf("none policy: %v", err)
	}
}

// TestReconcileRestoresDrift: a cgroup something else changed is put back
// by the reconcile loop, through the runtime (in-answer) or by writing it
// (direct, the default); a cgroup that is gone is skipped; the drift is
// counted.
func TestReconcileRestoresDrift(t *testing.T) {
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) { testReconcileRestoresDrift(t, mode) })
	}
}

func testReconcileRestoresDrift(t *testing.T, mode string) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0+"shared_pool_updates = \""+mode+"\"\n"), topo)
	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	be1, _, err := rt.create(bePod, "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	settle(t, r.d) // direct: be1's cgroup written by the pass
	if n := r.d.ReconcileNow(); n != 0 {
		t.Errorf("reconcile with no drift restored %d containers", n)
	}
	// Something else widens be1 to the whole machine and moves c2 onto
	// the reserved core.
	if err := os.WriteFile(rt.cgroupFile(be1), []byte("0-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(rt.cgroupFile(c2), []byte("0,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n := r.d.ReconcileNow(); n != 2 {
		t.Errorf("reconcile restored %d containers, want 2", n)
	}
	for c, want := range map[*api.Container]string{be1: "0,2-4,6-7", c2: "1,5"} {
		if got := cgroupCPUs(t, rt, c); got != want {
			t.Errorf("%s cgroup after reconcile %q, want %q", c.Name, got, want)
		}
	}
	pushes := rt.Pushes()
	if mode == config.SharedUpdatesDirect && pushes != 0 {
		t.Errorf("direct restored through the runtime: %d pushes", pushes)
	}
	if mode == config.SharedUpdatesInAnswer && pushes == 0 {
		t.Error("in-answer restored without the runtime")
	}
	// A container whose cgroup is gone is skipped, not an error.
	if err := os.RemoveAll(filepath.Dir(rt.cgroupFile(c2))); err != nil {
		t.Fatal(err)
	}
	if n := r.d.ReconcileNow(); n != 0 {
		t.Errorf("reconcile with a vanished cgroup restored %d", n)
	}
	// The drift was counted.
	srv := httptest.NewServer(r.d.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/metrics")
	if !strings.Contains(body, "nri_cpualign_reconcile_drift_total 2") {
		t.Errorf("drift metric missing:\n%s", grepLines(body, "drift"))
	}
}

func TestStateMetricsHealth(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo)
	srv := httptest.NewServer(r.d.Handler())
	defer srv.Close()

	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	if _, _, err := rt.create(g1, "c2", 2000, 2000); err != nil {
		t.Fatal(err)
	}
	g2 := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
	if _, _, err := rt.create(g2, "odd", 3000, 3000); err != nil {
		t.Fatal(err)
	}

	var v observe.StateView
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/state")), &v); err != nil {
		t.Fatal(err)
	}
	// c2 on core 1 {1,5}; odd (3 CPUs) takes core 2 whole and the lowest
	// CPU of core 3: {2,3,6}.
	want := []observe.ContainerView{
		{ID: v.Containers[0].ID, Pod: "default/g1", PodUID: "g1", Container: "c2", CPUs: "1,5", Baseline: "1,5", Mems: "0", Exclusive: true, NUMA: []int{0}, L3: []int{0}, Since: v.Containers[0].Since},
		{ID: v.Containers[1].ID, Pod: "default/g2", PodUID: "g2", Container: "odd", CPUs: "2-3,6", Baseline: "2-3,6", Mems: "0", Exclusive: true, NUMA: []int{0}, L3: []int{0}, Since: v.Containers[1].Since},
	}
	if !reflect.DeepEqual(v.Containers, want) || v.Shared != "0,4,7" || !v.Synchronized || !v.Connected {
		t.Errorf("/state = %+v\nwant containers %+v, shared 0,4,7", v, want)
	}

	body := get(t, srv.URL+"/metrics")
	for _, line := range []string{
		"cpu_manager_pinning_requests_total 2",
		"cpu_manager_pinning_errors_total 0",
		"topology_manager_admission_requests_total 2",
		"topology_manager_admission_errors_total 0",
		// c2 is one whole core; odd is not (CPU 3 without 7); both sit in
		// the only NUMA node and L3.
		`container_aligned_compute_resources_count{boundary="physical_cpu",scope="container"} 1`,
		`container_aligned_compute_resources_count{boundary="numa_node",scope="container"} 2`,
		`container_aligned_compute_resources_count{boundary="uncore_cache",scope="container"} 2`,
		"nri_cpualign_shared_cpus 3",
		"nri_cpualign_exclusive_cpus 5",
		"nri_cpualign_reserved_cpus 2",
		"topology_manager_admission_duration_seconds_count 2",
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if got := get(t, srv.URL+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
}

func TestHealthzBeforeSync(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\n" + offHostCgroups(t)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/healthz before connecting: %d, want 503", resp.StatusCode)
	}
}

func TestStateDirLocked(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, reserveCore0)
	startDaemon(t, rt, cfg, topo)
	d2, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if err := d2.Run(t.Context()); err == nil || !strings.Contains(err.Error(), "another nri-cpualign") {
		t.Errorf("second daemon on the same state dir: %v", err)
	}
}

func TestConfigureFromRuntime(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\n" + offHostCgroups(t)))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	// The runtime's config moves the reservation to core 3 = {3,7}.
	if err := d.configure("reserved_system_cpus = \"3,7\"\nstate_dir = \"/elsewhere\"\n"); err != nil {
		t.Fatal(err)
	}
	got := d.Config()
	if got.ReservedSystemCPUs != "3,7" || got.StateDir == "/elsewhere" {
		t.Errorf("after configure: reserved %q, state_dir %q", got.ReservedSystemCPUs, got.StateDir)
	}
	if v := d.State(); v.Reserved != "3,7" {
		t.Errorf("engine reserved %q, want 3,7", v.Reserved)
	}
	// A bad runtime configuration is refused with its key and line.
	err = d.configure("reserved_cpu_count = 1\ntopology_manager_scope = \"node\"\n")
	if err == nil || !strings.Contains(err.Error(), `line 2: key "topology_manager_scope"`) {
		t.Errorf("bad runtime config: %v", err)
	}
	if d.Config().ReservedSystemCPUs != "3,7" {
		t.Error("a refused configuration changed the daemon")
	}
}

// TestConfigureKeepsSharedPoolUpdates: the way the shared pool is applied
// is chosen at start-up; a runtime configuration asking for another one is
// refused with the key and line and changes nothing, the same value is
// accepted, and the removed "after-answer" is refused naming "direct".
func TestConfigureKeepsSharedPoolUpdates(t *testing.T) {
	cgroupRoot := t.TempDir() // writable: the default "direct" stays
	if err := os.MkdirAll(filepath.Join(cgroupRoot, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\ncgroup_root = \"" + cgroupRoot + "\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	d, err := New(cfg, WithTopology(loadFixture(t, "ht-1s-4c")), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatal(err)
	}
	if m := d.applier().Mode(); m != config.SharedUpdatesDirect {
		t.Fatalf("mode %q at start, want the default direct", m)
	}
	err = d.configure("reserved_system_cpus = \"3,7\"\nshared_pool_updates = \"in-answer\"\n")
	if err == nil || !strings.Contains(err.Error(), `line 2: key "shared_pool_updates"`) || !strings.Contains(err.Error(), "restart the plugin") {
		t.Errorf("configure changing shared_pool_updates: %v, want a refusal naming the key, line 2, and the restart", err)
	}
	if got := d.Config(); got.ReservedSystemCPUs == "3,7" || got.SharedPoolUpdates != config.SharedUpdatesDirect {
		t.Errorf("a refused configuration changed the daemon: reserved %q, shared_pool_updates %q", got.ReservedSystemCPUs, got.SharedPoolUpdates)
	}
	if err := d.configure("reserved_system_cpus = \"3,7\"\nshared_pool_updates = \"direct\"\n"); err != nil {
		t.Errorf("configure with the running mode: %v", err)
	}
	if got := d.Config(); got.ReservedSystemCPUs != "3,7" || d.applier().Mode() != config.SharedUpdatesDirect {
		t.Errorf("after configure: reserved %q, mode %q; want 3,7 and direct", got.ReservedSystemCPUs, d.applier().Mode())
	}
	err = d.configure("shared_pool_updates = \"after-answer\"\n")
	if err == nil || !strings.Contains(err.Error(), `use "direct"`) {
		t.Errorf("configure with after-answer: %v, want a refusal naming direct", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The example configuration in deploy/ starts a daemon as it is.
func TestDeployExampleStarts(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	cfg, err := config.LoadFile(filepath.Join("..", "..", "deploy", "nri-cpualign.toml"))
	if err != nil {
		t.Fatal(err)
	}
	// The example's cgroup_root is the host's: kept off it (offHostCgroups).
	cfg.CgroupRoot = offHostRoot(t)
	d, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t)))
	if err != nil {
		t.Fatalf("example config: %v", err)
	}
	// reserved_cpu_count = 2 on ht-1s-4c: the whole core 0 = {0,4}.
	if v := d.State(); v.Reserved != "0,4" {
		t.Errorf("reserved %q, want 0,4", v.Reserved)
	}
}

// When the connection to the runtime is lost (runtime restart), the daemon
// (external mode) reconnects with backoff and synchronizes again from its
// in-memory state. The connection is cut from the plugin's side through a
// dialer; pkg/adaptation's Stop does not close external plugins.
func TestReconnectAfterConnectionLoss(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	var mu sync.Mutex
	var conns []net.Conn
	dialer := func(path string) (net.Conn, error) {
		c, err := net.Dial("unix", path)
		if err == nil {
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return c, err
	}
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo, WithStubOptions(stub.WithDialer(dialer)))
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	for _, c := range conns {
		c.Close()
	}
	mu.Unlock()
	waitFor(t, "the daemon's second Synchronize", func() bool {
		return readLedger(r.d, (*ledger.Tx).Syncs) >= 2
	})
	waitFor(t, "connected", r.d.Connected)
	mu.Lock()
	n := len(conns)
	mu.Unlock()
	if n != 2 {
		t.Errorf("%d connections, want 2", n)
	}
	// c2 still holds core 1; the next 2-CPU container gets core 2.
	g2 := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
	c3, _, err := rt.create(g2, "c3", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if rt.cpus(c2) != "1,5" || rt.cpus(c3) != "2,6" {
		t.Errorf("after reconnect c2 %q c3 %q, want 1,5 and 2,6", rt.cpus(c2), rt.cpus(c3))
	}
}

// A pre-registered plugin starts without --config: the engine waits for
// the runtime's Configure, which must bring a valid configuration.
func TestConfigFromRuntimeDeferred(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.CgroupRoot = offHostRoot(t)
	if _, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t))); err == nil {
		t.Fatal("default static config without a reservation accepted without WithConfigFromRuntime")
	}
	d, err := New(cfg, WithTopology(topo), WithLogger(testLogger(t)), WithConfigFromRuntime())
	if err != nil {
		t.Fatal(err)
	}
	if v := d.State(); len(v.Containers) != 0 || v.Synchronized {
		t.Errorf("unconfigured state %+v", v)
	}
	if err := d.configure(""); err == nil || !strings.Contains(err.Error(), "reserved_system_cpus or reserved_cpu_count") {
		t.Errorf("Configure without a config = %v", err)
	}
	if _, err := (d.handlers()).Synchronize(t.Context(), nil, nil); err == nil || !strings.HasPrefix(err.Error(), "InvalidConfig") {
		t.Errorf("Synchronize before configuration = %v", err)
	}
	// Every other event before the configuration: a creation is refused
	// with the reason word, the rest find nothing to do.
	p, ctx := d.handlers(), t.Context()
	pod, c := testPod("u"), testCtr("c-1", "c", 1000)
	if _, _, err := p.CreateContainer(ctx, pod, c); err == nil || !strings.HasPrefix(err.Error(), "InvalidConfig") {
		t.Errorf("CreateContainer before configuration = %v", err)
	}
	if err := p.StartContainer(ctx, pod, c); err != nil {
		t.Errorf("StartContainer before configuration = %v", err)
	}
	if _, err := p.UpdateContainer(ctx, pod, c, milliCPU(2000, 2000)); err != nil {
		t.Errorf("UpdateContainer before configuration = %v", err)
	}
	if ups, err := p.StopContainer(ctx, pod, c); err != nil || len(ups) != 0 {
		t.Errorf("StopContainer before configuration = %v, %v", ups, err)
	}
	if err := p.RemoveContainer(ctx, pod, c); err != nil {
		t.Errorf("RemoveContainer before configuration = %v", err)
	}
	if err := p.RemovePodSandbox(ctx, pod); err != nil {
		t.Errorf("RemovePodSandbox before configuration = %v", err)
	}
	if err := d.configure("reserved_cpu_count = 2\n"); err != nil {
		t.Fatal(err)
	}
	if v := d.State(); v.Reserved != "0,4" || v.Shared != "0-7" {
		t.Errorf("after Configure: %+v", v)
	}
	if !readLedger(d, (*ledger.Tx).Restored) {
		t.Error("state not restored after the first Configure")
	}
}

// On the two-socket fixture ht-2s-6c (NUMA 0 = socket 0 = CPUs 0-5,12-17,
// NUMA 1 = 6-11,18-23, siblings N and N+12) with single-numa-node, a
// container lands in one NUMA node with every node's memory (memory
// manager None), and one that
// cannot fit in any single node is refused with TopologyAffinityError.
func TestSingleNUMANodeThroughNRI(t *testing.T) {
	topo := loadFixture(t, "ht-2s-6c")
	rt := startRuntime(t)
	startDaemon(t, rt, testConfig(t, rt, t.TempDir(),
		"cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\n"), topo)

	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	four, _, err := rt.create(g1, "four", 4000, 4000)
	if err != nil {
		t.Fatal(err)
	}
	// Both nodes fit 4 CPUs; the tie goes to the lower mask, NUMA 0, where
	// the lowest free whole cores are 1 and 2 = {1,13} and {2,14}.
	if got, mems := rt.cpus(four), rt.mems(four); got != "1-2,13-14" || mems != "0-1" {
		t.Errorf("four: cpus %q mems %q, want 1-2,13-14 and 0-1", got, mems)
	}
	// 14 CPUs: 18 are free (6 in NUMA 0, 12 in NUMA 1) but no single node
	// holds 14.
	g2 := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
	_, _, err = rt.create(g2, "big", 14000, 14000)
	if err == nil {
		t.Fatal("14 CPUs under single-numa-node admitted")
	}
	msg := err.Error()
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	if !strings.HasPrefix(msg, "TopologyAffinityError") {
		t.Errorf("rejection %q does not start with TopologyAffinityError", msg)
	}
	// 12 CPUs fit NUMA 1 exactly.
	twelve, _, err := rt.create(g2, "twelve", 12000, 12000)
	if err != nil {
		t.Fatal(err)
	}
	if got, mems := rt.cpus(twelve), rt.mems(twelve); got != "6-11,18-23" || mems != "0-1" {
		t.Errorf("twelve: cpus %q mems %q, want 6-11,18-23 and 0-1", got, mems)
	}
}

// The loop runs every reconcile_period by itself.
func TestReconcileLoopPeriod(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), reserveCore0)
	cfg.ReconcilePeriod = config.Duration(50 * time.Millisecond)
	startDaemon(t, rt, cfg, topo)
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	// Something else moves c2 onto the reserved core; the loop puts it back
	// on core 1.
	if err := os.WriteFile(rt.cgroupFile(c2), []byte("0,4\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "c2's cgroup restored to 1,5", func() bool {
		b, _ := os.ReadFile(rt.cgroupFile(c2))
		return strings.TrimSpace(string(b)) == "1,5"
	})
}

// A checkpoint written under another reservation is reconciled: an
// assignment on CPUs that are now reserved is dropped and its container
// placed again.
func TestCheckpointFromAnotherConfig(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	r1 := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0), topo)
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	g2 := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
	c3, _, err := rt.create(g2, "c3", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	// c2 on core 1 {1,5}, c3 on core 2 {2,6}.
	if rt.cpus(c2) != "1,5" || rt.cpus(c3) != "2,6" {
		t.Fatalf("c2 %q c3 %q", rt.cpus(c2), rt.cpus(c3))
	}
	r1.stop(t)

	// Now core 1 is reserved instead of core 0.
	r2 := startDaemon(t, rt, testConfig(t, rt, stateDir, "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"1,5\"\n"), topo)
	// c3 keeps core 2; c2 lost core 1 to the reservation and is placed
	// again on the lowest free core: core 0 = {0,4} (core 3 is free too,
	// core 0 comes first).
	if rt.cpus(c3) != "2,6" {
		t.Errorf("c3 %q, want 2,6", rt.cpus(c3))
	}
	if rt.cpus(c2) != "0,4" {
		t.Errorf("c2 %q, want 0,4", rt.cpus(c2))
	}
	if v := r2.d.State(); v.Reserved != "1,5" || v.Shared != "1,3,5,7" {
		t.Errorf("state %+v, want reserved 1,5 and shared 1,3,5,7", v)
	}
}

// A decision that cannot be written is not made: the container is refused
// with PersistError and the state stays as it was.
func TestPersistFailureRefusesAndKeepsState(t *testing.T) {
	for _, store := range []persist.Mode{persist.Snapshot, persist.Journal} {
		t.Run(string(store), func(t *testing.T) { testPersistFailure(t, store) })
	}
}

func testPersistFailure(t *testing.T, store persist.Mode) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	r := startDaemon(t, rt, testConfig(t, rt, stateDir, reserveCore0), topo, WithStore(store))
	// A directory in the checkpoint's place makes the rename fail (as root,
	// permissions would not).
	path := filepath.Join(stateDir, CheckpointName)
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(path, "blocker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if store == persist.Journal {
		// The journal forgotten, as after a failed append: the snapshot
		// written instead cannot be renamed either.
		_ = r.d.led.Update(func(*ledger.Tx) error { r.d.store.Reset(); return nil })
	}
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	_, _, err := rt.create(g1, "c2", 2000, 2000)
	if err == nil || !strings.Contains(err.Error(), "PersistError") {
		t.Fatalf("create with an unwritable checkpoint = %v, want PersistError", err)
	}
	if v := r.d.State(); v.Shared != "0-7" || len(v.Containers) != 0 {
		t.Errorf("state changed by a decision that was not persisted: %+v", v)
	}
	if err := os.RemoveAll(path); err != nil {
		t.Fatal(err)
	}
	// Core 1 was never taken: the retry gets it.
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "1,5" {
		t.Errorf("c2 %q, want 1,5", got)
	}
}
