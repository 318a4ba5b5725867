package topology

import (
	"reflect"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"
)

// dualSocketHT is the kubelet's topoDualSocketHT written out by hand: 2
// sockets × 6 cores × 2 threads, core k = {k, k+12}, socket 0 = cores 0-5,
// NUMA node = socket, one L3 per socket.
func dualSocketHT() Machine {
	var cpus []CPUInfo
	for cpu := 0; cpu < 24; cpu++ {
		core := cpu % 12
		socket := core / 6
		cpus = append(cpus, CPUInfo{CPU: cpu, Core: core, SysfsCoreID: core % 6, Socket: socket, NUMA: socket, L3: socket})
	}
	return Machine{
		CPUs:        cpus,
		Distances:   map[int]map[int]int{0: {0: 10, 1: 21}, 1: {0: 21, 1: 10}},
		MemoryBytes: map[int]uint64{0: 1 << 30, 1: 2 << 30, 2: 4 << 30, 3: 0},
		Isolated:    cpuset.New(3, 15, 40), // 40 is not online
	}
}

func mustNew(t *testing.T, m Machine) *Topology {
	t.Helper()
	topo, err := New(m)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return topo
}

func set(ids ...int) cpuset.CPUSet { return cpuset.New(ids...) }

func TestQueries(t *testing.T) {
	topo := mustNew(t, dualSocketHT())
	counts := []int{topo.NumCPUs(), topo.NumCores(), topo.NumSockets(), topo.NumNUMANodes(), topo.NumL3(),
		topo.CPUsPerCore(), topo.CPUsPerSocket(), topo.CPUsPerNUMA(), topo.CPUsPerL3(), topo.MaxThreadsPerCore()}
	if want := []int{24, 12, 2, 2, 2, 2, 12, 12, 12, 2}; !reflect.DeepEqual(counts, want) {
		t.Errorf("counts = %v, want %v", counts, want)
	}
	setTests := []struct {
		name string
		got  cpuset.CPUSet
		want cpuset.CPUSet
	}{
		{"CPUs", topo.CPUs(), cpuset.New(seq(0, 23)...)},
		{"CPUsInSockets(1)", topo.CPUsInSockets(1), set(6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23)},
		{"CPUsInSockets(0,1)", topo.CPUsInSockets(0, 1), cpuset.New(seq(0, 23)...)},
		{"CPUsInNUMANodes(0)", topo.CPUsInNUMANodes(0), set(0, 1, 2, 3, 4, 5, 12, 13, 14, 15, 16, 17)},
		{"CPUsInNUMANodes(7)", topo.CPUsInNUMANodes(7), set()},
		{"CPUsInL3Groups(1)", topo.CPUsInL3Groups(1), set(6, 7, 8, 9, 10, 11, 18, 19, 20, 21, 22, 23)},
		{"CPUsInCores(0,7)", topo.CPUsInCores(0, 7), set(0, 12, 7, 19)},
		{"Siblings(13)", topo.Siblings(13), set(1, 13)},
		{"Siblings(99)", topo.Siblings(99), set()},
		{"Isolated", topo.Isolated(), set(3, 15)}, // offline 40 dropped
	}
	for _, tc := range setTests {
		if !tc.got.Equals(tc.want) {
			t.Errorf("%s = %s, want %s", tc.name, tc.got, tc.want)
		}
	}
	listTests := []struct {
		name      string
		got, want []int
	}{
		{"Sockets", topo.Sockets(), []int{0, 1}},
		{"NUMANodes", topo.NUMANodes(), []int{0, 1}},
		{"L3Groups", topo.L3Groups(), []int{0, 1}},
		{"Cores", topo.Cores(), seq(0, 11)},
		{"MemoryNodes", topo.MemoryNodes(), []int{0, 1, 2}}, // node 3 has 0 bytes
		{"SocketsOf", topo.SocketsOf(set(0, 23, 99)), []int{0, 1}},
		{"NUMANodesOf", topo.NUMANodesOf(set(18)), []int{1}},
		{"L3GroupsOf", topo.L3GroupsOf(set()), nil},
		{"CoresOf", topo.CoresOf(set(12, 0, 13, 23)), []int{0, 1, 11}},
		{"NUMANodesInSocket(1)", topo.NUMANodesInSocket(1), []int{1}},
		{"SocketsInNUMANode(0)", topo.SocketsInNUMANode(0), []int{0}},
	}
	for _, tc := range listTests {
		if !reflect.DeepEqual(tc.got, tc.want) {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
	if c, ok := topo.Info(18); !ok || c.Core != 6 || c.SysfsCoreID != 0 || c.Socket != 1 {
		t.Errorf("Info(18) = %+v, %v", c, ok)
	}
	if _, ok := topo.Info(24); ok {
		t.Error("Info(24) ok for an absent CPU")
	}
	if d, ok := topo.Distance(0, 1); !ok || d != 21 {
		t.Errorf("Distance(0,1) = %d, %v", d, ok)
	}
	if _, ok := topo.Distance(0, 5); ok {
		t.Error("Distance(0,5) known")
	}
	if got := topo.MemTotal(1); got != 2<<30 {
		t.Errorf("MemTotal(1) = %d", got)
	}
}

// TestImmutable checks that neither the input Machine nor returned values
// can change a Topology.
func TestImmutable(t *testing.T) {
	m := dualSocketHT()
	topo := mustNew(t, m)
	m.CPUs[0].Socket = 1
	m.Distances[0][1] = 99
	m.MemoryBytes[0] = 0
	d := topo.Details()
	d[0].Core = 42
	topo.Distances()[0][1] = 77
	topo.Sockets()[0] = 9
	topo.Cores()[0] = 9
	if c, _ := topo.Info(0); c.Socket != 0 || c.Core != 0 {
		t.Errorf("Info(0) = %+v after mutating inputs/outputs", c)
	}
	if v, _ := topo.Distance(0, 1); v != 21 {
		t.Errorf("Distance(0,1) = %d after mutation", v)
	}
	if topo.MemTotal(0) != 1<<30 || topo.Sockets()[0] != 0 || topo.Cores()[0] != 0 {
		t.Error("memory, sockets or cores changed through a returned value")
	}
}

// TestHybridAverages: 2 two-thread cores + 2 one-thread cores = 6 CPUs on 4
// cores; the kubelet's average CPUsPerCore is 6/4 = 1.
func TestHybridAverages(t *testing.T) {
	topo := mustNew(t, Machine{CPUs: []CPUInfo{
		{CPU: 0, Core: 0}, {CPU: 1, Core: 0}, {CPU: 2, Core: 2}, {CPU: 3, Core: 2},
		{CPU: 4, Core: 4}, {CPU: 5, Core: 5},
	}})
	if topo.CPUsPerCore() != 1 || topo.MaxThreadsPerCore() != 2 {
		t.Errorf("CPUsPerCore %d, MaxThreadsPerCore %d; want 1, 2", topo.CPUsPerCore(), topo.MaxThreadsPerCore())
	}
	if len(topo.Distances()) != 0 || len(topo.MemoryNodes()) != 0 || !topo.Isolated().IsEmpty() {
		t.Error("nil distances/memory/isolated should give empty results")
	}
}

func TestNewErrors(t *testing.T) {
	tests := []struct {
		name string
		m    Machine
		want string
	}{
		{"no cpus", Machine{}, "no online CPUs"},
		{"duplicate", Machine{CPUs: []CPUInfo{{CPU: 1, Core: 1}, {CPU: 1, Core: 1}}}, "cpu 1 listed twice"},
		{"negative cpu", Machine{CPUs: []CPUInfo{{CPU: -1}}}, "negative"},
		{"negative numa", Machine{CPUs: []CPUInfo{{CPU: 0, NUMA: -2}}}, "negative"},
		{"cpu id too large", Machine{CPUs: []CPUInfo{{CPU: 0}, {CPU: MaxCPUID + 1}}}, "above the largest supported id 65535"},
		{"core spans sockets", Machine{CPUs: []CPUInfo{{CPU: 0, Core: 0}, {CPU: 1, Core: 0, Socket: 1}}}, "spans"},
		{"core spans numa", Machine{CPUs: []CPUInfo{{CPU: 0, Core: 0}, {CPU: 1, Core: 0, NUMA: 1}}}, "spans"},
		{"negative memory node", Machine{CPUs: []CPUInfo{{CPU: 0}}, MemoryBytes: map[int]uint64{-1: 5}}, "negative NUMA node"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			topo, err := New(tc.m)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("New = %v, %v; want error containing %q", topo, err, tc.want)
			}
		})
	}
}

func seq(lo, hi int) []int {
	var out []int
	for i := lo; i <= hi; i++ {
		out = append(out, i)
	}
	return out
}
