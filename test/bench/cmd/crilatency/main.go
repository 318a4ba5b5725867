// Command crilatency measures the latency nri-cpualign adds to container
// creation on a real runtime (containerd, or CRI-O with E2E_RUNTIME=crio):
// CreateContainer + StartContainer through the CRI API (the kubelet's calls)
// of a Guaranteed 1-CPU container, on a node already running 0, 20 or 50
// shared-pool containers (BestEffort and Burstable, alternately).
//
// Each cell (number of shared containers) sets its shared containers up
// once, then takes samples in blocks that rotate over the modes: plugin off,
// shared_pool_updates = "direct", "in-answer" (off, direct, in; direct,
// in, off; ...), so drift of the machine hits
// every mode alike; the k-th
// sample of a mode is paired with the k-th sample of "off". After every
// StartContainer returns, the cpuset.cpus files of all shared containers are
// polled until each holds the new shared pool (every CPU but the new
// container's): the time from StartContainer's return until the last one
// did is the window during which the exclusive CPU was still shared (0 when
// the runtime applied the updates before the start). Each sample's pod is
// removed afterwards and the next sample waits until the shared containers
// have the whole machine again.
//
// With the plugin on, each sample also reads the plugin's own time on the
// start path from its metrics (nri_cpualign_event_duration_seconds: the
// CreateContainer, StartContainer and PostStartContainer answers), scraped
// before the creation and after the pool check: the part of the added
// latency that is the plugin's work and waiting, without the ±20-50 ms of
// runc and shim noise that each start carries. It leaves out NRI's
// transport (the in-process round trip's, `make bench`: a few tenths of a
// millisecond per event).
//
// With -block 1 every round takes one sample of each mode, in rotating
// order (off, direct, in-answer; direct, in-answer, off; ...), and the
// samples of round k are paired: the ratios table gives, for every pair
// of modes, the median of the per-round ratios of their starts, its
// distribution-free 95% interval and their interquartile range, beside
// the ratio of the modes' medians.
//
// It needs root and a test runtime set up by the project's scripts, and
// must hold /tmp/nri-cpualign-e2e.lock; run it through `scripts/bench.sh
// --cri` (or `make bench-cri`), which does both on this machine, or in the
// production-shaped VM through `make bench-vm` (scripts/e2e-vm.sh with
// VM_TESTS=bench). It is not part of `make test`.
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Targets of issue 15, with 50 shared containers running.
const (
	targetAdded  = time.Millisecond       // added to the p50 start (paired median difference)
	targetWindow = 100 * time.Millisecond // whole shared pool updated after the start (p99)
	targetShared = 50
)

// startEvents are the NRI events on a container's start path.
var startEvents = []string{"CreateContainer", "StartContainer", "PostStartContainer"}

func main() {
	bin := flag.String("bin", "bin/nri-cpualign", "the plugin binary")
	n := flag.Int("n", 30, "samples per mode and cell")
	block := flag.Int("block", 5, "samples per block between plugin starts and stops")
	shared := flag.String("shared", "0,20,50", "numbers of running shared-pool containers, one cell each")
	modes := flag.String("modes", "direct,in-answer", "shared_pool_updates values measured against the plugin off")
	work := flag.String("work", "", "work directory (default: a new temporary one, removed on success)")
	settle := flag.Duration("settle", 10*time.Second, "how long the shared containers may take to reach a new pool after a start or a removal (and the runtime to apply a plugin's Synchronize, at least 20s)")
	flag.Parse()
	var cells []int
	for _, f := range strings.Split(*shared, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 0 {
			fmt.Fprintf(os.Stderr, "crilatency: -shared: %q is not a count\n", f)
			os.Exit(2)
		}
		cells = append(cells, v)
	}
	if err := run(*bin, *n, *block, cells, strings.Split(*modes, ","), *work, *settle); err != nil {
		fmt.Fprintln(os.Stderr, "crilatency:", err)
		os.Exit(1)
	}
}

