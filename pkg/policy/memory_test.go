package policy_test

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

const (
	mi = uint64(1) << 20
	gi = uint64(1) << 30
)

func memStatic(t testing.TB, fixture, topoPolicy, reservedCPUs string, reserved ...memorymanager.Reservation) *policy.Engine {
	t.Helper()
	cfg := static(topoPolicy, reservedCPUs)
	cfg.MemoryPolicy = policy.MemoryPolicyStatic
	cfg.ReservedMemory = reserved
	cfg.MachineMemory = policytest.MachineMemory(t, fixture)
	return newEngine(t, fixture, cfg)
}

func reserve(node int, limits map[memorymanager.Resource]uint64) memorymanager.Reservation {
	return memorymanager.Reservation{NUMANode: node, Limits: limits}
}

func withMemory(r policy.Request, mem map[memorymanager.Resource]uint64) policy.Request {
	r.Memory = mem
	return r
}

// free is a node's free bytes of one resource.
func free(st policy.State, node int, r memorymanager.Resource) uint64 {
	return st.Memory.Nodes[node].MemoryMap[r].Free
}

// ht-2s-6c: node 0 = CPUs 0-5,12-17, node 1 = CPUs 6-11,18-23; 16 GiB per
// node with a 1 GiB pool of 2 MiB pages and one 1 GiB page. With 1 GiB
// of memory reserved per node, memory allocatable per node is
// 16 - 1 - 2 (the pools) = 13 GiB; each pool 1 GiB.
func twoNodes(t *testing.T, topoPolicy string) *policy.Engine {
	return memStatic(t, "ht-2s-6c", topoPolicy, "0,12",
		reserve(0, map[memorymanager.Resource]uint64{"memory": gi}),
		reserve(1, map[memorymanager.Resource]uint64{"memory": gi}))
}

func TestMemoryMachineState(t *testing.T) {
	e := twoNodes(t, hints.PolicySingleNUMANode)
	st := e.NewState()
	for node := 0; node < 2; node++ {
		m := st.Memory.Nodes[node].MemoryMap
		if got := m["memory"]; got.TotalMemSize != 16*gi || got.SystemReserved != gi || got.Allocatable != 13*gi || got.Free != 13*gi {
			t.Errorf("node %d memory %+v", node, got)
		}
		if got := m["hugepages-2Mi"]; got.Allocatable != gi || got.Free != gi {
			t.Errorf("node %d hugepages-2Mi %+v", node, got)
		}
		if got := m["hugepages-1Gi"]; got.Allocatable != gi {
			t.Errorf("node %d hugepages-1Gi %+v", node, got)
		}
	}
}

// single-numa-node aligns CPUs, memory and hugepages on one node; a
// container whose memory only fits the other node goes there; one that
// fits no node alone is refused by the memory manager with the kubelet's
// text; removals give everything back.
func TestMemorySingleNUMANode(t *testing.T) {
	e := twoNodes(t, hints.PolicySingleNUMANode)
	st := e.NewState()
	fresh := st

	// 2 CPUs, 4 GiB, 512 MiB of 2 MiB pages: both nodes can, node 0 is
	// the first preferred hint of both providers.
	st, d, err := e.Add(st, withMemory(guaranteed("a", "c", 2), map[memorymanager.Resource]uint64{"memory": 4 * gi, "hugepages-2Mi": 512 * mi}))
	if err != nil {
		t.Fatal(err)
	}
	check(t, d, want{cpus: "1,13", mems: "0", exclusive: true, numa: "0", preferred: true})
	if !d.MemPinned || free(st, 0, "memory") != 9*gi || free(st, 0, "hugepages-2Mi") != 512*mi || free(st, 1, "memory") != 13*gi {
		t.Errorf("after a: pinned %v, node 0 memory %d hugepages %d, node 1 memory %d", d.MemPinned,
			free(st, 0, "memory"), free(st, 0, "hugepages-2Mi"), free(st, 1, "memory"))
	}

	// 10 GiB: node 0 has 9 GiB free; node 1 alone can; {0,1} is out since
	// node 0 is used alone. CPUs follow memory to node 1.
	st, d, err = e.Add(st, withMemory(guaranteed("b", "c", 2), map[memorymanager.Resource]uint64{"memory": 10 * gi}))
	if err != nil {
		t.Fatal(err)
	}
	check(t, d, want{cpus: "6,18", mems: "1", exclusive: true, numa: "1", preferred: true})

	// 10 GiB more fits neither node (9 and 3 GiB free) and {0,1} holds
	// used single nodes: no memory hint, so the merge takes the CPU hint
	// (node 0), and the memory manager finds no hint to extend it to.
	before := st
	_, _, err = e.Add(st, withMemory(guaranteed("c", "c", 1), map[memorymanager.Resource]uint64{"memory": 10 * gi}))
	var me *memorymanager.Error
	if !errors.As(err, &me) || me.Reason() != "UnexpectedAdmissionError" ||
		me.Error() != "[memorymanager] failed to find NUMA nodes to extend the current topology hint" {
		t.Fatalf("10 GiB more: %v", err)
	}
	if !reflect.DeepEqual(st, before) {
		t.Error("a refusal changed the state")
	}

	// Release.
	st = e.Remove(st, "a", "c")
	st = e.RemovePod(st, "b")
	if !reflect.DeepEqual(st.Memory.Nodes, fresh.Memory.Nodes) || len(st.Memory.Assignments) != 0 {
		t.Errorf("after the removals: %+v", st.Memory)
	}
}

