//go:build e2e

package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/cpuset"
	"sigs.k8s.io/yaml"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

const (
	// pluginNS is deploy/'s namespace.
	pluginNS = "nri-cpualign"
	// testNS holds the workloads; the label lets scripts/lib-cluster.sh
	// delete it when a run ends early.
	testNS = "cpualign-e2e"
	// pluginSelector selects the DaemonSet's pods.
	pluginSelector = "app.kubernetes.io/name=nri-cpualign"
	// nodeLabel is the README's opt-in label.
	nodeLabel = "nri-cpualign/enabled"
	// nriName is how the runtime names the plugin in its log.
	nriName = daemon.PluginIdx + "-" + daemon.PluginName
)

// metricsAddress is the ConfigMap's metrics_address (the pod shares the
// host network, so the node's loopback); set in BeforeAll.
var metricsAddress string

// workload builds a one-replica Deployment of the busybox image: host
// network (the node has no CNI), the image imported locally (never pulled),
// Recreate so that a restart never runs two pods side by side.
func workload(name string, cpuReq, cpuLim, mem string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	one := int32(1)
	return &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: testNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: &one,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       podSpec(resources(cpuReq, cpuLim, mem)),
			},
		},
	}
}

// resources: requests cpuReq and mem, limits cpuLim and mem ("" leaves a
// value out; all "" is BestEffort).
func resources(cpuReq, cpuLim, mem string) corev1.ResourceRequirements {
	r := corev1.ResourceRequirements{Requests: corev1.ResourceList{}, Limits: corev1.ResourceList{}}
	if cpuReq != "" {
		r.Requests[corev1.ResourceCPU] = resource.MustParse(cpuReq)
	}
	if cpuLim != "" {
		r.Limits[corev1.ResourceCPU] = resource.MustParse(cpuLim)
	}
	if mem != "" {
		r.Requests[corev1.ResourceMemory] = resource.MustParse(mem)
		r.Limits[corev1.ResourceMemory] = resource.MustParse(mem)
	}
	return r
}

func podSpec(r corev1.ResourceRequirements) corev1.PodSpec {
	no := false
	grace := int64(5)
	return corev1.PodSpec{
		HostNetwork:                   true,
		AutomountServiceAccountToken:  &no,
		EnableServiceLinks:            &no,
		TerminationGracePeriodSeconds: &grace,
		Containers: []corev1.Container{{
			Name: "app", Image: Env.TestImage, ImagePullPolicy: corev1.PullNever, Resources: r,
		}},
	}
}

