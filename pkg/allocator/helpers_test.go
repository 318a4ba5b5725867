package allocator

import (
	"errors"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// spec describes a machine for tests built from Go literals, with the
// kernel's x86 numbering (thread t of machine-wide core k is CPU
// t×cores+k) unless adjacent is set (a core's threads consecutive).
type spec struct {
	sockets, numaPerSocket, coresPerSocket, threads int
	coresPerL3                                      int // 0: one node-level L3 per socket (uncore id = socket)
	adjacent                                        bool
}

func build(t testing.TB, s spec) *topology.Topology {
	t.Helper()
	if s.numaPerSocket == 0 {
		s.numaPerSocket = 1
	}
	if s.threads == 0 {
		s.threads = 1
	}
	cores := s.sockets * s.coresPerSocket
	var cpus []topology.CPUInfo
	for k := 0; k < cores; k++ {
		sock := k / s.coresPerSocket
		inSock := k % s.coresPerSocket
		numa := sock*s.numaPerSocket + inSock/(s.coresPerSocket/s.numaPerSocket)
		l3 := sock
		if s.coresPerL3 > 0 {
			l3 = sock*(s.coresPerSocket/s.coresPerL3) + inSock/s.coresPerL3
		}
		for th := 0; th < s.threads; th++ {
			id := th*cores + k
			if s.adjacent {
				id = k*s.threads + th
			}
			cpus = append(cpus, topology.CPUInfo{CPU: id, SysfsCoreID: inSock, Socket: sock, NUMA: numa, L3: l3})
		}
	}
	// Core id = lowest thread id.
	low := map[int]int{}
	for i, c := range cpus {
		k := i / s.threads
		if v, ok := low[k]; !ok || c.CPU < v {
			low[k] = c.CPU
		}
	}
	for i := range cpus {
		cpus[i].Core = low[i/s.threads]
	}
	topo, err := topology.New(topology.Machine{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

// Literal twins of the fixture machines (CONTRACTS.md) and of the KEP
// examples.
var (
	specHT1S4C     = spec{sockets: 1, coresPerSocket: 4, threads: 2}
	specHT2S6C     = spec{sockets: 2, coresPerSocket: 6, threads: 2}
	specHT2S4NUMA  = spec{sockets: 2, numaPerSocket: 2, coresPerSocket: 20, threads: 2}
	specEPYC7702P  = spec{sockets: 1, coresPerSocket: 64, threads: 2, coresPerL3: 4}
	specKEP4800_16 = spec{sockets: 1, coresPerSocket: 16, threads: 1, coresPerL3: 8}
	specKEP4800_32 = spec{sockets: 1, coresPerSocket: 32, threads: 1, coresPerL3: 8}
	specKEP2625    = spec{sockets: 1, coresPerSocket: 16, threads: 2}
)

func mustParse(t testing.TB, s string) cpuset.CPUSet {
	t.Helper()
	c, err := cpuset.Parse(s)
	if err != nil {
		t.Fatalf("bad cpuset %q: %v", s, err)
	}
	return c
}

// mustMask is mustParse as a cpumask.Mask (the shared pool's type).
func mustMask(t testing.TB, s string) cpumask.Mask {
	t.Helper()
	m, err := cpumask.FromCPUSet(mustParse(t, s))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func newStatic(t testing.TB, topo *topology.Topology, o Options, reserved string) *Static {
	t.Helper()
	s, err := NewStatic(topo, o, mustParse(t, reserved))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// alloc allocates and checks the invariants of the resulting state.
func alloc(t testing.TB, s *Static, st State, pod, ctr string, n int, aff hints.Mask) (State, cpuset.CPUSet, error) {
	t.Helper()
	next, cpus, err := s.Allocate(st, Request{Pod: pod, Container: ctr, CPUs: n}, hints.Hint{Affinity: aff})
	if verr := s.Validate(next); verr != nil {
		t.Fatalf("invariants broken after allocating %d for %s/%s: %v", n, pod, ctr, verr)
	}
	if err == nil && cpus.Size() != n {
		t.Fatalf("allocated %s (%d CPUs) for a request of %d", cpus, cpus.Size(), n)
	}
	return next, cpus, err
}

func reasonOf(err error) string {
	var r Reasoner
	if errors.As(err, &r) {
		return r.Reason()
	}
	return ""
}

func mustTopo(t testing.TB, cpus []topology.CPUInfo) *topology.Topology {
	t.Helper()
	topo, err := topology.New(topology.Machine{CPUs: cpus})
	if err != nil {
		t.Fatal(err)
	}
	return topo
}
