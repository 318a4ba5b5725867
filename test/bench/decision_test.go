package bench_test

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/bench"
)

// BenchmarkDecision is one admission decision through the policy engine
// (request check, CPU hint generation, best-effort merge and admission,
// allocation, cpuset.mems) on every fixture machine, at 0, 50 and 90%
// occupancy, for the four option sets. The name carries the table's
// columns: machine/cpus=/numa=/l3=/occ=/opts=/req=. Besides ns/op it
// reports the p50 and p99 of the per-decision wall-clock time (p50-ns,
// p99-ns) and of the thread CPU time (cpu-p50-ns, cpu-p99-ns), and the
// occupancy the fill reached (occ-pct).
func BenchmarkDecision(b *testing.B) {
	for _, m := range bench.Fixtures() {
		benchMachine(b, m)
	}
}

// BenchmarkScaling is BenchmarkDecision on the generated machines of 16 to
// 1024 CPUs (bench.Sweep), to show how the cost grows with the machine.
func BenchmarkScaling(b *testing.B) {
	for _, m := range bench.Sweep() {
		benchMachine(b, m)
	}
}

func benchMachine(b *testing.B, m bench.Machine) {
	topo := sysfstest.LoadSpec(b, m.Spec)
	for _, set := range bench.OptionSets() {
		e, err := policy.New(topo, bench.EngineConfig(set.Options))
		if err != nil {
			// e.g. an option the machine cannot honour; the table leaves
			// the row out and says why.
			b.Logf("%s/%s: skipped: %v", m.Name, set.Name, err)
			continue
		}
		n := bench.RequestCPUs(topo)
		req := bench.Guaranteed("bench", "c", n)
		for _, occ := range bench.Occupancies {
			st, used, err := bench.Fill(e, occ, n, int64(occ)+1)
			if err != nil {
				b.Fatalf("%s/%s/occ%d: %v", m.Name, set.Name, occ, err)
			}
			if _, _, err := e.Add(st, req); err != nil {
				b.Logf("%s/%s/occ%d: skipped: the measured request is refused: %v", m.Name, set.Name, occ, err)
				continue
			}
			assignable := topo.NumCPUs() - e.Reserved().Size()
			name := fmt.Sprintf("%s/cpus=%d/numa=%d/l3=%d/occ=%d/opts=%s/req=%d",
				m.Name, topo.NumCPUs(), topo.NumNUMANodes(), topo.NumL3(), occ, set.Name, n)
			b.Run(name, func(b *testing.B) {
				timeEach(b, func() error {
					_, _, err := e.Add(st, req)
					return err
				})
				b.ReportMetric(float64(used)*100/float64(assignable), "occ-pct")
			})
		}
	}
}

// timeEach runs op b.N times and reports, besides ns/op and allocations,
// the p50 and p99 of each run's wall-clock time (p50-ns, p99-ns) and
// thread CPU time (cpu-p50-ns, cpu-p99-ns). On a shared machine the first
// includes time preempted by other processes, the second does not (GC
// work op is made to do counts in both). An error from op fails b.
func timeEach(b *testing.B, op func() error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	samples := make([]time.Duration, b.N)
	cpu := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c0, ok0 := threadCPUTime()
		t0 := time.Now()
		err := op()
		samples[i] = time.Since(t0)
		if c1, ok1 := threadCPUTime(); ok0 && ok1 {
			cpu = append(cpu, c1-c0)
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	reportPercentiles(b, samples)
	if len(cpu) == b.N {
		slices.Sort(cpu)
		b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "cpu-p50-ns")
		b.ReportMetric(float64(cpu[int(0.99*float64(len(cpu)-1))].Nanoseconds()), "cpu-p99-ns")
	}
}

// reportPercentiles adds the p50 and p99 of the per-operation durations
// (each includes the two clock reads around it, tens of ns).
func reportPercentiles(b *testing.B, samples []time.Duration) {
	if len(samples) == 0 {
		return
	}
	slices.Sort(samples)
	at := func(p float64) float64 { return float64(samples[int(p*float64(len(samples)-1))].Nanoseconds()) }
	b.ReportMetric(at(0.50), "p50-ns")
	b.ReportMetric(at(0.99), "p99-ns")
}
