//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

const (
	// resizeNS holds this container's pods (labelled like testNS, so that
	// scripts/lib-cluster.sh deletes it when a run ends early).
	resizeNS = "cpualign-e2e-resize"
	// hostMetrics is where the host plugin serves /state and /healthz (not
	// the DaemonSet's port: a DaemonSet pod left behind must not answer).
	hostMetrics = "127.0.0.1:19465"
)

// Issue 22 §3's exclusive resizes. On two CPUs a Guaranteed pod can only
// grow from 1 to 2 CPUs when nothing is reserved and no shared-pool
// container runs (the plugin refuses to take the shared pool's last CPU
// from running shared-pool containers), so the plugin runs here as a
// process on the host with deploy/'s configuration and
// reserved_cpu_count = 0, not as the DaemonSet (whose own container is a
// shared-pool container), and no other pod runs on the node.
var _ = Describe("exclusive CPUs resized in place with kubectl patch --subresource resize, the plugin on the host with reserved_cpu_count = 0", Ordered, Serial, func() {
	var logPath string

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		if HostCPUs.Size() < 2 {
			Skip(fmt.Sprintf("needs 2 CPUs (a 1-CPU pod grows to 2); this machine has %s", HostCPUs))
		}
		waitNodeReady(ctx)
		waitNodeEmpty(ctx)
		var cfg config.Config
		// deploy/'s configuration with nothing reserved.
		logPath, cfg = startHostPlugin(ctx, filepath.Join(Env.Dir, "host-plugin"), map[string]string{"reserved_cpu_count": "0"},
			func(g Gomega, st observe.StateView) {
				g.Expect(st.Reserved).To(BeEmpty())
				g.Expect(st.Shared).To(Equal(HostCPUs.String()))
			})
		Expect(cfg.ReservedCPUCount).To(BeZero())
		Expect(cfg.DisableCPUQuota).To(BeTrue())

		// Before the plugin stops (cleanups run last first): its
		// containers go while it still tracks them.
		createNamespace(ctx, resizeNS)
	}, NodeTimeout(5*time.Minute))

	It("grows a Guaranteed 1-CPU pod to 2 CPUs and back to 1: it keeps its first CPU throughout, the resize ends done, and no other container shares its CPUs", func(ctx SpecContext) {
		pod := runPod(ctx, "grow", "1")
		Expect(pod.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
		first := cpusOf(Default, ctx, pod)
		Expect(first.Size()).To(Equal(1))
		id := containerID(pod, "app")
		dir := cgroupDir(pod, id)
		expectExclusive(Default, ctx, pod, first, first)

		samples := sampleCPUs(ctx, dir, id)

		// 1 → 2: the first CPU stays, one is added (on two CPUs: the other).
		resize(ctx, pod.Name, "2")
		waitResized(ctx, pod.Name, 2000)
		grown := cpusOf(Default, ctx, pod)
		Expect(grown.Size()).To(Equal(2), "inside and on the host at 2 CPUs")
		Expect(first.IsSubsetOf(grown)).To(BeTrue(), "first CPU %s, now %s", first, grown)
		expectExclusive(Default, ctx, pod, grown, first)

		// 2 → 1: the baseline (its first CPU) is what stays; the other CPU
		// goes back to the shared pool once the runtime applied the update.
		resize(ctx, pod.Name, "1")
		waitResized(ctx, pod.Name, 1000)
		Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(first), "inside and on the host back at 1 CPU")
		Eventually(func(g Gomega) {
			expectExclusive(g, ctx, pod, first, first)
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())

		values, others := samples.stop()
		GinkgoWriter.Printf("cpuset.cpus of %s/%s from before the first patch to after the second resize was done: %q; other containers seen: %d\n",
			pod.Name, id, values, others)
		Expect(values).NotTo(BeEmpty())
		for _, v := range values {
			s, err := cpuset.Parse(v)
			Expect(err).NotTo(HaveOccurred())
			Expect(first.IsSubsetOf(s)).To(BeTrue(), "cgroup %s/cpuset.cpus was %q, without its first CPU %s (all values: %q)", dir, v, first, values)
		}
		Expect(values[0]).To(Equal(first.String()))
		Expect(values).To(ContainElement(grown.String()))
		Expect(values[len(values)-1]).To(Equal(first.String()))

		// A shared-pool container started now gets the CPU given back, and
		// not the pod's.
		apply(ctx, &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "neighbour", Namespace: resizeNS},
			Spec:       podSpec(resources("", "", "")),
		})
		Eventually(func(g Gomega) {
			var p corev1.Pod
			g.Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", "neighbour")).To(Succeed())
			g.Expect(isReady(p)).To(BeTrue(), podSummary(p))
			g.Expect(cpusOf(g, ctx, p)).To(equalCPUs(HostCPUs.Difference(first)))
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
		Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(first))
		Expect(logSince(logPath, 0)).To(And(
			MatchRegexp(`msg="container resized".* kind=upsize .*pod=%s/grow`, resizeNS),
			MatchRegexp(`msg="container resized".* kind=downsize .*pod=%s/grow`, resizeNS)))
		mustKubectl(ctx, "-n", resizeNS, "delete", "pod", "grow", "neighbour", "--wait=true", "--timeout=60s")
	}, SpecTimeout(5*time.Minute))

	It("refuses a resize below the baseline (2 → 1 CPU) and from exclusive CPUs to 1500m, naming the rule in the pod's PodResizeInProgress condition; nothing moves", func(ctx SpecContext) {
		pod := runPod(ctx, "whole", "2")
		all := cpusOf(Default, ctx, pod)
		Expect(all.Size()).To(Equal(2))
		expectExclusive(Default, ctx, pod, all, all)

		resize(ctx, pod.Name, "1")
		waitRefused(ctx, logPath, pod.Name, policyRule("below-baseline"), 1000)
		Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(all))
		expectExclusive(Default, ctx, pod, all, all)

		resize(ctx, pod.Name, "1500m")
		waitRefused(ctx, logPath, pod.Name, policyRule("exclusive-to-shared"), 1500)
		Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(all))
		expectExclusive(Default, ctx, pod, all, all)
		mustKubectl(ctx, "-n", resizeNS, "delete", "pod", pod.Name, "--wait=true", "--timeout=60s")
	}, SpecTimeout(5*time.Minute))

	It("refuses a resize from 1500m (the shared pool) to 2 exclusive CPUs, naming the rule in the pod's PodResizeInProgress condition; nothing moves", func(ctx SpecContext) {
		pod := runPod(ctx, "frac", "1500m")
		Expect(pod.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
		Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(HostCPUs), "a shared-pool container with nothing exclusive")

		resize(ctx, pod.Name, "2")
		waitRefused(ctx, logPath, pod.Name, policyRule("shared-to-exclusive"), 2000)
		Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(HostCPUs))
		st := hostState(Default, ctx)
		Expect(st.Shared).To(Equal(HostCPUs.String()))
		for _, c := range st.Containers {
			Expect(c.Exclusive).To(BeFalse(), "%s/%s holds %s", c.Pod, c.Container, c.CPUs)
		}
		mustKubectl(ctx, "-n", resizeNS, "delete", "pod", pod.Name, "--wait=true", "--timeout=60s")
	}, SpecTimeout(5*time.Minute))

	It("keeps a busy Guaranteed pod's container and pod without a CFS quota, never throttled, as it grows from 1 to 2 CPUs and back; a Burstable pod's resize keeps the kubelet's quota", func(ctx SpecContext) {
		resizeQuota(ctx, logPath)
	}, SpecTimeout(8*time.Minute))
})