// plugin is the nri-cpualign process of the "on" blocks.
type plugin struct {
	env                 framework.Env
	bin, work, log, pid string
	proc                *framework.PluginProcess
	metrics             string // host:port of the running one's metrics endpoint
	// settle also bounds the wait for the runtime's "synchronized": under
	// in-answer the runtime applies the Synchronize answer's update of
	// every shared container first, one OCI runtime update each, which
	// took 24 s for 20 containers in the emulated VM node.
	settle time.Duration
}

func (p *plugin) start(ctx context.Context, mode string, reserved cpuset.CPUSet) error {
	cfg := filepath.Join(p.work, "config-"+mode+".toml")
	text := fmt.Sprintf(`cpu_manager_policy = "static"
reserved_system_cpus = %q
topology_manager_policy = "best-effort"
shared_pool_updates = %q
state_dir = %q
sysfs_root = "/sys"
cgroup_root = "/sys/fs/cgroup"
socket_path = %q
metrics_address = "127.0.0.1:0"
`, reserved.String(), mode, filepath.Join(p.work, "state-"+mode), p.env.NRISocket)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		return err
	}
	offset := framework.FileSize(p.env.RuntimeLog)
	logOffset := framework.FileSize(p.log)
	proc, err := framework.StartPlugin(p.bin, []string{"run", "--config", cfg}, p.log, p.pid)
	if err != nil {
		return err
	}
	p.proc = proc
	wctx, cancel := context.WithTimeout(ctx, max(20*time.Second, p.settle))
	defer cancel()
	if _, err := framework.WaitForLine(wctx, p.env.RuntimeLog, offset, "cpualign", "connected and synchronized"); err != nil {
		return fmt.Errorf("plugin did not synchronize: %w (log %s)", err, p.log)
	}
	p.metrics, err = framework.MetricsAddress(p.log, logOffset)
	return err
}

func (p *plugin) stop(ctx context.Context) error {
	if p.proc == nil {
		return nil
	}
	offset := framework.FileSize(p.env.RuntimeLog)
	if err := p.proc.Terminate(5 * time.Second); err != nil {
		return err
	}
	p.proc = nil
	// The runtime must have dropped the plugin before the next "off"
	// sample, or that sample pays for finding out.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := framework.WaitForLine(wctx, p.env.RuntimeLog, offset, "cpualign", "closed"); err != nil {
		return fmt.Errorf("%s did not log the plugin's disconnection: %w", p.env.Runtime, err)
	}
	return nil
}

// sample is one timed creation.
type sample struct {
	start  time.Duration // CreateContainer + StartContainer
	window time.Duration // StartContainer's return until every shared container held the new pool
	plugin time.Duration // the plugin's own answers to the start's events (plugin on)
}

// bench is one runtime's run.
type bench struct {
	env      framework.Env
	cli      *framework.Client
	host     *framework.Host
	reserved cpuset.CPUSet
	p        *plugin
	seq      int
	settle   time.Duration // waitPool's limit
}