// A request no node holds alone: the memory hints are {0,1} only
// (preferred: the narrowest that holds it), the CPU hints the single
// nodes. The merge marks a permutation preferred only when its providers'
// affinities are equal, so {0}&{0,1} is not preferred and best-effort
// takes {0,1}, the widest of the providers' narrowest (the kubelet's
// bestNonPreferredAffinityCount): a multi-node group. single-numa-node
// refuses it. A later 1 GiB container could fit one node, but a node in
// a group is used within it only: {0,1} again, not preferred.
func TestMemoryGroup(t *testing.T) {
	e := twoNodes(t, hints.PolicyBestEffort)
	st := e.NewState()
	big := withMemory(guaranteed("a", "c", 2), map[memorymanager.Resource]uint64{"memory": 14 * gi})
	st, d, err := e.Add(st, big)
	if err != nil {
		t.Fatal(err)
	}
	check(t, d, want{cpus: "1,13", mems: "0-1", exclusive: true, numa: "0-1", preferred: false})
	// Taken in node order: all 13 GiB of node 0, 1 GiB of node 1.
	if free(st, 0, "memory") != 0 || free(st, 1, "memory") != 12*gi {
		t.Errorf("free %d, %d", free(st, 0, "memory"), free(st, 1, "memory"))
	}
	for _, n := range []int{0, 1} {
		if c := st.Memory.Nodes[n].Cells; !reflect.DeepEqual(c, []int{0, 1}) {
			t.Errorf("node %d cells %v", n, c)
		}
	}

	one := withMemory(guaranteed("b", "c", 1), map[memorymanager.Resource]uint64{"memory": gi})
	_, d, err = e.Add(st, one)
	if err != nil {
		t.Fatal(err)
	}
	if d.Mems.String() != "0-1" || d.Affinity.Affinity.String() != "0-1" || d.Affinity.Preferred {
		t.Errorf("best-effort 1 GiB beside the group: mems %s affinity %v", d.Mems, d.Affinity)
	}

	sn := twoNodes(t, hints.PolicySingleNUMANode)
	_, _, err = sn.Add(sn.NewState(), big)
	var te *hints.TopologyAffinityError
	if !errors.As(err, &te) {
		t.Fatalf("single-numa-node 14 GiB: %v", err)
	}

	// Release the group: every node alone again.
	st = e.Remove(st, "a", "c")
	for _, n := range []int{0, 1} {
		if c := st.Memory.Nodes[n].Cells; !reflect.DeepEqual(c, []int{n}) || st.Memory.Nodes[n].NumberOfAssignments != 0 ||
			free(st, n, "memory") != 13*gi {
			t.Errorf("node %d after release: %+v", n, st.Memory.Nodes[n])
		}
	}
}

