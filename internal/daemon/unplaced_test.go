package daemon

import (
	"context"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// TestUnplacedContainerStarts: a container whose CreateContainer answer
// never reached the runtime (the runtime gave up waiting, dropped the
// plugin, and created the container after the reconnection's
// Synchronize) starts unpinned, on every CPU. Its StartContainer is the
// first the plugin hears of it: it joins the shared pool there, logged,
// and is off the exclusive CPUs once its start returns (direct) or once
// the worker pushed the pool (in-answer).
func TestUnplacedContainerStarts(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) {
			rt := startRuntime(t, nritest.WithUnpinnedCPUs("0-7"), nritest.WithUnpinnedMems("0"))
			log, hook := hookedLogger(t)
			r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0+"shared_pool_updates = \""+mode+"\"\n"), topo, WithLogger(log))
			ctx := context.Background()

			g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
			c2, _, err := rt.create(g1, "c2", 2000, 2000)
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.StartContainer(ctx, c2); err != nil {
				t.Fatal(err)
			}
			if got := rt.cpus(c2); got != "1,5" {
				t.Fatalf("c2 on %q, want 1,5", got)
			}

			late := rt.newCtr(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "late", 0, 0)
			rt.CreateContainerAwayNotStarted(late)
			if got := cgroupCPUs(t, rt, late); got != "0-7" {
				t.Fatalf("late's cgroup %q before its start, want 0-7 (unpinned)", got)
			}
			if err := rt.StartContainer(ctx, late); err != nil {
				t.Fatal(err)
			}
			settle(t, r.d)
			if got := cgroupCPUs(t, rt, late); got != "0,2-4,6-7" {
				t.Errorf("late's cgroup %q once started, want the shared pool 0,2-4,6-7", got)
			}
			if mode == config.SharedUpdatesInAnswer {
				if got := rt.cpus(late); got != "0,2-4,6-7" {
					t.Errorf("the runtime's record of late %q, want 0,2-4,6-7", got)
				}
			}
			if !logged(hook, logrus.WarnLevel, "the plugin never placed") {
				t.Error("no warning about a container the plugin never placed")
			}
			known := false
			for _, c := range r.d.State().Containers {
				known = known || (c.ID == late.Id && !c.Exclusive)
			}
			if !known {
				t.Errorf("/state does not list late in the shared pool: %+v", r.d.State().Containers)
			}

			// The pod's removal gives core 1 back to it too.
			rt.stop(c2)
			rt.remove(c2)
			rt.removePod(g1)
			settle(t, r.d)
			if got := cgroupCPUs(t, rt, late); got != "0-7" {
				t.Errorf("late's cgroup %q once c2's pod was removed, want 0-7", got)
			}
		})
	}
}

// TestSyncLogsMoved: a container the plugin placed but that runs
// elsewhere (its answer was lost: the runtime ran it with the kubelet's
// cpuset and dropped the plugin) is moved at the reconnection's
// Synchronize, logged.
func TestSyncLogsMoved(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t, nritest.WithUnpinnedCPUs("0-7"), nritest.WithUnpinnedMems("0"))
	log, hook := hookedLogger(t)
	cfg := testConfig(t, rt, t.TempDir(), reserveCore0)
	r := startDaemon(t, rt, cfg, topo, WithLogger(log))
	ctx := context.Background()

	c2 := rt.newCtr(rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"}), "c2", 2000, 2000)
	if err := rt.CreateContainerAnswerLost(ctx, rt.PodOf(c2), c2); err != nil {
		t.Fatal(err)
	}
	if got := cgroupCPUs(t, rt, c2); got != "0-7" {
		t.Fatalf("c2's cgroup %q, want 0-7 (the answer was lost)", got)
	}
	r.stop(t)
	r = startDaemon(t, rt, cfg, topo, WithLogger(log))
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, c2); got != "1,5" {
		t.Errorf("c2's cgroup %q after the reconnection, want 1,5", got)
	}
	found := false
	for _, e := range hook.AllEntries() {
		found = found || (e.Data["container"] == "c2" && e.Data["found_cpus"] == "0-7" && e.Data["cpus"] == "1,5")
	}
	if !found {
		t.Error("no log line naming c2 moved from 0-7 to 1,5")
	}
}