func run(bin string, n, block int, cells []int, modes []string, work string, settle time.Duration) error {
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
	cli, err := framework.DialEnv(ctx, env)
	if err != nil {
		return err
	}
	defer cli.Close()
	keep := work != ""
	if work == "" {
		if work, err = os.MkdirTemp("", "nri-crilat-"); err != nil {
			return err
		}
	} else if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	b := &bench{env: env, cli: cli, host: host, reserved: cpuset.New(host.CPUs.List()[0]), settle: settle,
		p: &plugin{env: env, bin: bin, work: work, log: filepath.Join(work, "plugin.log"), pid: os.Getenv("NRI_CPUALIGN_E2E_PIDFILE"), settle: settle}}
	defer func() { _ = b.p.stop(ctx) }()

	fmt.Printf("CreateContainer+StartContainer of a Guaranteed 1-CPU container on the real %s (%s cgroup driver, cgroup %s, %d CPUs), with running shared-pool containers; %d paired samples per mode and cell, in blocks of %d; \"pool\" = from StartContainer's return until every shared container's cpuset.cpus held the new pool; \"plugin's own\" = its answers to the start's NRI events (CreateContainer, StartContainer, PostStartContainer) from its metrics, NRI's transport not included:\n\n", env.Runtime, cli.CgroupDriver, cgroupVersion(), host.CPUs.Size(), n, block)
	fmt.Println("| shared | plugin | p50 | p99 | added p50 (paired median, 95% CI) | pool p50 | pool p99 | plugin's own p50 | p99 |")
	fmt.Println("|--:|---|--:|--:|--:|--:|--:|--:|--:|")
	var verdicts []string
	for _, shared := range cells {
		res, err := b.cell(ctx, shared, n, block, modes)
		if err != nil {
			return err
		}
		off := res["off"]
		fmt.Printf("| %d | off | %s | %s | | | | | |\n", shared, ms(pct(starts(off), .5)), ms(pct(starts(off), .99)))
		for _, m := range modes {
			on := res[m]
			diffs := paired(starts(on), starts(off))
			med := pct(diffs, .5)
			ci := "n/a"
			lo, hi, ok := medianCI(diffs)
			if ok {
				ci = fmt.Sprintf("[%s, %s]", ms(lo), ms(hi))
			}
			w := windows(on)
			own := owns(on)
			fmt.Printf("| %d | %s | %s | %s | %s %s | %s | %s | %s | %s |\n", shared, m, ms(pct(starts(on), .5)), ms(pct(starts(on), .99)),
				ms(med), ci, ms(pct(w, .5)), ms(pct(w, .99)), ms(pct(own, .5)), ms(pct(own, .99)))
			if shared == targetShared {
				verdicts = append(verdicts,
					addedVerdict(fmt.Sprintf("%s, %s, %d shared: added to the p50 start <= %s", env.Runtime, m, shared, ms(targetAdded)), med, lo, hi, ok))
				// Only direct's answers leave the runtime nothing to do
				// for other containers: there the plugin's own time (and
				// NRI's transport) is what it adds. in-answer's runtime
				// applies the updates after the plugin answered.
				if m == "direct" {
					verdicts = append(verdicts, verdict(fmt.Sprintf("%s, %s, %d shared: the plugin's own answers on the start path (p50, NRI transport not included) <= %s", env.Runtime, m, shared, ms(targetAdded)), pct(own, .5), targetAdded))
				}
				verdicts = append(verdicts, verdict(fmt.Sprintf("%s, %s, %d shared: whole shared pool updated (p99 after the start) <= %s", env.Runtime, m, shared, ms(targetWindow)), pct(w, .99), targetWindow))
			}
		}
		printRatios(shared, append([]string{"off"}, modes...), res)
		for _, m := range append([]string{"off"}, modes...) {
			var raw []string
			for _, s := range res[m] {
				raw = append(raw, fmt.Sprintf("%d/%d/%d", s.start.Microseconds(), s.window.Microseconds(), s.plugin.Microseconds()))
			}
			fmt.Printf("raw %s shared=%d %s start/pool/plugin µs: %s\n", env.Runtime, shared, m, strings.Join(raw, " "))
		}
	}
	if len(verdicts) > 0 {
		fmt.Println()
		fmt.Println("Targets:")
		fmt.Println()
		for _, v := range verdicts {
			fmt.Println(v)
		}
	}
	if !keep {
		os.RemoveAll(work)
	}
	return nil
}

func verdict(what string, got, target time.Duration) string {
	v := "met"
	if got > target {
		v = "missed"
	}
	return fmt.Sprintf("- %s: %s — %s", what, ms(got), v)
}

// addedVerdict judges the paired median difference by its confidence
// interval: met when all of it is within the target, missed when all of it
// is above, otherwise not resolved by these samples.
func addedVerdict(what string, med, lo, hi time.Duration, ok bool) string {
	switch {
	case !ok:
		return verdict(what, med, targetAdded)
	case hi <= targetAdded:
		return fmt.Sprintf("- %s: %s (95%% CI [%s, %s]) — met", what, ms(med), ms(lo), ms(hi))
	case lo > targetAdded:
		return fmt.Sprintf("- %s: %s (95%% CI [%s, %s]) — missed", what, ms(med), ms(lo), ms(hi))
	}
	return fmt.Sprintf("- %s: %s (95%% CI [%s, %s]) — not resolved (the interval spans the target)", what, ms(med), ms(lo), ms(hi))
}

