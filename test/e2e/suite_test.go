//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Suite-wide state, set up once in BeforeSuite and shared by every spec file
// of the package.
var (
	// Env describes the test runtime (setup-containerd.sh's or
	// setup-crio.sh's environment).
	Env framework.Env
	// CRI is the CRI client to it.
	CRI *framework.Client
	// Host is this machine's CPUs, NUMA nodes and L3 groups, from /sys.
	Host *framework.Host
	// PluginBin is the nri-cpualign binary under test.
	PluginBin string
	// WorkDir holds plugin configs, state dirs and logs of this run.
	WorkDir string

	podSeq atomic.Int64
)

// PluginName is the NRI name ("<idx>-<name>") nri-cpualign registers with,
// as containerd logs it.
const PluginName = daemon.PluginIdx + "-" + daemon.PluginName

// RuntimeName is the runtime this run of the suite is for, from
// E2E_RUNTIME (the suite runs once per runtime): "containerd" or "CRI-O".
// It is known before the specs are built, so their texts carry it.
var RuntimeName = func() string {
	if os.Getenv("E2E_RUNTIME") == framework.CRIO {
		return "CRI-O"
	}
	return "containerd"
}()

func TestE2E(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "nri-cpualign e2e on "+RuntimeName)
}

var _ = BeforeSuite(func(ctx SpecContext) {
	var err error
	Host, err = framework.ReadHost("/sys")
	Expect(err).NotTo(HaveOccurred())
	// Specs that need the real runtime call RequireRuntime; the
	// in-process ones run without it.
	Env, err = framework.LoadEnv()
	if err != nil {
		runtimeMissing = err.Error()
		return
	}
	CRI, err = framework.DialEnv(ctx, Env)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(CRI.Close)

	WorkDir = os.Getenv("E2E_WORK_DIR")
	if WorkDir == "" {
		WorkDir = GinkgoT().TempDir()
	}
	Expect(os.MkdirAll(WorkDir, 0o755)).To(Succeed())
	PluginBin = os.Getenv("NRI_CPUALIGN_BIN")
	if PluginBin == "" {
		// Running the suite without scripts/e2e.sh: build the binary here.
		PluginBin = filepath.Join(WorkDir, "nri-cpualign")
		out, err := exec.CommandContext(ctx, "go", "build", "-o", PluginBin, "github.com/nri-cpualign/nri-cpualign/cmd/nri-cpualign").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "go build nri-cpualign:\n%s", out)
	}
	By(fmt.Sprintf("runtime %s (pid %d, CRI %s, NRI socket %s, log %s); %d CPUs %s; plugin %s; work dir %s",
		RuntimeName, Env.RuntimePID, Env.CRIAddress, Env.NRISocket, Env.RuntimeLog, Host.CPUs.Size(), Host.CPUs, PluginBin, WorkDir))
}, NodeTimeout(5*time.Minute))

// runtimeMissing says why the real-runtime specs cannot run ("" = they
// can).
var runtimeMissing string

// RequireRuntime skips the current spec (or Ordered container, from
// BeforeAll) when the test runtime's environment is not loaded.
func RequireRuntime() {
	if runtimeMissing != "" {
		Skip(runtimeMissing)
	}
}

// RequireContainerd is RequireRuntime, for specs written before the suite
// ran on CRI-O too.
func RequireContainerd() { RequireRuntime() }

// SkipOnCRIO skips the current spec on CRI-O, saying why.
func SkipOnCRIO(why string) {
	if Env.IsCRIO() {
		Skip("not on CRI-O: " + why)
	}
}

// NewPodUID returns a pod UID unique to this run (it names the pod cgroup).
func NewPodUID(prefix string) string {
	return fmt.Sprintf("%s-%d-%d", prefix, time.Now().UnixNano(), podSeq.Add(1))
}

// RunPod runs a pod for the given containers' resources (which decide its QoS
// class) and removes it, with its cgroups, when the current node's scope ends
// (a spec, or the Ordered container for BeforeAll).
func RunPod(ctx context.Context, name string, ctrs ...framework.Resources) *framework.Pod {
	GinkgoHelper()
	p, err := CRI.RunPod(ctx, framework.PodSpec{Name: name, UID: NewPodUID(name), Containers: ctrs})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func(ctx SpecContext) {
		Expect(CRI.RemovePod(ctx, p.ID, p.CgroupParent())).To(Succeed())
	}, NodeTimeout(time.Minute))
	return p
}