// ht-2s-4numa-80: 4 nodes of 10 cores (node n = CPUs 10n..10n+9 and
// 40+10n..), 16 GiB and 512 MiB of 2 MiB pages each; 1 GiB of memory
// reserved on node 0. 768 MiB of hugepages fit no node alone: every pair
// is a preferred memory hint; best-effort takes the first, {0,1} (not
// preferred, see TestMemoryGroup) and the CPUs come from its nodes;
// single-numa-node refuses (no single-node memory hint).
func TestMemoryHugepagesFourNodes(t *testing.T) {
	req := withMemory(guaranteed("a", "c", 4), map[memorymanager.Resource]uint64{"memory": gi, "hugepages-2Mi": 768 * mi})
	e := memStatic(t, "ht-2s-4numa-80", hints.PolicyBestEffort, "0,40", reserve(0, map[memorymanager.Resource]uint64{"memory": gi}))
	st, d, err := e.Add(e.NewState(), req)
	if err != nil {
		t.Fatal(err)
	}
	check(t, d, want{cpus: "1-2,41-42", mems: "0-1", exclusive: true, numa: "0-1", preferred: false})
	if free(st, 0, "hugepages-2Mi") != 0 || free(st, 1, "hugepages-2Mi") != 256*mi {
		t.Errorf("hugepages free %d, %d", free(st, 0, "hugepages-2Mi"), free(st, 1, "hugepages-2Mi"))
	}
	if got := st.Memory.Blocks("a", "c"); len(got) != 2 || got[0].Type != "hugepages-2Mi" || got[1].Size != gi {
		t.Errorf("blocks %+v", got)
	}

	sn := memStatic(t, "ht-2s-4numa-80", hints.PolicySingleNUMANode, "0,40", reserve(0, map[memorymanager.Resource]uint64{"memory": gi}))
	_, _, err = sn.Add(sn.NewState(), req)
	var te *hints.TopologyAffinityError
	if !errors.As(err, &te) {
		t.Fatalf("single-numa-node: %v", err)
	}
	// 256 MiB of pages fit node 0: CPUs, memory and hugepages on it.
	_, d, err = sn.Add(sn.NewState(), withMemory(guaranteed("a", "c", 4), map[memorymanager.Resource]uint64{"memory": gi, "hugepages-2Mi": 256 * mi}))
	if err != nil {
		t.Fatal(err)
	}
	check(t, d, want{cpus: "1-2,41-42", mems: "0", exclusive: true, numa: "0", preferred: true})
}

// Shared-pool and Burstable containers: the memory manager accounts the
// containers of Guaranteed pods only, fractional CPUs included, as the
// kubelet's Static policy does.
func TestMemorySharedAndBurstable(t *testing.T) {
	e := twoNodes(t, hints.PolicyNone)
	frac := policy.Request{Pod: "a", Container: "c", QoS: policy.Guaranteed, CPURequestMilli: 500, CPULimitMilli: 500, Memory: map[memorymanager.Resource]uint64{"memory": gi}}
	st, d, err := e.Add(e.NewState(), frac)
	if err != nil {
		t.Fatal(err)
	}
	if d.Exclusive || !d.MemPinned || d.Mems.String() != "0" {
		t.Errorf("fractional Guaranteed: %+v", d)
	}
	if e.MemsOf(st, "a", "c").String() != "0" {
		t.Errorf("MemsOf %s", e.MemsOf(st, "a", "c"))
	}
	burst := policy.Request{Pod: "b", Container: "c", QoS: policy.Burstable, CPURequestMilli: 500, Memory: map[memorymanager.Resource]uint64{"memory": gi}}
	_, d, err = e.Add(st, burst)
	if err != nil || d.MemPinned || d.Mems.String() != "0-1" {
		t.Errorf("Burstable: %+v %v", d, err)
	}
	bad := withMemory(guaranteed("c", "c", 1), map[memorymanager.Resource]uint64{"memory": gi, "cpu": 1})
	if _, _, err := e.Add(st, bad); err == nil || !strings.Contains(err.Error(), "neither memory nor hugepages") {
		t.Errorf("bad resource: %v", err)
	}
}

