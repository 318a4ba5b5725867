package main

import (
	"bytes"
	"fmt"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// simBenchConfig is the configuration of the simulate benchmark: the
// static policy with two reserved CPUs under best-effort, as the decision
// benchmarks (test/bench).
const simBenchConfig = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n"

// addRemoveTrace is a simulate input of ops add and remove lines: Guaranteed
// containers of 1-8 whole CPUs (one in four Burstable), each in its own pod,
// removed again at random so that about 60 live at any time (on a 256-CPU
// machine: a busy node, some adds refused when the free CPUs run short).
// A few lines per thousand are malformed or name an unknown op, so the
// error paths are in the mix. Deterministic for a seed.
func addRemoveTrace(seed int64, ops int) []string {
	rng := rand.New(rand.NewSource(seed))
	var live []string
	lines := make([]string, 0, ops)
	for n := 0; len(lines) < ops; n++ {
		switch {
		case rng.Intn(500) == 0:
			lines = append(lines, []string{`{"op":"add","pod":`, `{"op":"frobnicate"}`, `{"op":"add","pod":"p","container":"c","cpu_limit":1}`, `   `}[rng.Intn(4)])
		case len(live) > 0 && (len(live) > 60 || rng.Intn(3) == 0):
			i := rng.Intn(len(live))
			pod := live[i]
			live[i] = live[len(live)-1]
			live = live[:len(live)-1]
			lines = append(lines, fmt.Sprintf(`{"op":"remove","pod":%q,"container":"main"}`, pod))
		default:
			pod := fmt.Sprintf("pod-%05d", n)
			live = append(live, pod)
			if rng.Intn(4) == 0 {
				lines = append(lines, fmt.Sprintf(`{"op":"add","pod":%q,"container":"main","qos":"burstable","cpu_request_milli":%d,"cpu_limit_milli":%d}`,
					pod, 100*(1+rng.Intn(20)), 4000))
				continue
			}
			m := int64(1000 * (1 + rng.Intn(8)))
			lines = append(lines, fmt.Sprintf(`{"op":"add","pod":%q,"container":"main","qos":"guaranteed","cpu_request_milli":%d,"cpu_limit_milli":%d}`, pod, m, m))
		}
	}
	return lines
}

// BenchmarkSimulate runs `simulate` in-process on a 4,000-line add/remove
// trace on epyc-9754 (256 CPUs), its answers written to /dev/null through
// a file, as to a pipe. ns/operation is the wall-clock time per input
// line, command start-up (reading the fixture, building the engine)
// included; cpu-ns/operation the process's CPU time (user + system, the
// garbage collector's included) per line, which other processes on the
// machine do not inflate.
func BenchmarkSimulate(b *testing.B) {
	const ops = 4000
	root := simFixture(b, "epyc-9754")
	cfg := filepath.Join(b.TempDir(), "config.toml")
	if err := os.WriteFile(cfg, []byte(simBenchConfig), 0o644); err != nil {
		b.Fatal(err)
	}
	null, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer null.Close()
	// ops=0 is the start-up alone (the machine read from the fixture's
	// sysfs, the engine built), to tell it from the lines' cost.
	for _, ops := range []int{0, ops} {
		in := []byte(strings.Join(addRemoveTrace(1, ops), "\n") + "\n")
		b.Run(fmt.Sprintf("epyc-9754/cpus=256/ops=%d", ops), func(b *testing.B) {
			var stderr bytes.Buffer
			b.ReportAllocs()
			cpu0 := processCPU(b)
			start := time.Now()
			for i := 0; i < b.N; i++ {
				if code := cmdSimulate([]string{"--sysfs-root", root, "--config", cfg}, bytes.NewReader(in), null, &stderr); code != 0 {
					b.Fatalf("exit %d: %s", code, stderr.String())
				}
			}
			cpu := processCPU(b) - cpu0
			if ops == 0 {
				b.ReportMetric(float64(cpu)/float64(b.N), "cpu-ns/op")
				return
			}
			b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*ops), "ns/operation")
			b.ReportMetric(float64(cpu)/float64(b.N*ops), "cpu-ns/operation")
		})
	}
}

// processCPU is the process's user + system CPU time in ns.
func processCPU(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
