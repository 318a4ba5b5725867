package policy_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// The tests below run on ht-2s-6c, the kubelet's topoDualSocketHT:
// NUMA node 0 = socket 0 = CPUs 0-5,12-17, node 1 = 6-11,18-23, core k =
// {k, k+12}. CPUs 0,12 (core 0) are reserved, so node 0 has 10 assignable
// CPUs (cores 1-5) and node 1 all 12.

// podLevel is the pod-scope engine with pod_level_resource_managers on.
func podLevel(t *testing.T, scope string, on bool) *policy.Engine {
	t.Helper()
	return newEngine(t, "ht-2s-6c", policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "single-numa-node",
		TopologyScope: scope, ReservedCPUs: cpuset.New(0, 12), PodLevelResourceManagers: on})
}

// inPod is a container of a pod whose spec.resources asks for budget
// CPUs (request = limit), the container itself asking req/lim milli-CPUs.
func inPod(pod, ctr string, budget, req, lim int64) policy.Request {
	return policy.Request{Pod: pod, Container: ctr, QoS: policy.Guaranteed, CPURequestMilli: req, CPULimitMilli: lim,
		PodCPURequestMilli: budget * 1000, PodCPULimitMilli: budget * 1000}
}

func wantEmptyPool(t *testing.T, err error, budget, exclusive int) {
	t.Helper()
	var ep *policy.EmptyPodSharedPoolError
	if !errors.As(err, &ep) || ep.Budget != budget || ep.Exclusive != exclusive || ep.Reason() != "EmptyPodSharedPoolError" {
		t.Fatalf("err = %v, want EmptyPodSharedPoolError{budget %d, exclusive %d}", err, budget, exclusive)
	}
}

