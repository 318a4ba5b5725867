package policy_test

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Placements kubelet v1.38 changed, through the engine: rows of the
// kubelet's v1.38.0-beta.0 tests and hand-worked cases, under both rule
// sets (Config.KubeletVersion).

// dualSocketHT is the kubelet's topoDualSocketHT: 12 CPUs, socket = NUMA
// node = CPU parity, core k = {k, k+6}.
func dualSocketHT(t *testing.T) *topology.Topology {
	t.Helper()
	var cpus []topology.CPUInfo
	for i := 0; i < 12; i++ {
		cpus = append(cpus, topology.CPUInfo{CPU: i, Core: i % 6, Socket: i % 2, NUMA: i % 2, L3: i % 2})
	}
	topo, err := topology.New(topology.Machine{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// TestStaticPolicyAllocatePod, the two pod-scope distribute-cpus-across-numa
// rows (#139456): topoDualSocketHT, reserved 0-1, hint {0,1} preferred,
// pod-level resources. The pod's block is taken with the hint's NUMA count
// and so is each container's slice of it.
//   - 1 container of 4 in a pod of 4: v1.38 spreads the block over both
//     nodes, whole cores first: 2,8 and 3,9. v1.37 fits it in node 0:
//     2,8 and 4,10 (the core holding 6 has one free CPU, so it is not free).
//   - 4 + 2 in a pod of 6: 6 CPUs need both nodes under either rule set,
//     3 each: 2,8 + 6 and 3,9 + 7; then 4 of those 6, 2 per node (one node
//     holds 3): 2,3,8,9, and the other container 6,7.
func TestStaticPolicyAllocatePodDistributeOverHint(t *testing.T) {
	hint := &hints.Hint{Affinity: hints.NewMask(0, 1), Preferred: true}
	type ctr struct {
		name string
		n    int64
	}
	for _, c := range []struct {
		name      string
		budget    int64
		ctrs      []ctr
		want137   map[string]string
		want138   map[string]string
		shared137 string
		shared138 string
	}{
		{"single container", 4, []ctr{{"workload", 4}},
			map[string]string{"workload": "2,4,8,10"}, map[string]string{"workload": "2-3,8-9"},
			"0-1,3,5-7,9,11", "0-1,4-7,10-11"},
		{"multiple containers", 6, []ctr{{"workload", 4}, {"sidecar", 2}},
			map[string]string{"workload": "2-3,8-9", "sidecar": "6-7"}, map[string]string{"workload": "2-3,8-9", "sidecar": "6-7"},
			"0-1,4-5,10-11", "0-1,4-5,10-11"},
	} {
		for _, v := range []kubever.Version{kubever.V137, kubever.V138} {
			e, err := policy.New(dualSocketHT(t), policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "best-effort", TopologyScope: "pod",
				ReservedCPUs: mustParse(t, "0-1"), CPUOptions: map[string]string{allocator.OptDistributeCPUsAcrossNUMA: "true"},
				PodLevelResourceManagers: true, KubeletVersion: v})
			if err != nil {
				t.Fatal(err)
			}
			want, shared := c.want138, c.shared138
			if v == kubever.V137 {
				want, shared = c.want137, c.shared137
			}
			st := e.NewState()
			for _, k := range c.ctrs {
				req := inPod("pod", k.name, c.budget, k.n*1000, k.n*1000)
				req.AffinityOverride = hint
				var d policy.Decision
				st, d = add(t, e, st, req)
				if !d.Exclusive || d.CPUs.String() != want[k.name] {
					t.Errorf("%s %s: %s got %s (exclusive %t), want %s", c.name, v, k.name, d.CPUs, d.Exclusive, want[k.name])
				}
			}
			if got := e.SharedCPUs(st).String(); got != shared {
				t.Errorf("%s %s: node shared pool %s, want %s", c.name, v, got, shared)
			}
		}
	}
}

// Under topology_manager_scope = pod every container is placed on the
// pod's hint, which can span more NUMA nodes than the container needs. On
// ht-2s-4numa-80 (NUMA n = CPUs 10n..10n+9 and 40+10n..; reserved 0,40)
// a pod of two 16-CPU containers gets the hint {0,1} (32 CPUs need two
// nodes; the first two-node mask). Its first container, 16 CPUs from
// nodes 0 and 1 (18 and 20 free):
//   - v1.38 spreads them over both hinted nodes, 8 each, whole cores
//     first: 1-4,41-44 and 10-13,50-53;
//   - v1.37 fits them in one node, the one leaving the free CPUs best
//     balanced (node 1: 18 and 4 left, deviation 7, against 2 and 20,
//     deviation 9): 10-17,50-57.
func TestKubelet138PodScopeHintSpread(t *testing.T) {
	for _, c := range []struct {
		v    kubever.Version
		want string
	}{{kubever.V137, "10-17,50-57"}, {kubever.V138, "1-4,10-13,41-44,50-53"}} {
		e, err := policy.New(sysfstest.Load(t, "ht-2s-4numa-80"), policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "best-effort",
			TopologyScope: "pod", ReservedCPUs: mustParse(t, "0,40"), CPUOptions: map[string]string{allocator.OptDistributeCPUsAcrossNUMA: "true"},
			KubeletVersion: c.v})
		if err != nil {
			t.Fatal(err)
		}
		req := policy.Request{Pod: "p", Container: "a", QoS: policy.Guaranteed, CPURequestMilli: 16000, CPULimitMilli: 16000,
			PodCPURequestMilli: 32000, PodCPULimitMilli: 32000}
		_, d := add(t, e, e.NewState(), req)
		check(t, d, want{cpus: c.want, mems: "0-3", exclusive: true, numa: "0-1", preferred: true})
	}
}

// Devices on several nodes (#139456's case, kubernetes#139430): 8 CPUs
// with GPUs on all four nodes of ht-2s-4numa-80 (reserved 0,40). The
// device hint is {0-3}; a CPU hint of one node ANDed with it is not
// preferred (the affinities differ), so no combination is preferred and
// the widest-wanted non-preferred one wins: {0-3}.
//   - v1.38 spreads the 8 CPUs over the four hinted nodes, 2 each, whole
//     cores first: 1,41 / 10,50 / 20,60 / 30,70.
//   - v1.37 fits them in the node that leaves the free CPUs best balanced:
//     node 1 (18 12 20 20: deviation 3.279; node 0 would leave 10 20 20
//     20: 4.330; nodes 2 and 3 tie with node 1, which comes first): 10-13,
//     50-53.
func TestKubelet138DevicesOnSeveralNodes(t *testing.T) {
	for _, c := range []struct {
		v    kubever.Version
		want string
	}{{kubever.V137, "10-13,50-53"}, {kubever.V138, "1,10,20,30,41,50,60,70"}} {
		e, err := policy.New(sysfstest.Load(t, "ht-2s-4numa-80"), policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "best-effort",
			TopologyScope: "container", ReservedCPUs: mustParse(t, "0,40"), CPUOptions: map[string]string{allocator.OptDistributeCPUsAcrossNUMA: "true"},
			KubeletVersion: c.v})
		if err != nil {
			t.Fatal(err)
		}
		req := policy.Request{Pod: "p", Container: "a", QoS: policy.Guaranteed, CPURequestMilli: 8000, CPULimitMilli: 8000,
			Hints: map[string][]hints.Hint{"nvidia.com/gpu": e.DeviceHints([]int{0, 1, 2, 3})}}
		_, d := add(t, e, e.NewState(), req)
		check(t, d, want{cpus: c.want, mems: "0-3", exclusive: true, numa: "0-3", preferred: false})
	}
}
