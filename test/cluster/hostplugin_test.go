//go:build e2e

package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// waitNodeEmpty waits until the DaemonSet's plugin and every pod on the
// node are gone. The DaemonSet container uninstalls the plugin (or, when it
// failed, removes the node label) and deletes its namespace; a Describe
// that runs its own plugin on the host needs both gone: one plugin per
// runtime, and no shared-pool container it did not place.
func waitNodeEmpty(ctx SpecContext) {
	Eventually(func(g Gomega) {
		g.Expect(pluginProcesses()).To(BeEmpty(), "an nri-cpualign process (the DaemonSet's) still runs")
		var pods corev1.PodList
		g.Expect(getJSON(ctx, &pods, "get", "pods", "-A", "--field-selector", "spec.nodeName="+Env.Node)).To(Succeed())
		var names []string
		for _, p := range pods.Items {
			names = append(names, p.Namespace+"/"+p.Name)
		}
		g.Expect(names).To(BeEmpty(), "pods on node %s", Env.Node)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// startHostPlugin runs the plugin as a process on the host, built from this
// checkout, with deploy/'s configuration and settings over it (TOML values)
// on top of the host's paths, its metrics on hostMetrics and reconcile off
// (so that no repair pass hides a wrong move). It returns once the plugin
// is connected, synchronized and ready says so, and the runtime has logged
// the connection. It returns the plugin's log and configuration; the
// plugin is killed when the container's cleanups run.
func startHostPlugin(ctx SpecContext, dir string, settings map[string]string, ready func(Gomega, observe.StateView)) (logPath string, cfg config.Config) {
	if Env.Runtime == crio && !canLowerOOMScore() {
		startZeroNegativeOOM(ctx)
	}
	stateDir := filepath.Join(dir, "state")
	Expect(os.MkdirAll(stateDir, 0o755)).To(Succeed())
	values := map[string]string{
		"state_dir":        fmt.Sprintf("%q", stateDir),
		"sysfs_root":       `"/sys"`,
		"cgroup_root":      `"/sys/fs/cgroup"`,
		"socket_path":      fmt.Sprintf("%q", Env.NRISock),
		"metrics_address":  fmt.Sprintf("%q", hostMetrics),
		"reconcile_period": `"0s"`,
	}
	for k, v := range settings {
		values[k] = v
	}
	base, err := os.ReadFile(filepath.Join(repoRoot, "deploy/config.toml"))
	Expect(err).NotTo(HaveOccurred())
	doc := setTOML(string(base), values)
	cfg, err = config.Load([]byte(doc))
	Expect(err).NotTo(HaveOccurred())
	cfgPath := filepath.Join(dir, "config.toml")
	Expect(os.WriteFile(cfgPath, []byte(doc), 0o644)).To(Succeed())

	bin := filepath.Join(dir, "nri-cpualign")
	build := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/nri-cpualign")
	build.Dir = repoRoot
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build:\n%s", out)
	logPath = filepath.Join(dir, "plugin.log")
	offset := fileSize(Env.RuntimeLog)
	plugin, err := framework.StartPlugin(bin, []string{"run", "--config", cfgPath}, logPath, "")
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(plugin.Kill)
	Eventually(func(g Gomega) {
		g.Expect(plugin.Running()).To(BeTrue(), "the plugin exited")
		st := hostState(g, ctx)
		g.Expect(st.Connected && st.Synchronized).To(BeTrue())
		ready(g, st)
	}).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(200*time.Millisecond).Should(Succeed(),
		"plugin log:\n%s", logSince(logPath, 0))
	// The plugin's own state turns synchronized inside its Synchronize,
	// a moment before the runtime adds it to the plugins it calls.
	waitRuntimeLog(ctx, offset, nriName, "connected and synchronized")
	return logPath, cfg
}