// The memory state survives a snapshot; one that no longer matches the
// machine (reservations changed) is dropped with a note.
func TestMemorySnapshot(t *testing.T) {
	e := twoNodes(t, hints.PolicySingleNUMANode)
	st, _, err := e.Add(e.NewState(), withMemory(guaranteed("a", "c", 2), map[memorymanager.Resource]uint64{"memory": 4 * gi}))
	if err != nil {
		t.Fatal(err)
	}
	snap := e.Snapshot(st)
	data, err := json.Marshal(snap)
	if err != nil {
		t.Fatal(err)
	}
	var back policy.Snapshot
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	got, notes, err := e.FromSnapshot(back)
	if err != nil || len(notes) != 0 || !reflect.DeepEqual(got.Memory.Nodes, st.Memory.Nodes) || !reflect.DeepEqual(got.Memory.Assignments, st.Memory.Assignments) {
		t.Fatalf("restore: %v %v %+v", err, notes, got.Memory)
	}
	other := memStatic(t, "ht-2s-6c", hints.PolicySingleNUMANode, "0,12",
		reserve(0, map[memorymanager.Resource]uint64{"memory": 2 * gi}))
	got, notes, err = other.FromSnapshot(back)
	if err != nil || len(notes) != 1 || !strings.Contains(notes[0], "dropped the memory manager state") || len(got.Memory.Assignments) != 0 {
		t.Errorf("other reservations: %v %v", err, notes)
	}
	none := newEngine(t, "ht-2s-6c", static(hints.PolicySingleNUMANode, "0,12"))
	if _, notes, _ := none.FromSnapshot(back); len(notes) != 1 || !strings.Contains(notes[0], "None") {
		t.Errorf("under None: %v", notes)
	}
	if s := none.Snapshot(none.NewState()); s.Memory != nil {
		t.Errorf("None snapshot has memory %s", s.Memory)
	}
}

func TestMemoryStaticConfigErrors(t *testing.T) {
	cfg := static(hints.PolicyNone, "0,12")
	cfg.MemoryPolicy = policy.MemoryPolicyStatic
	cfg.MachineMemory = policytest.MachineMemory(t, "ht-2s-6c")
	for _, tc := range []struct {
		res  []memorymanager.Reservation
		want string
	}{
		{nil, "you should specify the system reserved memory"},
		{[]memorymanager.Reservation{reserve(2, map[memorymanager.Resource]uint64{"memory": gi})}, "references a NUMA node 2 that does not exist"},
		{[]memorymanager.Reservation{reserve(0, map[memorymanager.Resource]uint64{"memory": gi, "hugepages-1Gi": 2 * gi})}, "exceeds"},
	} {
		cfg.ReservedMemory = tc.res
		_, err := policy.New(sysfstest.Load(t, "ht-2s-6c"), cfg)
		var ce *policy.ConfigError
		if !errors.As(err, &ce) || ce.Key != "reserved_memory" || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v", tc.res, err)
		}
	}
}

