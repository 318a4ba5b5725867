//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Issue 24 §1 across an in-place resize: the kubelet (CPU manager none)
// sees a Guaranteed pod with a CPU limit, so at every resize it writes the
// pod cgroup's quota for the new limit, and since it reads the pod's
// current quota as -1 (unlimited) and the new one is larger, it writes it
// before the containers' UpdateContainerResources, for a shrink as for a
// growth (kuberuntime's doPodResizeAction). The plugin lifts it again in
// that update's NRI UpdateContainer, and gives the container quota -1 in
// its answer. The host plugin runs with reconcile_period = "0s", so no
// periodic pass can be what lifted it.
//
// The quota files are what catch a lift missing: without the one in
// UpdateContainer the pod keeps the kubelet's 200000 after the growth and
// 100000 after the shrink. The pod runs two busy threads, and neither
// cgroup may be throttled meanwhile (issue 24's observable); a quota equal
// to the container's CPUs did not throttle them on a 2-CPU VM either, so
// nr_throttled alone would miss that; it would catch a quota below them.
// The Burstable pod at the end runs the same threads under a real quota,
// where nr_throttled must grow: the measure does see throttling.
func resizeQuota(ctx SpecContext, logPath string) {
	pod := busyPod(ctx, "busy", "1", "1")
	Expect(pod.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
	first := cpusOf(Default, ctx, pod)
	Expect(first.Size()).To(Equal(1))
	ctr := cgroupDir(pod, containerID(pod, "app"))
	podCg := filepath.Dir(ctr)
	lifted := func() int { return countLines(logSince(logPath, 0), podQuotaLifted(pod.Name)) }

	expectNoQuota(ctr, podCg)
	expectNotThrottled(ctx, ctr, podCg, 1)

	resize(ctx, pod.Name, "2")
	waitResized(ctx, pod.Name, 2000)
	Expect(cpusOf(Default, ctx, pod).Size()).To(Equal(2))
	// The kubelet wrote 200000 into the pod cgroup before the update
	// (-1 < 200000), the plugin lifted it in UpdateContainer.
	expectNoQuota(ctr, podCg)
	expectNotThrottled(ctx, ctr, podCg, 2)
	expectStatusLimit(ctx, pod.Name, 1000)
	Expect(lifted()).To(Equal(1), "plugin log lines %q after the growth", podQuotaLifted(pod.Name))

	resize(ctx, pod.Name, "1")
	waitResized(ctx, pod.Name, 1000)
	Expect(cpusOf(Default, ctx, pod)).To(equalCPUs(first))
	// A shrink too: the kubelet's 100000 is larger than -1.
	expectNoQuota(ctr, podCg)
	expectNotThrottled(ctx, ctr, podCg, 1)
	expectStatusLimit(ctx, pod.Name, 1000)
	Expect(lifted()).To(Equal(2), "plugin log lines %q after the shrink", podQuotaLifted(pod.Name))
	mustKubectl(ctx, "-n", resizeNS, "delete", "pod", pod.Name, "--wait=true", "--timeout=60s")

	// Burstable, 100m/200m → 200m/500m: the kubelet's quotas (limit ×
	// 100000 µs / 1000m), on the container and on the pod, before and
	// after; the plugin leaves them.
	bu := busyPod(ctx, "bu", "100m", "200m")
	Expect(bu.Status.QOSClass).To(Equal(corev1.PodQOSBurstable))
	buCtr := cgroupDir(bu, containerID(bu, "app"))
	buPod := filepath.Dir(buCtr)
	Expect(cpuQuota(Default, buCtr)).To(Equal(int64(20000)), "container %s", buCtr)
	Expect(cpuQuota(Default, buPod)).To(Equal(int64(20000)), "pod %s", buPod)
	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"200m"},"limits":{"cpu":"500m"}}}]}}`
	mustKubectl(ctx, "-n", resizeNS, "patch", "pod", bu.Name, "--subresource", "resize", "--patch", patch)
	Eventually(func(g Gomega) {
		var p corev1.Pod
		g.Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", bu.Name)).To(Succeed())
		for _, c := range p.Status.Conditions {
			g.Expect(c.Type).NotTo(BeElementOf(corev1.PodResizePending, corev1.PodResizeInProgress), "%s: %s", c.Reason, c.Message)
		}
		st := appStatus(g, p)
		g.Expect(st.Resources).NotTo(BeNil(), podSummary(p))
		// Read back from the container's quota: 50000 of 100000.
		g.Expect(st.Resources.Limits.Cpu().MilliValue()).To(Equal(int64(500)), "status: %s", podSummary(p))
	}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	Expect(cpuQuota(Default, buCtr)).To(Equal(int64(50000)), "container %s", buCtr)
	Expect(cpuQuota(Default, buPod)).To(Equal(int64(50000)), "pod %s", buPod)
	before := nrThrottled(Default, buCtr)
	waitCPUUsage(ctx, buCtr, time.Second)
	Expect(nrThrottled(Default, buCtr)).To(BeNumerically(">", before), "cpu.stat of %s: two busy threads under a 500m quota", buCtr)
	Expect(countLines(logSince(logPath, 0), podQuotaLifted(bu.Name))).To(BeZero())
	mustKubectl(ctx, "-n", resizeNS, "delete", "pod", bu.Name, "--wait=true", "--timeout=60s")
}

// busyPod creates pod NAME in resizeNS, its container "app" with the cpu
// request and limit given (and 32Mi) running two busy threads, and returns
// it once it is Ready.
func busyPod(ctx context.Context, name, req, lim string) corev1.Pod {
	GinkgoHelper()
	spec := podSpec(resources(req, lim, "32Mi"))
	spec.Containers[0].Command = []string{"sh", "-c", "while :; do :; done & while :; do :; done"}
	apply(ctx, &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: resizeNS},
		Spec:       spec,
	})
	var p corev1.Pod
	Eventually(func(g Gomega) {
		g.Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", name)).To(Succeed())
		g.Expect(isReady(p)).To(BeTrue(), podSummary(p))
	}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
	return p
}

// expectStatusLimit checks the CPU limit in the status of pod NAME's
// container: the kubelet reads it back from the container's CFS quota,
// and finding none (-1) keeps the one it reported before, which for an
// exclusive container is its limit at admission, whatever the resizes
// since. The kubelet's own static policy (DisableCPUQuotaWithExclusiveCPUs)
// does the same (docs/resize.md).
func expectStatusLimit(ctx context.Context, name string, milli int64) {
	GinkgoHelper()
	var p corev1.Pod
	Expect(getJSON(ctx, &p, "-n", resizeNS, "get", "pod", name)).To(Succeed())
	st := appStatus(Default, p)
	Expect(st.Resources).NotTo(BeNil(), podSummary(p))
	Expect(st.Resources.Limits.Cpu().MilliValue()).To(Equal(milli), "status limit of %s: %s", name, podSummary(p))
}

// expectNoQuota checks that the container's and the pod's cgroups (their
// cpuset paths) have no CFS quota: cpu.cfs_quota_us -1, or cpu.max "max".
func expectNoQuota(ctr, pod string) {
	GinkgoHelper()
	Expect(cpuQuota(Default, ctr)).To(Equal(int64(-1)), "container %s", ctr)
	Expect(cpuQuota(Default, pod)).To(Equal(int64(-1)), "pod %s", pod)
}

// expectNotThrottled lets the container's busy threads use n seconds of
// CPU (10 CFS periods with all its n CPUs busy) and checks that neither
// the container nor the pod was throttled meanwhile, and that both are
// still without a quota.
func expectNotThrottled(ctx context.Context, ctr, pod string, n int) {
	GinkgoHelper()
	c0, p0 := nrThrottled(Default, ctr), nrThrottled(Default, pod)
	waitCPUUsage(ctx, ctr, time.Duration(n)*time.Second)
	Expect(nrThrottled(Default, ctr)).To(Equal(c0), "cpu.stat nr_throttled of container %s", ctr)
	Expect(nrThrottled(Default, pod)).To(Equal(p0), "cpu.stat nr_throttled of pod %s", pod)
	expectNoQuota(ctr, pod)
}

// waitCPUUsage waits until the cgroup (its cpuset path) has used d more
// CPU time than now.
func waitCPUUsage(ctx context.Context, dir string, d time.Duration) {
	GinkgoHelper()
	start := cpuUsage(Default, dir)
	Eventually(func(g Gomega) time.Duration {
		return cpuUsage(g, dir) - start
	}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(250*time.Millisecond).Should(BeNumerically(">=", d),
		"CPU time used by %s", dir)
}

// v1File is file of the cgroup v1 controller for the cgroup whose cpuset
// path is dir; under v2 (one hierarchy) it is dir/file.
func v1File(dir, controller, file string) string {
	if rel, ok := strings.CutPrefix(dir, "/sys/fs/cgroup/cpuset/"); ok {
		return filepath.Join("/sys/fs/cgroup", controller, rel, file)
	}
	return filepath.Join(dir, file)
}

// cpuStatValue is a key of the cgroup's cpu.stat.
func cpuStatValue(g Gomega, dir, key string) int64 {
	b, err := os.ReadFile(v1File(dir, "cpu", "cpu.stat"))
	g.Expect(err).NotTo(HaveOccurred())
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			g.Expect(err).NotTo(HaveOccurred(), "cpu.stat of %s: %q", dir, line)
			return n
		}
	}
	g.Expect(string(b)).To(ContainSubstring(key+" "), "cpu.stat of %s", dir)
	return 0
}

func nrThrottled(g Gomega, dir string) int64 { return cpuStatValue(g, dir, "nr_throttled") }

// cpuUsage is the CPU time the cgroup has used: cpuacct.usage (ns) under
// v1, cpu.stat's usage_usec under v2.
func cpuUsage(g Gomega, dir string) time.Duration {
	if strings.HasPrefix(dir, "/sys/fs/cgroup/cpuset/") {
		b, err := os.ReadFile(v1File(dir, "cpuacct", "cpuacct.usage"))
		g.Expect(err).NotTo(HaveOccurred())
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		g.Expect(err).NotTo(HaveOccurred())
		return time.Duration(n)
	}
	return time.Duration(cpuStatValue(g, dir, "usage_usec")) * time.Microsecond
}

// podQuotaLifted matches the plugin's log line for a pod quota lifted in
// an UpdateContainer, for pod NAME in resizeNS.
func podQuotaLifted(name string) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`msg="CFS quota of the pod lifted[^"]*".* pod=%s/%s .*reason="container updated"`,
		regexp.QuoteMeta(resizeNS), regexp.QuoteMeta(name)))
}

func countLines(text string, re *regexp.Regexp) int {
	n := 0
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			n++
		}
	}
	return n
}
