//go:build !linux

package bench_test

import "time"

// threadCPUTime is not available off Linux.
func threadCPUTime() (time.Duration, bool) { return 0, false }
