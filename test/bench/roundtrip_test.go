//go:build testhooks

package bench_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/persist"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/bench"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// roundTripMachine is the machine of the round-trip benchmark: 256 CPUs,
// the size of the decision target.
const roundTripMachine = "epyc-9754"

// BenchmarkCreateContainer is the full CreateContainer round trip over the
// real NRI protocol in-process: the runtime side (pkg/adaptation) sends
// CreateContainer over its socket to the daemon (internal/daemon, the same
// code `nri-cpualign run` runs), which decides, writes and fsyncs its
// checkpoint, and answers with the adjustment and the updates of the
// shared-pool containers. Only the CreateContainer call is timed (p50 and
// p99: the NRI exchange alone, not the fake runtime's storing of the
// answer, which under direct writes its fake cgroup files); the
// container is stopped and removed again outside the timer, so every
// iteration sees the same number of existing containers (0, 100, 500: one
// in five exclusive with 2 CPUs, the rest shared). kind=exclusive creates
// a Guaranteed 2-CPU container (the shared pool shrinks: every shared
// container gets an update in the answer); kind=shared a Burstable one.
// state=disk keeps the checkpoint on the root file system (ext4 here),
// state=tmpfs on /dev/shm: the same encode, write, rename and fsync calls,
// without the storage latency, to separate the plugin's own cost from the
// disk's. updates= is shared_pool_updates: in-answer puts the shared-pool
// containers' updates in the answer, direct (the default) writes their cgroups (here plain
// files of a fake tree) right after the answer (there, each iteration
// waits outside the timer until the shared-pool containers follow the
// pool). store= is how
// the decision is made durable: journal (one record appended and
// fdatasynced, the default) or snapshot (the whole checkpoint rewritten,
// fsynced, renamed, directory fsynced: the format before the journal).
func BenchmarkCreateContainer(b *testing.B) {
	for _, storage := range []string{"disk", "tmpfs"} {
		for _, existing := range []int{0, 100, 500} {
			for _, kind := range []string{"exclusive", "shared"} {
				modes := []string{config.SharedUpdatesInAnswer}
				if kind == "exclusive" {
					modes = append(modes, config.SharedUpdatesDirect)
				}
				for _, mode := range modes {
					for _, store := range []persist.Mode{persist.Journal, persist.Snapshot} {
						b.Run(fmt.Sprintf("%s/cpus=256/existing=%d/kind=%s/updates=%s/state=%s/store=%s", roundTripMachine, existing, kind, mode, storage, store), func(b *testing.B) {
							benchRoundTrip(b, existing, kind, mode, storage, store)
						})
					}
				}
			}
		}
	}
}

