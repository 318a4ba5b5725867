package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// ht-1s-4c: CPUs 0-7, siblings {k, k+4}; reserveCore0 reserves 0,4.
const directTOML = reserveCore0 + "shared_pool_updates = \"direct\"\n"

// cgroupCPUs is what c's (fake) cgroup holds.
func cgroupCPUs(t *testing.T, rt *fakeRuntime, c *api.Container) string {
	t.Helper()
	b, err := os.ReadFile(rt.cgroupFile(c))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestSharedUpdatesDirect: under shared_pool_updates = "direct" the answers
// carry no update of another container; the plugin writes the shared pool
// into the shared-pool containers' cgroups, and a new exclusive
// container's StartContainer returns only once they hold the shrunk pool.
// The runtime's own record of them keeps the cpuset they were created with.
func TestSharedUpdatesDirect(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), directTOML), topo)
	ctx := context.Background()

	be1, ups, err := rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := cgroupCPUs(t, rt, be1); got != "0-7" || len(ups) != 0 {
		t.Fatalf("be1 cgroup %q, updates %q; want 0-7 and none", got, rt.describe(ups))
	}
	if err := rt.StartContainer(ctx, be1); err != nil {
		t.Fatal(err)
	}

	// 2 CPUs: core 1 = {1,5}; the pool shrinks to 0,2-4,6-7.
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, ups, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "1,5" || len(ups) != 0 {
		t.Fatalf("c2 cpus %q, updates %q; want 1,5 and none", got, rt.describe(ups))
	}
	// No settle: StartContainer itself must not return before be1's
	// cgroup left core 1.
	if err := rt.StartContainer(ctx, c2); err != nil {
		t.Fatal(err)
	}
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Errorf("be1 cgroup %q once c2 started, want 0,2-4,6-7", got)
	}
	if got := rt.cpus(be1); got != "0-7" {
		t.Errorf("the runtime's record of be1 is %q, want 0-7 (the plugin did not ask the runtime)", got)
	}
	if n := len(rt.Unsolicited()); n != 0 {
		t.Errorf("%d updates pushed to the runtime, want none", n)
	}

	// A burstable container joins the shrunk pool in its answer.
	bu, ups, err := rt.create(rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"}), "bu", 250, 500)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(bu); got != "0,2-4,6-7" || len(ups) != 0 {
		t.Errorf("bu cpus %q, updates %q; want 0,2-4,6-7 and none", got, rt.describe(ups))
	}

	// Stopping c2 gives nothing back (its pod holds core 1 for its
	// restart); removing its pod does: both cgroups grow once the worker
	// wrote them.
	if ups := rt.stop(c2); len(ups) != 0 {
		t.Errorf("stop answered with updates %q, want none", rt.describe(ups))
	}
	rt.removePod(g1)
	settle(t, r.d)
	for _, c := range []*api.Container{be1, bu} {
		if got := cgroupCPUs(t, rt, c); got != "0-7" {
			t.Errorf("cgroup of %s %q after c2's pod was removed, want 0-7", c.Name, got)
		}
	}
	if n := len(rt.Unsolicited()); n != 0 {
		t.Errorf("%d updates pushed to the runtime, want none", n)
	}
}

// TestDirectStartRewritesStaleCgroup: a shared-pool container answered
// with a pool that shrank before the OCI runtime created its cgroup gets
// the current pool at its StartContainer (the pass found no cgroup, or the
// OCI runtime wrote the answered pool after it).
func TestDirectStartRewritesStaleCgroup(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), directTOML), topo)
	ctx := context.Background()

	be1, _, err := rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c2, _, err := rt.create(rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"}), "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, c2); err != nil {
		t.Fatal(err)
	}
	settle(t, r.d)
	// be1's OCI runtime create comes now, with the pool of its answer.
	if err := os.WriteFile(rt.cgroupFile(be1), []byte("0-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, be1); err != nil {
		t.Fatal(err)
	}
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Errorf("be1 cgroup %q once started, want 0,2-4,6-7 (without c2's core 1)", got)
	}
}

