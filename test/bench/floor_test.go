//go:build testhooks

package bench_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-cpualign/nri-cpualign/test/bench"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// BenchmarkNRIFloor is BenchmarkCreateContainer's exchange with a plugin
// that decides nothing: its CreateContainer answers a fixed cpuset.cpus
// and cpuset.mems at once (sync=none), or after one durable journal
// append of a one-block record on the root file system, as the daemon's
// store pays per durable event (sync=journal). Same runtime side, same
// 500 existing containers, same timing of the CreateContainer call alone.
// It is what the NRI exchange and the storage cost on this machine
// without the plugin: the daemon's round trip less this floor is the
// daemon's own part (docs/performance.md, "The daemon's rooms").
func BenchmarkNRIFloor(b *testing.B) {
	for _, sync := range []string{"none", "journal"} {
		b.Run("existing=500/sync="+sync, func(b *testing.B) {
			benchFloor(b, sync == "journal")
		})
	}
}

func benchFloor(b *testing.B, journal bool) {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "nri-floor-") // short: unix socket path limit
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	rt, err := bench.StartRuntime(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Stop()
	journalDir := ""
	if journal {
		journalDir = dir
	}
	p, err := bench.NewFloor(journalDir)
	if err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	s, err := stub.New(p, stub.WithSocketPath(rt.Socket()), stub.WithPluginName("floor"), stub.WithPluginIdx("90"))
	if err != nil {
		b.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- s.Run(runCtx) }()
	defer func() {
		cancel()
		s.Stop()
		<-done
	}()
	if err := rt.WaitForPlugin(1, 10*time.Second); err != nil {
		b.Fatal(err)
	}
	if err := bench.Populate(ctx, rt, 500, 2); err != nil {
		b.Fatal(err)
	}
	r := framework.GuaranteedCPUs(2)
	pod, err := bench.RunPod(ctx, rt, "floor", r)
	if err != nil {
		b.Fatal(err)
	}
	timeCreates(ctx, b, rt, pod, r, nil)
}
