//go:build e2e

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/stub"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/types"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
)

// repoRoot is the repository, seen from the package directory go test runs in.
const repoRoot = "../.."

// env is what scripts/e2e-cluster.sh exports: the cluster (kubectl, its
// kubeconfig, the node, a work directory) and the test runtime
// (the environment setup-containerd.sh or setup-crio.sh writes).
type env struct {
	Kubectl, Kubeconfig, Node, Dir string
	// Runtime is "containerd" or "crio"; RuntimeLog its log file.
	Runtime, RuntimeLog string
	NRISock, TestImage  string
	// containerd: ctr and its address, to import the image.
	Ctr, ContainerdAddress string
	// CRI-O: its containers-storage ("driver@root+runroot"), for skopeo.
	CrioStore string
	// Helm is the helm binary (scripts/setup-helm.sh), for the chart.
	Helm string
}

// The runtimes the suite runs against (setup-crio.sh sets E2E_RUNTIME=crio).
const (
	containerd = "containerd"
	crio       = "crio"
)

var (
	// Env is the cluster and runtime under test; valid when missing is "".
	Env env
	// missing says why the suite cannot run here ("" when it can).
	missing string
	// HostCPUs is this machine's online CPUs.
	HostCPUs cpuset.CPUSet
)

func TestCluster(t *testing.T) {
	RegisterFailHandler(Fail)
	rt := os.Getenv("E2E_RUNTIME")
	if rt == "" {
		rt = containerd
	}
	RunSpecs(t, "nri-cpualign DaemonSet on a real control plane ("+rt+")")
}

var _ = BeforeSuite(func() {
	type envVar struct {
		name string
		dst  *string
	}
	vars := []envVar{
		{"E2E_KUBECTL", &Env.Kubectl}, {"KUBECONFIG", &Env.Kubeconfig}, {"E2E_CLUSTER_NODE", &Env.Node},
		{"E2E_CLUSTER_DIR", &Env.Dir}, {"NRI_SOCKET", &Env.NRISock}, {"E2E_TEST_IMAGE", &Env.TestImage},
	}
	Env.Runtime = containerd
	if os.Getenv("E2E_RUNTIME") == crio {
		Env.Runtime = crio
		vars = append(vars, envVar{"E2E_CRIO_LOG", &Env.RuntimeLog}, envVar{"E2E_CRIO_STORE", &Env.CrioStore})
	} else {
		vars = append(vars, envVar{"E2E_CTR", &Env.Ctr}, envVar{"CONTAINERD_ADDRESS", &Env.ContainerdAddress},
			envVar{"E2E_CONTAINERD_LOG", &Env.RuntimeLog})
	}
	if _, ok := install.(*helmInstaller); ok {
		vars = append(vars, envVar{"E2E_HELM", &Env.Helm})
	}
	var unset []string
	for _, v := range vars {
		*v.dst = os.Getenv(v.name)
		if *v.dst == "" {
			unset = append(unset, v.name)
		}
	}
	if len(unset) > 0 {
		missing = "no cluster: " + strings.Join(unset, ", ") + " not set (make e2e-cluster starts the control plane, the kubelet and containerd, then runs this suite)"
		return
	}
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	Expect(err).NotTo(HaveOccurred())
	HostCPUs, err = cpuset.Parse(strings.TrimSpace(string(b)))
	Expect(err).NotTo(HaveOccurred())
})

// requireCluster skips the calling node when the environment is missing.
func requireCluster() {
	if missing != "" {
		Skip(missing)
	}
}

// kubectl runs kubectl against the test cluster, stdin from in (may be
// ""), and returns its standard output; the error carries standard error.
func kubectlIn(ctx context.Context, in string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, Env.Kubectl, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+Env.Kubeconfig)
	var out, stderr bytes.Buffer
	cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(in), &out, &stderr
	if err := cmd.Run(); err != nil {
		return out.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out.String(), nil
}

func kubectl(ctx context.Context, args ...string) (string, error) { return kubectlIn(ctx, "", args...) }