// The path an operator takes, on a one-node cluster whose kubelet runs
// with the CPU, topology and memory managers at none/None and no CPU
// reservation: the plugin's ConfigMap reserves one CPU.
var _ = Describe("the DaemonSet installed as the README says", Ordered, Serial, func() {
	var (
		stateDir   string
		reserved   cpuset.CPUSet // the plugin's reservation: CPU 0 (worked out below)
		pinnedCPUs cpuset.CPUSet // the Guaranteed Deployment's exclusive CPU
		baseConfig string        // config.toml as deploy/ (and the chart, by default) has it
	)

	pluginLogs := func(ctx context.Context) string {
		out, err := kubectl(ctx, "-n", pluginNS, "logs", "ds/nri-cpualign", "--tail=40")
		if err != nil {
			return err.Error()
		}
		return out
	}

	// waitPluginReady returns the DaemonSet's one pod once the DaemonSet
	// controller has seen the current template and counted the node, the
	// node's pod runs that template, and it is the one live pod, Running
	// and Ready (the readiness probe is /healthz: connected to the runtime
	// and synchronized). Not kubectl rollout status: until the controller
	// has counted a node labelled a moment ago, nothing is desired and
	// rollout status returns at once.
	waitPluginReady := func(ctx context.Context) corev1.Pod {
		GinkgoHelper()
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			var ds appsv1.DaemonSet
			g.Expect(getJSON(ctx, &ds, "-n", pluginNS, "get", "daemonset", "nri-cpualign")).To(Succeed())
			s := ds.Status
			g.Expect(s.ObservedGeneration).To(Equal(ds.Generation), "the DaemonSet controller has not seen generation %d", ds.Generation)
			g.Expect(s.DesiredNumberScheduled).To(Equal(int32(1)), "the DaemonSet controller has not counted node %s", Env.Node)
			g.Expect(s.UpdatedNumberScheduled).To(Equal(int32(1)), "no pod of the current template on node %s", Env.Node)
			g.Expect(s.NumberAvailable).To(Equal(int32(1)), "the DaemonSet's pod is not available")
			pod = runningPod(g, ctx, pluginNS, pluginSelector)
		}).WithContext(ctx).WithTimeout(150*time.Second).WithPolling(time.Second).Should(Succeed(),
			func() string { return "the DaemonSet's pod did not turn Ready; plugin log:\n" + pluginLogs(ctx) })
		return pod
	}

	// expectPluginLog waits for a line matching re in the plugin pod's
	// log: the runtime copies a container's output into its log file
	// asynchronously, so a line the plugin wrote before answering can
	// reach kubectl logs after the effect it describes.
	expectPluginLog := func(ctx context.Context, re string) {
		GinkgoHelper()
		Eventually(func() (string, error) { return kubectl(ctx, "-n", pluginNS, "logs", "ds/nri-cpualign") }).
			WithContext(ctx).WithTimeout(30*time.Second).WithPolling(500*time.Millisecond).
			Should(MatchRegexp(re), "the plugin pod's log (kubectl logs) has no line matching %s within 30 s", re)
	}

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		if HostCPUs.Size() < 2 {
			Skip(fmt.Sprintf("needs 2 CPUs (the ConfigMap reserves one, a Guaranteed pod takes another); this machine has %s", HostCPUs))
		}

		// The operator's ConfigMap decides what the plugin does; read the
		// values the specs depend on from it.
		data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/config.toml"))
		Expect(err).NotTo(HaveOccurred())
		baseConfig = string(data)
		cfg, err := config.Load([]byte(baseConfig))
		Expect(err).NotTo(HaveOccurred())
		Expect(cfg.CPUManagerPolicy).To(Equal("static"))
		Expect(cfg.ReservedCPUCount).To(Equal(1), "the specs below expect deploy/'s reservation of one CPU")
		Expect(strings.TrimSpace(cfg.ReservedSystemCPUs)).To(BeEmpty())
		metricsAddress = cfg.MetricsAddress
		// reserved_cpu_count = 1: the kubelet's rule takes whole cores,
		// lowest-numbered first, and one CPU of core 0 is CPU 0.
		reserved = cpuset.New(HostCPUs.List()[0])

		// The node: Ready with no taint once the kubelet reports the
		// runtime's network ready (a placeholder CNI config; every pod
		// here uses the host network).
		Eventually(func(g Gomega) {
			var node corev1.Node
			g.Expect(getJSON(ctx, &node, "get", "node", Env.Node)).To(Succeed())
			ready := false
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					ready = c.Status == corev1.ConditionTrue
					g.Expect(ready).To(BeTrue(), "node %s: %s: %s", Env.Node, c.Reason, c.Message)
				}
			}
			g.Expect(ready).To(BeTrue(), "node %s has no Ready condition", Env.Node)
			g.Expect(node.Spec.Taints).To(BeEmpty())
			g.Expect(node.Labels).To(HaveKeyWithValue("kubernetes.io/os", "linux"))
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())

		if Env.Runtime == crio && !canLowerOOMScore() {
			startZeroNegativeOOM(ctx)
			GinkgoWriter.Printf("root cannot lower oom_score_adj here (no CAP_SYS_RESOURCE): a test NRI plugin makes CRI-O's negative scores 0, as containerd's restrict_oom_score_adj does\n")
		}

		// Cleanups run last first: the namespace goes, then the label.
		DeferCleanup(func(ctx SpecContext) {
			_, err := kubectl(ctx, "label", "node", Env.Node, nodeLabel+"-")
			Expect(err).NotTo(HaveOccurred())
		}, NodeTimeout(time.Minute))
		createNamespace(ctx, testNS)
	}, NodeTimeout(3*time.Minute))

	It("installs with make image, the archive imported into the runtime, "+install.name()+" and the node label; the pod turns Ready and the runtime logs the plugin connected and synchronized", func(ctx SpecContext) {
		// 1. The image, as the README builds and imports it.
		archive := filepath.Join(Env.Dir, "nri-cpualign-image.tar")
		out, err := exec.CommandContext(ctx, "make", "-s", "-C", repoRoot, "image", "IMAGE_ARCHIVE="+archive).CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "make image:\n%s", out)
		var image string
		{
			data, err := os.ReadFile(filepath.Join(repoRoot, "deploy/daemonset.yaml"))
			Expect(err).NotTo(HaveOccurred())
			var ds appsv1.DaemonSet
			Expect(yaml.UnmarshalStrict(data, &ds)).To(Succeed())
			image = ds.Spec.Template.Spec.Containers[0].Image
		}
		switch Env.Runtime {
		case containerd:
			out, err = exec.CommandContext(ctx, Env.Ctr, "-a", Env.ContainerdAddress, "-n", "k8s.io", "images", "import", archive).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), "ctr images import:\n%s", out)
			// The CRI plugin sees an imported image once it labels it managed.
			Eventually(func(g Gomega) {
				out, err := exec.CommandContext(ctx, Env.Ctr, "-a", Env.ContainerdAddress, "-n", "k8s.io", "images", "ls", "name=="+image).CombinedOutput()
				g.Expect(err).NotTo(HaveOccurred(), "%s", out)
				g.Expect(string(out)).To(ContainSubstring("io.cri-containerd.image=managed"))
			}).WithContext(ctx).WithTimeout(20 * time.Second).Should(Succeed())
		case crio:
			// The README's skopeo line, into the test instance's store.
			out, err = exec.CommandContext(ctx, "skopeo", "copy", "-q", "oci-archive:"+archive,
				"containers-storage:["+Env.CrioStore+"]"+image).CombinedOutput()
			Expect(err).NotTo(HaveOccurred(), "skopeo copy:\n%s", out)
		}

		// 2. deploy/ (a kustomize overlay) or the chart (helm install
		// --set), whose only differences are the test runtime's NRI socket
		// directory and a fresh state directory (checked: everything else
		// renders identically).
		stateDir = filepath.Join(Env.Dir, "plugin-state")
		offset := fileSize(Env.RuntimeLog)
		install.install(ctx, filepath.Dir(Env.NRISock), stateDir)

		// 3. Opt-in: without the label the DaemonSet places no pod.
		Eventually(func(g Gomega) {
			var ds appsv1.DaemonSet
			g.Expect(getJSON(ctx, &ds, "-n", pluginNS, "get", "daemonset", "nri-cpualign")).To(Succeed())
			g.Expect(ds.Status.ObservedGeneration).To(Equal(ds.Generation))
			g.Expect(ds.Status.DesiredNumberScheduled).To(BeZero(), "a pod was placed on an unlabelled node")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		mustKubectl(ctx, "label", "node", Env.Node, nodeLabel+"=true")

		// 4. What to check afterwards.
		pod := waitPluginReady(ctx)
		Expect(pod.Spec.NodeName).To(Equal(Env.Node))
		Expect(pod.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
		Expect(mustKubectl(ctx, "-n", pluginNS, "get", "pods", "-o", "wide")).To(MatchRegexp(`nri-cpualign-\S+\s+1/1\s+Running\s+0\s`))
		waitRuntimeLog(ctx, offset, nriName, "connected and synchronized")
		code, body, err := pluginGet(ctx, "/healthz")
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusOK), "/healthz: %s", body)
		expectPluginLog(ctx, "detected CPU topology")
		expectPluginLog(ctx, "effective configuration")
		expectPluginLog(ctx, "synchronized with the runtime")
		st := pluginState(Default, ctx)
		Expect(st.Connected && st.Synchronized).To(BeTrue())
		Expect(st.Reserved).To(Equal(reserved.String()))
	}, SpecTimeout(8*time.Minute)) // make image builds the binary (cold: a minute or more)

	It("gives a Guaranteed Deployment's pod an exclusive CPU and shrinks the shared pods, the plugin's own included", func(ctx SpecContext) {
		apply(ctx, workload("shared", "100m", "500m", "32Mi"))
		var shared corev1.Pod
		Eventually(func(g Gomega) {
			shared = runningPod(g, ctx, testNS, "app=shared")
			g.Expect(cpusOf(g, ctx, shared)).To(equalCPUs(HostCPUs), "nothing is exclusive yet")
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

		apply(ctx, workload("pinned", "1", "1", "32Mi"))
		var pinned corev1.Pod
		Eventually(func(g Gomega) {
			pinned = runningPod(g, ctx, testNS, "app=pinned")
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
		Expect(pinned.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
		// One CPU, never the reserved one: on two CPUs that is CPU 1.
		pinnedCPUs = cpusOf(Default, ctx, pinned)
		Expect(pinnedCPUs.Size()).To(Equal(1))
		Expect(pinnedCPUs.Intersection(reserved).IsEmpty()).To(BeTrue(), "exclusive CPU %s is reserved (%s)", pinnedCPUs, reserved)
		pool := HostCPUs.Difference(pinnedCPUs)
		// The shared pod left it at once (the update travels in the
		// CreateContainer answer), and so did the plugin's own container.
		Expect(cpusOf(Default, ctx, shared)).To(equalCPUs(pool))
		var plugin corev1.Pod
		Eventually(func(g Gomega) { plugin = runningPod(g, ctx, pluginNS, pluginSelector) }).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
		checkHost(Default, plugin, containerID(plugin, "nri-cpualign"), pool)

		st := pluginState(Default, ctx)
		var found bool
		for _, c := range st.Containers {
			if c.PodUID == string(pinned.UID) {
				found = true
				Expect(c.Exclusive).To(BeTrue())
				Expect(c.CPUs).To(Equal(pinnedCPUs.String()))
			}
		}
		Expect(found).To(BeTrue(), "/state does not list pod %s", pinned.Name)
		Expect(st.Shared).To(Equal(pool.String()))
		GinkgoWriter.Printf("reserved %s; pod %s exclusive on %s; shared pod %s and the plugin's own container on %s\n",
			reserved, pinned.Name, pinnedCPUs, shared.Name, pool)

		// The placement is one info line in the plugin's log...
		expectPluginLog(ctx, fmt.Sprintf(`msg="container admitted".* container=app cpus=%s exclusive=true .*pod=%s/%s`, pinnedCPUs, testNS, pinned.Name))
		// ...and /state through kubectl port-forward, as the README reads it.
		var viaForward observe.StateView
		Expect(json.Unmarshal([]byte(portForwardGet(ctx, plugin.Name, "/state")), &viaForward)).To(Succeed())
		Expect(viaForward.Containers).To(ContainElement(And(
			HaveField("PodUID", string(pinned.UID)), HaveField("Exclusive", true), HaveField("CPUs", pinnedCPUs.String()))))
	}, SpecTimeout(4*time.Minute))

	It("keeps a Burstable pod resized with kubectl patch --subresource resize on the shared pool before, while and after the resize, in its cgroup and in the runtime's record, while the Guaranteed pod holds its exclusive CPU", func(ctx SpecContext) {
		resizeBurstable(ctx, pinnedCPUs)
	}, SpecTimeout(3*time.Minute))

	It("refuses a pod when the plugin reserves more than the kubelet, and kubectl describe shows InsufficientCPUs; the kubelet's retries leak nothing", func(ctx SpecContext) {
		// With the kubelet reserving nothing and the plugin one CPU, the
		// DaemonSet's 100m keeps the scheduler from placing a second
		// 1-CPU pod on two CPUs; the plugin must be stricter still. Give
		// the pinned CPU back, then reserve every CPU in the plugin (the
		// mismatch the README warns about), as an operator changes the
		// configuration: edit the ConfigMap, restart the DaemonSet.
		mustKubectl(ctx, "-n", testNS, "scale", "deployment/pinned", "--replicas=0")
		Eventually(func(g Gomega) {
			pods, err := podsOf(ctx, testNS, "app=pinned")
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(BeEmpty())
			g.Expect(cpusOf(g, ctx, runningPod(g, ctx, testNS, "app=shared"))).To(equalCPUs(HostCPUs), "the pinned CPU did not come back to the shared pod")
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

		// configure applies it as the operator would (an overlay's
		// config.toml, helm upgrade --set): the configuration's hash in the
		// pod template makes the DaemonSet replace the pod by itself, no
		// rollout restart.
		strict := strings.Replace(baseConfig, "reserved_cpu_count = 1", fmt.Sprintf("reserved_system_cpus = %q", HostCPUs.String()), 1)
		Expect(strict).NotTo(Equal(baseConfig))
		before := waitPluginReady(ctx)
		install.configure(ctx, strict)
		after := waitPluginReady(ctx)
		Expect(after.UID).NotTo(Equal(before.UID), "the configuration change did not replace the plugin's pod")
		const revision = "controller-revision-hash" // the DaemonSet's pod template revision
		Expect(before.Labels[revision]).NotTo(BeEmpty())
		Expect(after.Labels[revision]).NotTo(Equal(before.Labels[revision]), "the pod template did not change")
		Eventually(func(g Gomega) {
			g.Expect(pluginState(g, ctx).Reserved).To(Equal(HostCPUs.String()))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		refused := &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "refused", Namespace: testNS, Labels: map[string]string{"app": "refused"}},
			Spec:       podSpec(resources("1", "1", "32Mi")),
		}
		apply(ctx, refused)
		Eventually(func(g Gomega) {
			var p corev1.Pod
			g.Expect(getJSON(ctx, &p, "-n", testNS, "get", "pod", "refused")).To(Succeed())
			g.Expect(p.Spec.NodeName).To(Equal(Env.Node), "the scheduler did not place it")
			g.Expect(p.Status.ContainerStatuses).To(HaveLen(1), podSummary(p))
			w := p.Status.ContainerStatuses[0].State.Waiting
			g.Expect(w).NotTo(BeNil(), podSummary(p))
			g.Expect(w.Reason).To(Equal("CreateContainerError"))
			g.Expect(w.Message).To(ContainSubstring("InsufficientCPUs"))
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

		// The kubelet retries; after at least two refusals the plugin
		// holds nothing for the pod.
		Eventually(func(g Gomega) {
			var events corev1.EventList
			g.Expect(getJSON(ctx, &events, "-n", testNS, "get", "events", "--field-selector", "involvedObject.name=refused,reason=Failed")).To(Succeed())
			n := int32(0)
			for _, e := range events.Items {
				g.Expect(e.Message).To(ContainSubstring("InsufficientCPUs"))
				n += max(e.Count, 1)
				if e.Series != nil {
					n = max(n, e.Series.Count)
				}
			}
			g.Expect(n).To(BeNumerically(">=", 2), "refusals seen")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(2 * time.Second).Should(Succeed())
		describe := mustKubectl(ctx, "-n", testNS, "describe", "pod", "refused")
		_, events, ok := strings.Cut(describe, "\nEvents:")
		Expect(ok).To(BeTrue(), describe)
		Expect(events).To(MatchRegexp(`Warning\s+Failed\s.*InsufficientCPUs`), "kubectl describe pod refused:\n%s", describe)
		Expect(describe).To(ContainSubstring("CreateContainerError"))
		for _, l := range strings.Split(events, "\n") {
			if strings.Contains(l, "InsufficientCPUs") {
				GinkgoWriter.Printf("kubectl describe pod refused: %s\n", strings.TrimSpace(l))
				break
			}
		}
		expectPluginLog(ctx, fmt.Sprintf(`level=warning msg="container rejected".* pod=%s/refused reason=InsufficientCPUs`, testNS))
		st := pluginState(Default, ctx)
		for _, c := range st.Containers {
			Expect(c.Exclusive).To(BeFalse(), "container %s/%s holds %s", c.Pod, c.Container, c.CPUs)
			Expect(c.Pod).NotTo(Equal("refused"))
		}
		Expect(metric(Default, ctx, "nri_cpualign_exclusive_cpus")).To(BeZero())
		Expect(metric(Default, ctx, "cpu_manager_pinning_errors_total")).To(BeNumerically(">=", 2))

		mustKubectl(ctx, "-n", testNS, "delete", "pod", "refused", "--wait=true", "--timeout=60s")
		// Back to the operator's configuration, rolled out the same way.
		install.configure(ctx, baseConfig)
		waitPluginReady(ctx)
		Eventually(func(g Gomega) {
			g.Expect(pluginState(g, ctx).Reserved).To(Equal(reserved.String()))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	}, SpecTimeout(6*time.Minute))

	It("stops on a node whose label is removed, changing no container, and comes back with its assignments when it is labelled again", func(ctx SpecContext) {
		mustKubectl(ctx, "-n", testNS, "scale", "deployment/pinned", "--replicas=1")
		var pinned, shared corev1.Pod
		Eventually(func(g Gomega) {
			pinned = runningPod(g, ctx, testNS, "app=pinned")
			g.Expect(cpusOf(g, ctx, pinned)).To(equalCPUs(pinnedCPUs), "the exclusive CPU worked out before")
			shared = runningPod(g, ctx, testNS, "app=shared")
			g.Expect(cpusOf(g, ctx, shared)).To(equalCPUs(HostCPUs.Difference(pinnedCPUs)))
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

		// Uninstalling, step 2 for one node.
		offset := fileSize(Env.RuntimeLog)
		mustKubectl(ctx, "label", "node", Env.Node, nodeLabel+"-")
		Eventually(func(g Gomega) {
			pods, err := podsOf(ctx, pluginNS, pluginSelector)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(pods).To(BeEmpty())
			g.Expect(pluginProcesses()).To(BeEmpty())
		}).WithContext(ctx).WithTimeout(60*time.Second).Should(Succeed(), "the plugin still runs on the unlabelled node")
		waitRuntimeLog(ctx, offset, "connection to plugin", nriName, "closed")
		Consistently(func(g Gomega) {
			g.Expect(cpusOf(g, ctx, pinned)).To(equalCPUs(pinnedCPUs))
			g.Expect(cpusOf(g, ctx, shared)).To(equalCPUs(HostCPUs.Difference(pinnedCPUs)))
		}).WithContext(ctx).WithTimeout(3 * time.Second).WithPolling(time.Second).Should(Succeed())

		// Labelled again: the new pod starts from the checkpoint in the
		// state hostPath and reports the same assignment.
		offset = fileSize(Env.RuntimeLog)
		mustKubectl(ctx, "label", "node", Env.Node, nodeLabel+"=true")
		waitPluginReady(ctx)
		waitRuntimeLog(ctx, offset, nriName, "connected and synchronized")
		st := pluginState(Default, ctx)
		var found bool
		for _, c := range st.Containers {
			if c.PodUID == string(pinned.UID) {
				found = true
				Expect(c.Exclusive).To(BeTrue())
				Expect(c.CPUs).To(Equal(pinnedCPUs.String()))
			}
		}
		Expect(found).To(BeTrue(), "/state does not list pod %s after the restart", pinned.Name)
		Expect(cpusOf(Default, ctx, pinned)).To(equalCPUs(pinnedCPUs))
		Expect(cpusOf(Default, ctx, shared)).To(equalCPUs(HostCPUs.Difference(pinnedCPUs)))
	}, SpecTimeout(4*time.Minute))

	It("uninstalls ("+map[bool]string{true: "helm uninstall", false: "kubectl delete -k"}[install.name() == "helm install"]+") as the README's Uninstalling section says", func(ctx SpecContext) {
		var pinned, shared corev1.Pod
		Eventually(func(g Gomega) {
			pinned = runningPod(g, ctx, testNS, "app=pinned")
			g.Expect(cpusOf(g, ctx, pinned)).To(equalCPUs(pinnedCPUs))
			shared = runningPod(g, ctx, testNS, "app=shared")
			g.Expect(cpusOf(g, ctx, shared)).To(equalCPUs(HostCPUs.Difference(pinnedCPUs)))
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		// 2. "kubectl delete -k deploy/ (helm uninstall nri-cpualign): the
		// plugin stops".
		offset := fileSize(Env.RuntimeLog)
		install.uninstall(ctx)
		Eventually(pluginProcesses).WithContext(ctx).WithTimeout(60*time.Second).Should(BeEmpty(), "the plugin still runs")
		_, err := kubectl(ctx, "get", "namespace", pluginNS)
		Expect(err).To(MatchError(ContainSubstring("NotFound")))
		waitRuntimeLog(ctx, offset, "connection to plugin", nriName, "closed")

		// "Nothing is changed in the containers": the pinned one keeps its
		// CPU, the shared one stays off it...
		Consistently(func(g Gomega) {
			g.Expect(cpusOf(g, ctx, pinned)).To(equalCPUs(pinnedCPUs))
			g.Expect(cpusOf(g, ctx, shared)).To(equalCPUs(HostCPUs.Difference(pinnedCPUs)))
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(time.Second).Should(Succeed())

		// 3. ...but new containers get every CPU, the formerly exclusive
		// one included, and restarting the pinned pod makes it uniform.
		apply(ctx, workload("after", "", "", ""))
		Eventually(func(g Gomega) {
			g.Expect(cpusOf(g, ctx, runningPod(g, ctx, testNS, "app=after"))).To(equalCPUs(HostCPUs))
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
		mustKubectl(ctx, "-n", testNS, "delete", "pod", pinned.Name, "--wait=true", "--timeout=60s")
		Eventually(func(g Gomega) {
			p := runningPod(g, ctx, testNS, "app=pinned")
			g.Expect(p.UID).NotTo(Equal(pinned.UID))
			g.Expect(cpusOf(g, ctx, p)).To(equalCPUs(HostCPUs))
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())

		// 4. The checkpoint stays in the state directory until removed.
		_, err = os.Stat(filepath.Join(stateDir, daemon.CheckpointName))
		Expect(err).NotTo(HaveOccurred(), "the README tells to remove the state directory; it should still be there")

		// The node label is not part of deploy/: it stays.
		var node corev1.Node
		Expect(getJSON(ctx, &node, "get", "node", Env.Node)).To(Succeed())
		Expect(node.Labels).To(HaveKeyWithValue(nodeLabel, "true"))
	}, SpecTimeout(6*time.Minute))
})

// portForwardGet GETs a path of the plugin's metrics endpoint through
// `kubectl port-forward POD LOCAL:9464`, the README's way from a workstation.
func portForwardGet(ctx context.Context, pod, p string) string {
	GinkgoHelper()
	_, port, err := net.SplitHostPort(metricsAddress)
	Expect(err).NotTo(HaveOccurred())
	const local = "19464"
	fctx, cancel := context.WithCancel(ctx)
	defer cancel()
	cmd := exec.CommandContext(fctx, Env.Kubectl, "-n", pluginNS, "port-forward", "pod/"+pod, local+":"+port)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+Env.Kubeconfig)
	out, err := cmd.StdoutPipe()
	Expect(err).NotTo(HaveOccurred())
	cmd.Stderr = GinkgoWriter
	Expect(cmd.Start()).To(Succeed())
	defer func() { cancel(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	Expect(err).NotTo(HaveOccurred(), "kubectl port-forward printed nothing")
	Expect(line).To(HavePrefix("Forwarding from 127.0.0.1:" + local))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:"+local+p, nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s through port-forward: %s", p, b)
	return string(b)
}
