//go:build e2e

package kubelet

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Suite-wide state, set once in BeforeSuite.
var (
	// Env is the runtime and kubelet this run uses.
	Env env
	// Host is this machine's CPUs, from /sys.
	Host *framework.Host
	// PluginBin is the nri-cpualign binary under test.
	PluginBin string
	// WorkDir holds kubelet and plugin configs, state and logs of this run.
	WorkDir string
	// envMissing says why the suite cannot run here ("" = it can).
	envMissing string
	// Driver is the runtime's cgroup driver (asked through CRI
	// RuntimeConfig): the kubelet is configured with the same one, and the
	// suite looks for pod and container cgroups where it puts them.
	Driver framework.CgroupDriver
)

// env is what scripts/e2e-kubelet.sh exports: one runtime's setup
// environment (setup-containerd.sh or setup-crio.sh) plus the kubelet from
// setup-kube.sh.
type env struct {
	Runtime    string // "containerd" or "crio" (E2E_RUNTIME)
	Endpoint   string // CRI socket, unix:///... (CRI_RUNTIME_ENDPOINT)
	NRISocket  string
	TestImage  string
	PauseImage string
	Kubelet    string // the kubelet binary ($E2E_KUBE_BIN/kubelet)
	// RuntimeLog is the runtime's log (E2E_CONTAINERD_LOG or
	// E2E_CRIO_LOG): the suite waits there for a plugin to be connected
	// and synchronized.
	RuntimeLog string
	// PrevKubelet is an older kubelet ($E2E_KUBE_BIN_PREV/kubelet) for
	// the specs that check what a node moving from it leaves behind (the
	// migration's state files); "" when the run has none.
	PrevKubelet string
	PIDFile     string // where started processes' pids go, for the script's cleanup
}

func loadEnv() (env, error) {
	var missing []string
	get := func(name string) string {
		v := os.Getenv(name)
		if v == "" {
			missing = append(missing, name)
		}
		return v
	}
	e := env{
		Endpoint:   get("CRI_RUNTIME_ENDPOINT"),
		NRISocket:  get("NRI_SOCKET"),
		TestImage:  get("E2E_TEST_IMAGE"),
		PauseImage: get("E2E_PAUSE_IMAGE"),
		Runtime:    os.Getenv("E2E_RUNTIME"),
		PIDFile:    os.Getenv("NRI_CPUALIGN_E2E_PIDFILE"),
	}
	if os.Getenv("E2E_RUNTIME") == "crio" {
		e.RuntimeLog = get("E2E_CRIO_LOG")
	} else {
		e.RuntimeLog = get("E2E_CONTAINERD_LOG")
	}
	bin := get("E2E_KUBE_BIN")
	if len(missing) > 0 {
		return env{}, fmt.Errorf("environment not loaded, missing %v: run scripts/e2e-kubelet.sh (make e2e-kubelet), or source a runtime's env (scripts/setup-containerd.sh or setup-crio.sh) and scripts/setup-kube.sh kubelet's export line", missing)
	}
	if e.Runtime == "" {
		e.Runtime = "containerd"
	}
	e.Kubelet = filepath.Join(bin, "kubelet")
	if _, err := os.Stat(e.Kubelet); err != nil {
		return env{}, fmt.Errorf("no kubelet binary: %w (run scripts/setup-kube.sh kubelet)", err)
	}
	if prev := os.Getenv("E2E_KUBE_BIN_PREV"); prev != "" {
		e.PrevKubelet = filepath.Join(prev, "kubelet")
		if _, err := os.Stat(e.PrevKubelet); err != nil {
			return env{}, fmt.Errorf("E2E_KUBE_BIN_PREV has no kubelet: %w", err)
		}
	}
	return e, nil
}