// mustKubectl is kubectl that fails the spec on an error.
func mustKubectl(ctx context.Context, args ...string) string {
	GinkgoHelper()
	out, err := kubectl(ctx, args...)
	Expect(err).NotTo(HaveOccurred())
	return out
}

// getJSON decodes `kubectl ARGS -o json` into obj.
func getJSON(ctx context.Context, obj any, args ...string) error {
	out, err := kubectl(ctx, append(args, "-o", "json")...)
	if err != nil {
		return err
	}
	return json.Unmarshal([]byte(out), obj)
}

// apply pipes the objects, as JSON documents, to `kubectl apply -f -`.
func apply(ctx context.Context, objs ...any) {
	GinkgoHelper()
	var b strings.Builder
	for _, o := range objs {
		j, err := json.Marshal(o)
		Expect(err).NotTo(HaveOccurred())
		b.Write(j)
		b.WriteString("\n")
	}
	_, err := kubectlIn(ctx, b.String(), "apply", "-f", "-")
	Expect(err).NotTo(HaveOccurred())
}

// podsOf lists the pods matching a label selector in namespace ns that are
// not being deleted.
func podsOf(ctx context.Context, ns, selector string) ([]corev1.Pod, error) {
	var list corev1.PodList
	if err := getJSON(ctx, &list, "-n", ns, "get", "pods", "-l", selector); err != nil {
		return nil, err
	}
	var live []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			live = append(live, p)
		}
	}
	return live, nil
}

// runningPod returns the one live pod matching selector once it runs and
// its containers are ready.
func runningPod(g Gomega, ctx context.Context, ns, selector string) corev1.Pod {
	pods, err := podsOf(ctx, ns, selector)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(pods).To(HaveLen(1), "pods of %s", selector)
	p := pods[0]
	g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), "pod %s: %s", p.Name, podSummary(p))
	g.Expect(isReady(p)).To(BeTrue(), "pod %s not Ready: %s", p.Name, podSummary(p))
	return p
}

func isReady(p corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podSummary is a pod's phase, conditions and container states, for
// failure messages.
func podSummary(p corev1.Pod) string {
	b, _ := json.Marshal(struct {
		Phase      corev1.PodPhase
		Conditions []corev1.PodCondition
		Containers []corev1.ContainerStatus
	}{p.Status.Phase, p.Status.Conditions, p.Status.ContainerStatuses})
	return string(b)
}

// containerID is the runtime's id of the pod's container NAME.
func containerID(p corev1.Pod, name string) string {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == name {
			_, id, _ := strings.Cut(s.ContainerID, "://")
			return id
		}
	}
	return ""
}

// cgroupDir is the container's cpuset cgroup on the host, where the
// kubelet's cgroupfs driver puts it: /kubepods[/burstable|/besteffort]/pod<uid>/<id>
// (CRI-O: crio-<id>).
func cgroupDir(p corev1.Pod, id string) string {
	if Env.Runtime == crio {
		id = "crio-" + id
	}
	parent := "kubepods"
	switch p.Status.QOSClass {
	case corev1.PodQOSBurstable:
		parent += "/burstable"
	case corev1.PodQOSBestEffort:
		parent += "/besteffort"
	}
	rel := path.Join(parent, "pod"+string(p.UID), id)
	if v1 := filepath.Join("/sys/fs/cgroup/cpuset", rel); dirExists(v1) {
		return v1
	}
	return filepath.Join("/sys/fs/cgroup", rel)
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// equalCPUs matches a CPU set equal to want.
func equalCPUs(want cpuset.CPUSet) types.GomegaMatcher {
	return WithTransform(func(c cpuset.CPUSet) string { return c.String() }, Equal(want.String()))
}

// statusCPUs parses Cpus_allowed_list out of a /proc/<pid>/status text.
func statusCPUs(status string) (cpuset.CPUSet, error) {
	for _, l := range strings.Split(status, "\n") {
		if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
			return cpuset.Parse(strings.TrimSpace(v))
		}
	}
	return cpuset.New(), fmt.Errorf("no Cpus_allowed_list in %q", status)
}

