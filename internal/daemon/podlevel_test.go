package daemon

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// ht-2s-6c, the kubelet's topoDualSocketHT: NUMA node 0 = socket 0 =
// CPUs 0-5,12-17, node 1 = 6-11,18-23, core k = {k, k+12}; core 0
// (0,12) reserved. The pod scope with pod_level_resource_managers on.
const podLevelTOML = "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,12\"\n" +
	"topology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\npod_level_resource_managers = true\n"

// TestPodLevelPools: a pod with spec.resources of 4 CPUs (the sandbox's
// pod_resources) gets one block, its whole-CPU container a slice of it,
// its other containers the rest as the pod's private pool; the
// node-shared containers never run on the block. Worked out by hand (as
// pkg/policy's TestPodLevelBlockSlicesAndPool):
//   - block: the pod hint is node 0 (narrowest preferred), the kubelet's
//     allocateCPUs of 4 there: the two lowest free cores, 1-2,13-14;
//   - a (2 CPUs): takeByTopology in the block, core 1 = 1,13;
//   - b (500m/1) and c (250m/500m): the pool, 1-2,13-14 less 1,13 = 2,14;
//   - node-shared: 0-23 less the block = 0,3-12,15-23;
//   - d (1 CPU): takeByTopology of 1 in the pool 2,14 is CPU 2; b and c
//     follow the shrunk pool, 14;
//   - a removed for good: its slice goes back to the pool, 1,13-14;
//   - the pod removed: the block goes back, 0-23.
//
// In both modes (the plugin writes the cgroups, or the runtime applies
// its answers and pushes), and across a restart of the plugin (journal
// replay, then Synchronize) before a is removed.
func TestPodLevelPools(t *testing.T) {
	for _, mode := range []string{config.SharedUpdatesDirect, config.SharedUpdatesInAnswer} {
		t.Run(mode, func(t *testing.T) { testPodLevelPools(t, mode) })
	}
}

