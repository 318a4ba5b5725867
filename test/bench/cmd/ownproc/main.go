// Command ownproc times the CreateContainer round trip of BenchmarkCreateContainer
// with the plugin in its own process, as it is deployed beside a runtime:
// the runtime side of NRI runs in this process (internal/nritest, as in the
// benchmark), the plugin is the real `nri-cpualign run` binary (or, with
// -plugin floor, this command again as a plugin that answers a fixed cpuset,
// the out-of-process twin of BenchmarkNRIFloor), and the two meet on NRI's
// socket. The machine is the epyc-9754 fixture (256 CPUs) written as a sysfs
// tree, with -existing containers placed (one in five exclusive with 2 CPUs),
// the fake cgroup tree on /dev/shm, and the state on the root file system
// (-state disk) or on /dev/shm (-state tmpfs).
//
// Each of -n iterations creates a Guaranteed 2-CPU container (timed: the
// CreateContainer exchange alone), starts, stops and removes it, and pauses
// -settle after the start and after the removal, long enough for the plugin's
// passes to end. The pause sleeps, so the plugin's threads park between
// creates as on a node where creates arrive now and then, or with -spin it
// busy-waits, so this process's thread stays on its CPU as the in-process
// benchmark's does. The in-process benchmark never lets the plugin idle; this
// command shows what a create costs when it does.
//
//	go build -o bin/nri-cpualign ./cmd/nri-cpualign
//	go run ./test/bench/cmd/ownproc -bin bin/nri-cpualign -state disk
//	go run ./test/bench/cmd/ownproc -plugin floor -sync journal
//
// It prints one line: the settings, then p50, p90 and p99 in microseconds.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/stub"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/bench"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

type options struct {
	bin, plugin, procs, state, sync string
	n, existing                     int
	settle                          time.Duration
	spin                            bool
}