func TestKubelet(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "nri-cpualign with a real kubelet")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	Env, err = loadEnv()
	if err != nil {
		envMissing = err.Error()
		return
	}
	Host, err = framework.ReadHost("/sys")
	Expect(err).NotTo(HaveOccurred())
	cri, err := framework.Dial(ctx, strings.TrimPrefix(Env.Endpoint, "unix://"), Env.TestImage)
	Expect(err).NotTo(HaveOccurred())
	Driver = cri.RuntimeCgroupDriver(ctx)
	Expect(cri.Close()).To(Succeed())
	WorkDir = os.Getenv("E2E_WORK_DIR")
	if WorkDir == "" {
		WorkDir = GinkgoT().TempDir()
	}
	Expect(os.MkdirAll(WorkDir, 0o755)).To(Succeed())
	// A new directory every run: specs name their pods with a counter, so
	// a second run into the same place (another runtime version) would
	// find the first run's output files, plugin checkpoint and kubelet
	// state under the same names. Short: the kubelet's sockets live under
	// it, and a unix socket path has at most 107 bytes.
	WorkDir, err = os.MkdirTemp(WorkDir, Env.Runtime+"-")
	Expect(err).NotTo(HaveOccurred())
	PluginBin = os.Getenv("NRI_CPUALIGN_BIN")
	if PluginBin == "" {
		PluginBin = filepath.Join(WorkDir, "nri-cpualign")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", PluginBin, "github.com/nri-cpualign/nri-cpualign/cmd/nri-cpualign").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build nri-cpualign:\n%s", out)
	}
	if Env.Runtime == "crio" && hugetlbUnmounted() {
		envMissing = "CRI-O sets the kubelet's hugepage limits because /proc/cgroups lists the hugetlb controller, but no hugetlb hierarchy is mounted, so runc fails every container: mount one at /sys/fs/cgroup/hugetlb (scripts/e2e-kubelet.sh does)"
		return
	}
	if Env.Runtime == "crio" && !canLowerOOMScore(ctx) {
		offset := framework.FileSize(Env.RuntimeLog)
		stop, err := startOOMClamp(context.Background(), Env.NRISocket)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(stop)
		// stub.Start returns after Configure, before the runtime has
		// synchronized the clamp and calls it.
		waitRuntimeLine(ctx, offset, "95-e2e-oomclamp")
		GinkgoWriter.Printf("this machine cannot lower oom_score_adj (no CAP_SYS_RESOURCE): the e2e-oomclamp NRI plugin turns CRI-O's negative scores into 0\n")
	}
	GinkgoWriter.Printf("runtime %s (%s, NRI %s, cgroup driver %s, cgroup v2 %v), kubelet %s (previous: %s), %d CPUs %s, plugin %s, work dir %s\n",
		Env.Runtime, Env.Endpoint, Env.NRISocket, Driver, framework.Unified, Env.Kubelet, cmp.Or(Env.PrevKubelet, "none"),
		Host.CPUs.Size(), Host.CPUs, PluginBin, WorkDir)
}, NodeTimeout(5*time.Minute))

// canLowerOOMScore reports whether a process here may lower its
// oom_score_adj (root without CAP_SYS_RESOURCE may not, as in this VM).
func canLowerOOMScore(ctx context.Context) bool {
	return exec.CommandContext(ctx, "sh", "-c", "echo -1 > /proc/self/oom_score_adj").Run() == nil
}

// hugetlbUnmounted reports whether the kernel has the hugetlb controller
// (enabled in /proc/cgroups) without a v1 hierarchy mounted for it. On
// cgroup v2 it is in the unified tree.
func hugetlbUnmounted() bool {
	if framework.Unified {
		return false
	}
	b, err := os.ReadFile("/proc/cgroups")
	if err != nil {
		return false
	}
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 4 && f[0] == "hugetlb" && f[3] == "1" {
			_, err := os.Stat(filepath.Join(framework.CgroupRoot, "hugetlb", "cgroup.procs"))
			return err != nil
		}
	}
	return false
}

// RequireEnv skips the current spec (or Ordered container, from BeforeAll)
// when the runtime or the kubelet is not set up, and when the machine has
// fewer than 2 CPUs (one is reserved, one is handed out exclusively).
func RequireEnv() {
	if envMissing != "" {
		Skip(envMissing)
	}
	if Host.CPUs.Size() < 2 {
		Skip(fmt.Sprintf("needs 2 CPUs (one reserved, one exclusive); this machine has %s", Host.CPUs))
	}
}