// policyRule is a rule name as the refusal's message has it (the rule
// names are docs/resize.md's; written out here rather than taken from
// pkg/policy, so a renamed rule fails this spec).
func policyRule(name string) string { return ": " + name + ": " }

// setTOML replaces the top-level `key = value` lines of doc; every key must
// be there (deploy/config.toml writes them all).
func setTOML(doc string, values map[string]string) string {
	GinkgoHelper()
	lines := strings.Split(doc, "\n")
	for key, v := range values {
		found := false
		for i, l := range lines {
			if strings.HasPrefix(l, key+" = ") {
				lines[i], found = key+" = "+v, true
			}
		}
		Expect(found).To(BeTrue(), "deploy/config.toml has no %s line", key)
	}
	return strings.Join(lines, "\n")
}

// waitNodeReady waits until the kubelet reports the node Ready.
func waitNodeReady(ctx context.Context) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		var node corev1.Node
		g.Expect(getJSON(ctx, &node, "get", "node", Env.Node)).To(Succeed())
		ready := false
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady {
				ready = c.Status == corev1.ConditionTrue
			}
		}
		g.Expect(ready).To(BeTrue(), "node %s not Ready", Env.Node)
	}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
}

// hostState is the host plugin's /state.
func hostState(g Gomega, ctx context.Context) observe.StateView {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostMetrics+"/state", nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "/state: %s", b)
	var st observe.StateView
	g.Expect(json.Unmarshal(b, &st)).To(Succeed())
	return st
}