func main() {
	var o options
	flag.StringVar(&o.bin, "bin", "bin/nri-cpualign", "the nri-cpualign binary (-plugin nri-cpualign)")
	flag.StringVar(&o.plugin, "plugin", "nri-cpualign", "nri-cpualign, or floor: a plugin that answers a fixed cpuset")
	flag.StringVar(&o.procs, "procs", "", "GOMAXPROCS of the plugin's process (empty: Go's default)")
	flag.StringVar(&o.state, "state", "disk", "disk (the root file system) or tmpfs (/dev/shm): where the plugin's state lives")
	flag.StringVar(&o.sync, "sync", "none", "floor only: none, or journal (one durable append per create, as the daemon's store)")
	flag.IntVar(&o.n, "n", 300, "timed creates")
	flag.IntVar(&o.existing, "existing", 500, "containers placed before the timed creates")
	flag.DurationVar(&o.settle, "settle", 20*time.Millisecond, "pause after each start and each removal")
	flag.BoolVar(&o.spin, "spin", false, "busy-wait the pauses instead of sleeping")
	floorSocket := flag.String("floor-socket", "", "internal: run as the floor plugin on this NRI socket")
	floorJournal := flag.String("floor-journal", "", "internal: the floor plugin's journal directory (empty: no append)")
	flag.Parse()
	var err error
	if *floorSocket != "" {
		err = runFloor(*floorSocket, *floorJournal)
	} else {
		err = run(o)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "ownproc:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	if o.state != "disk" && o.state != "tmpfs" {
		return fmt.Errorf("-state %q: want disk or tmpfs", o.state)
	}
	if o.sync != "none" && o.sync != "journal" {
		return fmt.Errorf("-sync %q: want none or journal", o.sync)
	}
	if o.n < 1 {
		return fmt.Errorf("-n %d: want at least 1", o.n)
	}
	spec, _ := sysfstest.Get("epyc-9754")
	dir, err := os.MkdirTemp("", "nri-own-") // short: unix socket path limit
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	sys := filepath.Join(dir, "sys")
	if err := sysfstest.Write(sys, spec); err != nil {
		return err
	}
	// In memory as cgroupfs is (see BenchmarkCreateContainer).
	cgroupRoot, err := os.MkdirTemp("/dev/shm", "nri-own-cgroup-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(cgroupRoot)
	if err := os.MkdirAll(filepath.Join(cgroupRoot, "cpuset"), 0o755); err != nil {
		return err
	}
	state := filepath.Join(dir, "state")
	if o.state == "tmpfs" {
		if state, err = os.MkdirTemp("/dev/shm", "nri-own-state-"); err != nil {
			return err
		}
		defer os.RemoveAll(state)
	} else if err := os.Mkdir(state, 0o755); err != nil {
		return err
	}
	rt, err := bench.StartRuntime(dir, nritest.WithCgroupRoot(cgroupRoot))
	if err != nil {
		return err
	}
	defer rt.Stop()

	var cmd *exec.Cmd
	switch o.plugin {
	case "nri-cpualign":
		bin, err := filepath.Abs(o.bin)
		if err != nil {
			return err
		}
		if _, err := os.Stat(bin); err != nil {
			return fmt.Errorf("plugin binary: %w (build it with make build)", err)
		}
		cfgPath := filepath.Join(dir, "config.toml")
		cfg := fmt.Sprintf(`cpu_manager_policy = "static"
reserved_cpu_count = %d
topology_manager_policy = "best-effort"
state_dir = %q
sysfs_root = %q
cgroup_root = %q
socket_path = %q
metrics_address = ""
reconcile_period = "0"
`, bench.ReservedCount, state, sys, cgroupRoot, rt.Socket())
		if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
			return err
		}
		cmd = exec.Command(bin, "run", "--config", cfgPath)
	case "floor":
		self, err := os.Executable()
		if err != nil {
			return err
		}
		journal := ""
		if o.sync == "journal" {
			journal = state
		}
		cmd = exec.Command(self, "-floor-socket", rt.Socket(), "-floor-journal", journal)
	default:
		return fmt.Errorf("-plugin %q: want nri-cpualign or floor", o.plugin)
	}
	logPath := filepath.Join(dir, "plugin.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = os.Environ()
	if o.procs != "" {
		cmd.Env = append(cmd.Env, "GOMAXPROCS="+o.procs)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
	}()
	withLog := func(err error) error {
		b, _ := os.ReadFile(logPath)
		return fmt.Errorf("%w; plugin log:\n%s", err, b)
	}
	if err := rt.WaitForPlugin(1, 30*time.Second); err != nil {
		return withLog(err)
	}
	ctx := context.Background()
	if err := bench.Populate(ctx, rt, o.existing, 2); err != nil {
		return withLog(err)
	}
	r := framework.GuaranteedCPUs(2)
	pod, err := bench.RunPod(ctx, rt, "own", r)
	if err != nil {
		return withLog(err)
	}
	pause := func() {
		if !o.spin {
			time.Sleep(o.settle)
			return
		}
		for end := time.Now().Add(o.settle); time.Now().Before(end); {
		}
	}
	pause()
	samples := make([]time.Duration, 0, o.n)
	for i := range o.n {
		c := rt.NewContainer(pod, fmt.Sprintf("c%d", i), r)
		_, took, err := rt.CreateContainerTimed(ctx, pod, c)
		if err != nil {
			return withLog(err)
		}
		samples = append(samples, took)
		if err := rt.StartContainer(ctx, c); err != nil {
			return withLog(err)
		}
		pause()
		if _, err := rt.StopContainer(ctx, c); err != nil {
			return withLog(err)
		}
		if err := rt.RemoveContainer(ctx, c); err != nil {
			return withLog(err)
		}
		pause()
	}
	slices.Sort(samples)
	at := func(q int) int64 { return samples[min(len(samples)-1, len(samples)*q/100)].Microseconds() }
	procs := o.procs
	if procs == "" {
		procs = "default"
	}
	sync := ""
	if o.plugin == "floor" {
		sync = " sync=" + o.sync
	}
	fmt.Printf("ownproc plugin=%s%s procs=%s state=%s existing=%d settle=%s spin=%t n=%d p50=%d p90=%d p99=%d us\n",
		o.plugin, sync, procs, o.state, o.existing, o.settle, o.spin, o.n, at(50), at(90), at(99))
	return nil
}

func runFloor(socket, journal string) error {
	p, err := bench.NewFloor(journal)
	if err != nil {
		return err
	}
	defer p.Close()
	s, err := stub.New(p, stub.WithSocketPath(socket), stub.WithPluginName("floor"), stub.WithPluginIdx("90"))
	if err != nil {
		return err
	}
	return s.Run(context.Background())
}
