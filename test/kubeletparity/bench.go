package kubeletparity

import (
	"fmt"
	"math/rand"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// BenchMachines are the machines of the side-by-side benchmark: 16 CPUs
// (one socket, 2 NUMA nodes), 96 (2 sockets), 256 (4 sockets).
var BenchMachines = []string{"gen-16", "gen-96-2s", "gen-256-4s"}

// BenchOptions are its option sets.
func BenchOptions() []OptionSet {
	return []OptionSet{
		{},
		{allocator.OptFullPCPUsOnly: "true"},
		{allocator.OptDistributeCPUsAcrossNUMA: "true"},
		{allocator.OptDistributeCPUsAcrossCores: "true"},
	}
}

// Filled is a machine at an occupancy, for one measured decision: the
// engine and its state, and the container to place.
type Filled struct {
	Static *allocator.Static
	State  allocator.State
	Pod    Pod
	Req    allocator.Request
}

// Fill holds occ percent of the assignable CPUs of m with containers of 1
// to 4 cores, the same for a seed, and one in five of them released again
// so the free CPUs are fragmented; 2 CPUs are reserved. The measured
// container asks 8 CPUs on machines of 64 or more, else 4.
func Fill(m Machine, o OptionSet, v kubever.Version, occ int, seed int64) (*Filled, error) {
	eng, err := newEngine(m, o, v, 2)
	if err != nil {
		return nil, err
	}
	rng := rand.New(rand.NewSource(seed))
	per := m.Topo.CPUsPerCore()
	target := (m.Topo.NumCPUs() - 2) * occ / 100
	used := 0
	for i := 0; used < target; i++ {
		n := min(per*(1+rng.Intn(4)), (target-used)/per*per)
		if n == 0 {
			break
		}
		p := Pod{UID: fmt.Sprintf("fill%d", i), Containers: []Container{{Name: "c", CPUs: n}}}
		cpus, ref := eng.allocate(p, 0, 0)
		if ref != nil {
			return nil, fmt.Errorf("fill %s: %s", m.Name, ref)
		}
		used += cpus.Size()
		if rng.Intn(5) == 0 {
			victim := fmt.Sprintf("fill%d", rng.Intn(i+1))
			if c, ok := eng.st.Assignments[victim]["c"]; ok {
				eng.remove(victim, "c")
				used -= c.Size()
			}
		}
	}
	n := 4
	if m.Topo.NumCPUs() >= 64 {
		n = 8
	}
	p := Pod{UID: "measured", Containers: []Container{{Name: "c", CPUs: n}}}
	return &Filled{Static: eng.s, State: eng.st, Pod: p, Req: request(p, 0)}, nil
}

// Decide is one decision of the engine: the container's CPU hints, the
// merged affinity (the best preferred hint) and the allocation.
func (f *Filled) Decide() (cpuset.CPUSet, error) {
	var best hints.Mask
	for _, h := range f.Static.CPUHints(f.State, f.Req) {
		if h.Preferred && (best == 0 || h.Affinity.Count() < best.Count() || (h.Affinity.Count() == best.Count() && h.Affinity < best)) {
			best = h.Affinity
		}
	}
	_, cpus, err := f.Static.Allocate(f.State, f.Req, hints.Hint{Affinity: best, Preferred: true})
	return cpus, err
}