// expectExclusive checks the plugin's /state: the pod's container holds
// cpus exclusively with baseline base, the shared pool is the rest, and no
// other container is on any of cpus.
func expectExclusive(g Gomega, ctx context.Context, p corev1.Pod, cpus, base cpuset.CPUSet) {
	st := hostState(g, ctx)
	g.Expect(st.Shared).To(Equal(HostCPUs.Difference(cpus).String()), "shared pool")
	found := false
	for _, c := range st.Containers {
		if c.PodUID == string(p.UID) {
			found = true
			g.Expect(c.Exclusive).To(BeTrue())
			g.Expect(c.CPUs).To(Equal(cpus.String()))
			g.Expect(c.Baseline).To(Equal(base.String()))
			continue
		}
		on, err := cpuset.Parse(c.CPUs)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(on.Intersection(cpus).IsEmpty()).To(BeTrue(), "%s/%s on %s shares %s's CPUs %s", c.Pod, c.Container, c.CPUs, p.Name, cpus)
	}
	g.Expect(found).To(BeTrue(), "/state does not list pod %s", p.Name)
}

// runPod creates a Guaranteed pod NAME with cpu CPUs (and 32Mi) in resizeNS
// and returns it once it is Ready.
func runPod(ctx context.Context, name, cpu string) corev1.Pod {
	GinkgoHelper()
	apply(ctx, &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: resizeNS},
		Spec:       podSpec(resources(cpu, cpu, "32Mi")),
	})
	var p corev1.Pod
	Eventually(func(g Gomega) {
		g.Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", name)).To(Succeed())
		g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), podSummary(p))
		g.Expect(isReady(p)).To(BeTrue(), podSummary(p))
	}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
	return p
}

// resize sets the CPU request and limit of pod NAME's container to cpu
// through the resize subresource.
func resize(ctx context.Context, name, cpu string) {
	GinkgoHelper()
	patch := fmt.Sprintf(`{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":%q},"limits":{"cpu":%q}}}]}}`, cpu, cpu)
	mustKubectl(ctx, "-n", resizeNS, "patch", "pod", name, "--subresource", "resize", "--patch", patch)
}

// appStatus is the status of the pod's container "app".
func appStatus(g Gomega, p corev1.Pod) corev1.ContainerStatus {
	for _, s := range p.Status.ContainerStatuses {
		if s.Name == "app" {
			return s
		}
	}
	g.Expect(p.Status.ContainerStatuses).To(ContainElement(HaveField("Name", "app")))
	return corev1.ContainerStatus{}
}

