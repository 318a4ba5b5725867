package allocator

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator/take"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// BenchmarkAllocate times one allocation decision (an 8-CPU container) on
// the largest fixtures at 0%, 50% and 90% occupancy, for each option
// family. The occupied state is built with the same policy from seeded
// random even-sized containers, some of them released again so the free
// CPUs are fragmented. Target: <= 20 µs per decision.
func BenchmarkAllocate(b *testing.B) {
	modes := []struct {
		name string
		o    Options
	}{
		{"packed", Options{}},
		{"full-pcpus-only", Options{FullPCPUsOnly: true}},
		{"across-numa", Options{DistributeCPUsAcrossNUMA: true}},
		{"uncore+full-pcpus-only", Options{PreferAlignByUncoreCache: true, FullPCPUsOnly: true}},
	}
	for _, fixture := range []string{"epyc-9754", "epyc-9654-2p-nps2", "xeon-8490h-2p-snc"} {
		topo := sysfstest.Load(b, fixture)
		for _, mode := range modes {
			reserved, err := ReservedByCount(topo, mode.o, 2)
			if err != nil {
				b.Fatal(err)
			}
			s, err := NewStatic(topo, mode.o, reserved)
			if err != nil {
				b.Fatal(err)
			}
			for _, occ := range []int{0, 50, 90} {
				st := s.NewState()
				rng := rand.New(rand.NewSource(int64(occ)))
				target := topo.NumCPUs() * occ / 100
				used, i := 0, 0
				for used < target {
					n := 2 * (1 + rng.Intn(4))
					if n > target-used {
						n = (target - used + 1) / 2 * 2
					}
					next, cpus, err := s.Allocate(st, Request{Pod: fmt.Sprintf("p%d", i), Container: "c", CPUs: n}, hints.Hint{})
					if err != nil {
						break
					}
					st, used, i = next, used+cpus.Size(), i+1
					if rng.Intn(5) == 0 { // fragment: release an earlier one
						victim := fmt.Sprintf("p%d", rng.Intn(i))
						if c, ok := st.Assignments[victim]["c"]; ok {
							st = s.Release(st, victim, "c")
							used -= c.Size()
						}
					}
				}
				req := Request{Pod: "bench", Container: "c", CPUs: 8}
				b.Run(fmt.Sprintf("%s/%s/occ%d", fixture, mode.name, occ), func(b *testing.B) {
					b.ReportAllocs()
					for b.Loop() {
						if _, _, err := s.Allocate(st, req, hints.Hint{}); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		}
	}
}

// BenchmarkCPUHints times CPU hint generation on the 8-NUMA-node Xeon.
func BenchmarkCPUHints(b *testing.B) {
	topo := sysfstest.Load(b, "xeon-8490h-2p-snc")
	s, err := NewStatic(topo, Options{}, mustParse(b, "0,120"))
	if err != nil {
		b.Fatal(err)
	}
	st := s.NewState()
	req := Request{Pod: "bench", Container: "c", CPUs: 40}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.CPUHints(st, req)
	}
}

// BenchmarkCPUSetBoundary is the floor the State contract (cpuset.CPUSet
// fields) puts under a decision on a 256-CPU machine: reading the shared
// pool into a bitset and building the next shared pool (255 CPUs).
func BenchmarkCPUSetBoundary(b *testing.B) {
	topo := sysfstest.Load(b, "epyc-9754")
	m := take.NewMachine(topo)
	def := topo.CPUs()
	b.ReportAllocs()
	for b.Loop() {
		bits := m.ToBits(def)
		bits.Clear(0)
		_ = m.ToSet(bits)
	}
}