// RunContainer creates and starts a container in p.
func RunContainer(ctx context.Context, p *framework.Pod, name string, r framework.Resources) *framework.Container {
	GinkgoHelper()
	ct, err := CRI.RunContainer(ctx, p, name, r)
	Expect(err).NotTo(HaveOccurred())
	return ct
}

// RunPodWith runs a one-container pod and returns its container.
func RunPodWith(ctx context.Context, name string, r framework.Resources) *framework.Container {
	GinkgoHelper()
	return RunContainer(ctx, RunPod(ctx, name, r), name, r)
}

// CPUsOf returns the container's CPUs after checking that the two views
// agree: Cpus_allowed_list of its PID 1 (read inside the container) equals
// its cgroup's cpuset.cpus on the host, and its cgroup's cpuset.mems holds
// the memory nodes of those CPUs' NUMA nodes.
func CPUsOf(ctx context.Context, ct *framework.Container) cpuset.CPUSet {
	GinkgoHelper()
	return CPUsOfG(Default, ctx, ct)
}

// CPUsOfG is CPUsOf asserting through g, for use inside Eventually.
func CPUsOfG(g Gomega, ctx context.Context, ct *framework.Container) cpuset.CPUSet {
	GinkgoHelper()
	allowed, err := CRI.CPUsAllowed(ctx, ct)
	g.Expect(err).NotTo(HaveOccurred())
	cg, err := framework.ReadCpuset(ct.CgroupsPath())
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cg.CPUs).To(EqualCPUs(allowed), "container %s: cgroup cpuset.cpus %s differs from Cpus_allowed_list %s inside", ct.Name, cg.CPUs, allowed)
	g.Expect(cg.Mems).To(BeSupersetOf(Host.NUMANodes(allowed).Intersection(Host.MemoryNodes)),
		"container %s on CPUs %s: cpuset.mems %s lacks the memory of those CPUs' NUMA nodes", ct.Name, allowed, cg.Mems)
	return allowed
}

// PluginConfig is the TOML the suite gives nri-cpualign: the static policy
// with CPU 0 reserved (the kubelet's reservedSystemCPUs), state in stateDir.
// extra lines are appended (new keys or tables); an extra line setting one
// of the keys above replaces that key's line (TOML refuses a repeated key).
func PluginConfig(stateDir string, extra ...string) string {
	lines := []string{
		`cpu_manager_policy = "static"`,
		`reserved_system_cpus = "` + Reserved().String() + `"`,
		`topology_manager_policy = "best-effort"`,
		`state_dir = "` + stateDir + `"`,
		`sysfs_root = "/sys"`,
		`cgroup_root = "/sys/fs/cgroup"`,
		`socket_path = "` + Env.NRISocket + `"`,
		`metrics_address = ""`,
		// Off: the specs check that events alone keep the cgroups right.
		`reconcile_period = "0s"`,
		`log_level = "debug"`,
	}
	key := func(l string) string { k, _, _ := strings.Cut(l, "="); return strings.TrimSpace(k) }
	override := map[string]bool{}
	for _, l := range extra {
		if strings.Contains(l, "=") && !strings.HasPrefix(strings.TrimSpace(l), "[") {
			override[key(l)] = true
		}
	}
	kept := lines[:0]
	for _, l := range lines {
		if !override[key(l)] {
			kept = append(kept, l)
		}
	}
	return strings.Join(append(kept, extra...), "\n") + "\n"
}

// Reserved is the reserved CPU set the suite configures: the first CPU.
func Reserved() cpuset.CPUSet { return cpuset.New(Host.CPUs.List()[0]) }

// Plugin is one nri-cpualign deployment of the suite: a config, a state dir
// and a log that survive restarts of its process.
type Plugin struct {
	Dir        string // config.toml, state/, plugin.log
	ConfigPath string
	StateDir   string
	LogPath    string
	Proc       *framework.PluginProcess
}