// cpusOf returns the CPUs the pod's container "app" runs on, read three
// ways that must agree: inside the container (`kubectl exec ... grep
// Cpus_allowed_list /proc/1/status`, the README's check), on the host for
// its process (/proc/<pid>/status, pid from the cgroup) and its cgroup's
// cpuset.cpus.
func cpusOf(g Gomega, ctx context.Context, p corev1.Pod) cpuset.CPUSet {
	out, err := kubectl(ctx, "-n", p.Namespace, "exec", p.Name, "-c", "app", "--", "grep", "Cpus_allowed_list", "/proc/1/status")
	g.Expect(err).NotTo(HaveOccurred())
	inside, err := statusCPUs(out)
	g.Expect(err).NotTo(HaveOccurred())

	id := containerID(p, "app")
	g.Expect(id).NotTo(BeEmpty(), "pod %s has no container id: %s", p.Name, podSummary(p))
	return checkHost(g, p, id, inside)
}

// checkHost compares the container's process and cgroup on the host with
// want, and returns want.
func checkHost(g Gomega, p corev1.Pod, id string, want cpuset.CPUSet) cpuset.CPUSet {
	dir := cgroupDir(p, id)
	cg, err := readCPUs(dir, "cpuset.cpus")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cg.String()).To(Equal(want.String()), "cgroup %s/cpuset.cpus of %s/%s", dir, p.Name, id)
	procs, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	g.Expect(err).NotTo(HaveOccurred())
	pids := strings.Fields(string(procs))
	g.Expect(pids).NotTo(BeEmpty(), "no process in %s", dir)
	for _, pid := range pids {
		st, err := os.ReadFile("/proc/" + pid + "/status")
		if err != nil {
			continue // exited meanwhile
		}
		task, err := statusCPUs(string(st))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(task.String()).To(Equal(want.String()), "/proc/%s/status of %s/%s on the host", pid, p.Name, id)
	}
	return want
}

func readCPUs(dir, file string) (cpuset.CPUSet, error) {
	b, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil {
		return cpuset.New(), err
	}
	return cpuset.Parse(strings.TrimSpace(string(b)))
}

// pluginGet GETs a path of the plugin's metrics endpoint, on the node's
// loopback where the ConfigMap's metrics_address puts it (the pod shares the
// host network).
func pluginGet(ctx context.Context, p string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddress+p, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// pluginState is the plugin's /state document.
func pluginState(g Gomega, ctx context.Context) observe.StateView {
	code, body, err := pluginGet(ctx, "/state")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK), "/state: %s", body)
	var st observe.StateView
	g.Expect(json.Unmarshal([]byte(body), &st)).To(Succeed())
	return st
}

// metric returns the value of an unlabelled metric from /metrics.
func metric(g Gomega, ctx context.Context, name string) float64 {
	code, body, err := pluginGet(ctx, "/metrics")
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(code).To(Equal(http.StatusOK))
	for _, l := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			g.Expect(err).NotTo(HaveOccurred())
			return f
		}
	}
	g.Expect(body).To(ContainSubstring(name+" "), "metric %s not served", name)
	return 0
}

// fileSize is the current size of a log file, the offset to search from.
func fileSize(p string) int64 {
	st, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return st.Size()
}

// hasLine reports whether a line of text contains every one of substrs
// (the runtimes quote the plugin's name differently in their logs).
func hasLine(text string, substrs ...string) bool {
	for _, l := range strings.Split(text, "\n") {
		all := true
		for _, s := range substrs {
			all = all && strings.Contains(l, s)
		}
		if all {
			return true
		}
	}
	return false
}

// logSince is a log file from offset on.
func logSince(p string, offset int64) string {
	b, err := os.ReadFile(p)
	if err != nil || int64(len(b)) < offset {
		return ""
	}
	return string(b[offset:])
}