// cell runs shared shared-pool containers and takes n samples per mode.
func (b *bench) cell(ctx context.Context, shared, n, block int, modes []string) (map[string][]sample, error) {
	ctx0 := ctx
	pods := make([]*framework.Pod, shared)
	paths := make([]string, shared)
	defer func() {
		// Four at a time: one by one, 50 pods take 40 s to go.
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for _, p := range pods {
			if p == nil {
				continue
			}
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer func() { <-sem; wg.Done() }()
				_ = b.cli.RemovePod(ctx0, p.ID, p.CgroupParent())
			}()
		}
		wg.Wait()
	}()
	// Four at a time too: one by one, 20 took 14 minutes in the VM under
	// emulation on a loaded machine.
	t0 := time.Now()
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		ferr error
		sem  = make(chan struct{}, 4)
	)
	for i := range shared {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			r := framework.Resources{} // BestEffort
			if i%2 == 1 {
				r = framework.Resources{CPURequestMilli: 100, MemRequest: 16 << 20} // Burstable
			}
			name := fmt.Sprintf("shared%d", i)
			pod, err := b.cli.RunPod(ctx, framework.PodSpec{Name: name, Namespace: "bench", UID: fmt.Sprintf("bench-sh-%d-%d-%d", os.Getpid(), shared, i), Containers: []framework.Resources{r}})
			var ct *framework.Container
			if err == nil {
				ct, err = b.cli.RunContainer(ctx, pod, name, r)
			}
			mu.Lock()
			defer mu.Unlock()
			pods[i] = pod
			if err != nil {
				ferr = cmp.Or(ferr, fmt.Errorf("shared container %d: %w", i, err))
				return
			}
			paths[i] = ct.CgroupsPath()
		}()
	}
	wg.Wait()
	if ferr != nil {
		return nil, ferr
	}
	fmt.Fprintf(os.Stderr, "crilatency: %s: %d shared containers running (%s)\n", b.env.Runtime, shared, time.Since(t0).Round(time.Millisecond))

	res := map[string][]sample{}
	all := append([]string{"off"}, modes...)
	// Warm-up outside the figures: the first container after a start pays
	// for image and shim caches.
	if _, err := b.one(ctx, false, paths); err != nil {
		return nil, err
	}
	blocks := (n + block - 1) / block
	for k := 0; k < blocks; k++ {
		for j := range all {
			m := all[(j+k)%len(all)]
			on := m != "off"
			if on {
				if err := b.p.start(ctx, m, b.reserved); err != nil {
					return nil, err
				}
			}
			for i := 0; i < block && len(res[m]) < n; i++ {
				s, err := b.one(ctx, on, paths)
				if err != nil {
					return nil, fmt.Errorf("%d shared, %s: %w", shared, m, err)
				}
				res[m] = append(res[m], s)
				// As it goes: a run cut short still leaves its samples.
				fmt.Fprintf(os.Stderr, "crilatency: %s, %d shared, block %d: %s start %s\n", b.env.Runtime, shared, k+1, m, ms(s.start))
			}
			if on {
				if err := b.p.stop(ctx); err != nil {
					return nil, err
				}
			}
		}
		fmt.Fprintf(os.Stderr, "crilatency: %s, %d shared: block %d/%d done\n", b.env.Runtime, shared, k+1, blocks)
	}
	return res, nil
}

