package daemon

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
)

// hookedLogger is testLogger with the entries also kept for inspection.
func hookedLogger(t *testing.T) (*logrus.Logger, *logtest.Hook) {
	l := testLogger(t)
	l.SetLevel(logrus.DebugLevel)
	return l, logtest.NewLocal(l)
}

// logged reports whether an entry at level has a message containing msg.
func logged(h *logtest.Hook, level logrus.Level, msg string) bool {
	for _, e := range h.AllEntries() {
		if e.Level == level && strings.Contains(e.Message, msg) {
			return true
		}
	}
	return false
}

// metricLines fails the test unless /metrics has every line.
func metricLines(t *testing.T, d *Daemon, lines ...string) {
	t.Helper()
	srv := httptest.NewServer(d.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/metrics")
	for _, line := range lines {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
}

// rejection is the text of a refused CreateContainer after the gRPC
// wrapping.
func rejection(err error) string {
	msg := err.Error()
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	return msg
}

// Under strict-cpu-reservation the exclusive containers take every
// non-reserved CPU, as the kubelet lets them: the shared pool is empty,
// its containers run on the reserved CPUs meanwhile and move back when
// exclusive CPUs are released. ht-1s-4c: core k = {k, k+4}; reserved
// core 0.
func TestSharedPoolEmptyStrict(t *testing.T) {
	for _, mode := range []string{"direct", "in-answer"} {
		t.Run(mode, func(t *testing.T) {
			topo := loadFixture(t, "ht-1s-4c")
			rt := startRuntime(t)
			stateDir := t.TempDir()
			cfg := testConfig(t, rt, stateDir, reserveCore0+"shared_pool_updates = \""+mode+"\"\n"+
				"[cpu_manager_policy_options]\nstrict-cpu-reservation = \"true\"\n")
			log, hook := hookedLogger(t)
			r := startDaemon(t, rt, cfg, topo, WithLogger(log))
			// The updates of other containers arrive in the answer
			// (in-answer) or are written into their cgroups before the
			// new container's start returns (direct), which is then the
			// truth: the runtime's record keeps the creation's cpuset.
			follow := func(what string, cond func() bool) { t.Helper(); waitFor(t, what, cond) }
			cpus := func(c *api.Container) string {
				if mode == "direct" {
					return cgroupCPUs(t, rt, c)
				}
				return rt.cpus(c)
			}
			start := func(c *api.Container) {
				t.Helper()
				if err := rt.StartContainer(context.Background(), c); err != nil {
					t.Fatal(err)
				}
			}

			be1, _, err := rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			start(be1)
			// Strict: the reserved core is not shared.
			if got := cpus(be1); got != "1-3,5-7" {
				t.Fatalf("be1 on %q, want 1-3,5-7", got)
			}
			g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
			c2, _, err := rt.create(g1, "c2", 2000, 2000)
			if err != nil {
				t.Fatal(err)
			}
			if got := rt.cpus(c2); got != "1,5" {
				t.Fatalf("c2 on %q, want core 1 = 1,5", got)
			}
			start(c2)
			follow("be1 on 2-3,6-7", func() bool { return cpus(be1) == "2-3,6-7" })
			// The last 4 non-reserved CPUs: admitted, the pool empties
			// and be1 moves to the reserved core.
			c4, _, err := rt.create(rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"}), "c4", 4000, 4000)
			if err != nil {
				t.Fatalf("the pool's last CPUs refused: %v", err)
			}
			if got := rt.cpus(c4); got != "2-3,6-7" {
				t.Fatalf("c4 on %q, want 2-3,6-7", got)
			}
			start(c4)
			follow("be1 on the reserved 0,4", func() bool { return cpus(be1) == "0,4" })
			if !logged(hook, logrus.WarnLevel, "shared pool is empty: shared-pool containers run on the reserved CPUs") {
				t.Error("no warning when the pool emptied")
			}
			metricLines(t, r.d, "nri_cpualign_shared_pool_empty 1", "nri_cpualign_shared_cpus 0", "nri_cpualign_exclusive_cpus 6")
			// A new shared-pool container starts on the reserved core.
			bu, ups, err := rt.create(rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"}), "bu", 250, 500)
			if err != nil {
				t.Fatal(err)
			}
			start(bu)
			if got := cpus(bu); got != "0,4" || len(ups) != 0 {
				t.Fatalf("bu on %q with updates %q; want 0,4 and none", got, rt.describe(ups))
			}
			// One more exclusive CPU: none left.
			if _, _, err := rt.create(rt.addPod(podSpec{uid: "g3", name: "g3", qos: "guaranteed"}), "one", 1000, 1000); err == nil ||
				!strings.HasPrefix(rejection(err), "InsufficientCPUs") {
				t.Fatalf("an exclusive CPU beyond the pool: got %v", err)
			}

			// A restart restores the empty pool (the kubelet's own state
			// check refuses it) and leaves everything where it is.
			r.stop(t)
			log2, _ := hookedLogger(t)
			r = startDaemon(t, rt, cfg, topo, WithLogger(log2))
			settle(t, r.d) // direct: the pass after Synchronize rewrites every shared-pool cgroup
			for c, want := range map[*api.Container]string{be1: "0,4", bu: "0,4", c2: "1,5", c4: "2-3,6-7"} {
				if got := cpus(c); got != want {
					t.Errorf("after the restart %s is on %q, want %q", c.Name, got, want)
				}
			}
			if v := r.d.State(); v.Shared != "0,4" {
				t.Errorf("/state shared %q, want the reserved 0,4 where shared-pool containers run", v.Shared)
			}

			// c2's pod goes: core 1 is shared again and both
			// shared-pool containers move there.
			rt.stop(c2)
			rt.removePod(g1)
			settle(t, r.d)
			follow("be1 and bu on 1,5", func() bool { return cpus(be1) == "1,5" && cpus(bu) == "1,5" })
			metricLines(t, r.d, "nri_cpualign_shared_pool_empty 0", "nri_cpualign_shared_cpus 2")
			if !logged(hook, logrus.WarnLevel, "shared pool is empty") {
				t.Error("the first daemon did not warn")
			}
		})
	}
}

// With no reserved CPUs (written explicitly) the daemon starts with a
// warning; a shared-pool container has nowhere to run once every CPU is
// exclusive, so the daemon never lets that happen while one runs, and
// refuses new ones while the pool is empty.
func TestZeroReservation(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	// Omitted: refused as before.
	if _, err := New(testConfig(t, rt, t.TempDir(), "cpu_manager_policy = \"static\"\n"), WithTopology(topo), WithLogger(testLogger(t))); err == nil ||
		!strings.Contains(err.Error(), "reserved_cpu_count = 0") {
		t.Fatalf("static policy without a reservation: got %v, want a refusal naming reserved_cpu_count = 0", err)
	}
	log, hook := hookedLogger(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), "cpu_manager_policy = \"static\"\nreserved_cpu_count = 0\n"), topo, WithLogger(log))
	if !logged(hook, logrus.WarnLevel, "static policy with no reserved CPUs") {
		t.Error("no start-up warning")
	}

	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	be1, _, err := rt.create(bePod, "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(be1); got != "0-7" {
		t.Fatalf("be1 on %q, want 0-7", got)
	}
	// All 8 CPUs: the kubelet's policy would admit it and leave be1 on
	// them; here be1 would have no CPU.
	_, _, err = rt.create(rt.addPod(podSpec{uid: "g8", name: "g8", qos: "guaranteed"}), "all", 8000, 8000)
	if err == nil || !strings.HasPrefix(rejection(err), "InsufficientCPUs") || !strings.Contains(err.Error(), "1 running shared-pool containers would have no CPU") {
		t.Fatalf("taking be1's last CPU: got %v", err)
	}
	// 7 CPUs: cores 0-2 whole, then CPU 3 (core 3's lowest); be1 keeps 7.
	g7, _, err := rt.create(rt.addPod(podSpec{uid: "g7", name: "g7", qos: "guaranteed"}), "seven", 7000, 7000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(g7); got != "0-6" {
		t.Fatalf("seven on %q, want 0-6", got)
	}
	// Its start waits until the plugin wrote be1's cgroup.
	if err := rt.StartContainer(context.Background(), g7); err != nil {
		t.Fatal(err)
	}
	if got := cgroupCPUs(t, rt, be1); got != "7" {
		t.Fatalf("be1 on %q once seven started, want 7", got)
	}

	// Without shared-pool containers the last CPU may go, as in the
	// kubelet.
	rt.stop(be1)
	rt.remove(be1)
	g1Pod := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	g1, _, err := rt.create(g1Pod, "one", 1000, 1000)
	if err != nil {
		t.Fatalf("the last CPU with no shared-pool container: %v", err)
	}
	if got := rt.cpus(g1); got != "7" {
		t.Fatalf("one on %q, want 7", got)
	}
	if !logged(hook, logrus.WarnLevel, "shared pool is empty and no CPUs are reserved") {
		t.Error("no warning when the pool emptied")
	}
	metricLines(t, r.d, "nri_cpualign_shared_pool_empty 1", "nri_cpualign_shared_cpus 0")
	// Now a shared-pool container has no CPU: refused, not given "".
	_, _, err = rt.create(bePod, "be2", 0, 0)
	if err == nil || !strings.HasPrefix(rejection(err), "InsufficientCPUs") || !strings.Contains(err.Error(), "no CPU for a shared-pool container") {
		t.Fatalf("a shared-pool container with no CPU: got %v", err)
	}
	// CPU 7 comes back with its pod's removal: be2 starts there.
	rt.stop(g1)
	rt.removePod(g1Pod)
	be2, _, err := rt.create(bePod, "be2", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(be2); got != "7" {
		t.Fatalf("be2 on %q, want 7", got)
	}
	if !logged(hook, logrus.InfoLevel, "shared pool has CPUs again") {
		t.Error("no info line when the pool had CPUs again")
	}
	metricLines(t, r.d, "nri_cpualign_shared_pool_empty 0", "nri_cpualign_shared_cpus 1")
}

// The same rule when the plugin places containers created while it was
// away: an exclusive container that would leave a running shared-pool
// container no CPU stays in the shared pool, with a warning.
func TestZeroReservationSynchronize(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t, nritest.WithUnpinnedCPUs("0-7"))
	all := rt.createAway(rt.addPod(podSpec{uid: "g8", name: "g8", qos: "guaranteed"}), "all", 8000, 8000)
	be1 := rt.createAway(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
	log, hook := hookedLogger(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), "cpu_manager_policy = \"static\"\nreserved_cpu_count = 0\n"), topo, WithLogger(log))
	// Oldest first: all 8 CPUs would strand be1, so "all" stays shared.
	settle(t, r.d)
	if got, got2 := cgroupCPUs(t, rt, all), cgroupCPUs(t, rt, be1); got != "0-7" || got2 != "0-7" {
		t.Fatalf("all on %q, be1 on %q; want both on 0-7", got, got2)
	}
	for _, c := range r.d.State().Containers {
		if c.Exclusive {
			t.Errorf("%s/%s exclusive on %s, want every container shared", c.Pod, c.Container, c.CPUs)
		}
	}
	if !logged(hook, logrus.WarnLevel, "cannot be admitted now") {
		t.Error("no warning for the container left in the shared pool")
	}
}
