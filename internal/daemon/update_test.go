package daemon

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// answered is the cpuset.cpus and cpuset.mems an UpdateContainer answer
// gives container id ("-" when the answer does not name it).
func answered(updates []*api.ContainerUpdate, id string) (cpus, mems string) {
	for _, u := range updates {
		if u.GetContainerId() == id {
			cpu := u.GetLinux().GetResources().GetCpu()
			return cpu.GetCpus(), cpu.GetMems()
		}
	}
	return "-", "-"
}

// TestUpdateAnswersCurrentCPUSet: every update of a known container's
// resources is answered with the cpuset it must have now, in both modes.
// The fake runtime writes the recorded cpuset back into the cgroup on every
// update, as containerd does: under direct the record of a shared-pool
// container holds the pool of its creation, so without the answer a resize
// would put it back on CPUs an exclusive container owns.
//
// ht-1s-4c: CPUs 0-7, siblings {k, k+4}; 0,4 reserved. c2 (2 CPUs) takes
// core 1 = {1,5}; the pool is then 0,2-4,6-7, and 0-7 again once c2 stops.
func TestUpdateAnswersCurrentCPUSet(t *testing.T) {
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) { testUpdateAnswersCurrentCPUSet(t, mode) })
	}
}

func testUpdateAnswersCurrentCPUSet(t *testing.T, mode string) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0+"shared_pool_updates = \""+mode+"\"\n"), topo)
	ctx := context.Background()

	bu, _, err := rt.create(rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"}), "bu", 250, 500)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, bu); err != nil {
		t.Fatal(err)
	}
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	c2, _, err := rt.create(g1, "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.StartContainer(ctx, c2); err != nil {
		t.Fatal(err)
	}
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, bu); got != "0,2-4,6-7" {
		t.Fatalf("bu cgroup %q after c2 started, want 0,2-4,6-7", got)
	}

	// A kubelet resize of bu: shares, quota and memory, no cpuset.
	ups, err := rt.UpdateContainer(ctx, bu, milliCPU(300, 600))
	if err != nil {
		t.Fatal(err)
	}
	if cpus, mems := answered(ups, bu.Id); cpus != "0,2-4,6-7" || mems != "" {
		t.Errorf("resize of bu answered cpus %q mems %q, want 0,2-4,6-7 and none", cpus, mems)
	}
	if got := cgroupCPUs(t, rt, bu); got != "0,2-4,6-7" {
		t.Errorf("bu cgroup %q after its resize, want 0,2-4,6-7 (not c2's core 1)", got)
	}
	if got := rt.cpus(bu); got != "0,2-4,6-7" {
		t.Errorf("the runtime's record of bu %q after its resize, want 0,2-4,6-7", got)
	}

	// An update without any CPU value (memory only) is answered too.
	ups, err = rt.UpdateContainer(ctx, bu, &api.LinuxResources{Memory: &api.LinuxMemory{Limit: api.Int64(256 << 20)}})
	if err != nil {
		t.Fatal(err)
	}
	if cpus, _ := answered(ups, bu.Id); cpus != "0,2-4,6-7" {
		t.Errorf("memory-only update of bu answered cpus %q, want 0,2-4,6-7", cpus)
	}

	// The exclusive container keeps its CPUs and the mems it was created
	// with (node 0, the fixture's only node).
	ups, err = rt.UpdateContainer(ctx, c2, milliCPU(2000, 2000))
	if err != nil {
		t.Fatal(err)
	}
	if cpus, mems := answered(ups, c2.Id); cpus != "1,5" || mems != "0" {
		t.Errorf("resize of c2 keeping 2 CPUs answered cpus %q mems %q, want 1,5 and 0", cpus, mems)
	}
	if got := cgroupCPUs(t, rt, c2); got != "1,5" {
		t.Errorf("c2 cgroup %q after its resize, want 1,5", got)
	}

	// c2's pod goes (a stop alone keeps its CPUs for the pod): the pool is
	// 0-7 again, and so is the answer to the next resize of bu.
	rt.stop(c2)
	rt.remove(c2)
	rt.removePod(g1)
	settle(t, r.d)
	ups, err = rt.UpdateContainer(ctx, bu, milliCPU(250, 500))
	if err != nil {
		t.Fatal(err)
	}
	if cpus, _ := answered(ups, bu.Id); cpus != "0-7" {
		t.Errorf("resize of bu after g1 went answered cpus %q, want 0-7", cpus)
	}
	if got := cgroupCPUs(t, rt, bu); got != "0-7" {
		t.Errorf("bu cgroup %q after g1 went and bu resized, want 0-7", got)
	}

	// A refused resize answers nothing and moves nothing.
	half, _, err := rt.create(rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"}), "half", 500, 500)
	if err != nil {
		t.Fatal(err)
	}
	ups, err = rt.UpdateContainer(ctx, half, milliCPU(1000, 1000))
	if err == nil || !strings.Contains(err.Error(), "InPlaceResizeRejected") || len(ups) != 0 {
		t.Errorf("resize 500m -> 1 CPU = %q, %v; want InPlaceResizeRejected and no update", rt.describe(ups), err)
	}
	if got := cgroupCPUs(t, rt, half); got != "0-7" {
		t.Errorf("half cgroup %q after a refused resize, want 0-7", got)
	}
}

// TestPostUpdateRestoresCgroup: after a runtime update a cgroup that does
// not hold the container's assignment (the pool moved between the answer
// and the OCI runtime's write, or another plugin set a cpuset) is restored,
// written under direct, through the runtime under in-answer, and counted.
// A cgroup that is right is left alone.
func TestPostUpdateRestoresCgroup(t *testing.T) {
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) { testPostUpdateRestoresCgroup(t, mode) })
	}
}

func testPostUpdateRestoresCgroup(t *testing.T, mode string) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0+"shared_pool_updates = \""+mode+"\"\n"), topo)
	ctx := context.Background()

	be1, _, err := rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c2, _, err := rt.create(rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"}), "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []*api.Container{be1, c2} {
		if err := rt.StartContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, r.d)
	pushes := rt.Pushes()

	// Nothing wrong: nothing done.
	if err := rt.PostUpdateContainer(ctx, be1); err != nil {
		t.Fatal(err)
	}
	settle(t, r.d)
	if n := rt.Pushes(); n != pushes {
		t.Errorf("%d pushes after a PostUpdateContainer of a right cgroup, want none", n-pushes)
	}

	rt.WriteCgroup(be1, "0-7")
	rt.WriteCgroup(c2, "0-7")
	for _, c := range []*api.Container{be1, c2} {
		if err := rt.PostUpdateContainer(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	settle(t, r.d)
	for c, want := range map[*api.Container]string{be1: "0,2-4,6-7", c2: "1,5"} {
		if got := cgroupCPUs(t, rt, c); got != want {
			t.Errorf("%s cgroup %q after PostUpdateContainer, want %q", c.Name, got, want)
		}
	}
	n := rt.Pushes() - pushes
	if mode == config.SharedUpdatesDirect && n != 0 {
		t.Errorf("direct restored through the runtime: %d pushes", n)
	}
	if mode == config.SharedUpdatesInAnswer && n == 0 {
		t.Error("in-answer restored without the runtime")
	}
	srv := httptest.NewServer(r.d.Handler())
	defer srv.Close()
	if body := get(t, srv.URL+"/metrics"); !strings.Contains(body, "nri_cpualign_update_repairs_total 2") {
		t.Errorf("repairs metric missing or wrong:\n%s", grepLines(body, "update_repairs"))
	}
}