// one creates, starts, checks and removes one Guaranteed container.
func (b *bench) one(ctx context.Context, on bool, shared []string) (sample, error) {
	b.seq++
	name := fmt.Sprintf("lat%d", b.seq)
	r := framework.GuaranteedCPUs(1)
	pod, err := b.cli.RunPod(ctx, framework.PodSpec{Name: name, Namespace: "bench", UID: fmt.Sprintf("bench-%d-%d", os.Getpid(), b.seq), Containers: []framework.Resources{r}})
	if err != nil {
		return sample{}, err
	}
	removed := false
	defer func() {
		if !removed {
			_ = b.cli.RemovePod(ctx, pod.ID, pod.CgroupParent())
		}
	}()
	var before float64
	if on {
		if before, err = b.p.eventSeconds(ctx); err != nil {
			return sample{}, err
		}
	}
	t0 := time.Now()
	ct, err := b.cli.CreateContainer(ctx, pod, name, r)
	if err == nil {
		err = b.cli.StartContainer(ctx, ct)
	}
	t1 := time.Now()
	if err != nil {
		return sample{}, err
	}
	s := sample{start: t1.Sub(t0)}
	if on {
		// Poll first: the window starts at StartContainer's return.
		pool := b.host.CPUs
		cs, err := framework.ReadCpuset(ct.CgroupsPath())
		if err == nil {
			pool = b.host.CPUs.Difference(cs.CPUs)
		}
		done, werr := waitPool(shared, pool, b.settle)
		s.window = done.Sub(t1)
		if err != nil {
			return s, err
		}
		if werr != nil {
			return s, fmt.Errorf("shared pool %s after the start: %w", pool, werr)
		}
		if cs.CPUs.Size() != 1 || !cs.CPUs.IsSubsetOf(b.host.CPUs.Difference(b.reserved)) {
			return s, fmt.Errorf("container cgroup has CPUs %s (machine %s, reserved %s)", cs.CPUs, b.host.CPUs, b.reserved)
		}
		after, err := b.p.eventSeconds(ctx)
		if err != nil {
			return s, err
		}
		s.plugin = time.Duration((after - before) * float64(time.Second))
	} else if cs, err := framework.ReadCpuset(ct.CgroupsPath()); err != nil || !cs.CPUs.Equals(b.host.CPUs) {
		return s, fmt.Errorf("plugin off: container cgroup has CPUs %s (%v), want %s", cs.CPUs, err, b.host.CPUs)
	}
	removed = true
	if err := b.cli.RemovePod(ctx, pod.ID, pod.CgroupParent()); err != nil {
		return s, err
	}
	// The next sample starts from a settled node: the pool grew back.
	if _, err := waitPool(shared, b.host.CPUs, b.settle); err != nil {
		return s, fmt.Errorf("shared pool after the removal: %w", err)
	}
	return s, nil
}

// waitPool polls the cpuset.cpus of every cgroup in paths until each holds
// want, and returns when the last one was seen to.
func waitPool(paths []string, want cpuset.CPUSet, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	left := slices.Clone(paths)
	for {
		var still []string
		for _, p := range left {
			// The set in force: on cgroup v2 a scope nobody gave a cpuset
			// (the systemd driver's shared containers with the plugin off)
			// has an empty cpuset.cpus and takes its parent's.
			cs, err := framework.ReadCpuset(p)
			if err != nil {
				return time.Time{}, err
			}
			if !cs.CPUs.Equals(want) {
				still = append(still, p)
			}
		}
		now := time.Now()
		if len(still) == 0 {
			return now, nil
		}
		if now.After(deadline) {
			cs, _ := framework.ReadCpuset(still[0])
			return now, fmt.Errorf("%d of %d shared containers still not on %s after %s (e.g. %s: %s)", len(still), len(paths), want, timeout, still[0], cs.CPUs)
		}
		left = still
		time.Sleep(200 * time.Microsecond)
	}
}

func starts(s []sample) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		out[i] = x.start
	}
	return out
}

func owns(s []sample) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		out[i] = x.plugin
	}
	return out
}

// eventSeconds is the plugin's total time answering the start path's
// events so far (the _sum series of its event histogram).
func (p *plugin) eventSeconds(ctx context.Context) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.metrics+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("plugin metrics: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("plugin metrics: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("plugin metrics: %s", resp.Status)
	}
	return startPathSeconds(string(body))
}