func TestPodLevelBlockSlicesAndPool(t *testing.T) {
	e := podLevel(t, "pod", true)
	st := e.NewState()

	// Pod p, budget 4. One pod hint for 4 CPUs: both nodes fit them, the
	// narrower-equal node 0 wins (preferred). The block is the kubelet's
	// allocateCPUs on node 0: two whole free cores, the lowest (1, 2):
	// 1-2,13-14. Container a (2 CPUs) takes one whole core of the block by
	// takeByTopology: core 1 = 1,13.
	st, d := add(t, e, st, inPod("p", "a", 4, 2000, 2000))
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	if got := e.SharedCPUs(st).String(); got != "0,3-12,15-23" {
		t.Fatalf("node shared pool = %s, want 0,3-12,15-23 (the whole block left it)", got)
	}

	// Container b asks 500m with a 1-CPU limit: not exclusive, it runs on
	// the pod's private pool, the block less a's slice: 2,14.
	st, d = add(t, e, st, inPod("p", "b", 4, 500, 1000))
	check(t, d, want{cpus: "2,14", mems: "0-1", numa: "0", preferred: true})
	if !d.PodPool {
		t.Fatal("b: PodPool = false, want the pod's private pool")
	}

	// Container c asks 2 exclusive CPUs: that would take 2,14, the last
	// CPUs b runs on: refused, as the kubelet refuses the pod.
	_, _, err := e.Add(st, inPod("p", "c", 4, 2000, 2000))
	wantEmptyPool(t, err, 4, 4)

	// c with 1 CPU fits: takeByTopology of 1 from 2,14 is CPU 2, and b's
	// pool shrinks to 14.
	st, d = add(t, e, st, inPod("p", "c", 4, 1000, 1000))
	check(t, d, want{cpus: "2", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	if pool, ok := e.PodPoolCPUs(st, "p"); !ok || pool.String() != "14" {
		t.Fatalf("pod pool = %s, %t; want 14", pool, ok)
	}

	// Adding b again (the runtime retried) gives the current pool.
	_, d = add(t, e, st, inPod("p", "b", 4, 500, 1000))
	if !d.Existing || !d.PodPool || d.CPUs.String() != "14" {
		t.Fatalf("b again = %+v, want existing pod-pool 14", d)
	}

	// a ends: its slice goes back to the pod, not to the node.
	st = e.Remove(st, "p", "a")
	if pool, _ := e.PodPoolCPUs(st, "p"); pool.String() != "1,13-14" {
		t.Fatalf("pod pool after a = %s, want 1,13-14", pool)
	}
	if got := e.SharedCPUs(st).String(); got != "0,3-12,15-23" {
		t.Fatalf("node shared pool after a = %s, want unchanged 0,3-12,15-23", got)
	}
	if err := e.Validate(st); err != nil {
		t.Fatal(err)
	}
	// The pod ends: its block goes back to the node.
	st = e.RemovePod(st, "p")
	if got := e.SharedCPUs(st).String(); got != "0-23" || len(st.PodShared) != 0 || len(st.Alloc.Assignments) != 0 {
		t.Fatalf("after the pod: shared %s, pod shared %v, assignments %v; want 0-23 and nothing", e.SharedCPUs(st), st.PodShared, st.Alloc.Assignments)
	}
}

// An exclusive container may take the whole budget while no container of
// the pod needs the pool yet; the shared container after it is refused.
func TestPodLevelWholeBudgetThenShared(t *testing.T) {
	e := podLevel(t, "pod", true)
	// Budget 2 on node 0: core 1 = 1,13, all of it to x.
	st, d := add(t, e, e.NewState(), inPod("q", "x", 2, 2000, 2000))
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	next, _, err := e.Add(st, inPod("q", "y", 2, 0, 0))
	wantEmptyPool(t, err, 2, 2)
	if len(next.PodShared) != 0 || !slices.Equal(keys(next.Alloc.Assignments["q"]), []string{"@pod", "x"}) {
		t.Fatalf("refused Add changed the state: %+v", next)
	}
	// An exclusive container larger than the budget cannot be cut from it.
	_, _, err = e.Add(e.NewState(), inPod("r", "big", 2, 4000, 4000))
	var ins *allocator.InsufficientCPUsError
	if !errors.As(err, &ins) || ins.Requested != 4 || ins.Available != 2 {
		t.Fatalf("err = %v, want InsufficientCPUs{4, 2}", err)
	}
}

// Under the container scope the kubelet makes no block: an exclusive
// container of a pod-level pod takes CPUs from the node, its other
// containers run on the node's shared pool, and the pod may mix the two.
func TestPodLevelContainerScopeMixes(t *testing.T) {
	e := podLevel(t, "container", true)
	// a: 2 CPUs; the container hint prefers node 0; core 1 = 1,13.
	st, d := add(t, e, e.NewState(), inPod("p", "a", 4, 2000, 2000))
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	// b: 500m of a 1-CPU limit in a Guaranteed pod: the node's shared
	// pool, everything but 1,13.
	st, d = add(t, e, st, inPod("p", "b", 4, 500, 1000))
	check(t, d, want{cpus: "0,2-12,14-23", mems: "0-1", preferred: true}) // no CPU preference: the any-node hint, preferred
	if d.PodPool {
		t.Fatal("container scope: PodPool = true")
	}
	if _, ok := e.PodPoolCPUs(st, "p"); ok {
		t.Fatal("container scope made a block")
	}

	// With the option off the same container is an invalid Guaranteed
	// request, as before.
	off := podLevel(t, "container", false)
	_, _, err := off.Add(off.NewState(), inPod("p", "b", 4, 500, 1000))
	var re *policy.RequestError
	if !errors.As(err, &re) || re.Field != "cpu_limit_milli" {
		t.Fatalf("option off: err = %v, want RequestError on cpu_limit_milli", err)
	}
}

// Without the option, or with a budget that is not whole CPUs, or a limit
// above the request, the pod scope places containers one by one.
func TestPodLevelNoBlock(t *testing.T) {
	for name, tc := range map[string]struct {
		on  bool
		req policy.Request
	}{
		"option off":     {false, inPod("p", "a", 4, 2000, 2000)},
		"fractional":     {true, policy.Request{Pod: "p", Container: "a", QoS: policy.Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 2000, PodCPURequestMilli: 2500, PodCPULimitMilli: 2500}},
		"limit above":    {true, policy.Request{Pod: "p", Container: "a", QoS: policy.Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 2000, PodCPURequestMilli: 2000, PodCPULimitMilli: 3000}},
		"burstable pod":  {true, policy.Request{Pod: "p", Container: "a", QoS: policy.Burstable, CPURequestMilli: 2000, CPULimitMilli: 2000, PodCPURequestMilli: 4000, PodCPULimitMilli: 4000}},
		"no pod request": {true, guaranteed("p", "a", 2)},
	} {
		t.Run(name, func(t *testing.T) {
			e := podLevel(t, "pod", tc.on)
			if n := e.PodBudget(tc.req); n != 0 {
				t.Fatalf("PodBudget = %d, want 0", n)
			}
			st, _, err := e.Add(e.NewState(), tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := st.Alloc.Assignments["p"][policy.PodPoolEntry]; ok {
				t.Fatalf("a block was made: %v", st.Alloc.Assignments)
			}
		})
	}
	if n := podLevel(t, "pod", true).PodBudget(inPod("p", "a", 4, 0, 0)); n != 4 {
		t.Fatalf("PodBudget = %d, want 4", n)
	}
}

// The block and the pod-pool containers survive a checkpoint, as JSON;
// a checkpoint from before the option (no pod_shared) still loads, and
// pod-pool containers of a pod without a block are dropped with a note.
func TestPodLevelSnapshotRoundTrip(t *testing.T) {
	e := podLevel(t, "pod", true)
	st, _ := add(t, e, e.NewState(), inPod("p", "a", 4, 2000, 2000))
	st, _ = add(t, e, st, inPod("p", "b", 4, 500, 1000))
	raw, err := json.Marshal(e.Snapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	var snap policy.Snapshot
	if err := json.Unmarshal(raw, &snap); err != nil {
		t.Fatal(err)
	}
	if snap.Assignments["p"][policy.PodPoolEntry] != "1-2,13-14" || !slices.Equal(snap.PodShared["p"], []string{"b"}) {
		t.Fatalf("snapshot %s: want block 1-2,13-14 and pod_shared p=[b]", raw)
	}
	back, notes, err := e.FromSnapshot(snap)
	if err != nil || len(notes) != 0 {
		t.Fatalf("FromSnapshot = %v, notes %v", err, notes)
	}
	if pool, ok := e.PodPoolCPUs(back, "p"); !ok || pool.String() != "2,14" || !slices.Equal(back.PodShared["p"], []string{"b"}) {
		t.Fatalf("restored pool %s (%t), pod shared %v; want 2,14 and [b]", pool, ok, back.PodShared)
	}
	if err := e.Validate(back); err != nil {
		t.Fatal(err)
	}

	old := []byte(`{"shared":"0,3-23","reserved":"0,12","assignments":{"p":{"a":"1-2"}}}`)
	if err := json.Unmarshal(old, &snap); err != nil {
		t.Fatal(err)
	}
	snap.PodShared = nil
	back, notes, err = e.FromSnapshot(snap)
	if err != nil || len(notes) != 0 || back.PodShared != nil || back.Alloc.Assignments["p"]["a"].String() != "1-2" {
		t.Fatalf("old checkpoint: %v, notes %v, state %+v", err, notes, back)
	}

	snap.PodShared = map[string][]string{"p": {"b"}}
	back, notes, _ = e.FromSnapshot(snap)
	if len(notes) != 1 || back.PodShared != nil {
		t.Fatalf("pod-pool containers without a block: notes %v, pod shared %v; want one note, none kept", notes, back.PodShared)
	}
}

// A container may not take the block's name.
func TestPodLevelReservedName(t *testing.T) {
	e := podLevel(t, "pod", true)
	_, _, err := e.Add(e.NewState(), inPod("p", policy.PodPoolEntry, 4, 2000, 2000))
	var re *policy.RequestError
	if !errors.As(err, &re) || re.Field != "container" {
		t.Fatalf("err = %v, want RequestError on container", err)
	}
}

func keys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// TestPodLevelSliceNotResized: a slice of a pod's block (a: 1,13 of
// 1-2,13-14, as in TestPodLevelBlockSlicesAndPool) is neither grown nor
// shrunk in place: an upsize would take CPUs outside the block, a
// downsize would give the node CPUs of the block. The same size is
// answered with its CPUs.
func TestPodLevelSliceNotResized(t *testing.T) {
	e := podLevel(t, "pod", true)
	st, _ := add(t, e, e.NewState(), inPod("p", "a", 4, 2000, 2000))
	for _, milli := range []int64{1000, 3000} {
		_, _, err := e.Resize(st, inPod("p", "a", 4, milli, milli))
		var re *policy.ResizeError
		if !errors.As(err, &re) || re.Rule != policy.RulePodLevelSlice {
			t.Errorf("resize to %dm: err %v, want rule %s", milli, err, policy.RulePodLevelSlice)
		}
	}
	_, rd, err := e.Resize(st, inPod("p", "a", 4, 2000, 2000))
	if err != nil || rd.Kind != policy.ResizeNone || rd.CPUs.String() != "1,13" {
		t.Errorf("same size: %v %+v, want 1,13 unchanged", err, rd)
	}
}

// TestPodLevelInitSliceReuse: inside a block, an app container's slice
// may reuse a regular init container's slice, as the kubelet's partition
// takes app slices from the block less the sidecars' and the earlier app
// containers' slices only. Pod p, budget 4: the block 1-2,13-14 (node 0,
// two whole cores), sidecar s takes core 1 (1,13), init container i core 2
// (2,14), and app container c, with nothing left in the pool, reuses i's
// slice. A second app container finds nothing: app and sidecar slices are
// never reused. Without and with a restart between i and c.
func TestPodLevelInitSliceReuse(t *testing.T) {
	e := podLevel(t, "pod", true)
	typed := func(name string, typ allocator.ContainerType) policy.Request {
		r := inPod("p", name, 4, 2000, 2000)
		r.Type = typ
		return r
	}
	st := e.NewState()
	st, d := add(t, e, st, typed("s", allocator.Sidecar))
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	st, d = add(t, e, st, typed("i", allocator.Init))
	check(t, d, want{cpus: "2,14", mems: "0-1", exclusive: true, numa: "0", preferred: true})

	snap, err := json.Marshal(e.Snapshot(st))
	if err != nil {
		t.Fatal(err)
	}
	var back policy.Snapshot
	if err := json.Unmarshal(snap, &back); err != nil {
		t.Fatal(err)
	}
	restored, notes, err := e.FromSnapshot(back)
	if err != nil || len(notes) > 0 {
		t.Fatalf("FromSnapshot: %v %v", err, notes)
	}
	for name, st := range map[string]policy.State{"no restart": st, "restart": restored} {
		next, d := add(t, e, st, typed("c", allocator.App))
		if d.CPUs.String() != "2,14" {
			t.Errorf("%s: app container c got %s, want i's slice 2,14", name, d.CPUs)
		}
		if _, _, err := e.Add(next, typed("d", allocator.App)); !errors.As(err, new(*allocator.InsufficientCPUsError)) {
			t.Errorf("%s: a second app container: err = %v, want InsufficientCPUs (s's and c's slices are not reused)", name, err)
		}
		if got := e.SharedCPUs(next).String(); got != "0,3-12,15-23" {
			t.Errorf("%s: node shared pool %s, want 0,3-12,15-23", name, got)
		}
		// c's end gives nothing to the node: i still holds the CPUs, and
		// the block keeps them until the pod ends.
		next = e.Remove(next, "p", "c")
		if pool, _ := e.PodPoolCPUs(next, "p"); !pool.IsEmpty() {
			t.Errorf("%s: pod pool %s after c's end, want empty (i's slice is held)", name, pool)
		}
		if err := e.Validate(next); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}

	// Unmarked containers (the daemon's: NRI does not say which are init
	// containers) reuse nothing: i's slice stays i's.
	st = e.NewState()
	st, _ = add(t, e, st, typed("s", allocator.App))
	st, _ = add(t, e, st, typed("i", allocator.App))
	if _, _, err := e.Add(st, typed("c", allocator.App)); !errors.As(err, new(*allocator.InsufficientCPUsError)) {
		t.Errorf("unmarked: err = %v, want InsufficientCPUs", err)
	}
}
