// Command crilatency measures the latency nri-cpualign adds to container
// creation on a real containerd: CreateContainer + StartContainer through
// the CRI API (the kubelet's calls) of a Guaranteed 1-CPU container, with
// the plugin running and with it stopped, interleaved in blocks (on, off,
// off, on, on, off, ...) so drift of the machine hits both sides alike.
// Each sample's pod is created before and removed after the timed calls.
// In the plugin's blocks every container's cgroup is checked to hold the
// exclusive CPU the plugin gave it, in the others the whole machine.
//
// It needs root and the test containerd of ../shared/e2e, and must hold
// /tmp/nri-cpualign-e2e.lock; run it through `scripts/bench.sh --cri` (or
// `make bench-cri`), which does both. It is not part of `make test`.
package main

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

func main() {
	bin := flag.String("bin", "bin/nri-cpualign", "the plugin binary")
	n := flag.Int("n", 40, "containers per mode (plugin on, plugin off)")
	block := flag.Int("block", 5, "containers per block between plugin starts and stops")
	work := flag.String("work", "", "work directory (default: a new temporary one, removed on success)")
	flag.Parse()
	if err := run(*bin, *n, *block, *work); err != nil {
		fmt.Fprintln(os.Stderr, "crilatency:", err)
		os.Exit(1)
	}
}

// plugin is the nri-cpualign process of the "on" blocks.
type plugin struct {
	env                 framework.Env
	bin, cfg, log, pids string
	proc                *framework.PluginProcess
}

func (p *plugin) start(ctx context.Context) error {
	offset := framework.FileSize(p.env.ContainerdLog)
	proc, err := framework.StartPlugin(p.bin, []string{"run", "--config", p.cfg}, p.log, p.pids)
	if err != nil {
		return err
	}
	p.proc = proc
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	if _, err := framework.WaitForLine(wctx, p.env.ContainerdLog, offset, "cpualign", "connected and synchronized"); err != nil {
		return fmt.Errorf("plugin did not synchronize: %w (log %s)", err, p.log)
	}
	return nil
}

func (p *plugin) stop(ctx context.Context) error {
	if p.proc == nil {
		return nil
	}
	offset := framework.FileSize(p.env.ContainerdLog)
	if err := p.proc.Terminate(5 * time.Second); err != nil {
		return err
	}
	p.proc = nil
	// containerd must have dropped the plugin before the next "off" sample.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := framework.WaitForLine(wctx, p.env.ContainerdLog, offset, "cpualign", "closed"); err != nil {
		return fmt.Errorf("containerd did not log the plugin's disconnection: %w", err)
	}
	return nil
}

