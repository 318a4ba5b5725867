package daemon

import (
	"context"
	"os"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
)

// TestHeldUpdatesRideInTheNextAnswer: on a containerd whose NRI deadlocks
// on unsolicited updates (2.3.7), under in-answer, the plugin never calls
// UpdateContainers: the CPU a removed pod gives back reaches the shared
// container with the next answer that can carry it (here a resize's
// UpdateContainer, as in the e2e deadlock spec), and the reconcile loop's
// repair of a drifted exclusive container waits for one too. On 2.4.2 the
// same removal is pushed at once.
//
// ht-1s-4c: CPUs 0-7, siblings {k, k+4}; 0,4 reserved. g (2 CPUs) takes
// core 1 = {1,5}; the pool is then 0,2-4,6-7, and 0-7 again once g goes.
func TestHeldUpdatesRideInTheNextAnswer(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	ctx := context.Background()
	for _, tc := range []struct {
		version string
		held    bool
	}{{"v2.3.7", true}, {"v2.4.2", false}} {
		t.Run(tc.version, func(t *testing.T) {
			rt := startRuntime(t, nritest.WithVersion(tc.version))
			r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0+"shared_pool_updates = \"in-answer\"\n"), topo)
			bu, _, err := rt.create(rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"}), "bu", 250, 500)
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.StartContainer(ctx, bu); err != nil {
				t.Fatal(err)
			}
			gp := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
			g, _, err := rt.create(gp, "g", 2000, 2000)
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.StartContainer(ctx, g); err != nil {
				t.Fatal(err)
			}
			settle(t, r.d)
			if got := rt.cpus(bu); got != "0,2-4,6-7" {
				t.Fatalf("bu on %q after g's admission, want 0,2-4,6-7 (in the answer)", got)
			}
			rt.removePod(gp)
			settle(t, r.d)
			heldCount := gatherByLabels(t, r.d, "nri_cpualign_updates_deferred_total")[""]
			if !tc.held {
				if rt.Pushes() == 0 || rt.cpus(bu) != "0-7" || heldCount != 0 {
					t.Fatalf("containerd %s: pushes %d, bu on %q, held %v; want a push, 0-7, nothing held", tc.version, rt.Pushes(), rt.cpus(bu), heldCount)
				}
				return
			}
			if rt.Pushes() != 0 {
				t.Fatalf("containerd %s: %d unsolicited updates, want none", tc.version, rt.Pushes())
			}
			if got := rt.cpus(bu); got != "0,2-4,6-7" {
				t.Fatalf("bu on %q before any answer, want 0,2-4,6-7 (nothing pushed)", got)
			}
			if heldCount != 1 {
				t.Fatalf("nri_cpualign_updates_deferred_total %v after the pod's removal, want 1", heldCount)
			}
			// The next event that can answer with updates carries the pool.
			ups, err := rt.UpdateContainer(ctx, bu, milliCPU(300, 600))
			if err != nil {
				t.Fatal(err)
			}
			if cpus, _ := answered(ups, bu.Id); cpus != "0-7" {
				t.Errorf("bu's resize answered %q, want 0-7", cpus)
			}
			if got := rt.cpus(bu); got != "0-7" {
				t.Errorf("bu on %q after its resize, want 0-7", got)
			}

			// A drifted exclusive container: the reconcile loop holds its
			// repair for the next answer, here another container's
			// creation.
			g2p := rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"})
			g2, _, err := rt.create(g2p, "g2", 2000, 2000)
			if err != nil {
				t.Fatal(err)
			}
			if err := rt.StartContainer(ctx, g2); err != nil {
				t.Fatal(err)
			}
			settle(t, r.d)
			want := rt.cpus(g2)
			writeCgroupCPUs(t, rt, g2, "0-7")
			if n := r.d.ReconcileNow(); n != 1 {
				t.Fatalf("reconcile found %d drifted, want 1", n)
			}
			if rt.Pushes() != 0 || cgroupCPUs(t, rt, g2) != "0-7" {
				t.Fatalf("the repair was pushed (%d pushes, cgroup %q): want it held", rt.Pushes(), cgroupCPUs(t, rt, g2))
			}
			_, ups, err = rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be", 0, 0)
			if err != nil {
				t.Fatal(err)
			}
			if cpus, _ := answered(ups, g2.Id); cpus != want {
				t.Errorf("the next CreateContainer answered g2 %q, want its %q", cpus, want)
			}
			if got := cgroupCPUs(t, rt, g2); got != want {
				t.Errorf("g2's cgroup %q after the answer, want %q", got, want)
			}
		})
	}
}

// writeCgroupCPUs changes c's (fake) cgroup behind the plugin's back.
func writeCgroupCPUs(t *testing.T, rt *fakeRuntime, c *api.Container, cpus string) {
	t.Helper()
	if err := os.WriteFile(rt.cgroupFile(c), []byte(cpus+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}
