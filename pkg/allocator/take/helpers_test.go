package take

import (
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// The machines of these tests are the kubelet's test machines, rebuilt
// from its per-CPU and per-core descriptions, or the fixtures of
// pkg/sysfs/sysfstest (pkg/allocator's TestLiteralTwinsMatchFixtures ties
// those to the Go-literal machines its tests use).

// mustParse reads a CPU list with the project's parser, whose error names
// the list.
func mustParse(t testing.TB, s string) cpuset.CPUSet {
	t.Helper()
	set, err := topology.ParseList(s)
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// kubeletTopo builds a machine from per-CPU (socket, core, numa, l3).
func kubeletTopo(t testing.TB, n int, f func(cpu int) (socket, core, numa, l3 int)) *topology.Topology {
	t.Helper()
	cpus := make([]topology.CPUInfo, n)
	for i := range cpus {
		s, c, nn, l := f(i)
		cpus[i] = topology.CPUInfo{CPU: i, Core: c, Socket: s, NUMA: nn, L3: l}
	}
	topo, err := topology.New(topology.Machine{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// coresTopo builds a machine from explicit cores: each entry is a core
// id, its socket (= its NUMA node unless numa is set) and its CPUs.
type coreSpec struct {
	core, socket int
	cpus         string
	numa         int // -1: the socket
}

func coresTopo(t testing.TB, cores []coreSpec) *topology.Topology {
	t.Helper()
	var cpus []topology.CPUInfo
	for _, c := range cores {
		numa := c.numa
		if numa < 0 {
			numa = c.socket
		}
		for _, p := range mustParse(t, c.cpus).List() {
			cpus = append(cpus, topology.CPUInfo{CPU: p, Core: c.core, Socket: c.socket, NUMA: numa, L3: c.socket})
		}
	}
	topo, err := topology.New(topology.Machine{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// versionName names a subtest's kubelet rules.
func versionName(v137 bool) string {
	if v137 {
		return "/v1.37"
	}
	return "/v1.38"
}
