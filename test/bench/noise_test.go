package bench_test

import (
	"runtime"
	"slices"
	"testing"
	"time"
)

var noiseSink uint64

// BenchmarkNoiseFloor times a fixed loop of arithmetic that allocates
// nothing, the way BenchmarkDecision times a decision (thread CPU time and
// wall clock per operation). Its spread is what the machine adds to any
// short operation — timer interrupts, a virtual CPU descheduled by the
// host, cache misses — so the decision p99s can be read against it. work=
// is the loop length; ~4 µs on this machine, about one decision.
func BenchmarkNoiseFloor(b *testing.B) {
	const work = 3000
	b.Run("work=3000", func(b *testing.B) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		samples := make([]time.Duration, b.N)
		cpu := make([]time.Duration, 0, b.N)
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			c0, ok0 := threadCPUTime()
			t0 := time.Now()
			x := uint64(i)
			for j := 0; j < work; j++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
			noiseSink += x
			samples[i] = time.Since(t0)
			if c1, ok1 := threadCPUTime(); ok0 && ok1 {
				cpu = append(cpu, c1-c0)
			}
		}
		b.StopTimer()
		reportPercentiles(b, samples)
		if len(cpu) == b.N {
			slices.Sort(cpu)
			b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "cpu-p50-ns")
			b.ReportMetric(float64(cpu[int(0.99*float64(len(cpu)-1))].Nanoseconds()), "cpu-p99-ns")
		}
	})
}