// The pod scope: the first container's merge uses the pod's memory
// (PodMemory) and fixes the pod's affinity; each container is then
// allocated its own memory on it.
func TestMemoryPodScope(t *testing.T) {
	cfg := static(hints.PolicySingleNUMANode, "0,12")
	cfg.TopologyScope = hints.ScopePod
	cfg.MemoryPolicy = policy.MemoryPolicyStatic
	cfg.MachineMemory = policytest.MachineMemory(t, "ht-2s-6c")
	cfg.ReservedMemory = []memorymanager.Reservation{reserve(0, map[memorymanager.Resource]uint64{"memory": gi}), reserve(1, map[memorymanager.Resource]uint64{"memory": gi})}
	e := newEngine(t, "ht-2s-6c", cfg)
	// Another pod takes 7 GiB of node 0 first: the pod's 2 x 6 GiB then
	// fit node 1 (13 GiB free) and not node 0 (6 GiB free).
	st, _, err := e.Add(e.NewState(), withMemory(guaranteed("x", "c", 1), map[memorymanager.Resource]uint64{"memory": 7 * gi}))
	if err != nil {
		t.Fatal(err)
	}
	pod := map[memorymanager.Resource]uint64{"memory": 12 * gi}
	first := withMemory(guaranteed("p", "a", 1), map[memorymanager.Resource]uint64{"memory": 6 * gi})
	first.PodMemory, first.PodCPURequestMilli = pod, 2000
	st, d, err := e.Add(st, first)
	if err != nil {
		t.Fatal(err)
	}
	if d.Mems.String() != "1" || d.Affinity.Affinity.String() != "1" {
		t.Errorf("first container: mems %s affinity %v, want node 1 (the pod's 12 GiB do not fit node 0's 6 GiB)", d.Mems, d.Affinity)
	}
	second := withMemory(guaranteed("p", "b", 1), map[memorymanager.Resource]uint64{"memory": 6 * gi})
	second.PodMemory, second.PodCPURequestMilli = pod, 2000
	st, d, err = e.Add(st, second)
	if err != nil || d.Mems.String() != "1" {
		t.Fatalf("second container: %+v %v", d, err)
	}
	if free(st, 1, "memory") != gi {
		t.Errorf("node 1 free %d, want 1 GiB", free(st, 1, "memory"))
	}
}

// A checkpoint without a memory field (None, or an earlier release) loads
// under Static with the machine's empty memory state.
func TestMemoryFromOldSnapshot(t *testing.T) {
	none := newEngine(t, "ht-2s-6c", static(hints.PolicySingleNUMANode, "0,12"))
	st, _, err := none.Add(none.NewState(), guaranteed("a", "c", 2))
	if err != nil {
		t.Fatal(err)
	}
	e := twoNodes(t, hints.PolicySingleNUMANode)
	got, notes, err := e.FromSnapshot(none.Snapshot(st))
	if err != nil || len(notes) != 0 {
		t.Fatalf("%v %v", err, notes)
	}
	if !reflect.DeepEqual(got.Memory.Nodes, e.NewState().Memory.Nodes) || len(got.Memory.Assignments) != 0 {
		t.Errorf("memory state %+v", got.Memory)
	}
	if cpus, ok := e.Assignment(got, "a", "c"); !ok || cpus.String() != "1,13" {
		t.Errorf("CPU assignment %v %v", cpus, ok)
	}
}

// An exited container's memory (an init container's, as NRI shows it:
// exited before the pod's next container is created) is taken over by the
// pod's next container, as the kubelet reuses init containers' memory:
// node 0 has 6 GiB free, the init container takes 4 of them and exits;
// the app's 4 GiB fit node 0 again (2 free + 4 reusable) and nothing more
// is taken. Without the reuse the app goes to node 1.
func TestMemoryReuseOfExitedContainers(t *testing.T) {
	e := twoNodes(t, hints.PolicySingleNUMANode)
	st, _, err := e.Add(e.NewState(), withMemory(guaranteed("x", "c", 1), map[memorymanager.Resource]uint64{"memory": 7 * gi}))
	if err != nil {
		t.Fatal(err)
	}
	st, d, err := e.Add(st, withMemory(guaranteed("p", "init", 1), map[memorymanager.Resource]uint64{"memory": 4 * gi}))
	if err != nil || d.Mems.String() != "0" {
		t.Fatalf("init: %+v %v", d, err)
	}
	app := withMemory(guaranteed("p", "app", 1), map[memorymanager.Resource]uint64{"memory": 4 * gi})
	if _, d, err := e.Add(st, app); err != nil || d.Mems.String() != "1" {
		t.Fatalf("app without reuse: %+v %v, want node 1", d, err)
	}
	app.MemoryReuse = []string{"init"}
	next, d, err := e.Add(st, app)
	if err != nil || d.Mems.String() != "0" {
		t.Fatalf("app reusing init's memory: %+v %v, want node 0", d, err)
	}
	if free(next, 0, "memory") != 2*gi {
		t.Errorf("node 0 free %d, want 2 GiB (the app took the init container's 4 GiB over)", free(next, 0, "memory"))
	}
	if b := next.Memory.Blocks("p", "init"); len(b) != 1 || b[0].Size != 0 {
		t.Errorf("init blocks %+v, want one of size 0", b)
	}
	if err := memorymanager.Check(next.Memory); err != nil {
		t.Error(err)
	}
	// The state restores as the kubelet checks it, and the pod's removal
	// gives node 0 its 6 GiB back.
	if _, notes, err := e.FromSnapshot(e.Snapshot(next)); err != nil || len(notes) != 0 {
		t.Errorf("restore: %v %v", err, notes)
	}
	if got := free(e.RemovePod(next, "p"), 0, "memory"); got != 6*gi {
		t.Errorf("node 0 free after the pod %d, want 6 GiB", got)
	}
}

