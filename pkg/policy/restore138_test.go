package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// TestStaticPolicyRestorePodAllocation: every row of kubelet v1.38's
// policy_static_restore_test.go (#141041), under its description.
// topoRestoreUniformSingleSocket: 8 single-thread CPUs, CPU 0 reserved,
// pod-level resource managers on, pod scope. The checkpoint is a Snapshot
// read back with FromSnapshot (the daemon's restart); then the pod's
// containers are added in spec order, as the runtime creates them, twice
// (a second AllocatePod must change nothing), and each must get the row's
// CPUs. v1.37 allocated the pod again; the plugin restores its own state
// under both rule sets, so both expect the same.
//
// Rows with diff set meet an input the plugin treats differently on
// purpose (pkg/allocator/doc.go, docs/migration.md); they assert the
// plugin's behaviour, and diff says the kubelet's:
//   - a checkpoint whose assignments are not a prefix of the spec order:
//     the kubelet takes them for a dead instance's leftovers and allocates
//     again; here they are the running containers' (a container removed
//     before a later one leaves exactly this), which keep their CPUs;
//   - a block that overlaps the checkpoint's shared pool: the plugin's
//     shared pool is recomputed from the assignments, so the block is the
//     pod's and the pool is what no one holds;
//   - a missing slice that the block cannot hold: the kubelet releases
//     the whole pod, running containers included; the plugin refuses that
//     container and leaves the others their CPUs;
//   - a shared regular init container beside an app slice: it stays on
//     the pod's pool until it is removed (the plugin cannot tell that it
//     has finished), so the slice that would empty that pool is refused
//     until then, and a shared container has no set of its own to restore.
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
	initGu := func(name string, n int64) ctr { return ctr{name, allocator.Init, n * 1000, false} }
	sidecar := func(name string, n int64) ctr { return ctr{name, allocator.Sidecar, n * 1000, false} }
	const refused = "refused: "
	for _, c := range []struct {
		name      string
		diff      string // the kubelet's outcome where the plugin's differs
		budget    int64
		shared    string            // node shared pool in the checkpoint
		restored  map[string]string // pod's assignments in the checkpoint, "@pod" = block
		podShared []string          // the pod's containers on its pool in the checkpoint
		ctrs      []ctr
		want      map[string]string // CPUs, or refused + the reason
		wantPool  string            // node shared pool at the end
		remove    string            // then removed: the refused containers are added again
		wantAfter map[string]string
	}{
		{name: "complete checkpoint is restored as-is", budget: 4, shared: "0,5-7",
			restored: map[string]string{"@pod": "1-4", "c1": "1-2", "c2": "3-4"},
			ctrs:     []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "1-2", "c2": "3-4"}, wantPool: "0,5-7"},
		{name: "complete checkpoint is restored as-is even when a fresh allocation would pick different CPUs", budget: 4, shared: "0-2,7",
			restored: map[string]string{"@pod": "3-6", "c1": "3-4", "c2": "5-6"},
			ctrs:     []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "3-4", "c2": "5-6"}, wantPool: "0-2,7"},
		{name: "partial checkpoint: the missing container assignment is carved out of the restored pod CPU set", budget: 4, shared: "0,5-7",
			restored: map[string]string{"@pod": "1-4", "c1": "1-2"},
			ctrs:     []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "1-2", "c2": "3-4"}, wantPool: "0,5-7"},
		{name: "partial checkpoint: no container assignments at all, every one is carved out", budget: 4, shared: "0,5-7",
			restored: map[string]string{"@pod": "1-4"},
			ctrs:     []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "1-2", "c2": "3-4"}, wantPool: "0,5-7"},
		{name: "partial checkpoint: the missing non-guaranteed container gets the recomputed pod shared pool", budget: 3, shared: "0,4-7",
			restored: map[string]string{"@pod": "1-3", "c1": "1-2"},
			ctrs:     []ctr{gu("c1", 2), {"c2", allocator.App, 500, true}}, want: map[string]string{"c1": "1-2", "c2": "3"}, wantPool: "0,4-7"},
		{name: "partial checkpoint: the missing guaranteed app container reuses the CPUs of a restored regular init container", budget: 2, shared: "0,3-7",
			restored: map[string]string{"@pod": "1-2", "i1": "1-2"},
			ctrs:     []ctr{initGu("i1", 2), gu("c1", 2)}, want: map[string]string{"i1": "1-2", "c1": "1-2"}, wantPool: "0,3-7"},
		{name: "partial checkpoint: the missing guaranteed app container does not collide with a restored sidecar", budget: 4, shared: "0,5-7",
			restored: map[string]string{"@pod": "1-4", "s1": "1-2"},
			ctrs:     []ctr{sidecar("s1", 2), gu("c1", 2)}, want: map[string]string{"s1": "1-2", "c1": "3-4"}, wantPool: "0,5-7"},
		{name: "partial checkpoint: the missing sidecar does not collide with a restored sidecar declared earlier in the spec", budget: 6, shared: "0,7",
			restored: map[string]string{"@pod": "1-6", "s1": "1-2"},
			ctrs:     []ctr{sidecar("s1", 2), sidecar("s2", 2), gu("c1", 2)},
			want:     map[string]string{"s1": "1-2", "s2": "3-4", "c1": "5-6"}, wantPool: "0,7"},
		{name: "non-prefix leftovers: a hole among the app containers releases the stale allocation and the pod is allocated from scratch",
			diff:   "c1 1-2, c2 3-4 (released, allocated again)",
			budget: 4, shared: "0,5-7", restored: map[string]string{"@pod": "1-4", "c2": "2,4"},
			ctrs: []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "1,3", "c2": "2,4"}, wantPool: "0,5-7"},
		{name: "non-prefix leftovers: a hole between init and app containers releases the stale allocation and the pod is allocated from scratch",
			diff:   "i1 1-2, c1 1-2 (released, allocated again)",
			budget: 2, shared: "0,3-7", restored: map[string]string{"@pod": "1-2", "c1": "2"},
			ctrs: []ctr{initGu("i1", 2), gu("c1", 2)}, want: map[string]string{"i1": refused + "InsufficientCPUs", "c1": "2"}, wantPool: "0,3-7"},
		{name: "stale pod-level CPU set overlapping the default CPU set is dropped and the pod is allocated from scratch",
			diff:   "c1 1-2, pod 1-2, default 0,3-7",
			budget: 2, shared: "0-7", restored: map[string]string{"@pod": "5-6"},
			ctrs: []ctr{gu("c1", 2)}, want: map[string]string{"c1": "5-6"}, wantPool: "0-4,7"},
		{name: "partial checkpoint: the missing non-guaranteed sidecar gets the recomputed pod shared pool", budget: 3, shared: "0,4-7",
			restored: map[string]string{"@pod": "1-3"},
			ctrs:     []ctr{{"s1", allocator.Sidecar, 500, true}, gu("c1", 2)}, want: map[string]string{"c1": "1-2", "s1": "3"}, wantPool: "0,4-7"},
		{name: "partial checkpoint: the missing non-guaranteed regular init container gets the pod CPU set minus the sidecar CPUs",
			diff:   "i1 3-4, c1 3-4",
			budget: 4, shared: "0,5-7", restored: map[string]string{"@pod": "1-4", "s1": "1-2"},
			ctrs: []ctr{sidecar("s1", 2), {"i1", allocator.Init, 500, true}, gu("c1", 2)},
			want: map[string]string{"s1": "1-2", "i1": "3-4", "c1": refused + policy.ReasonEmptyPodSharedPool}, wantPool: "0,5-7",
			remove: "i1", wantAfter: map[string]string{"s1": "1-2", "c1": "3-4"}},
		{name: "partial checkpoint: the restored non-guaranteed regular init container assignment is preserved as-is",
			diff:   "i1 3 (its checkpointed set), c1 3-4",
			budget: 4, shared: "0,5-7", restored: map[string]string{"@pod": "1-4", "s1": "1-2"}, podShared: []string{"i1"},
			ctrs: []ctr{sidecar("s1", 2), {"i1", allocator.Init, 500, true}, gu("c1", 2)},
			want: map[string]string{"s1": "1-2", "i1": "3-4", "c1": refused + policy.ReasonEmptyPodSharedPool}, wantPool: "0,5-7",
			remove: "i1", wantAfter: map[string]string{"s1": "1-2", "c1": "3-4"}},
		{name: "partial checkpoint: missing regular init and app containers reuse the CPUs of a restored regular init container", budget: 2, shared: "0,3-7",
			restored: map[string]string{"@pod": "1-2", "i1": "1-2"},
			ctrs:     []ctr{initGu("i1", 2), initGu("i2", 2), gu("c1", 2)},
			want:     map[string]string{"i1": "1-2", "i2": "1-2", "c1": "1-2"}, wantPool: "0,3-7"},
		{name: "restoring is idempotent: a second AllocatePod call leaves the state unchanged", budget: 4, shared: "0,5-7",
			restored: map[string]string{"@pod": "1-4", "c1": "1-2"},
			ctrs:     []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "1-2", "c2": "3-4"}, wantPool: "0,5-7"},
		{name: "failed completion releases every CPU held by the pod back to the default CPU set",
			diff:   "the pod refused, c1 released too, default 0-7",
			budget: 4, shared: "0,3-7", restored: map[string]string{"@pod": "1-2", "c1": "1-2"},
			ctrs: []ctr{gu("c1", 2), gu("c2", 2)}, want: map[string]string{"c1": "1-2", "c2": refused + "InsufficientCPUs"}, wantPool: "0,3-7"},
	} {
		t.Run(c.name, func(t *testing.T) {
			for _, v := range []kubever.Version{kubever.V137, kubever.V138} {
				e, err := policy.New(topo, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "none", TopologyScope: "pod",
					ReservedCPUs: mustParse(t, "0"), PodLevelResourceManagers: true, KubeletVersion: v})
				if err != nil {
					t.Fatal(err)
				}
				snap := e.Snapshot(e.NewState())
				snap.Shared = c.shared
				snap.Assignments = map[string]map[string]string{"pod": c.restored}
				if c.podShared != nil {
					snap.PodShared = map[string][]string{"pod": c.podShared}
				}
				st, _, err := e.FromSnapshot(snap)
				if err != nil {
					t.Fatalf("%s: FromSnapshot: %v", v, err)
				}
				got := map[string]string{}
				addAll := func(only map[string]bool) {
					for _, k := range c.ctrs {
						if only != nil && !only[k.name] {
							continue
						}
						req := inPod("pod", k.name, c.budget, k.milli, k.milli)
						if k.shared {
							req.CPULimitMilli = 1000
						}
						req.Type = k.typ
						next, d, err := e.Add(st, req)
						if err != nil {
							var r allocator.Reasoner
							if !errors.As(err, &r) {
								t.Fatalf("%s: Add(%s): %v", v, k.name, err)
							}
							got[k.name] = refused + r.Reason()
							continue
						}
						if err := e.Validate(next); err != nil {
							t.Fatalf("%s: state invalid after Add(%s): %v", v, k.name, err)
						}
						st, got[k.name] = next, d.CPUs.String()
					}
				}
				for pass := 0; pass < 2; pass++ {
					addAll(nil)
				}
				check := func(when string, want map[string]string) {
					for name, w := range want {
						if got[name] != w {
							t.Errorf("%s%s: %s got %q, want %q (kubelet: %s)", v, when, name, got[name], w, c.diff)
						}
					}
					if pool := e.SharedCPUs(st).String(); pool != c.wantPool {
						t.Errorf("%s%s: node shared pool %s, want %s", v, when, pool, c.wantPool)
					}
					if block, _ := e.Assignment(st, "pod", policy.PodPoolEntry); !block.Union(e.SharedCPUs(st)).Equals(mustParse(t, "0-7")) {
						t.Errorf("%s%s: block %s and shared pool %s do not cover every CPU", v, when, block, e.SharedCPUs(st))
					}
				}
				check("", c.want)
				if c.remove != "" {
					st = e.Remove(st, "pod", c.remove)
					again := map[string]bool{}
					for name, w := range c.want {
						if strings.HasPrefix(w, refused) {
							again[name] = true
						}
					}
					addAll(again)
					addAll(again)
					check(" after removing "+c.remove, c.wantAfter)
				}
			}
		})
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