func run(bin string, n, block int, work string) error {
	ctx := context.Background()
	env, err := framework.LoadEnv()
	if err != nil {
		return err
	}
	if bin, err = filepath.Abs(bin); err != nil {
		return err
	}
	host, err := framework.ReadHost("/sys")
	if err != nil {
		return err
	}
	if host.CPUs.Size() < 2 {
		return fmt.Errorf("need at least 2 CPUs (one reserved, one exclusive), have %s", host.CPUs)
	}
	cli, err := framework.Dial(ctx, env.ContainerdAddress, env.TestImage)
	if err != nil {
		return err
	}
	defer cli.Close()
	keep := work != ""
	if work == "" {
		if work, err = os.MkdirTemp("", "nri-crilat-"); err != nil {
			return err
		}
	}
	reserved := cpuset.New(host.CPUs.List()[0])
	cfg := fmt.Sprintf(`cpu_manager_policy = "static"
reserved_system_cpus = %q
topology_manager_policy = "best-effort"
state_dir = %q
sysfs_root = "/sys"
cgroup_root = "/sys/fs/cgroup"
socket_path = %q
metrics_address = ""
`, reserved.String(), filepath.Join(work, "state"), env.NRISocket)
	p := &plugin{env: env, bin: bin, cfg: filepath.Join(work, "config.toml"), log: filepath.Join(work, "plugin.log"),
		pids: os.Getenv("NRI_CPUALIGN_E2E_PIDFILE")}
	if err := os.WriteFile(p.cfg, []byte(cfg), 0o644); err != nil {
		return err
	}
	defer func() { _ = p.stop(ctx) }()

	r := framework.GuaranteedCPUs(1)
	exclusive := host.CPUs.Difference(reserved) // where the plugin may place the container
	samples := map[bool][]time.Duration{}
	seq := 0
	one := func(on bool) error {
		seq++
		name := fmt.Sprintf("lat%d", seq)
		pod, err := cli.RunPod(ctx, framework.PodSpec{Name: name, Namespace: "bench", UID: fmt.Sprintf("bench-%d-%d", os.Getpid(), seq), Containers: []framework.Resources{r}})
		if err != nil {
			return err
		}
		defer cli.RemovePod(ctx, pod.ID, pod.CgroupParent())
		t0 := time.Now()
		ct, err := cli.CreateContainer(ctx, pod, name, r)
		if err == nil {
			err = cli.StartContainer(ctx, ct)
		}
		dt := time.Since(t0)
		if err != nil {
			return err
		}
		cs, err := framework.ReadCpuset(ct.CgroupsPath())
		if err != nil {
			return err
		}
		// Plugin on: one exclusive CPU outside the reserved one; off: the
		// runtime's default, every CPU.
		if on && (cs.CPUs.Size() != 1 || !cs.CPUs.IsSubsetOf(exclusive)) || !on && !cs.CPUs.Equals(host.CPUs) {
			return fmt.Errorf("sample %d (plugin on: %v): container cgroup has CPUs %s (machine %s, reserved %s)", seq, on, cs.CPUs, host.CPUs, reserved)
		}
		samples[on] = append(samples[on], dt)
		_ = cli.StopContainer(ctx, ct)
		return cli.RemoveContainer(ctx, ct)
	}

	// Warm-up outside the figures: the first container after a start pays
	// for image and shim caches.
	if err := one(false); err != nil {
		return err
	}
	samples[false] = nil
	blocks := (n + block - 1) / block
	for b := 0; b < blocks; b++ {
		order := []bool{true, false}
		if b%2 == 1 {
			order = []bool{false, true}
		}
		for _, on := range order {
			if on {
				if err := p.start(ctx); err != nil {
					return err
				}
			}
			for i := 0; i < block && len(samples[on]) < n; i++ {
				if err := one(on); err != nil {
					return err
				}
			}
			if on {
				if err := p.stop(ctx); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(os.Stderr, "crilatency: block %d/%d done\n", b+1, blocks)
	}
	report(samples[true], samples[false])
	if !keep {
		os.RemoveAll(work)
	}
	return nil
}

func pct(s []time.Duration, p float64) time.Duration {
	c := slices.Clone(s)
	slices.Sort(c)
	return c[int(p*float64(len(c)-1))]
}

func mean(s []time.Duration) time.Duration {
	var sum time.Duration
	for _, d := range s {
		sum += d
	}
	return sum / time.Duration(len(s))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func report(on, off []time.Duration) {
	fmt.Printf("CreateContainer+StartContainer on the real containerd, Guaranteed 1-CPU container, %d samples per mode:\n\n", len(on))
	fmt.Println("| plugin | samples | p50 | p99 | mean |")
	fmt.Println("|---|--:|--:|--:|--:|")
	fmt.Printf("| on | %d | %s | %s | %s |\n", len(on), ms(pct(on, .5)), ms(pct(on, .99)), ms(mean(on)))
	fmt.Printf("| off | %d | %s | %s | %s |\n", len(off), ms(pct(off, .5)), ms(pct(off, .99)), ms(mean(off)))
	// Paired: the k-th sample of the plugin's blocks against the k-th of
	// the others (same block number and position).
	m := min(len(on), len(off))
	diffs := make([]time.Duration, m)
	for i := range m {
		diffs[i] = on[i] - off[i]
	}
	fmt.Printf("\ndelta (on - off): p50 %s, p99 %s; paired differences: p50 %s, p99 %s\n",
		ms(pct(on, .5)-pct(off, .5)), ms(pct(on, .99)-pct(off, .99)), ms(pct(diffs, .5)), ms(pct(diffs, .99)))
	if lo, hi, ok := medianCI(diffs); ok {
		fmt.Printf("median paired difference, distribution-free 95%% confidence interval: [%s, %s]\n", ms(lo), ms(hi))
	}
	var raw []string
	for _, d := range on {
		raw = append(raw, fmt.Sprint(d.Microseconds()))
	}
	fmt.Println("raw on µs:", strings.Join(raw, " "))
	raw = raw[:0]
	for _, d := range off {
		raw = append(raw, fmt.Sprint(d.Microseconds()))
	}
	fmt.Println("raw off µs:", strings.Join(raw, " "))
}

// medianCI is the distribution-free (sign test) 95% confidence interval of
// the median: the order statistics n/2 -+ 1.96*sqrt(n)/2 (normal
// approximation of the binomial, fine from about 20 samples).
func medianCI(d []time.Duration) (lo, hi time.Duration, ok bool) {
	n := len(d)
	if n < 20 {
		return 0, 0, false
	}
	c := slices.Clone(d)
	slices.Sort(c)
	// k is 1-based: the k-th smallest and the k-th largest.
	k := int(math.Floor(float64(n)/2 - 1.96*math.Sqrt(float64(n))/2))
	return c[k-1], c[n-k], true
}
