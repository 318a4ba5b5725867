package policy_test

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// TestStaticPolicyRestorePodAllocation: the rows of kubelet v1.38's
// policy_static_restore_test.go (#141041) that a container-at-a-time
// plugin can meet. topoRestoreUniformSingleSocket: 8 single-thread CPUs,
// CPU 0 reserved, pod-level resource managers on, pod scope. The
// checkpoint is a Snapshot read back with FromSnapshot (the daemon's
// restart); then the pod's containers are added in spec order, as the
// runtime creates them, and each must get the row's CPUs. v1.38 keeps the
// checkpointed block and slices and carves the missing ones out of the
// block; v1.37 allocated the pod again. The plugin restores its own state
// under both rule sets, so both expect the v1.38 rows.
//
// Rows left out, because the plugin never holds their input: "non-prefix
// leftovers" (a running container without an earlier one is a legal
// state here: the earlier one was removed, and the running one keeps its
// CPUs), "stale pod-level CPU set overlapping the default CPU set" (the
// journal commits a release atomically; such a snapshot fails Validate),
// "failed completion releases every CPU held by the pod" (the plugin
// refuses the one container and leaves the running ones as they are), and
// the two rows with a non-guaranteed regular init container beside a
// sidecar (the plugin keeps a shared init container on the pod pool until
// it is removed, so the app container's slice would empty that pool), and
// the two rows where app containers reuse a restored init container's
// slice (the plugin does not reuse init slices inside a block, restart or
// not: docs/pod-level-resources.md, "Left to do").
func TestStaticPolicyRestorePodAllocation(t *testing.T) {
	var cpus []topology.CPUInfo
	for i := 0; i < 8; i++ {
		cpus = append(cpus, topology.CPUInfo{CPU: i, Core: i, Socket: 0, NUMA: 0, L3: 0})
	}
	topo, err := topology.New(topology.Machine{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	type ctr struct {
		name   string
		typ    allocator.ContainerType
		milli  int64 // request = limit unless shared
		shared bool
	}
	gu := func(name string, n int64) ctr { return ctr{name, allocator.App, n * 1000, false} }
	for _, c := range []struct {
		name     string
		budget   int64
		shared   string            // node shared pool in the checkpoint
		restored map[string]string // pod's assignments in the checkpoint, "@pod" = block
		ctrs     []ctr
		want     map[string]string
		wantPool string // node shared pool at the end
	}{
		{"complete checkpoint is restored as-is", 4, "0,5-7", map[string]string{"@pod": "1-4", "c1": "1-2", "c2": "3-4"},
			[]ctr{gu("c1", 2), gu("c2", 2)}, map[string]string{"c1": "1-2", "c2": "3-4"}, "0,5-7"},
		{"restored as-is even when a fresh allocation would pick different CPUs", 4, "0-2,7", map[string]string{"@pod": "3-6", "c1": "3-4", "c2": "5-6"},
			[]ctr{gu("c1", 2), gu("c2", 2)}, map[string]string{"c1": "3-4", "c2": "5-6"}, "0-2,7"},
		{"partial checkpoint: the missing container assignment is carved out", 4, "0,5-7", map[string]string{"@pod": "1-4", "c1": "1-2"},
			[]ctr{gu("c1", 2), gu("c2", 2)}, map[string]string{"c1": "1-2", "c2": "3-4"}, "0,5-7"},
		{"partial checkpoint: no container assignments at all", 4, "0,5-7", map[string]string{"@pod": "1-4"},
			[]ctr{gu("c1", 2), gu("c2", 2)}, map[string]string{"c1": "1-2", "c2": "3-4"}, "0,5-7"},
		{"missing non-guaranteed container gets the pod shared pool", 3, "0,4-7", map[string]string{"@pod": "1-3", "c1": "1-2"},
			[]ctr{gu("c1", 2), {"c2", allocator.App, 500, true}}, map[string]string{"c1": "1-2", "c2": "3"}, "0,4-7"},
		{"missing app container does not collide with a restored sidecar", 4, "0,5-7", map[string]string{"@pod": "1-4", "s1": "1-2"},
			[]ctr{{"s1", allocator.Sidecar, 2000, false}, gu("c1", 2)}, map[string]string{"s1": "1-2", "c1": "3-4"}, "0,5-7"},
		{"missing sidecar does not collide with a restored sidecar declared earlier", 6, "0,7", map[string]string{"@pod": "1-6", "s1": "1-2"},
			[]ctr{{"s1", allocator.Sidecar, 2000, false}, {"s2", allocator.Sidecar, 2000, false}, gu("c1", 2)},
			map[string]string{"s1": "1-2", "s2": "3-4", "c1": "5-6"}, "0,7"},
		{"missing non-guaranteed sidecar gets the pod shared pool", 3, "0,4-7", map[string]string{"@pod": "1-3"},
			[]ctr{{"s1", allocator.Sidecar, 500, true}, gu("c1", 2)}, map[string]string{"c1": "1-2", "s1": "3"}, "0,4-7"},
	} {
		for _, v := range []kubever.Version{kubever.V137, kubever.V138} {
			e, err := policy.New(topo, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "none", TopologyScope: "pod",
				ReservedCPUs: mustParse(t, "0"), PodLevelResourceManagers: true, KubeletVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			snap := e.Snapshot(e.NewState())
			snap.Shared = c.shared
			snap.Assignments = map[string]map[string]string{"pod": c.restored}
			st, notes, err := e.FromSnapshot(snap)
			if err != nil {
				t.Fatalf("%s %s: FromSnapshot: %v %v", c.name, v, err, notes)
			}
			for pass := 0; pass < 2; pass++ { // the second pass: restoring is idempotent
				for _, k := range c.ctrs {
					req := inPod("pod", k.name, c.budget, k.milli, k.milli)
					if k.shared {
						req.CPULimitMilli = 1000
					}
					req.Type = k.typ
					st, _ = add(t, e, st, req)
				}
			}
			for name, want := range c.want {
				got, ok := e.Assignment(st, "pod", name)
				if !ok {
					got, ok = e.PodPoolOf(st, "pod", name)
				}
				if !ok || got.String() != want {
					t.Errorf("%s %s: %s has %s (%t), want %s", c.name, v, name, got, ok, want)
				}
			}
			if got := e.SharedCPUs(st).String(); got != c.wantPool {
				t.Errorf("%s %s: node shared pool %s, want %s", c.name, v, got, c.wantPool)
			}
		}
	}
}

// A pod-level pod whose first container fails after its pod's block was
// carved (here the memory manager refuses it) leaves the block in the
// node's shared pool: kubelet v1.38 releases the block when partitioning
// fails (v1.37 left it out of the default set); the engine commits
// nothing on an error, under both rule sets.
func TestPodLevelFailedPartitionGivesBlockBack(t *testing.T) {
	for _, v := range []kubever.Version{kubever.V137, kubever.V138} {
		cfg := static("best-effort", "0,12")
		cfg.TopologyScope, cfg.PodLevelResourceManagers, cfg.KubeletVersion = "pod", true, v
		cfg.MemoryPolicy = policy.MemoryPolicyStatic
		cfg.ReservedMemory = []memorymanager.Reservation{reserve(0, map[memorymanager.Resource]uint64{"memory": gi}), reserve(1, map[memorymanager.Resource]uint64{"memory": gi})}
		cfg.MachineMemory = policytest.MachineMemory(t, "ht-2s-6c")
		e := newEngine(t, "ht-2s-6c", cfg)
		st := e.NewState()
		before := e.SharedCPUs(st).String()
		req := withMemory(inPod("p", "a", 4, 2000, 2000), map[memorymanager.Resource]uint64{"memory": 100 * gi})
		next, _, err := e.Add(st, req)
		if err == nil {
			t.Fatalf("%s: Add admitted 100Gi on two 16Gi nodes", v)
		}
		if got := e.SharedCPUs(next).String(); got != before {
			t.Errorf("%s: shared pool %s after the failure, want %s (the block given back)", v, got, before)
		}
		if _, held := e.Assignment(next, "p", policy.PodPoolEntry); held {
			t.Errorf("%s: the pod's block is still held", v)
		}
	}
}