// waitResized waits until the kubelet reports the resize of pod NAME to
// milli CPUs done: no PodResizePending or PodResizeInProgress condition,
// and the container's status resources request the new CPU (read back from
// the runtime's cpu.shares).
func waitResized(ctx context.Context, name string, milli int64) {
	GinkgoHelper()
	var p corev1.Pod
	Eventually(func(g Gomega) {
		g.Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", name)).To(Succeed())
		for _, c := range p.Status.Conditions {
			g.Expect(c.Type).NotTo(BeElementOf(corev1.PodResizePending, corev1.PodResizeInProgress), "%s: %s", c.Reason, c.Message)
		}
		// Requests, not limits: the status limit is read back from the
		// CFS quota, which an exclusive container does not have
		// (disable_cpu_quota_with_exclusive_cpus), so the kubelet keeps
		// reporting the limit it first saw.
		st := appStatus(g, p)
		g.Expect(st.Resources).NotTo(BeNil(), podSummary(p))
		g.Expect(st.Resources.Requests.Cpu().MilliValue()).To(Equal(milli), "status: %s", podSummary(p))
		g.Expect(st.AllocatedResources.Cpu().MilliValue()).To(Equal(milli), "status: %s", podSummary(p))
	}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	st := appStatus(Default, p)
	GinkgoWriter.Printf("pod %s resized: status resources %v, allocated %v\n", name, st.Resources, st.AllocatedResources)
}

// waitRefused waits until the kubelet reports the runtime's refusal of pod
// NAME's resize to milli CPUs in a PodResizeInProgress condition with
// reason Error, its message naming the plugin's InPlaceResizeRejected and
// rule, and until the kubelet has tried it again (a second refusal in the
// plugin's log at logPath), so that what the caller then finds unchanged
// has been through a retry.
func waitRefused(ctx context.Context, logPath, name, rule string, milli int64) {
	GinkgoHelper()
	var msg string
	Eventually(func(g Gomega) {
		var p corev1.Pod
		g.Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", name)).To(Succeed())
		var cond *corev1.PodCondition
		for i := range p.Status.Conditions {
			if p.Status.Conditions[i].Type == corev1.PodResizeInProgress {
				cond = &p.Status.Conditions[i]
			}
		}
		g.Expect(cond).NotTo(BeNil(), podSummary(p))
		g.Expect(cond.Reason).To(Equal(corev1.PodReasonError), podSummary(p))
		g.Expect(cond.Message).To(And(ContainSubstring("InPlaceResizeRejected"), ContainSubstring(rule)))
		msg = cond.Message
	}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	// As an operator reads it.
	Expect(mustKubectl(ctx, "-n", resizeNS, "get", "pod", name, "-o", "yaml")).To(ContainSubstring("InPlaceResizeRejected"))
	GinkgoWriter.Printf("pod %s: PodResizeInProgress Error: %s\n", name, msg)
	refusals := func() int {
		n := 0
		for _, l := range strings.Split(logSince(logPath, 0), "\n") {
			if strings.Contains(l, `msg="resize refused`) && strings.Contains(l, " pod="+resizeNS+"/"+name+" ") &&
				strings.Contains(l, fmt.Sprintf(" request_milli=%d", milli)) && strings.Contains(l, strings.TrimSpace(rule)) {
				n++
			}
		}
		return n
	}
	Eventually(refusals).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(BeNumerically(">=", 2),
		"the kubelet did not retry the resize of %s (plugin log %s)", name, logPath)
}

// cpuSamples records, until stop, every value a container's cpuset.cpus
// takes, and checks each other running container's cgroup against it.
type cpuSamples struct {
	stopc chan struct{}
	done  chan struct{}
	vals  []string
	// others counts the other running containers seen; bad says where one
	// of them was on a CPU of the watched container.
	others int
	bad    []string
}

// sampleCPUs starts sampling the cgroup dir of container id.
func sampleCPUs(ctx context.Context, dir, id string) *cpuSamples {
	GinkgoHelper()
	ep := strings.TrimPrefix(os.Getenv("CRI_RUNTIME_ENDPOINT"), "unix://")
	Expect(ep).NotTo(BeEmpty(), "CRI_RUNTIME_ENDPOINT not set (the runtime's setup script exports it)")
	c, err := framework.Dial(ctx, ep, Env.TestImage)
	Expect(err).NotTo(HaveOccurred())
	s := &cpuSamples{stopc: make(chan struct{}), done: make(chan struct{})}
	seen := map[string]bool{}
	go func() {
		defer GinkgoRecover()
		defer close(s.done)
		defer c.Close()
		last := ""
		for {
			b, err := os.ReadFile(filepath.Join(dir, "cpuset.cpus"))
			if err == nil {
				v := strings.TrimSpace(string(b))
				if v != last {
					s.vals, last = append(s.vals, v), v
				}
				if mine, err := cpuset.Parse(v); err == nil {
					s.checkOthers(ctx, c, id, mine, seen)
				}
			}
			select {
			case <-s.stopc:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	DeferCleanup(func() {
		select {
		case <-s.done:
		default:
			close(s.stopc)
			<-s.done
		}
	})
	return s
}

// checkOthers reads the cgroup of every other running container the
// runtime lists and records one on a CPU of mine.
func (s *cpuSamples) checkOthers(ctx context.Context, c *framework.Client, id string, mine cpuset.CPUSet, seen map[string]bool) {
	resp, err := c.RT.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{
		State: &cri.ContainerStateValue{State: cri.ContainerState_CONTAINER_RUNNING}}})
	if err != nil {
		return
	}
	for _, other := range resp.GetContainers() {
		if other.GetId() == id {
			continue
		}
		if !seen[other.GetId()] {
			seen[other.GetId()] = true
			s.others++
		}
		st, err := c.RT.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: other.GetId(), Verbose: true})
		if err != nil {
			continue
		}
		var info struct {
			RuntimeSpec struct {
				Linux struct {
					CgroupsPath string `json:"cgroupsPath"`
				} `json:"linux"`
			} `json:"runtimeSpec"`
		}
		if json.Unmarshal([]byte(st.GetInfo()["info"]), &info) != nil || info.RuntimeSpec.Linux.CgroupsPath == "" {
			s.bad = append(s.bad, fmt.Sprintf("container %s: no cgroups path in its verbose status", other.GetId()))
			continue
		}
		cg := filepath.Join("/sys/fs/cgroup/cpuset", info.RuntimeSpec.Linux.CgroupsPath)
		if !dirExists(cg) {
			cg = filepath.Join("/sys/fs/cgroup", info.RuntimeSpec.Linux.CgroupsPath)
		}
		on, err := readCPUs(cg, "cpuset.cpus")
		if err != nil {
			continue // exited meanwhile
		}
		if !on.Intersection(mine).IsEmpty() {
			s.bad = append(s.bad, fmt.Sprintf("container %s on %s while the watched one was on %s", other.GetId(), on, mine))
		}
	}
}

// stop ends the sampling and returns the values seen and the number of
// other containers checked; it fails the spec if one shared a CPU.
func (s *cpuSamples) stop() ([]string, int) {
	GinkgoHelper()
	close(s.stopc)
	<-s.done
	Expect(s.bad).To(BeEmpty(), "other containers on the watched container's CPUs")
	return s.vals, s.others
}
