//go:build testhooks

// Command paths measures which files of the daemon's packages one NRI
// event crosses (issue 42's "a Guaranteed CreateContainer crosses at most 8
// files"). Built with -cover -covermode=atomic and -coverpkg naming those
// packages (paths_test.go does), it runs a daemon against internal/nritest's
// runtime side, clears the coverage counters before each measured event and
// writes them after it into -out/<event> (what go tool covdata reads).
//
// A shared-pool container runs beside the Guaranteed pods, so the create
// changes the pool it runs on. The daemon's own goroutines stay quiet
// during the measurements: no metrics server, no exporter, no reconcile
// period, no PodResources, and the update worker stopped (the testhooks
// tag's StopWorker) once it has served every kick. The kicks the events
// give are counted; the passes they would start are the applier's flow,
// not the event's, and would run beside it at no fixed moment.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime/coverage"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

func main() {
	mode := flag.String("mode", config.SharedUpdatesDirect, "shared_pool_updates")
	out := flag.String("out", "", "directory for the coverage data, one subdirectory per event")
	flag.Parse()
	if err := run(*mode, *out); err != nil {
		fmt.Fprintln(os.Stderr, "paths:", err)
		os.Exit(1)
	}
}

func run(mode, out string) error {
	ctx := context.Background()
	// Unix socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "nri-paths-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sys := filepath.Join(dir, "sys")
	if err := sysfstest.WriteNamed(sys, "ht-1s-4c"); err != nil {
		return err
	}
	cgroupRoot := filepath.Join(dir, "cgroup")
	if err := os.MkdirAll(filepath.Join(cgroupRoot, "cpuset"), 0o755); err != nil {
		return err
	}
	rt := nritest.New(dir, nritest.WithCgroupRoot(cgroupRoot))
	if err := rt.Start(); err != nil {
		return err
	}
	defer rt.Stop()
	cfg, err := config.Load(fmt.Appendf(nil, `cpu_manager_policy = "static"
reserved_system_cpus = "0,4"
sysfs_root = %q
state_dir = %q
socket_path = %q
cgroup_root = %q
metrics_address = ""
reconcile_period = "0"
pod_resources = false
shared_pool_updates = %q
`, sys, filepath.Join(dir, "state"), rt.Socket(), cgroupRoot, mode))
	if err != nil {
		return err
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := daemon.New(cfg, daemon.WithLogger(log))
	if err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	defer func() {
		cancel()
		<-done
	}()
	select {
	case <-d.Synchronized():
	case err := <-done:
		return fmt.Errorf("daemon exited: %v", err)
	case <-time.After(30 * time.Second):
		return fmt.Errorf("no Synchronize within 30 s")
	}

	// One Guaranteed pod placed and started before, so that nothing
	// measured is a first time (the journal's opening, the first record).
	g1, c1, err := guaranteed(ctx, rt, "g1")
	if err != nil {
		return err
	}
	if err := rt.StartContainer(ctx, c1); err != nil {
		return err
	}
	// A shared-pool container, which follows the pool.
	{
		pod, err := runPod(ctx, rt, "bu", framework.Resources{CPURequestMilli: 250, CPULimitMilli: 1000})
		if err != nil {
			return err
		}
		c := rt.NewContainer(pod, "c", framework.Resources{CPURequestMilli: 250, CPULimitMilli: 1000})
		if _, err := rt.CreateContainer(ctx, pod, c); err != nil {
			return err
		}
		if err := rt.StartContainer(ctx, c); err != nil {
			return err
		}
	}

	// The pod's end as the kubelet brings it: its container stopped and
	// removed first. Every kick served (Settle), no wake-up is armed and
	// the worker is idle: the pod's end changes no pool, so it stays so.
	if _, err := rt.StopContainer(ctx, c1); err != nil {
		return err
	}
	if err := rt.RemoveContainer(ctx, c1); err != nil {
		return err
	}
	if err := d.Settle(ctx); err != nil {
		return err
	}
	if err := measure(filepath.Join(out, "removepod"), func() error {
		return rt.RemovePod(ctx, g1)
	}); err != nil {
		return err
	}

	g2 := nritest.NewPod("uid-g2", "g2", "paths", framework.PodQOS(framework.GuaranteedCPUs(2)))
	g2.Linux.Resources = nritest.PodResources(framework.GuaranteedCPUs(2))
	if err := rt.RunPod(ctx, g2); err != nil {
		return err
	}
	c2 := rt.NewContainer(g2, "c", framework.GuaranteedCPUs(2))
	// The update worker is stopped once it has served every kick: under
	// "direct" the create kicks it, and the pass would run beside the
	// event at no fixed moment (it is the applier's flow, not the
	// event's). Under "in-answer" the answer carries the pool itself.
	if err := d.Settle(ctx); err != nil {
		return err
	}
	d.StopWorker()
	return measure(filepath.Join(out, "create"), func() error {
		resp, err := rt.CreateContainer(ctx, g2, c2)
		if err == nil && resp.GetAdjust().GetLinux().GetResources().GetCpu().GetCpus() == "" {
			err = fmt.Errorf("CreateContainer answered no cpuset")
		}
		return err
	})
}

func runPod(ctx context.Context, rt *nritest.Runtime, name string, r framework.Resources) (*api.PodSandbox, error) {
	pod := nritest.NewPod("uid-"+name, name, "paths", framework.PodQOS(r))
	pod.Linux.Resources = nritest.PodResources(r)
	return pod, rt.RunPod(ctx, pod)
}

func guaranteed(ctx context.Context, rt *nritest.Runtime, name string) (*api.PodSandbox, *api.Container, error) {
	r := framework.GuaranteedCPUs(2)
	pod, err := runPod(ctx, rt, name, r)
	if err != nil {
		return nil, nil, err
	}
	c := rt.NewContainer(pod, "c", r)
	_, err = rt.CreateContainer(ctx, pod, c)
	return pod, c, err
}

// measure runs event between a reset of the coverage counters and their
// write into dir (meta-data and counters, what go tool covdata reads).
func measure(dir string, event func() error) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := coverage.WriteMetaDir(dir); err != nil {
		return err
	}
	if err := coverage.ClearCounters(); err != nil {
		return err
	}
	if err := event(); err != nil {
		return err
	}
	return coverage.WriteCountersDir(dir)
}