func testPodLevelPools(t *testing.T, mode string) {
	topo := loadFixture(t, "ht-2s-6c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, podLevelTOML+"shared_pool_updates = \""+mode+"\"\n")
	r := startDaemon(t, rt, cfg, topo)
	ctx := context.Background()
	start := func(cs ...*api.Container) {
		t.Helper()
		for _, c := range cs {
			if err := rt.StartContainer(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
	}
	create := func(pod *api.PodSandbox, name string, req, lim int64, want string) *api.Container {
		t.Helper()
		c, _, err := rt.create(pod, name, req, lim)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := rt.cpus(c); got != want {
			t.Fatalf("%s answered %q, want %s", name, got, want)
		}
		start(c)
		return c
	}
	// expect checks every cgroup once the worker settled.
	expect := func(when string, want map[*api.Container]string) {
		t.Helper()
		settle(t, r.d)
		for c, cpus := range want {
			if got := cgroupCPUs(t, rt, c); got != cpus {
				t.Errorf("%s: %s's cgroup holds %q, want %s", when, c.Name, got, cpus)
			}
		}
	}

	be1 := create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0, "0-23")
	p := rt.addPod(podSpec{uid: "p", name: "p", qos: "guaranteed", podMilli: 4000})
	a := create(p, "a", 2000, 2000, "1,13")
	expect("a admitted", map[*api.Container]string{be1: "0,3-12,15-23", a: "1,13"})
	b := create(p, "b", 500, 1000, "2,14")
	c := create(p, "c", 250, 500, "2,14")
	be2 := create(rt.addPod(podSpec{uid: "be2", name: "be2", qos: "besteffort"}), "be2", 0, 0, "0,3-12,15-23")
	expect("b and c admitted", map[*api.Container]string{be1: "0,3-12,15-23", be2: "0,3-12,15-23", a: "1,13", b: "2,14", c: "2,14"})
	d := create(p, "d", 1000, 1000, "2")
	both := map[*api.Container]string{be1: "0,3-12,15-23", be2: "0,3-12,15-23", a: "1,13", b: "14", c: "14", d: "2"}
	expect("d admitted", both)

	// /state shows the block and the pool, not the block as held.
	sv := r.d.State()
	if !reflect.DeepEqual(sv.PodPools, []observe.PodPoolView{{PodUID: "p", Block: "1-2,13-14", Pool: "14", NUMA: []int{0}}}) ||
		len(sv.Held) != 0 || sv.Shared != "0,3-12,15-23" {
		t.Errorf("/state: pod pools %+v, held %+v, shared %s; want p's block 1-2,13-14 pool 14 on node 0, none held, 0,3-12,15-23",
			sv.PodPools, sv.Held, sv.Shared)
	}

	// The NodeResourceTopology export counts the block as taken on node
	// 0: 10 allocatable (12 less the reserved core), 6 available.
	obj, err := observe.NRTObject(r.d.led.View(), "w1")
	if err != nil {
		t.Fatal(err)
	}
	if z := obj.Zones[0].Resources[0]; z.Allocatable != 10 || z.Available != 6 {
		t.Errorf("node-0 cpu allocatable %d available %d, want 10 and 6", z.Allocatable, z.Available)
	}

	// A restart: the pod's pool and its containers come back from the
	// journal, and Synchronize keeps everyone where they are.
	r.stop(t)
	r = startDaemon(t, rt, cfg, topo)
	expect("after a restart", both)
	if got := readLedger(r.d, (*ledger.Tx).State).PodShared["p"]; !slices.Equal(got, []string{"b", "c"}) {
		t.Errorf("restored pool containers of p %v, want [b c]", got)
	}
	// A resize of b is answered with its pod's pool, not the node's.
	ups, err := rt.UpdateContainer(ctx, b, milliCPU(600, 1000))
	if err != nil {
		t.Fatal(err)
	}
	if cpus, _ := answered(ups, b.Id); cpus != "14" {
		t.Errorf("resize of b answered %q, want 14", cpus)
	}

	// a removed for good: its slice returns to the pod's pool.
	rt.stop(a)
	rt.remove(a)
	expect("a removed", map[*api.Container]string{be1: "0,3-12,15-23", be2: "0,3-12,15-23", b: "1,13-14", c: "1,13-14", d: "2"})

	// The pod removed: the block returns to the node's pool.
	for _, c := range []*api.Container{b, c, d} {
		rt.stop(c)
	}
	rt.removePod(p)
	expect("p removed", map[*api.Container]string{be1: "0-23", be2: "0-23"})
	if st := readLedger(r.d, (*ledger.Tx).State); len(st.PodShared) != 0 || len(st.Alloc.Assignments) != 0 {
		t.Errorf("after p's removal: pool containers %v, assignments %v; want none", st.PodShared, st.Alloc.Assignments)
	}
}

// TestPodLevelEmptyPoolRefused: a pod of 2 CPUs whose shared container
// runs on the whole block (node 0's lowest free core, 1,13) refuses an
// exclusive container that would take the pool's last CPUs, with the
// kubelet's reason first; the refused container changes nothing.
func TestPodLevelEmptyPoolRefused(t *testing.T) {
	topo := loadFixture(t, "ht-2s-6c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), podLevelTOML), topo)
	ctx := context.Background()

	q := rt.addPod(podSpec{uid: "q", name: "q", qos: "guaranteed", podMilli: 2000})
	s, _, err := rt.create(q, "s", 500, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(s); got != "1,13" {
		t.Fatalf("s answered %q, want 1,13 (the whole block: core 1)", got)
	}
	if err := rt.StartContainer(ctx, s); err != nil {
		t.Fatal(err)
	}
	_, _, err = rt.create(q, "x", 2000, 2000)
	if err == nil || !strings.Contains(err.Error(), policy.ReasonEmptyPodSharedPool+": pod rejected, sum of exclusive container cpu requests equals pod budget") {
		t.Fatalf("x: err %v, want the kubelet's EmptyPodSharedPoolError", err)
	}
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, s); got != "1,13" {
		t.Errorf("s's cgroup holds %q after the refusal, want 1,13", got)
	}
	if readLedger(r.d, func(l *ledger.Tx) bool { _, ok := l.Engine().Assignment(l.State(), "q", "x"); return ok }) {
		t.Error("the refused x holds CPUs")
	}
}