// TestDirectRebuildReadsCgroups: a state rebuilt from the runtime (the
// checkpoint is gone) under direct takes what containers run on from their
// cgroups, not from the runtime's record, which is stale for shared-pool
// containers: the running exclusive container keeps its CPUs, and no
// shared-pool container is sent to the runtime.
func TestDirectRebuildReadsCgroups(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	r := startDaemon(t, rt, testConfig(t, rt, stateDir, directTOML), topo)
	ctx := context.Background()
	be1, _, err := rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	// c3 takes core 2 = {2,6}: the packed fit of a fresh admission would
	// give core 1, so keeping it is what tells the two apart.
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c1, _, err := rt.create(g1, "c1", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	c3, _, err := rt.create(rt.addPod(podSpec{uid: "g3", name: "g3", qos: "guaranteed"}), "c3", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*api.Container{be1, c1, c3} {
		if err := rt.StartContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	if got := rt.cpus(c3); got != "2,6" {
		t.Fatalf("c3 on %q, want 2,6", got)
	}
	rt.stop(c1)
	rt.remove(c1)
	rt.removePod(g1)
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, be1); got != "0-1,3-5,7" {
		t.Fatalf("be1 cgroup %q, want 0-1,3-5,7", got)
	}
	r.stop(t)
	for _, f := range []string{CheckpointName, CheckpointName + ".journal"} {
		if err := os.Remove(filepath.Join(stateDir, f)); err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
	}

	syncs := len(rt.SyncUpdates())
	r = startDaemon(t, rt, testConfig(t, rt, stateDir, directTOML), topo)
	settle(t, r.d) // the pass after Synchronize (a plain file is empty while written)
	if got := rt.cpus(c3); got != "2,6" {
		t.Errorf("c3 on %q after the rebuild, want 2,6 (kept)", got)
	}
	if got := rt.describe(rt.SyncUpdates()[syncs:]); got != "" {
		t.Errorf("Synchronize sent %q to the runtime, want nothing", got)
	}
	if got := cgroupCPUs(t, rt, be1); got != "0-1,3-5,7" {
		t.Errorf("be1 cgroup %q after the rebuild, want 0-1,3-5,7", got)
	}
}

// TestDirectNeedsWritableCgroups: shared_pool_updates = "direct" written
// in the configuration refuses to start when cgroup_root cannot be
// written, naming the key; the default falls back to in-answer with a
// warning.
func TestDirectNeedsWritableCgroups(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	missing := filepath.Join(t.TempDir(), "no-cgroups")
	base := reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\nmetrics_address = \"\"\ncgroup_root = \"" + missing + "\"\n"

	cfg, err := config.Load([]byte(base + "shared_pool_updates = \"direct\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = New(cfg, WithTopology(topo), WithLogger(logrus.New()))
	if err == nil || !strings.Contains(err.Error(), "shared_pool_updates") || !strings.Contains(err.Error(), missing) {
		t.Errorf("New with direct and no writable cgroups: %v; want an error naming shared_pool_updates and %s", err, missing)
	}

	cfg, err = config.Load([]byte(base))
	if err != nil {
		t.Fatal(err)
	}
	log, hook := logtest.NewNullLogger()
	d, err := New(cfg, WithTopology(topo), WithLogger(log))
	if err != nil {
		t.Fatalf("New with the default mode and no writable cgroups: %v", err)
	}
	if got := d.Config().SharedPoolUpdates; got != config.SharedUpdatesInAnswer {
		t.Errorf("shared_pool_updates %q, want the fallback %q", got, config.SharedUpdatesInAnswer)
	}
	warned := false
	for _, e := range hook.AllEntries() {
		warned = warned || (e.Level == logrus.WarnLevel && e.Data["key"] == config.KeySharedPoolUpdates)
	}
	if !warned {
		t.Error("no warning about the fallback")
	}
}

// TestDirectStartWaitsForThePool: with no update worker running (handlers
// called directly), the pass that leaves a new exclusive container's CPUs
// out of the shared-pool cgroups is made by its StartContainer itself: the
// container never starts on a CPU a shared-pool container also has.
func TestDirectStartWaitsForThePool(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	h := newHandlerDaemon(t, t.TempDir(), "shared_pool_updates = \"direct\"\ncgroup_root = \""+root+"\"\n")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	bePod, gPod := testPod("be"), testPod("g")
	be := testCtr("be-1", "be", 0)
	be.Linux.CgroupsPath = "/kubepods/besteffort/podbe/be-1"
	cpus, _ := h.create(t, bePod, be)
	// What the OCI runtime creates from the answer.
	dir := filepath.Join(root, "cpuset", be.Linux.CgroupsPath)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpuset.cpus"), []byte(cpus+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cpuset.mems"), []byte("0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	h.start(t, bePod, be)

	app := testCtr("g-1", "app", 2000)
	app.Linux.CgroupsPath = "/kubepods/podg/g-1"
	if cpus, ups := h.create(t, gPod, app); cpus != "1,5" || len(ups) != 0 {
		t.Fatalf("app on %q with %d updates, want 1,5 and none", cpus, len(ups))
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "cpuset.cpus")); strings.TrimSpace(string(b)) != "0-7" {
		t.Fatalf("be's cgroup %q before app's start, want 0-7 (no worker runs here)", b)
	}
	h.start(t, gPod, app)
	if b, _ := os.ReadFile(filepath.Join(dir, "cpuset.cpus")); strings.TrimSpace(string(b)) != "0,2-4,6-7" {
		t.Errorf("be's cgroup %q once app started, want 0,2-4,6-7", b)
	}
}

// TestDirectReadOnlyMount: a cgroup_root mounted read-only is refused for
// an explicit direct (read-only bind mount; needs root to mount), while a
// directory no one but its owner may list, as a cgroup v1 root is (r-x),
// is not: the files under it are what the daemon writes.
func TestDirectReadOnlyMount(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(root, "cpuset"), 0o555); err != nil {
		t.Fatal(err)
	}
	doc := reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\nmetrics_address = \"\"\ncgroup_root = \"" + root + "\"\nshared_pool_updates = \"direct\"\n"
	cfg, err := config.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(cfg, WithTopology(topo), WithLogger(logrus.New())); err != nil {
		t.Errorf("New with a writable mount whose cpuset directory is r-x: %v", err)
	}

	if err := syscall.Mount(root, root, "", syscall.MS_BIND, ""); err != nil {
		t.Skipf("cannot bind-mount (needs root): %v", err)
	}
	defer syscall.Unmount(root, 0)
	if err := syscall.Mount("", root, "", syscall.MS_REMOUNT|syscall.MS_BIND|syscall.MS_RDONLY, ""); err != nil {
		t.Skipf("cannot remount read-only: %v", err)
	}
	_, err = New(cfg, WithTopology(topo), WithLogger(logrus.New()))
	if err == nil || !strings.Contains(err.Error(), "shared_pool_updates") || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("New with direct on a read-only cgroup_root: %v; want an error naming shared_pool_updates and the read-only file system", err)
	}
}

// TestDirectRestartRestores: a node running under direct restarts. The
// state comes back from the checkpoint (the exclusive container keeps its
// CPUs); the Synchronize answer carries no shared-pool update, since the
// runtime's record of those containers is stale by design; instead the
// plugin writes every shared-pool cgroup again: one widened while it was
// down and one created meanwhile (unpinned) both end on the pool. A new
// exclusive admission after the restart moves them through the start
// barrier.
func TestDirectRestartRestores(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t, nritest.WithUnpinnedCPUs("0-7"))
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, reserveCore0)
	ctx := context.Background()
	start := func(c *api.Container) {
		t.Helper()
		if err := rt.StartContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	r := startDaemon(t, rt, cfg, topo)
	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	be1, _, err := rt.create(bePod, "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	start(be1)
	c2, _, err := rt.create(rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"}), "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	start(c2)
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Fatalf("be1 cgroup %q once c2 started, want 0,2-4,6-7", got)
	}
	r.stop(t)

	// While the plugin is down: be1's cgroup is widened, be2 is created
	// unpinned.
	if err := os.WriteFile(rt.cgroupFile(be1), []byte("0-7\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	be2 := rt.createAway(bePod, "be2", 0, 0)

	log, hook := hookedLogger(t)
	r = startDaemon(t, rt, cfg, topo, WithLogger(log))
	if !logged(hook, logrus.InfoLevel, "state restored from checkpoint") {
		t.Error("no restore from the checkpoint logged")
	}
	if ups := rt.describe(rt.SyncUpdates()); ups != "" {
		t.Errorf("Synchronize answered %q, want no update (c2 is where it was, the rest is written by the plugin)", ups)
	}
	settle(t, r.d)
	for c, want := range map[*api.Container]string{be1: "0,2-4,6-7", be2: "0,2-4,6-7", c2: "1,5"} {
		if got := cgroupCPUs(t, rt, c); got != want {
			t.Errorf("%s cgroup %q after the restart, want %q", c.Name, got, want)
		}
	}
	if got := rt.cpus(be1); got != "0-7" {
		t.Errorf("the runtime's record of be1 %q, want 0-7: the creation's cpuset, never updated under direct", got)
	}
	v := r.d.State()
	if v.Shared != "0,2-4,6-7" || len(v.Containers) != 3 {
		t.Errorf("/state after the restart: shared %q, %d containers; want 0,2-4,6-7 and 3", v.Shared, len(v.Containers))
	}

	// Core 2 = {2,6} for c3: its start returns with both moved.
	c3, ups, err := rt.create(rt.addPod(podSpec{uid: "g3", name: "g3", qos: "guaranteed"}), "c3", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c3); got != "2,6" || len(ups) != 0 {
		t.Fatalf("c3 on %q with updates %q, want 2,6 and none", got, rt.describe(ups))
	}
	start(c3)
	for _, c := range []*api.Container{be1, be2} {
		if got := cgroupCPUs(t, rt, c); got != "0,3-4,7" {
			t.Errorf("%s cgroup %q once c3 started, want 0,3-4,7", c.Name, got)
		}
	}
}

// TestFreedKicksOnlyWhenSomeoneFollows: under direct, an exclusive
// container's removal or its pod's end grows the pool, but with no
// shared-pool container on the node there is no cgroup to write, and the
// worker is not woken for nothing (its wake-up would compete with the
// next event's answer). With one, it is. Under in-answer the worker is
// always woken: its pass also delivers what is owed.
func TestFreedKicksOnlyWhenSomeoneFollows(t *testing.T) {
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) {
			h := newHandlerDaemon(t, t.TempDir(), "shared_pool_updates = \""+mode+"\"\ncgroup_root = \""+root+"\"\n")
			if got := h.d.Config().SharedPoolUpdates; got != mode {
				t.Fatalf("mode %q, want %q", got, mode)
			}
			ctx := context.Background()
			if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
				t.Fatal(err)
			}
			always := mode == config.SharedUpdatesInAnswer

			g1Pod := testPod("g1")
			g1 := testCtr("g1-1", "app", 2000)
			if cpus, _ := h.create(t, g1Pod, g1); cpus != "1,5" {
				t.Fatalf("g1 on %q, want 1,5", cpus)
			}
			h.kicked()
			h.remove(t, g1Pod, g1)
			if h.shared() != "0-7" {
				t.Fatalf("pool %q after g1's removal, want 0-7", h.shared())
			}
			if got := h.kicked(); got != always {
				t.Errorf("removal with no shared-pool container: kicked %v, want %v", got, always)
			}

			g2Pod := testPod("g2")
			g2 := testCtr("g2-1", "app", 2000)
			h.create(t, g2Pod, g2)
			h.kicked()
			h.removePod(t, g2Pod)
			if got := h.kicked(); got != always {
				t.Errorf("pod end with no shared-pool container: kicked %v, want %v", got, always)
			}

			bePod := testPod("be")
			h.create(t, bePod, testCtr("be-1", "be", 0))
			g3Pod := testPod("g3")
			g3 := testCtr("g3-1", "app", 2000)
			h.create(t, g3Pod, g3)
			h.kicked()
			h.remove(t, g3Pod, g3)
			if !h.kicked() {
				t.Error("removal with a shared-pool container on the node: no kick")
			}
			g4Pod := testPod("g4")
			h.create(t, g4Pod, testCtr("g4-1", "app", 2000))
			h.kicked()
			h.removePod(t, g4Pod)
			if !h.kicked() {
				t.Error("pod end with a shared-pool container on the node: no kick")
			}
		})
	}
}
