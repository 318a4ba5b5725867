// Command rss measures the resident memory of the real nri-cpualign binary:
// it starts the runtime side of NRI in-process (internal/nritest, no root
// needed), runs `nri-cpualign run` against it on a fixture machine written
// to a temporary sysfs tree, reads /proc/<pid>/status (VmRSS, VmHWM) after
// the plugin has synchronized, then creates the given number of containers
// through NRI (one in five exclusive with 2 CPUs, the rest on the shared
// pool) and reads it again. Each container's creation goes through the
// plugin's CreateContainer and checkpoint, as under containerd.
//
//	go build -o bin/nri-cpualign ./cmd/nri-cpualign
//	go run ./test/bench/cmd/rss -bin bin/nri-cpualign -machine epyc-9754 -containers 500
//
// The output is one line per measurement point, "rss <point> VmRSS=<KiB>
// VmHWM=<KiB> containers=<n>", then a summary against issue 9's target.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/bench"
)

func main() {
	bin := flag.String("bin", "bin/nri-cpualign", "the nri-cpualign binary to measure")
	machine := flag.String("machine", "epyc-9754", "fixture machine (pkg/sysfs/sysfstest) the plugin sees as its sysfs")
	containers := flag.Int("containers", 500, "containers to create before the second reading")
	settle := flag.Duration("settle", 2*time.Second, "wait before each reading (lets the GC and the update worker finish)")
	keep := flag.Bool("keep", false, "keep the work directory (plugin log, config, checkpoint)")
	flag.Parse()
	if err := run(*bin, *machine, *containers, *settle, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "rss:", err)
		os.Exit(1)
	}
}

func run(bin, machine string, containers int, settle time.Duration, keep bool) error {
	spec, ok := sysfstest.Get(machine)
	if !ok {
		return fmt.Errorf("unknown fixture machine %q (have %v)", machine, sysfstest.Names())
	}
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	if _, err := os.Stat(bin); err != nil {
		return fmt.Errorf("plugin binary: %w (build it with make build)", err)
	}
	dir, err := os.MkdirTemp("", "nri-rss-") // short: unix socket path limit
	if err != nil {
		return err
	}
	if keep {
		fmt.Fprintln(os.Stderr, "rss: work directory", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	sys := filepath.Join(dir, "sys")
	if err := sysfstest.Write(sys, spec); err != nil {
		return err
	}
	rt, err := bench.StartRuntime(dir)
	if err != nil {
		return err
	}
	defer rt.Stop()

	cfgPath := filepath.Join(dir, "config.toml")
	// The deployed defaults (metrics server, reconcile loop, info log),
	// with a static policy on the fixture machine.
	cfg := fmt.Sprintf(`cpu_manager_policy = "static"
reserved_cpu_count = %d
topology_manager_policy = "best-effort"
state_dir = %q
sysfs_root = %q
cgroup_root = %q
socket_path = %q
metrics_address = "127.0.0.1:0"
`, bench.ReservedCount, filepath.Join(dir, "state"), sys, filepath.Join(dir, "cgroup"), rt.Socket())
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		return err
	}
	logPath := filepath.Join(dir, "plugin.log")
	logf, err := os.Create(logPath)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "run", "--config", cfgPath)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}()
	tail := func() string {
		b, _ := os.ReadFile(logPath)
		lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		return strings.Join(lines[max(0, len(lines)-20):], "\n")
	}
	waitErr := make(chan error, 1)
	go func() { waitErr <- rt.WaitForPlugin(1, 30*time.Second) }()
	select {
	case err := <-waitErr:
		if err != nil {
			return fmt.Errorf("%w; plugin log:\n%s", err, tail())
		}
	case err := <-exited:
		exited <- err
		return fmt.Errorf("plugin exited before synchronizing (%v); its log:\n%s", err, tail())
	}
	pid := cmd.Process.Pid
	fmt.Printf("machine %s (%d CPUs), plugin %s pid %d\n", machine, spec.CPUs(), bin, pid)

	time.Sleep(settle)
	start, err := readStatus(pid)
	if err != nil {
		return err
	}
	fmt.Printf("rss after-start VmRSS=%d VmHWM=%d containers=0\n", start["VmRSS"], start["VmHWM"])

	t0 := time.Now()
	if err := bench.Populate(context.Background(), rt, containers, 2); err != nil {
		return fmt.Errorf("creating containers: %w; plugin log:\n%s", err, tail())
	}
	took := time.Since(t0)
	time.Sleep(settle)
	full, err := readStatus(pid)
	if err != nil {
		return err
	}
	fmt.Printf("rss with-containers VmRSS=%d VmHWM=%d containers=%d\n", full["VmRSS"], full["VmHWM"], len(rt.Containers()))
	fmt.Printf("created %d containers through NRI in %s (%.2f ms each, checkpoint included)\n",
		containers, took.Round(time.Millisecond), float64(took.Microseconds())/1000/float64(max(1, containers)))
	const target = 25 << 10 // KiB
	verdict := "met"
	if full["VmRSS"] > target {
		verdict = "missed"
	}
	fmt.Printf("target RSS <= 25 MiB with %d containers: %.1f MiB (peak %.1f MiB): %s\n",
		containers, float64(full["VmRSS"])/1024, float64(full["VmHWM"])/1024, verdict)
	return nil
}

// readStatus returns the kB fields of /proc/<pid>/status (VmRSS, VmHWM...).
func readStatus(pid int) (map[string]int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]int64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		var n int64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &n); err == nil {
			out[k] = n
		}
	}
	if _, ok := out["VmRSS"]; !ok {
		return nil, errors.New("no VmRSS in /proc/" + fmt.Sprint(pid) + "/status")
	}
	return out, sc.Err()
}
