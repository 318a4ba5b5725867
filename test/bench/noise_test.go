package bench_test

import "testing"

var noiseSink uint64

// BenchmarkNoiseFloor times a fixed loop of arithmetic that allocates
// nothing, the way BenchmarkDecision times a decision (timeEach). Its
// spread is what the machine adds to any short operation — timer
// interrupts, a virtual CPU descheduled by its host — so the decision
// percentiles can be read against it. work= is the loop length, about one
// decision (~4 µs) here.
func BenchmarkNoiseFloor(b *testing.B) {
	const work = 3000
	b.Run("work=3000", func(b *testing.B) {
		i := uint64(0)
		timeEach(b, func() error {
			x := i
			for j := 0; j < work; j++ {
				x = x*6364136223846793005 + 1442695040888963407
			}
			noiseSink += x
			i++
			return nil
		})
	})
}