// yamlDocs splits kubectl kustomize's output into its objects.
func yamlDocs(g Gomega, out string) []map[string]any {
	var docs []map[string]any
	for _, d := range strings.Split(out, "\n---\n") {
		var m map[string]any
		g.Expect(yaml.Unmarshal([]byte(d), &m)).To(Succeed())
		if m != nil {
			docs = append(docs, m)
		}
	}
	return docs
}

// pluginProcesses lists the pids of processes running a binary named
// nri-cpualign (the DaemonSet pod's plugin, seen from the host).
func pluginProcesses() []int {
	var pids []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, err := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		if err != nil || path.Base(strings.TrimSuffix(exe, " (deleted)")) != "nri-cpualign" {
			continue
		}
		st, err := os.ReadFile(filepath.Join("/proc", e.Name(), "status"))
		if err == nil && !strings.Contains(string(st), "\nState:\tZ") {
			pids = append(pids, pid)
		}
	}
	return pids
}

// createNamespace creates namespace ns with the suite's label and returns
// once the controller manager has made its "default" service account: the
// API server refuses pods in a namespace without it (the service account
// admission plugin), and the controller creates it asynchronously, seconds
// late on a cold machine. The namespace is deleted when the calling node's
// cleanups run.
func createNamespace(ctx context.Context, ns string) {
	GinkgoHelper()
	mustKubectl(ctx, "create", "namespace", ns)
	DeferCleanup(func(ctx SpecContext) {
		_, err := kubectl(ctx, "delete", "namespace", ns, "--wait=true", "--timeout=90s")
		Expect(err).NotTo(HaveOccurred())
	}, NodeTimeout(2*time.Minute))
	mustKubectl(ctx, "label", "namespace", ns, "nri-cpualign-e2e=true")
	// kubectl wait --for=create watches, so it returns as soon as the
	// object exists; the bound is the condition's, named if it is missed.
	_, err := kubectl(ctx, "wait", "-n", ns, "--for=create", "serviceaccount/default", "--timeout=60s")
	Expect(err).NotTo(HaveOccurred(), "namespace %s: the controller manager did not create its default service account within 60 s", ns)
}

// runtimeLogTimeout bounds the waits for a line of the runtime's log.
const runtimeLogTimeout = 30 * time.Second

// waitRuntimeLog waits until the runtime's log, from offset on, has a line
// with every one of substrs. The runtime writes "plugin X connected and
// synchronized" only after it has added X to the plugins it calls (the
// plugin's own /healthz turns true a moment earlier, inside its
// Synchronize), and "connection to plugin X closed" only once it has
// noticed the connection gone (after the process exits): the line is the
// condition itself.
func waitRuntimeLog(ctx context.Context, offset int64, substrs ...string) {
	GinkgoHelper()
	Eventually(func() bool { return hasLine(logSince(Env.RuntimeLog, offset), substrs...) }).
		WithContext(ctx).WithTimeout(runtimeLogTimeout).WithPolling(100*time.Millisecond).
		Should(BeTrue(), "%s logged no line with %q within %s (%s)", Env.Runtime, substrs, runtimeLogTimeout, Env.RuntimeLog)
}

// startStub connects a test NRI plugin (idx-name) to the runtime for the
// rest of the calling node, and returns once the runtime logs it connected
// and synchronized: stub.Start returns after Configure, before the runtime
// has synchronized it and added it to the plugins it calls.
func startStub(ctx context.Context, plugin any, name, idx string) {
	GinkgoHelper()
	s, err := stub.New(plugin, stub.WithSocketPath(Env.NRISock), stub.WithPluginName(name), stub.WithPluginIdx(idx))
	Expect(err).NotTo(HaveOccurred(), "NRI plugin %s-%s", idx, name)
	offset := fileSize(Env.RuntimeLog)
	// The stub serves until Stop, not until a spec's context ends.
	Expect(s.Start(context.Background())).To(Succeed(), "NRI plugin %s-%s", idx, name)
	DeferCleanup(s.Stop)
	waitRuntimeLog(ctx, offset, idx+"-"+name, "connected and synchronized")
}
