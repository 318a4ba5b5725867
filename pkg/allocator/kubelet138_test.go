package allocator

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// Placements kubelet v1.38 changed: the rows below are those of the
// kubelet's v1.38.0-beta.0 pkg/kubelet/cm/cpumanager tests
// (policy_static_test.go; read from the k8s.io/kubernetes@v1.38.0-beta.0
// module) that v1.37.2 did not have or expects differently, with their
// inputs as written there; the rows of cpu_assignment_test.go, which
// exercise the best fit alone, are in take/kubelet138_test.go. Each runs under
// both rule sets (Options.KubeletVersion): v1.38 expects the kubelet's
// row, v1.37 the value worked out by hand from v1.37.2's code, or this
// package's documented deviation where v1.37 would hand out a busy CPU
// (doc.go).

var bothVersions = []kubever.Version{kubever.V137, kubever.V138}

// TestPolicyWithDistributeCPUsAcrossNUMAAndFullPCPUsOnly (#140730):
// distribute-cpus-across-numa with full-pcpus-only where NUMA nodes have
// an odd number of free CPUs. The kubelet v1.37.2 loops forever on row 1
// (a remainder subset whose nodes have 1 CPU left each); this package
// skips such subsets under both rule sets, so both give v1.38's answer.
func TestPolicyWithDistributeCPUsAcrossNUMAAndFullPCPUsOnly(t *testing.T) {
	topo := build(t, specHT2S4NUMA)
	for _, c := range []struct {
		name     string
		reserved string
		def      string
		assigned map[string]map[string]cpuset.CPUSet
		n        int
		want     string
	}{
		{"fragmented per-NUMA availability", "", "0-4,10-14,20-24,30-34", nil, 14, "0-3,10-13,20-23,30-31"},
		// The row's default set leaves the reserved CPUs out; this
		// package's State keeps them in the shared pool (they are not
		// allocatable either way).
		{"PartialCoreReserved, ExpectAllocDistributed", "0,10,20,30", "0-79", nil, 70,
			"1-9,11-19,21-29,31-38,41-49,51-59,61-69,71-78"},
		{"PreexistingPartialCores, ExpectAllocDistributed", "", "3-9,13-19,23-29,33-39,40-79",
			map[string]map[string]cpuset.CPUSet{"legacyPod": {"legacyContainer": mustParse(t, "0-2,10-12,20-22,30-32")}}, 62,
			"3-9,13-19,23-29,33-41,43-51,53-61,63-69,73-79"},
	} {
		for _, v := range bothVersions {
			s := newStatic(t, topo, Options{DistributeCPUsAcrossNUMA: true, FullPCPUsOnly: true, KubeletVersion: v}, c.reserved)
			st := kubeletState(t, s, c.def, c.assigned)
			_, got, err := alloc(t, s, st, "fakePod", "fakeContainer", c.n, 0)
			if err != nil || !got.Equals(mustParse(t, c.want)) {
				t.Errorf("%s %s: got %s, %v; want %s", c.name, v, got, err, c.want)
			}
		}
	}
}

// The static policy passes the merged hint's NUMA count to the aligned
// take (allocateCPUs, numaAffinity.Count()) and none to the rest. On
// topoDualSocketHT (NUMA 0 = even CPUs, core k = {k, k+6}), reserved
// 0-1, a hint {0,1} and 4 CPUs: v1.38 spreads them over both nodes, whole
// cores first (2,8 and 3,9); v1.37 fits them in NUMA 0 (2,8,4,10).
func TestKubelet138AllocateSpreadsOverHint(t *testing.T) {
	dual := kubeletTopo(t, 12, func(i int) (int, int, int, int) { return i % 2, i % 6, i % 2, 0 })
	for _, c := range []struct {
		v    kubever.Version
		want string
	}{{kubever.V137, "2,4,8,10"}, {kubever.V138, "2-3,8-9"}} {
		s := newStatic(t, dual, Options{DistributeCPUsAcrossNUMA: true, KubeletVersion: c.v}, "0-1")
		_, got, err := alloc(t, s, s.NewState(), "p", "workload", 4, hints.NewMask(0, 1))
		if err != nil || !got.Equals(mustParse(t, c.want)) {
			t.Errorf("%s: got %s, %v; want %s", c.v, got, err, c.want)
		}
		// Static.Take (a pod's slice) reads the same hint.
		got, err = s.Take(mustParse(t, "2-11"), 4, hints.NewMask(0, 1))
		if err != nil || !got.Equals(mustParse(t, c.want)) {
			t.Errorf("%s Take: got %s, %v; want %s", c.v, got, err, c.want)
		}
	}
}