// NewPlugin writes a config for a new deployment under WorkDir/name.
func NewPlugin(name string, extra ...string) *Plugin {
	GinkgoHelper()
	dir := filepath.Join(WorkDir, name)
	p := &Plugin{Dir: dir, ConfigPath: filepath.Join(dir, "config.toml"), StateDir: filepath.Join(dir, "state"), LogPath: filepath.Join(dir, "plugin.log")}
	Expect(os.MkdirAll(p.StateDir, 0o755)).To(Succeed())
	Expect(os.WriteFile(p.ConfigPath, []byte(PluginConfig(p.StateDir, extra...)), 0o644)).To(Succeed())
	DeferCleanup(p.Kill)
	return p
}

// Kill SIGKILLs the current plugin process, if any, and waits for it.
func (p *Plugin) Kill() {
	if p.Proc != nil {
		p.Proc.Kill()
	}
}

// Start starts the plugin process and waits until the runtime logs it as
// connected and synchronized. The process is killed when the node that
// called NewPlugin ends (and by Pdeathsig if the test binary dies first).
func (p *Plugin) Start(ctx context.Context) {
	GinkgoHelper()
	Expect(p.Proc == nil || !p.Proc.Running()).To(BeTrue(), "plugin already running")
	offset := framework.FileSize(Env.RuntimeLog)
	proc, err := framework.StartPlugin(PluginBin, []string{"run", "--config", p.ConfigPath}, p.LogPath, os.Getenv("NRI_CPUALIGN_E2E_PIDFILE"))
	Expect(err).NotTo(HaveOccurred())
	p.Proc = proc
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := framework.WaitForLine(wctx, Env.RuntimeLog, offset, PluginName, SynchronizedLine)
		done <- err
	}()
	select {
	case err := <-done:
		Expect(err).NotTo(HaveOccurred(), "plugin did not synchronize; its log:\n%s", p.LogTail())
	case <-proc.Exited():
		Fail(fmt.Sprintf("plugin exited during start (%v); its log:\n%s", proc.ExitErr(), p.LogTail()))
	}
}

// SynchronizedLine is what both runtimes log (NRI's adaptation, which
// both embed) once a plugin is registered and synchronized, after its name.
const SynchronizedLine = "connected and synchronized"

// WaitSynchronized waits for the runtime to log the plugin as synchronized
// again after offset (a reconnect).
func (p *Plugin) WaitSynchronized(ctx context.Context, offset int64, timeout time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	_, err := framework.WaitForLine(wctx, Env.RuntimeLog, offset, PluginName, SynchronizedLine)
	return err
}

// LogTail is the last 60 lines of the plugin's log, for failure messages.
func (p *Plugin) LogTail() string {
	b, _ := os.ReadFile(p.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-60):], "\n")
}

// Pods is a set of pods that outlive a single spec (e.g. across the specs of
// an Ordered container); RemoveAll removes them and their cgroups.
type Pods struct{ list []*framework.Pod }

// Run runs a pod for ctrs (their resources decide its QoS class) and adds it
// to the set.
func (ps *Pods) Run(ctx context.Context, name string, ctrs ...framework.Resources) *framework.Pod {
	GinkgoHelper()
	p, err := CRI.RunPod(ctx, framework.PodSpec{Name: name, UID: NewPodUID(name), Containers: ctrs})
	Expect(err).NotTo(HaveOccurred())
	ps.list = append(ps.list, p)
	return p
}

// RunWith runs a one-container pod and returns its started container.
func (ps *Pods) RunWith(ctx context.Context, name string, r framework.Resources) *framework.Container {
	GinkgoHelper()
	return RunContainer(ctx, ps.Run(ctx, name, r), name, r)
}

// Remove removes one pod of the set now.
func (ps *Pods) Remove(ctx context.Context, p *framework.Pod) {
	GinkgoHelper()
	Expect(CRI.RemovePod(ctx, p.ID, p.CgroupParent())).To(Succeed())
	for i, q := range ps.list {
		if q == p {
			ps.list = append(ps.list[:i], ps.list[i+1:]...)
			break
		}
	}
}

// RemoveAll removes every pod of the set, newest first.
func (ps *Pods) RemoveAll(ctx context.Context) {
	GinkgoHelper()
	for len(ps.list) > 0 {
		ps.Remove(ctx, ps.list[len(ps.list)-1])
	}
}
