//go:build e2e

package kubelet

import (
	"context"
	"path"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// On the systemd cgroup driver, systemd keeps each container scope's
// AllowedCPUs and each pod slice's CPUQuota and writes them back into the
// cgroup files at every daemon-reload and daemon-reexec; the kubelet set
// the slice's quota through systemd when it made the pod. The plugin
// changes both through systemd's D-Bus API before the files, so under a
// real kubelet (cgroupDriver systemd, cpuManagerPolicy none) neither
// re-apply, nor a kubelet restart, may change any container's CPUs (its
// processes' affinity, its cgroup, systemd's AllowedCPUs of its scope) or
// bring back the exclusive pod's quota (the pod slice's cpu.max and
// systemd's CPUQuota of it; disable_cpu_quota_with_exclusive_cpus is on by
// default). The shared containers' cgroups, sampled every second through
// all of it, never hold an exclusive CPU; deleting the exclusive pod gives
// its CPUs back, and the next daemon-reload keeps them there. The
// reconcile loop is off (PluginConfig): systemd's own record must hold.
//
// On the VM test node (8 CPUs: siblings 0-1 2-3 4-5 6-7, NUMA node0 0-3,
// node1 4-7; CPU 0 reserved) the 2-CPU pod gets the whole core 2-3: the
// topology manager's lowest equally narrow hint is node0, whose one whole
// free core it is; the shared pods then run on 0-1,4-7.
// Label "vm": part of the subset make test runs in the VM test node.
var _ = Describe("a real kubelet with the plugin on a systemd cgroup driver node: daemon-reload, daemon-reexec and a kubelet restart", Label("vm"), Ordered, Serial, func() {
	var (
		plugin        *Plugin
		kubelet       *Kubelet
		be, bu, excl2 string // manifest names
		exclusive     cpuset.CPUSet
	)

	// scopeUnit is the systemd unit of container "app" of pod name: the
	// last element of its cgroup path (cri-containerd-<id>.scope,
	// crio-<id>.scope).
	scopeUnit := func(g Gomega, ctx context.Context, name string) (cgroup, unit string) {
		GinkgoHelper()
		pod := kubelet.Pod(g, ctx, name)
		st, ok := ContainerStatus(pod, "app")
		g.Expect(ok).To(BeTrue(), "pod %s has no status for container app", name)
		cgroup = ContainerCgroup(g, pod, st.ContainerID)
		return cgroup, path.Base(cgroup)
	}
	// expectCPUs checks container "app" of pod name in its three views:
	// its processes' Cpus_allowed_list equal its cgroup's cpuset.cpus
	// (ContainerCPUs), which is want, and so is systemd's AllowedCPUs.
	expectCPUs := func(g Gomega, ctx context.Context, name string, want cpuset.CPUSet, when string) {
		GinkgoHelper()
		got := ContainerCPUs(g, kubelet.Pod(g, ctx, name), "app")
		g.Expect(got.Equals(want)).To(BeTrue(), "pod %s %s: runs on %s, want %s", name, when, got, want)
		_, unit := scopeUnit(g, ctx, name)
		allowed, err := framework.AllowedCPUs(ctx, unit)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(allowed.Equals(want)).To(BeTrue(), "pod %s %s: systemd's AllowedCPUs of %s is %s, want %s", name, when, unit, allowed, want)
	}
	// expectNoQuota checks the exclusive pod's slice: no quota in cpu.max,
	// none in systemd's record.
	expectNoQuota := func(g Gomega, ctx context.Context, when string) {
		GinkgoHelper()
		slice := PodCgroup(kubelet.Pod(g, ctx, excl2))
		g.Expect(cpuFile(g, slice, "cpu.cfs_quota_us")).To(Equal("-1"), "cpu.max of the exclusive pod's slice %s %s", slice, when)
		quota, err := framework.UnitProperty(ctx, path.Base(slice), "CPUQuotaPerSecUSec")
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(quota).To(Equal("infinity"), "systemd's CPUQuota of %s %s", path.Base(slice), when)
	}
	// expectAll checks every pod right after an operation: it may have
	// changed nothing, so nothing is waited for.
	expectAll := func(ctx context.Context, when string) {
		GinkgoHelper()
		pool := Host.CPUs.Difference(exclusive)
		expectCPUs(Default, ctx, excl2, exclusive, when)
		expectNoQuota(Default, ctx, when)
		for _, p := range []string{be, bu} {
			expectCPUs(Default, ctx, p, pool, when)
		}
	}

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		if why := framework.SystemdMissing(); why != "" {
			Skip("needs systemd as PID 1 on cgroup v2 (make e2e-vm's guest): " + why)
		}
		if Driver != framework.Systemd {
			Skip("needs the runtime's systemd cgroup driver (make e2e-vm's guest); the runtime's is " + string(Driver))
		}
		if Host.CPUs.Size() < 4 {
			Skip("needs 4 CPUs (one reserved, two exclusive, one more shared); this machine has " + Host.CPUs.String())
		}
		plugin = NewPlugin("systemd-reload")
		plugin.Start(ctx)
		Expect(plugin.LogCount("through systemd's D-Bus API")).To(BeNumerically(">", 0),
			"the plugin did not say it goes through systemd; its log:\n%s", logTail(plugin.LogPath, 40))
		kubelet = NewKubelet("systemd-reload", KubeletConfig{})
		kubelet.Start(ctx)

		be, bu, excl2 = PodName("sd-besteffort"), PodName("sd-burstable"), PodName("sd-g2")
		kubelet.Apply(NewPod(be, Container("app", BestEffort())))
		kubelet.Apply(NewPod(bu, Container("app", Burstable("100m", "200m"))))
		for _, p := range []string{be, bu} {
			ExpectCPUs(ctx, kubelet, p, "app", Host.CPUs)
		}
		kubelet.Apply(NewPod(excl2, Container("app", Guaranteed("2"))))
		exclusive = CPUsOf(ctx, kubelet, excl2, "app")
		if framework.VMNodeMismatch(Host, "/sys") == "" {
			Expect(Reserved()).To(Equal(cpuset.New(0)))
			Expect(exclusive).To(Equal(cpuset.New(2, 3)), "the 2-CPU pod on the VM test node")
		}
		Expect(exclusive.Size()).To(Equal(2))
		Expect(exclusive.Intersection(Reserved()).IsEmpty()).To(BeTrue(), "exclusive %s includes the reserved %s", exclusive, Reserved())
		// The shared pods follow the pool a moment after the admission
		// (the plugin's pass), and the pod's quota is lifted in cpu.max:
		// what the files show, whichever way the plugin wrote them.
		// systemd's record of both is checked after each re-apply below,
		// where a value written only into the files would be undone.
		for _, p := range []string{be, bu} {
			ExpectCPUs(ctx, kubelet, p, "app", Host.CPUs.Difference(exclusive))
		}
		Eventually(func(g Gomega) string {
			return cpuFile(g, PodCgroup(kubelet.Pod(g, ctx, excl2)), "cpu.cfs_quota_us")
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Equal("-1"), "the exclusive pod's cpu.max")
	}, NodeTimeout(10*time.Minute))

	It("keeps every container's CPUs and the exclusive pod's lifted quota, and gives a deleted pod's CPUs back for good", func(ctx SpecContext) {
		cgroups := map[string]string{}
		for _, p := range []string{be, bu} {
			cgroups[p], _ = scopeUnit(Default, ctx, p)
		}
		sampler := framework.StartCpusetSampler(ctx, cgroups, exclusive)
		ids := map[string]map[string]ctrIdentity{}
		for _, p := range []string{be, bu, excl2} {
			ids[p] = ContainerIDs(kubelet.Pod(Default, ctx, p))
		}

		By("systemctl daemon-reload")
		_, err := framework.Systemctl(ctx, "daemon-reload")
		Expect(err).NotTo(HaveOccurred())
		expectAll(ctx, "after daemon-reload")

		By("systemctl daemon-reexec")
		reexec, cancel := context.WithTimeout(ctx, time.Minute)
		Expect(framework.DaemonReexec(reexec)).To(Succeed())
		cancel()
		expectAll(ctx, "after daemon-reexec")

		By("restarting the kubelet")
		kubelet.Stop()
		kubelet.Start(ctx)
		// Its first sync of each pod has run once it reports the same
		// containers again (none re-created).
		for p, want := range ids {
			Eventually(func(g Gomega) map[string]ctrIdentity {
				return ContainerIDs(kubelet.Pod(g, ctx, p))
			}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Equal(want))
		}
		expectAll(ctx, "after a kubelet restart")

		By("deleting the exclusive pod gives its CPUs back to the shared pods")
		// From the deletion's start no CPU is exclusive any more.
		sampler.SetExclusive(cpuset.New())
		kubelet.Delete(ctx, excl2)
		Eventually(func(g Gomega) {
			for _, p := range []string{be, bu} {
				expectCPUs(g, ctx, p, Host.CPUs, "after the exclusive pod's deletion")
			}
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Succeed(), "plugin log:\n%s", logTail(plugin.LogPath, 40))

		By("the next daemon-reload keeps them there")
		_, err = framework.Systemctl(ctx, "daemon-reload")
		Expect(err).NotTo(HaveOccurred())
		for _, p := range []string{be, bu} {
			expectCPUs(Default, ctx, p, Host.CPUs, "after the deletion and a daemon-reload")
		}

		samples, overlaps := sampler.Stop()
		GinkgoWriter.Printf("%d samples of the shared containers' cgroups, %d on an exclusive CPU; %d systemd write retries in the plugin's log\n",
			samples, len(overlaps), plugin.LogCount("the worker retries after retry_in"))
		Expect(samples).To(BeNumerically(">", 0))
		Expect(overlaps).To(BeEmpty(), "shared containers ran on the exclusive CPUs %s", exclusive)
		// Every write went through systemd on the one connection the
		// plugin keeps (redialed once if dbus went away): none may have
		// found it closed.
		Expect(plugin.LogCount("level=warning", "systemd unit ", "closed")).To(BeZero(),
			"a write through systemd found the bus connection closed; plugin log:\n%s", logTail(plugin.LogPath, 40))
	}, NodeTimeout(10*time.Minute))
})