func benchRoundTrip(b *testing.B, existing int, kind, updates, storage string, store persist.Mode) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nri-bench-") // short: unix socket path limit
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	// direct writes the shared-pool containers' cgroups: the runtime side
	// keeps a fake cgroup v1 tree (plain files in dir) for it to write.
	// It is kept in memory (/dev/shm) when it can be, as cgroupfs is: on
	// the disk the passes' 400 file writes per event kept the kernel's
	// writeback busy under the timed calls.
	cgroupRoot, err := os.MkdirTemp("/dev/shm", "nri-bench-cgroup-")
	if err != nil {
		cgroupRoot = dir + "/cgroup"
	}
	defer os.RemoveAll(cgroupRoot)
	if err := os.MkdirAll(cgroupRoot+"/cpuset", 0o755); err != nil {
		b.Fatal(err)
	}
	var rtOpts []nritest.Option
	if updates == config.SharedUpdatesDirect {
		rtOpts = append(rtOpts, nritest.WithCgroupRoot(cgroupRoot))
	}
	rt, err := bench.StartRuntime(dir, rtOpts...)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Stop()
	stateDir := dir + "/state"
	if storage == "tmpfs" {
		if stateDir, err = os.MkdirTemp("/dev/shm", "nri-bench-state-"); err != nil {
			b.Skipf("no tmpfs at /dev/shm: %v", err)
		}
		defer os.RemoveAll(stateDir)
	}

	doc := fmt.Sprintf(`cpu_manager_policy = "static"
reserved_cpu_count = %d
topology_manager_policy = "best-effort"
state_dir = %q
socket_path = %q
cgroup_root = %q
metrics_address = ""
reconcile_period = "0"
shared_pool_updates = %q
log_level = "info"
`, bench.ReservedCount, stateDir, rt.Socket(), cgroupRoot, updates)
	cfg, err := config.Load([]byte(doc))
	if err != nil {
		b.Fatal(err)
	}
	// The daemon logs one line per decision at info, as deployed; the
	// lines are formatted and discarded.
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := daemon.New(cfg, daemon.WithTopology(sysfstest.Load(b, roundTripMachine)), daemon.WithLogger(log), daemon.WithStore(store))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Errorf("daemon.Run: %v", err)
		}
	}()
	if err := rt.WaitForPlugin(1, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	if err := bench.Populate(ctx, rt, existing, 2); err != nil {
		b.Fatal(err)
	}

	r := framework.GuaranteedCPUs(2)
	if kind == "shared" {
		r = bench.Shared
	}
	pod, err := bench.RunPod(ctx, rt, "bench", r)
	if err != nil {
		b.Fatal(err)
	}
	// settled reports whether every shared-pool container runs on the
	// current shared pool (direct: the passes have written it).
	settled := func() bool {
		eng, st := d.EngineState()
		pool, n := eng.SharedMask(st), 0
		running, err := rt.Running() // the cgroups' under direct
		if err != nil {
			return false
		}
		for _, cpus := range running {
			if pool.CPUSet().Equals(cpus) {
				n++
			}
		}
		return n == bench.SharedOf(existing)
	}
	// wait lets the last event's push land, so that pushes cannot pile up
	// behind the timed calls. It spins rather than sleeps and does not
	// wait for the worker to go idle: any pause makes the next call pay
	// for waking the threads (0.1-0.2 ms on this VM), which back-to-back
	// in-answer iterations do not. It asks the daemon's kick ledger, not
	// the cgroups: reading 500 cgroups per spin made garbage enough to
	// keep this process's collector busy into the timed call (direct's
	// p50 was 1.6 ms against 0.6 ms for a shared container, tmpfs alike).
	// settled() checks the outcome once at the end instead.
	wait := func() {
		if updates == config.SharedUpdatesInAnswer {
			return
		}
		for deadline := time.Now().Add(10 * time.Second); !d.Settled(); runtime.Gosched() {
			if time.Now().After(deadline) {
				b.Fatal("the update worker did not serve its kicks within 10 s")
			}
		}
	}
	wait()
	timeCreates(ctx, b, rt, pod, r, wait)
	if updates != config.SharedUpdatesInAnswer && !settled() {
		b.Fatal("the shared-pool containers do not run on the shared pool after the loop")
	}
	if got := len(rt.Containers()); got != existing {
		b.Fatalf("%d containers in the runtime after the loop, want %d", got, existing)
	}
}

// timeCreates creates, starts, stops and removes one container of r in
// pod b.N times and reports the percentiles of the CreateContainer calls
// alone: the rest runs outside the timer, with settle (when not nil)
// after the start and after the removal, so every iteration sees the
// same containers. It returns with the timer stopped.
func timeCreates(ctx context.Context, b *testing.B, rt *nritest.Runtime, pod *api.PodSandbox, r framework.Resources, settle func()) {
	if settle == nil {
		settle = func() {}
	}
	samples := make([]time.Duration, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := rt.NewContainer(pod, fmt.Sprintf("c%d", i), r)
		b.StartTimer()
		_, took, err := rt.CreateContainerTimed(ctx, pod, c)
		samples[i] = took
		b.StopTimer()
		if err != nil {
			b.Fatal(err)
		}
		// direct's StartContainer waits for the shared-pool cgroups.
		if err := rt.StartContainer(ctx, c); err != nil {
			b.Fatal(err)
		}
		settle()
		if _, err := rt.StopContainer(ctx, c); err != nil {
			b.Fatal(err)
		}
		if err := rt.RemoveContainer(ctx, c); err != nil {
			b.Fatal(err)
		}
		settle()
		b.StartTimer()
	}
	b.StopTimer()
	reportPercentiles(b, samples)
}
