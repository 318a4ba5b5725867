//go:build e2e

package kubelet

import (
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// disable_cpu_quota_with_exclusive_cpus (default true), the kubelet's
// DisableCPUQuotaWithExclusiveCPUs: with the kubelet's static policy a
// Guaranteed 1-CPU pod's container and pod cgroups have cpu.cfs_quota_us
// -1; with the plugin doing the pinning they must too. This machine's cgroup
// v1 tree (cgroupfs driver): /sys/fs/cgroup/cpu/<cgroup>/cpu.cfs_quota_us.
var _ = Describe("no CFS quota on exclusive CPUs under a real kubelet", Ordered, Serial, func() {
	var (
		plugin   *Plugin
		kubelet  *Kubelet
		busy, bu string
	)

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		plugin = NewPlugin("quota")
		plugin.Start(ctx)
		kubelet = NewKubelet("quota", KubeletConfig{})
		kubelet.Start(ctx)
	}, NodeTimeout(3*time.Minute))

	It("runs a Guaranteed 1-CPU container and its pod without a quota, never throttled; a Burstable pod keeps its quota", func(ctx SpecContext) {
		busy, bu = PodName("busy"), PodName("bu")
		// One busy thread on its one exclusive CPU.
		kubelet.Apply(NewPod(busy, Container("app", Guaranteed("1"), ShellScript("while :; do :; done")...)))
		kubelet.Apply(NewPod(bu, Container("app", Burstable("100m", "200m"))))
		pod := WaitRunning(ctx, kubelet, busy, "app")
		Expect(CPUsOf(ctx, kubelet, busy, "app").Size()).To(Equal(1))
		ctr := quotaCgroup(pod, "app")
		Expect(cpuFile(Default, ctr, "cpu.cfs_quota_us")).To(Equal("-1"), "container %s", ctr)
		Expect(cpuFile(Default, PodCgroup(pod), "cpu.cfs_quota_us")).To(Equal("-1"), "pod %s", PodCgroup(pod))

		// The kubelet's values for 200m: 20000 of 100000, container and pod.
		shared := WaitRunning(ctx, kubelet, bu, "app")
		Expect(cpuFile(Default, quotaCgroup(shared, "app"), "cpu.cfs_quota_us")).To(Equal("20000"))
		Expect(cpuFile(Default, PodCgroup(shared), "cpu.cfs_quota_us")).To(Equal("20000"))

		// Once the busy loop has used 2 s of CPU (20 CFS periods), neither
		// cgroup has been throttled.
		Eventually(func(g Gomega) int64 {
			n, err := strconv.ParseInt(cpuacctFile(g, ctr, "cpuacct.usage"), 10, 64)
			g.Expect(err).NotTo(HaveOccurred())
			return n
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(BeNumerically(">=", int64(2e9)))
		for _, cg := range []string{ctr, PodCgroup(pod)} {
			Expect(cpuStat(Default, cg)).To(HaveKeyWithValue("nr_throttled", int64(0)), "cpu.stat of %s", cg)
		}
	}, NodeTimeout(3*time.Minute))

	It("keeps them without a quota when the kubelet is SIGKILLed and restarted", func(ctx SpecContext) {
		before := ContainerIDs(WaitRunning(ctx, kubelet, busy, "app"))
		kubelet.Kill()
		kubelet.Start(ctx)
		Eventually(func(g Gomega) map[string]ctrIdentity {
			return ContainerIDs(kubelet.Pod(g, ctx, busy))
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Equal(before))
		// The restarted kubelet's pod sync has run (it reported the pod):
		// it found the pod cgroup and left it, as its EnsureExists does.
		pod := kubelet.Pod(Default, ctx, busy)
		Consistently(func(g Gomega) {
			g.Expect(cpuFile(g, quotaCgroup(pod, "app"), "cpu.cfs_quota_us")).To(Equal("-1"))
			g.Expect(cpuFile(g, PodCgroup(pod), "cpu.cfs_quota_us")).To(Equal("-1"))
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	}, NodeTimeout(4*time.Minute))

	It("lifts the quota of a Guaranteed pod created while the plugin was away once it is back (Synchronize)", func(ctx SpecContext) {
		kubelet.Delete(ctx, busy)
		plugin.Kill()
		away := PodName("away")
		kubelet.Apply(NewPod(away, Container("app", Guaranteed("1"))))
		pod := WaitRunning(ctx, kubelet, away, "app")
		ctr := quotaCgroup(pod, "app")
		// Created without the plugin: the kubelet's quota for 1 CPU.
		Expect(cpuFile(Default, ctr, "cpu.cfs_quota_us")).To(Equal("100000"))
		Expect(cpuFile(Default, PodCgroup(pod), "cpu.cfs_quota_us")).To(Equal("100000"))

		plugin.Start(ctx)
		Eventually(func(g Gomega) {
			g.Expect(Exclusive(plugin.State(g, ctx))).To(HaveKey("default/" + StaticName(away) + "/app"))
			g.Expect(cpuFile(g, ctr, "cpu.cfs_quota_us")).To(Equal("-1"))
			g.Expect(cpuFile(g, PodCgroup(pod), "cpu.cfs_quota_us")).To(Equal("-1"))
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())
		Expect(cpuFile(Default, quotaCgroup(kubelet.Pod(Default, ctx, bu), "app"), "cpu.cfs_quota_us")).To(Equal("20000"))
	}, NodeTimeout(4*time.Minute))
})

// quotaCgroup is the cgroup path of container name of pod (its cpu
// hierarchy path is the same as its cpuset one under cgroupfs).
func quotaCgroup(pod corev1.Pod, name string) string {
	GinkgoHelper()
	st, ok := ContainerStatus(pod, name)
	Expect(ok).To(BeTrue(), "pod %s has no status for container %s", pod.Name, name)
	return ContainerCgroup(Default, pod, st.ContainerID)
}

// cpuFile reads a cpu controller file by its cgroup v1 name; on cgroup v2
// cpu.cfs_quota_us is the first field of cpu.max ("max" read as -1).
func cpuFile(g Gomega, cgroup, file string) string {
	GinkgoHelper()
	if framework.Unified && file == "cpu.cfs_quota_us" {
		v, err := framework.CgroupFile("cpu", cgroup, "cpu.max")
		g.Expect(err).NotTo(HaveOccurred())
		quota, _, _ := strings.Cut(v, " ")
		if quota == "max" {
			return "-1"
		}
		return quota
	}
	v, err := framework.CgroupFile("cpu", cgroup, file)
	g.Expect(err).NotTo(HaveOccurred())
	return v
}

// cpuacctFile reads a cpuacct file by its cgroup v1 name; on cgroup v2
// cpuacct.usage (ns) comes from cpu.stat's usage_usec.
func cpuacctFile(g Gomega, cgroup, file string) string {
	GinkgoHelper()
	if framework.Unified && file == "cpuacct.usage" {
		return strconv.FormatInt(cpuStat(g, cgroup)["usage_usec"]*1000, 10)
	}
	v, err := framework.CgroupFile("cpuacct", cgroup, file)
	g.Expect(err).NotTo(HaveOccurred())
	return v
}

// cpuStat is the cgroup's cpu.stat (nr_periods, nr_throttled,
// throttled_time).
func cpuStat(g Gomega, cgroup string) map[string]int64 {
	GinkgoHelper()
	out := map[string]int64{}
	for _, line := range strings.Split(cpuFile(g, cgroup, "cpu.stat"), "\n") {
		k, v, ok := strings.Cut(line, " ")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		g.Expect(err).NotTo(HaveOccurred(), "cpu.stat line %q", line)
		out[k] = n
	}
	return out
}