// KeepMemory: a running container's lost memory is put back on the nodes
// it runs on, as one block per resource, when their free memory holds it;
// otherwise nothing changes (worked on twoNodes: 13 GiB of memory and
// 1 GiB of 2 MiB pages allocatable per node).
func TestKeepMemory(t *testing.T) {
	e := twoNodes(t, hints.PolicySingleNUMANode)
	st := e.NewState()
	req := withMemory(guaranteed("a", "c", 2), map[memorymanager.Resource]uint64{"memory": 4 * gi, "hugepages-2Mi": 512 * mi})
	next, ok := e.KeepMemory(st, req, cpuset.New(1))
	if !ok || !e.MemoryPinned(next, "a", "c") || e.MemsOf(next, "a", "c").String() != "1" ||
		free(next, 1, "memory") != 9*gi || free(next, 1, "hugepages-2Mi") != 512*mi || free(next, 0, "memory") != 13*gi {
		t.Fatalf("kept on node 1: ok %v, mems %s, node 1 memory %d hugepages %d, node 0 memory %d", ok, e.MemsOf(next, "a", "c"),
			free(next, 1, "memory"), free(next, 1, "hugepages-2Mi"), free(next, 0, "memory"))
	}
	// Already held: unchanged.
	if again, ok := e.KeepMemory(next, req, cpuset.New(0)); ok || !reflect.DeepEqual(again, next) {
		t.Errorf("kept twice: %v", ok)
	}
	for _, tc := range []struct {
		name string
		req  policy.Request
		mems cpuset.CPUSet
	}{
		{"10 GiB on node 1 with 9 free", withMemory(guaranteed("b", "c", 2), map[memorymanager.Resource]uint64{"memory": 10 * gi}), cpuset.New(1)},
		{"two nodes under single-numa-node", withMemory(guaranteed("b", "c", 2), map[memorymanager.Resource]uint64{"memory": gi}), cpuset.New(0, 1)},
		{"no such node", withMemory(guaranteed("b", "c", 2), map[memorymanager.Resource]uint64{"memory": gi}), cpuset.New(2)},
		{"no mems", withMemory(guaranteed("b", "c", 2), map[memorymanager.Resource]uint64{"memory": gi}), cpuset.New()},
		{"Burstable", withMemory(policy.Request{Pod: "b", Container: "c", QoS: policy.Burstable, CPURequestMilli: 500, CPULimitMilli: 1000}, map[memorymanager.Resource]uint64{"memory": gi}), cpuset.New(0)},
	} {
		if got, ok := e.KeepMemory(next, tc.req, tc.mems); ok || !reflect.DeepEqual(got, next) {
			t.Errorf("%s: kept (%v) or changed the state", tc.name, ok)
		}
	}
	// best-effort may keep a container's memory on both nodes.
	be := twoNodes(t, hints.PolicyBestEffort)
	both, ok := be.KeepMemory(be.NewState(), withMemory(guaranteed("b", "c", 2), map[memorymanager.Resource]uint64{"memory": gi}), cpuset.New(0, 1))
	if !ok || be.MemsOf(both, "b", "c").String() != "0-1" {
		t.Errorf("best-effort, nodes 0-1: ok %v, mems %s", ok, be.MemsOf(both, "b", "c"))
	}
}