// startPathSeconds sums the startEvents' series
// nri_cpualign_event_duration_seconds_sum{event="..."} of a /metrics page
// (an event not answered yet has none).
func startPathSeconds(page string) (float64, error) {
	var total float64
	for _, line := range strings.Split(page, "\n") {
		for _, ev := range startEvents {
			prefix := `nri_cpualign_event_duration_seconds_sum{event="` + ev + `"} `
			if v, ok := strings.CutPrefix(line, prefix); ok {
				f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
				if err != nil {
					return 0, fmt.Errorf("plugin metrics: %q: %w", line, err)
				}
				total += f
			}
		}
	}
	return total, nil
}

func windows(s []sample) []time.Duration {
	out := make([]time.Duration, len(s))
	for i, x := range s {
		out[i] = x.window
	}
	return out
}

// paired is on[k] - off[k]: the same block number and position.
func paired(on, off []time.Duration) []time.Duration {
	m := min(len(on), len(off))
	d := make([]time.Duration, m)
	for i := range m {
		d[i] = on[i] - off[i]
	}
	return d
}

func pct[T cmp.Ordered](s []T, p float64) T {
	if len(s) == 0 {
		var zero T
		return zero
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c[int(p*float64(len(c)-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

// medianCI is the distribution-free (sign test) 95% confidence interval of
// the median: the order statistics n/2 -+ 1.96*sqrt(n)/2 (normal
// approximation of the binomial, fine from about 20 samples); below that a
// percentile bootstrap of the median (2,000 resamples, fixed seed).
func medianCI[T cmp.Ordered](d []T) (lo, hi T, ok bool) {
	n := len(d)
	if n < 5 {
		return lo, hi, false
	}
	c := slices.Clone(d)
	slices.Sort(c)
	if n >= 20 {
		// k is 1-based: the k-th smallest and the k-th largest.
		k := int(math.Floor(float64(n)/2 - 1.96*math.Sqrt(float64(n))/2))
		return c[k-1], c[n-k], true
	}
	rng := rand.New(rand.NewPCG(1, 2))
	meds := make([]T, 2000)
	re := make([]T, n)
	for i := range meds {
		for j := range re {
			re[j] = c[rng.IntN(n)]
		}
		meds[i] = pct(re, .5)
	}
	return pct(meds, .025), pct(meds, .975), true
}

// printRatios prints, for every pair of modes (the later one over the
// earlier: direct/off, in-answer/off, in-answer/direct), the ratio of
// their starts: the median of the per-pair ratios (sample k of one mode
// over sample k of the other, the same round with -block 1) with its 95%
// interval and interquartile range, and the ratio of the two medians.
func printRatios(shared int, modes []string, res map[string][]sample) {
	fmt.Println()
	fmt.Println("| shared | ratio of starts | pairs | median of paired ratios (95% CI) | IQR of paired ratios | ratio of medians |")
	fmt.Println("|--:|---|--:|--:|--:|--:|")
	for i, a := range modes {
		for _, b := range modes[i+1:] {
			r := ratios(starts(res[b]), starts(res[a]))
			ci := "n/a"
			if lo, hi, ok := medianCI(r); ok {
				ci = fmt.Sprintf("[%.2f, %.2f]", lo, hi)
			}
			fmt.Printf("| %d | %s / %s | %d | %.2f %s | %.2f-%.2f | %.2f |\n", shared, b, a, len(r), pct(r, .5), ci, pct(r, .25), pct(r, .75),
				float64(pct(starts(res[b]), .5))/float64(pct(starts(res[a]), .5)))
		}
	}
	fmt.Println()
}

// ratios is num[k] / den[k]: the same block number and position.
func ratios(num, den []time.Duration) []float64 {
	m := min(len(num), len(den))
	r := make([]float64, m)
	for i := range m {
		r[i] = float64(num[i]) / float64(den[i])
	}
	return r
}

// cgroupVersion is "v2" on the unified hierarchy, else "v1".
func cgroupVersion() string {
	if framework.Unified {
		return "v2"
	}
	return "v1"
}
