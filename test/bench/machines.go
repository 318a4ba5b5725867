// Package bench holds the performance measurements of issue 9: the
// machines and option sets the decision benchmarks sweep, the way a machine
// is filled to a given occupancy, and the helpers that drive the plugin
// through internal/nritest's in-process NRI runtime side in the
// CreateContainer round-trip benchmark and the RSS tool.
//
// The benchmarks themselves are in this directory's _test files (run them
// with scripts/bench.sh or `make bench`); cmd/benchtable turns their output
// into the README's table, cmd/rss measures the daemon's memory and
// cmd/crilatency the plugin's added latency on a real containerd.
//
// Nothing here asserts a time: the figures are reported, and the targets
// are compared by a reader of the table.
package bench

import (
	"fmt"
	"math/rand"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Machine is one machine of the sweep: a named fixture or a generated one.
type Machine struct {
	Name      string
	Spec      sysfstest.Spec
	Generated bool // part of the scaling sweep, not a named fixture
}

// Fixtures returns every named fixture machine of pkg/sysfs/sysfstest.
func Fixtures() []Machine {
	var out []Machine
	for _, name := range sysfstest.Names() {
		s, _ := sysfstest.Get(name)
		out = append(out, Machine{Name: name, Spec: s})
	}
	return out
}

// Sweep returns the generated machines of the scaling sweep: 16, 64, 256,
// 512 and 1024 CPUs, SMT2, 8 cores per L3, 2 to 8 NUMA nodes. The shapes
// grow the way server parts do: more sockets first, then more NUMA nodes
// per socket (NPS/SNC modes).
func Sweep() []Machine {
	gen := func(sockets, numaPerSocket, coresPerSocket int) Machine {
		s := sysfstest.Spec{
			Sockets: sockets, NUMAPerSocket: numaPerSocket, CoresPerSocket: coresPerSocket,
			ThreadsPerCore: 2, CoresPerL3: 8,
		}
		s.Description = fmt.Sprintf("generated: %d sockets x %d cores SMT2, %d NUMA nodes, 8 cores per L3",
			sockets, coresPerSocket, sockets*numaPerSocket)
		return Machine{Name: fmt.Sprintf("gen-%d", 2*sockets*coresPerSocket), Spec: s, Generated: true}
	}
	return []Machine{
		gen(1, 2, 8),   // 16 CPUs, 2 NUMA, 1 L3 shared by both nodes
		gen(2, 1, 16),  // 64 CPUs, 2 NUMA, 4 L3
		gen(2, 2, 64),  // 256 CPUs, 4 NUMA, 16 L3
		gen(2, 4, 128), // 512 CPUs, 8 NUMA, 32 L3
		gen(2, 4, 256), // 1024 CPUs, 8 NUMA, 64 L3
	}
}

// OptionSet is one static-policy option combination of the benchmarks.
type OptionSet struct {
	Name    string
	Options map[string]string
}

// OptionSets are the four option sets issue 9 names.
func OptionSets() []OptionSet {
	return []OptionSet{
		{"packed", nil},
		{"full-pcpus-only", map[string]string{"full-pcpus-only": "true"}},
		{"distribute-cpus-across-numa", map[string]string{"distribute-cpus-across-numa": "true"}},
		{"uncore+full-pcpus-only", map[string]string{"prefer-align-cpus-by-uncorecache": "true", "full-pcpus-only": "true"}},
	}
}

// Occupancies are the fractions (percent) of the assignable CPUs held by
// exclusive containers before the measured decision.
var Occupancies = []int{0, 50, 90}

// ReservedCount is the reserved_cpu_count of every benchmark engine: one
// whole core on the SMT2 machines.
const ReservedCount = 2

// EngineConfig is the policy configuration of the benchmarks: static with
// the option set, ReservedCount reserved CPUs, best-effort topology
// manager at container scope (so every decision generates CPU hints and
// merges them).
func EngineConfig(opts map[string]string) policy.Config {
	return policy.Config{
		CPUManagerPolicy: policy.CPUPolicyStatic,
		ReservedCount:    ReservedCount,
		CPUOptions:       opts,
		TopologyPolicy:   hints.PolicyBestEffort,
		TopologyScope:    hints.ScopeContainer,
	}
}

// RequestCPUs is the size of the measured container: 8 CPUs on machines
// of 64 CPUs or more, 4 from 16, else 2. Kept constant across the sweep so
// the cost grows with the machine only.
func RequestCPUs(topo *topology.Topology) int {
	switch n := topo.NumCPUs(); {
	case n >= 64:
		return 8
	case n >= 16:
		return 4
	}
	return 2
}

// Guaranteed is a Guaranteed-QoS request for n whole CPUs.
func Guaranteed(pod, container string, n int) policy.Request {
	return policy.Request{Pod: pod, Container: container, QoS: policy.Guaranteed,
		CPURequestMilli: int64(n) * 1000, CPULimitMilli: int64(n) * 1000}
}

// Fill adds exclusive containers to an empty state until occ percent of
// the assignable (non-reserved) CPUs are taken, leaving at least keepFree
// of them free. Container sizes are random multiples of the machine's
// threads per core (1-4 cores), and one in five additions is followed by
// the release of a random earlier container, so the free CPUs end up
// fragmented as on a node that has run for a while. The same seed gives
// the same state. It returns the state and how many CPUs are taken.
func Fill(e *policy.Engine, occ, keepFree int, seed int64) (policy.State, int, error) {
	st := e.NewState()
	topo := e.Topology()
	assignable := topo.NumCPUs() - e.Reserved().Size()
	target := min(assignable*occ/100, assignable-keepFree)
	tpc := max(1, topo.CPUsPerCore())
	rng := rand.New(rand.NewSource(seed))
	used, fails := 0, 0
	for i := 0; used < target && fails < 20; i++ {
		n := tpc * (1 + rng.Intn(4))
		if n > target-used {
			n = (target - used) / tpc * tpc
			if n == 0 {
				break
			}
		}
		pod := fmt.Sprintf("fill-%d", i)
		next, dec, err := e.Add(st, Guaranteed(pod, "c", n))
		if err != nil {
			fails++ // e.g. no whole cores left under full-pcpus-only: try another size
			continue
		}
		st, used = next, used+dec.CPUs.Size()
		if rng.Intn(5) == 0 {
			victim := fmt.Sprintf("fill-%d", rng.Intn(i+1))
			if cpus, ok := e.Assignment(st, victim, "c"); ok {
				st = e.Remove(st, victim, "c")
				used -= cpus.Size()
			}
		}
	}
	if err := e.Validate(st); err != nil {
		return st, used, fmt.Errorf("filled state is invalid: %w", err)
	}
	return st, used, nil
}