// Reserved is the CPU the plugin (and, for migration, the kubelet) reserves:
// the first one.
func Reserved() cpuset.CPUSet { return cpuset.New(Host.CPUs.List()[0]) }

// recordPID appends pid to the pid file the script kills survivors from.
func recordPID(pid int) {
	if Env.PIDFile == "" {
		return
	}
	if f, err := os.OpenFile(Env.PIDFile, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err == nil {
		fmt.Fprintln(f, pid)
		f.Close()
	}
}

// httpGet fetches url and returns the body of a 200 answer.
func httpGet(ctx context.Context, url string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return b, fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

// logTail is the last n lines of a log file, for failure messages.
func logTail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// ---------------------------------------------------------------- plugin

// PluginMetricsAddr is where the suite's plugin serves /state, /metrics and
// /healthz.
const PluginMetricsAddr = "127.0.0.1:19464"

// Plugin is one nri-cpualign deployment: config, state dir and log survive
// restarts of its process.
type Plugin struct {
	Dir, ConfigPath, StateDir, LogPath string
	proc                               *framework.PluginProcess
}

// PluginConfig is the plugin's TOML: the static policy with the first CPU
// reserved, state in stateDir, metrics on PluginMetricsAddr; extra lines are
// appended (new keys only: TOML refuses a repeated key).
func PluginConfig(stateDir string, extra ...string) string {
	lines := []string{
		`cpu_manager_policy = "static"`,
		`reserved_system_cpus = "` + Reserved().String() + `"`,
		`state_dir = "` + stateDir + `"`,
		`cgroup_root = "/sys/fs/cgroup"`,
		`socket_path = "` + Env.NRISocket + `"`,
		`metrics_address = "` + PluginMetricsAddr + `"`,
		// Off: events alone must keep every cgroup right; a reconcile pass
		// would hide a move the kubelet or the runtime made.
		`reconcile_period = "0s"`,
		`log_level = "debug"`,
	}
	return strings.Join(append(lines, extra...), "\n") + "\n"
}

// NewPlugin writes a plugin config under WorkDir/name (extra: TOML lines; a
// sysfs_root line replaces the real /sys). The process is killed when the
// calling node ends.
func NewPlugin(name string, extra ...string) *Plugin {
	GinkgoHelper()
	dir := filepath.Join(WorkDir, name)
	p := &Plugin{Dir: dir, ConfigPath: filepath.Join(dir, "config.toml"), StateDir: filepath.Join(dir, "state"), LogPath: filepath.Join(dir, "plugin.log")}
	Expect(os.MkdirAll(p.StateDir, 0o755)).To(Succeed())
	hasSysfs := false
	for _, l := range extra {
		hasSysfs = hasSysfs || strings.HasPrefix(l, "sysfs_root")
	}
	if !hasSysfs {
		extra = append(extra, `sysfs_root = "/sys"`)
	}
	Expect(os.WriteFile(p.ConfigPath, []byte(PluginConfig(p.StateDir, extra...)), 0o644)).To(Succeed())
	DeferCleanup(p.Kill)
	return p
}

// Start starts the plugin (extra args after the config) and waits until its
// /healthz says it is connected to the runtime and synchronized, and the
// runtime's log says it calls it.
func (p *Plugin) Start(ctx context.Context, args ...string) {
	GinkgoHelper()
	Expect(p.proc == nil || !p.proc.Running()).To(BeTrue(), "plugin already running")
	offset := framework.FileSize(Env.RuntimeLog)
	proc, err := framework.StartPlugin(PluginBin, append([]string{"run", "--config", p.ConfigPath}, args...), p.LogPath, "")
	Expect(err).NotTo(HaveOccurred())
	recordPID(proc.Pid())
	p.proc = proc
	Eventually(func(g Gomega) {
		g.Expect(proc.Running()).To(BeTrue(), "plugin exited")
		_, err := httpGet(ctx, "http://"+PluginMetricsAddr+"/healthz")
		g.Expect(err).NotTo(HaveOccurred())
	}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(Succeed(),
		func() string { return "plugin not healthy within 30 s; its log:\n" + logTail(p.LogPath, 40) })
	// /healthz turns true inside the plugin's Synchronize, a moment before
	// the runtime adds it to the plugins it calls.
	waitRuntimeLine(ctx, offset, daemon.PluginIdx+"-"+daemon.PluginName)
}

// waitRuntimeLine waits until the runtime's log, from offset on, says the
// NRI plugin (idx-name) is connected and synchronized: the runtime writes
// that once it has added the plugin to the plugins it calls.
func waitRuntimeLine(ctx context.Context, offset int64, plugin string) {
	GinkgoHelper()
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err := framework.WaitForLine(wctx, Env.RuntimeLog, offset, plugin, "connected and synchronized")
	Expect(err).NotTo(HaveOccurred(), "%s did not log NRI plugin %s connected and synchronized within 30 s", Env.Runtime, plugin)
}

// Kill SIGKILLs the plugin process, if running, and waits for it.
func (p *Plugin) Kill() {
	if p.proc != nil {
		p.proc.Kill()
	}
}

// State is the plugin's /state.
func (p *Plugin) State(g Gomega, ctx context.Context) StateView {
	GinkgoHelper()
	b, err := httpGet(ctx, "http://"+PluginMetricsAddr+"/state")
	g.Expect(err).NotTo(HaveOccurred())
	var v StateView
	g.Expect(json.Unmarshal(b, &v)).To(Succeed())
	return v
}

// StateView is the part of the plugin's /state the suite reads (README,
// "Metrics and the /state endpoint"); decoded here rather than through the
// daemon's own type, so the suite checks the documented document.
type StateView struct {
	Connected    bool            `json:"connected"`
	Synchronized bool            `json:"synchronized"`
	Reserved     string          `json:"reserved"`
	Shared       string          `json:"shared"`
	Containers   []ContainerView `json:"containers"`
	Held         []HeldView      `json:"held"`
	Memory       []MemoryView    `json:"memory"`
}

// MemoryView is one NUMA node's resource on /state under
// memory_manager_policy Static.
type MemoryView struct {
	NUMANode  int    `json:"numa_node"`
	Resource  string `json:"resource"`
	Allocated uint64 `json:"allocated"`
}

// HeldView is one assignment held for an exited container on /state.
type HeldView struct {
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
}

// ContainerView is one container on /state.
type ContainerView struct {
	ID        string `json:"id"`
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	Mems      string `json:"mems"`
	Exclusive bool   `json:"exclusive"`
}

// Metric is the value of an unlabelled metric on /metrics (0 if absent).
func (p *Plugin) Metric(g Gomega, ctx context.Context, name string) float64 {
	GinkgoHelper()
	b, err := httpGet(ctx, "http://"+PluginMetricsAddr+"/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			g.Expect(err).NotTo(HaveOccurred(), "metric line %q", sc.Text())
			return v
		}
	}
	return 0
}

// Exclusive maps "pod-name/container" to the exclusive CPUs of every
// exclusive container on /state; shared containers are left out.
func Exclusive(v StateView) map[string]string {
	out := map[string]string{}
	for _, c := range v.Containers {
		if c.Exclusive {
			out[c.Pod+"/"+c.Container] = c.CPUs
		}
	}
	return out
}

// LogCount counts the plugin log lines holding every one of substrs.
func (p *Plugin) LogCount(substrs ...string) int {
	b, _ := os.ReadFile(p.LogPath)
	n := 0
next:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range substrs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// ---------------------------------------------------------------- kubelet

// Kubelet settings fixed for the suite.
const (
	NodeName     = "nri-kubelet-e2e"
	ReadOnlyPort = 10255
	HealthzPort  = 10248
)

// KubeletConfig is what a spec may vary in the kubelet's configuration.
type KubeletConfig struct {
	// CPUManagerPolicy is "none" (the plugin's setting) or "static" (the
	// migration spec's starting point, with CPU 0 reserved).
	CPUManagerPolicy string
	// CPUManagerPolicyOptions and TopologyManagerPolicy (default none):
	// the kubelet's own static policy as the reference the plugin is
	// compared with.
	CPUManagerPolicyOptions map[string]string
	TopologyManagerPolicy   string
	// MemoryManagerPolicy is "None" (default) or "Static", which reserves
	// MemoryReservedMiB on NUMA node 0 (the kubelet requires the
	// reservation to equal its eviction threshold here, 1Mi, as nothing
	// else is reserved).
	MemoryManagerPolicy string
}

// MemoryReservedMiB is the kubelet's reservedMemory on node 0 under
// MemoryManagerPolicy Static: its memory.available eviction threshold.
const MemoryReservedMiB = 1

// Kubelet is one standalone kubelet: its config, static pod directory, root
// dir and log under WorkDir/name survive restarts of its process.
type Kubelet struct {
	Dir, ConfigPath, ManifestDir, RootDir, LogPath string
	// Bin is the kubelet binary the next Start runs (Env.Kubelet unless
	// a spec sets another).
	Bin       string
	proc      *framework.PluginProcess
	manifests map[string]bool // pod names with a manifest written
}

// NewKubelet prepares a kubelet under WorkDir/name with cfg. When the calling
// node ends, every pod it still runs is deleted (manifests removed, pods and
// their cgroups gone) and the kubelet is stopped.
func NewKubelet(name string, cfg KubeletConfig) *Kubelet {
	GinkgoHelper()
	dir := filepath.Join(WorkDir, name)
	k := &Kubelet{Dir: dir, ConfigPath: filepath.Join(dir, "kubelet.yaml"), ManifestDir: filepath.Join(dir, "manifests"),
		RootDir: filepath.Join(dir, "root"), LogPath: filepath.Join(dir, "kubelet.log"), Bin: Env.Kubelet, manifests: map[string]bool{}}
	Expect(os.MkdirAll(k.ManifestDir, 0o755)).To(Succeed())
	Expect(os.MkdirAll(k.RootDir, 0o755)).To(Succeed())
	k.Configure(cfg)
	DeferCleanup(func(ctx SpecContext) {
		if k.Running() {
			k.DeleteAll(ctx)
		}
		k.Stop()
		Expect(unmountUnder(k.RootDir)).To(Succeed())
	}, NodeTimeout(3*time.Minute))
	return k
}

// Configure (re)writes the kubelet's config; a running kubelet reads it on
// its next start. The fields are those of deploy/node/kubelet-cpualign.conf
// plus what a standalone kubelet needs on this machine (README of
// ../shared/e2e: cgroupfs, cgroup v1, swap, no API server, local images).
func (k *Kubelet) Configure(cfg KubeletConfig) {
	GinkgoHelper()
	policy := cfg.CPUManagerPolicy
	if policy == "" {
		policy = "none"
	}
	lines := []string{
		"apiVersion: kubelet.config.k8s.io/v1beta1",
		"kind: KubeletConfiguration",
		"staticPodPath: " + k.ManifestDir,
		// The kubelet also watches the directory (inotify); this is its
		// periodic fallback.
		"fileCheckFrequency: 1s",
		"cgroupDriver: " + string(Driver),
		"failSwapOn: false",
		"cpuManagerPolicy: " + policy,
		"topologyManagerPolicy: " + cmp.Or(cfg.TopologyManagerPolicy, "none"),
		"memoryManagerPolicy: " + cmp.Or(cfg.MemoryManagerPolicy, "None"),
		"address: 127.0.0.1",
		"healthzBindAddress: 127.0.0.1",
		fmt.Sprintf("healthzPort: %d", HealthzPort),
		fmt.Sprintf("readOnlyPort: %d", ReadOnlyPort),
		"authentication:",
		"  anonymous:",
		"    enabled: true",
		"  webhook:",
		"    enabled: false",
		"authorization:",
		"  mode: AlwaysAllow",
		"containerRuntimeEndpoint: " + Env.Endpoint,
		"enforceNodeAllocatable: []",
		"cgroupsPerQOS: true",
		"evictionHard:",
		`  memory.available: "1Mi"`,
		`  nodefs.available: "1%"`,
		`  imagefs.available: "1%"`,
		"imageGCHighThresholdPercent: 100",
		"imageGCLowThresholdPercent: 99",
		"serializeImagePulls: false",
		"localStorageCapacityIsolation: false",
	}
	if !framework.Unified {
		// Since 1.35 the kubelet refuses cgroup v1 unless told otherwise;
		// on cgroup v2 the default is left as it is.
		lines = append(lines, "failCgroupV1: false")
	}
	if policy == "static" {
		// The static policy needs a CPU reservation; reservedSystemCPUs
		// names it (the plugin's reserved_system_cpus, as the README asks).
		lines = append(lines, `reservedSystemCPUs: "`+Reserved().String()+`"`)
	}
	if cfg.MemoryManagerPolicy == "Static" {
		lines = append(lines, "reservedMemory:", "- numaNode: 0", "  limits:", fmt.Sprintf("    memory: %dMi", MemoryReservedMiB))
	}
	if len(cfg.CPUManagerPolicyOptions) > 0 {
		lines = append(lines, "cpuManagerPolicyOptions:")
		keys := make([]string, 0, len(cfg.CPUManagerPolicyOptions))
		for k := range cfg.CPUManagerPolicyOptions {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			lines = append(lines, fmt.Sprintf("  %s: %q", k, cfg.CPUManagerPolicyOptions[k]))
		}
	}
	Expect(os.WriteFile(k.ConfigPath, []byte(strings.Join(lines, "\n")+"\n"), 0o644)).To(Succeed())
}

// unmountUnder unmounts everything mounted at or below dir, deepest first:
// the kubelet makes its --root-dir a shared bind mount of itself and does
// not undo it when it stops.
func unmountUnder(dir string) error {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && (f[4] == dir || strings.HasPrefix(f[4], dir+"/")) {
			points = append(points, f[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		// EINVAL: no longer a mount point (a stacked duplicate went with
		// the first).
		if err := syscall.Unmount(p, syscall.MNT_DETACH); err != nil && err != syscall.EINVAL {
			return fmt.Errorf("unmount %s: %w", p, err)
		}
	}
	return nil
}

// Running reports whether the kubelet process runs.
func (k *Kubelet) Running() bool { return k.proc != nil && k.proc.Running() }

// Start starts the kubelet and waits until its healthz and read-only /pods
// answer.
func (k *Kubelet) Start(ctx context.Context) {
	GinkgoHelper()
	Expect(k.Running()).To(BeFalse(), "kubelet already running")
	args := []string{"--config", k.ConfigPath, "--root-dir", k.RootDir, "--hostname-override", NodeName}
	proc, err := framework.StartPlugin(k.Bin, args, k.LogPath, "")
	Expect(err).NotTo(HaveOccurred())
	recordPID(proc.Pid())
	k.proc = proc
	Eventually(func(g Gomega) {
		g.Expect(proc.Running()).To(BeTrue(), "kubelet exited")
		_, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/healthz", HealthzPort))
		g.Expect(err).NotTo(HaveOccurred())
		_, err = k.Pods(ctx)
		g.Expect(err).NotTo(HaveOccurred())
	}).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(),
		"kubelet not healthy; its log:\n%s", logTail(k.LogPath, 40))
}

// Stop stops the kubelet with SIGTERM (its pods keep running, as on a node
// whose kubelet is restarted), SIGKILL after 20 s.
func (k *Kubelet) Stop() {
	if k.Running() {
		if err := k.proc.Terminate(20 * time.Second); err != nil {
			GinkgoWriter.Printf("kubelet stop: %v\n", err)
		}
	}
}

// Kill SIGKILLs the kubelet (a crash) and waits for it.
func (k *Kubelet) Kill() {
	if k.Running() {
		k.proc.Kill()
	}
}

// LogTail is the end of the kubelet's log.
func (k *Kubelet) LogTail() string { return logTail(k.LogPath, 40) }

// StaticName is the name the kubelet gives the static pod from a manifest
// named name: name-<node>.
func StaticName(name string) string { return name + "-" + NodeName }

// Apply writes pod's manifest into the static pod directory.
func (k *Kubelet) Apply(pod *corev1.Pod) {
	GinkgoHelper()
	b, err := json.MarshalIndent(pod, "", "  ")
	Expect(err).NotTo(HaveOccurred())
	tmp := filepath.Join(k.Dir, pod.Name+".json.tmp")
	Expect(os.WriteFile(tmp, b, 0o644)).To(Succeed())
	// A rename, so the kubelet never reads half a manifest.
	Expect(os.Rename(tmp, k.manifestPath(pod.Name))).To(Succeed())
	k.manifests[pod.Name] = true
}

func (k *Kubelet) manifestPath(name string) string {
	return filepath.Join(k.ManifestDir, name+".json")
}

// Pods is the kubelet's /pods (read-only port).
func (k *Kubelet) Pods(ctx context.Context) ([]corev1.Pod, error) {
	b, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/pods", ReadOnlyPort))
	if err != nil {
		return nil, err
	}
	var list struct {
		Items []corev1.Pod `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return nil, fmt.Errorf("/pods: %w", err)
	}
	return list.Items, nil
}

// Pod is the kubelet's view of the static pod from manifest name; it fails g
// while the kubelet does not list it.
func (k *Kubelet) Pod(g Gomega, ctx context.Context, name string) corev1.Pod {
	GinkgoHelper()
	pods, err := k.Pods(ctx)
	g.Expect(err).NotTo(HaveOccurred())
	for _, p := range pods {
		if p.Name == StaticName(name) {
			return p
		}
	}
	g.Expect(pods).To(ContainElement(HaveField("ObjectMeta.Name", StaticName(name))), "the kubelet does not list pod %s", StaticName(name))
	return corev1.Pod{}
}

// Delete removes pod name's manifest and waits until the kubelet no longer
// lists it, none of its containers runs, and its pod cgroups are gone.
func (k *Kubelet) Delete(ctx context.Context, name string) {
	GinkgoHelper()
	var uid string
	if pods, err := k.Pods(ctx); err == nil {
		for _, p := range pods {
			if p.Name == StaticName(name) {
				uid = string(p.UID)
			}
		}
	}
	err := os.Remove(k.manifestPath(name))
	if err != nil && !os.IsNotExist(err) {
		Expect(err).NotTo(HaveOccurred())
	}
	delete(k.manifests, name)
	Eventually(func(g Gomega) {
		pods, err := k.Pods(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		for _, p := range pods {
			g.Expect(p.Name).NotTo(Equal(StaticName(name)), "the kubelet still lists pod %s", name)
		}
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", k.LogTail())
	if uid == "" {
		return
	}
	// The kubelet removes a deleted pod's cgroups in its housekeeping,
	// once no process is left in them.
	Eventually(func(g Gomega) {
		g.Expect(PodCgroupDirs(uid)).To(BeEmpty())
	}).WithContext(ctx).WithTimeout(90*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(),
		"pod %s (uid %s): its cgroups remain", name, uid)
}

// DeleteAll deletes every pod the suite gave this kubelet.
func (k *Kubelet) DeleteAll(ctx context.Context) {
	GinkgoHelper()
	for name := range k.manifests {
		k.Delete(ctx, name)
	}
}

// PodCgroupDirs lists the cgroup directories of pod uid, whatever its QoS
// class, in every v1 hierarchy or in the v2 tree: the cgroupfs layout
// kubepods[/burstable|/besteffort]/pod<uid>, or the systemd one
// kubepods.slice[/kubepods-<qos>.slice]/kubepods[-<qos>]-pod<uid>.slice.
func PodCgroupDirs(uid string) []string {
	var out []string
	for _, qos := range []framework.QOS{framework.Guaranteed, framework.Burstable, framework.BestEffort} {
		path := podCgroupPath(qos, uid)
		pattern := filepath.Join(framework.CgroupRoot, "*") + path
		if framework.Unified {
			pattern = filepath.Join(framework.CgroupRoot, path)
		}
		m, _ := filepath.Glob(pattern)
		out = append(out, m...)
	}
	return out
}

// podCgroupPath is the cgroup path the kubelet gives a pod of class q with
// the suite's cgroup driver.
func podCgroupPath(q framework.QOS, uid string) string {
	if Driver == framework.Systemd {
		return framework.SlicePath(framework.PodSlice(q, uid))
	}
	return framework.CgroupParent(q, uid)
}

// ---------------------------------------------------------------- containers

// ContainerCPUs checks a running container of pod from both sides and
// returns its CPUs: Cpus_allowed_list of its process (found through the
// container's cgroup) equals its cgroup's cpuset.cpus. It fails g while the
// container is not running.
func ContainerCPUs(g Gomega, pod corev1.Pod, name string) cpuset.CPUSet {
	GinkgoHelper()
	st, ok := ContainerStatus(pod, name)
	g.Expect(ok).To(BeTrue(), "pod %s has no status for container %s", pod.Name, name)
	g.Expect(st.State.Running).NotTo(BeNil(), "pod %s container %s is not running: %+v", pod.Name, name, st.State)
	dir := ContainerCgroup(g, pod, st.ContainerID)
	cg, err := framework.ReadCpuset(dir)
	g.Expect(err).NotTo(HaveOccurred())
	procs, err := framework.CgroupFile("cpuset", dir, "cgroup.procs")
	g.Expect(err).NotTo(HaveOccurred())
	pids := strings.Fields(procs)
	g.Expect(pids).NotTo(BeEmpty(), "container %s: no process in cgroup %s", name, dir)
	seen := 0
	for _, pid := range pids {
		allowed, err := CPUsAllowed(pid)
		if errors.Is(err, fs.ErrNotExist) {
			// The image's loop starts a `sleep 1` every second: a child
			// listed in cgroup.procs may have exited since.
			continue
		}
		g.Expect(err).NotTo(HaveOccurred())
		seen++
		g.Expect(allowed.Equals(cg.CPUs)).To(BeTrue(), "pod %s container %s: process %s has Cpus_allowed_list %s, its cgroup %s has cpuset.cpus %s",
			pod.Name, name, pid, allowed, dir, cg.CPUs)
	}
	g.Expect(seen).NotTo(BeZero(), "container %s: every process of cgroup %s exited while read", name, dir)
	return cg.CPUs
}

// ContainerCgroup is the cgroup path (below a hierarchy's mount, or in the
// v2 tree) of the container with the kubelet's containerID
// ("containerd://<id>" or "cri-o://<id>") in pod: <pod cgroup>/<id>
// (containerd) or <pod cgroup>/crio-<id> (CRI-O) with the cgroupfs driver,
// <pod slice>/cri-containerd-<id>.scope or <pod slice>/crio-<id>.scope with
// the systemd one.
func ContainerCgroup(g Gomega, pod corev1.Pod, containerID string) string {
	GinkgoHelper()
	_, id, ok := strings.Cut(containerID, "://")
	g.Expect(ok).To(BeTrue(), "container id %q", containerID)
	parent := PodCgroup(pod)
	for _, rt := range []string{framework.Containerd, framework.CRIO} {
		name := framework.ContainerCgroupName(rt, Driver, id)
		if name == "" {
			name = id
		}
		p := filepath.Join(parent, name)
		if _, err := os.Stat(framework.CgroupDir("cpuset", p)); err == nil {
			return p
		}
	}
	g.Expect(fmt.Errorf("no cgroup for container %s under %s", id, framework.CgroupDir("cpuset", parent))).NotTo(HaveOccurred())
	return ""
}

// PodCgroup is the kubelet's cgroup of pod, by its QoS class and the
// suite's cgroup driver.
func PodCgroup(pod corev1.Pod) string {
	q := framework.Guaranteed
	switch pod.Status.QOSClass {
	case "Burstable":
		q = framework.Burstable
	case "BestEffort":
		q = framework.BestEffort
	}
	return podCgroupPath(q, string(pod.UID))
}

// CPUsAllowed reads Cpus_allowed_list of process pid.
func CPUsAllowed(pid string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(filepath.Join("/proc", pid, "status"))
	if err != nil {
		return cpuset.CPUSet{}, err
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return cpuset.Parse(strings.TrimSpace(v))
		}
	}
	return cpuset.CPUSet{}, fmt.Errorf("/proc/%s/status has no Cpus_allowed_list", pid)
}

// ContainerStatus is the kubelet's status of container name of pod (app,
// init or sidecar).
func ContainerStatus(pod corev1.Pod, name string) (corev1.ContainerStatus, bool) {
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, st := range list {
			if st.Name == name {
				return st, true
			}
		}
	}
	return corev1.ContainerStatus{}, false
}
