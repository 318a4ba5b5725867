//go:build e2e

package e2e

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// systemd re-applies every unit's resources at daemon-reload and
// daemon-reexec: a container scope's AllowedCPUs goes back into its
// cpuset.cpus. On the systemd cgroup driver the plugin sets AllowedCPUs
// through systemd's D-Bus API before writing the file, so a reload must
// change nothing: not the CPUs inside a container, not its cgroup, not
// systemd's AllowedCPUs. The shared containers, sampled every second
// through the reloads, never run on the exclusive CPUs; a pod's removal
// gives its CPUs back and the next reload keeps them there. The reconcile
// loop is off: systemd's own record must hold. Label vm-systemd: it needs
// a node with systemd as PID 1, cgroup v2 and the runtime's systemd driver
// (make e2e-vm's guest); elsewhere it skips, saying why.
var _ = Describe("daemon-reload and daemon-reexec on a systemd cgroup driver node with a real "+RuntimeName, Label("vm", "vm-systemd"), Ordered, Serial, func() {
	var (
		plugin *Plugin
		pods   = &Pods{}
		pinned *framework.Container
		excl   cpuset.CPUSet
		shared []*framework.Container
	)

	systemctl := func(ctx context.Context, args ...string) {
		GinkgoHelper()
		_, err := framework.Systemctl(ctx, args...)
		Expect(err).NotTo(HaveOccurred())
	}
	// allowed is systemd's AllowedCPUs of the container's scope.
	allowed := func(g Gomega, ctx context.Context, ct *framework.Container) cpuset.CPUSet {
		set, err := framework.AllowedCPUs(ctx, ct.CgroupName)
		g.Expect(err).NotTo(HaveOccurred())
		return set
	}
	// expectAll checks every container in all three views.
	expectAll := func(ctx context.Context, when string, pool cpuset.CPUSet) {
		GinkgoHelper()
		if pinned != nil {
			Expect(CPUsOf(ctx, pinned)).To(EqualCPUs(excl), "the exclusive container %s", when)
			Expect(allowed(Default, ctx, pinned)).To(EqualCPUs(excl), "systemd's AllowedCPUs of the exclusive container %s", when)
		}
		for _, ct := range shared {
			Expect(CPUsOf(ctx, ct)).To(EqualCPUs(pool), "shared container %s %s", ct.Name, when)
			Expect(allowed(Default, ctx, ct)).To(EqualCPUs(pool), "systemd's AllowedCPUs of shared container %s %s", ct.Name, when)
		}
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if why := framework.SystemdMissing(); why != "" {
			Skip("needs systemd as PID 1 on cgroup v2 (make e2e-vm's guest): " + why)
		}
		if CRI.CgroupDriver != framework.Systemd {
			Skip("needs the runtime's systemd cgroup driver (make e2e-vm's guest)")
		}
		if Host.CPUs.Size() < 4 {
			Skip("needs 4 CPUs: one reserved, two exclusive, one more shared")
		}
		plugin = NewPlugin("systemd-reload")
		DeferCleanup(pods.RemoveAll, NodeTimeout(5*time.Minute))
		plugin.Start(ctx)
		line, ok, err := framework.FindLine(plugin.LogPath, 0, "through systemd's D-Bus API")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the plugin did not say it goes through systemd; its log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("plugin: %s\n", line)
		for _, name := range []string{"shared-a", "shared-b"} {
			shared = append(shared, pods.RunWith(ctx, name, framework.Resources{}))
		}
		pinned = pods.RunWith(ctx, "pinned", framework.GuaranteedCPUs(2))
		excl = CPUsOf(ctx, pinned)
		Expect(excl).To(HaveCPUCount(2))
		expectAll(ctx, "once placed", Host.CPUs.Difference(excl))
	}, NodeTimeout(10*time.Minute))

	It("keeps every container's CPUs through daemon-reload and daemon-reexec, and a freed pod's CPUs through the next reload", func(ctx SpecContext) {
		// The sampler: every second, every shared container's cgroup.
		cgroups := map[string]string{}
		for _, ct := range shared {
			cgroups[ct.Name] = ct.CgroupsPath()
		}
		sampler := framework.StartCpusetSampler(ctx, cgroups, excl)
		pool := Host.CPUs.Difference(excl)

		By("systemctl daemon-reload")
		systemctl(ctx, "daemon-reload")
		expectAll(ctx, "after daemon-reload", pool)

		By("systemctl daemon-reexec")
		reexec, cancel := context.WithTimeout(ctx, time.Minute)
		Expect(framework.DaemonReexec(reexec)).To(Succeed())
		cancel()
		expectAll(ctx, "after daemon-reexec", pool)

		By("removing the exclusive pod gives its CPUs back to the shared containers")
		// From the removal's start: the pod's stop frees its CPUs before
		// the removal returns.
		sampler.SetExclusive(cpuset.New())
		pods.Remove(ctx, pinned.Pod)
		pinned = nil
		Eventually(func(g Gomega) {
			for _, ct := range shared {
				g.Expect(CPUsOfG(g, ctx, ct)).To(EqualCPUs(Host.CPUs), "shared container %s", ct.Name)
				g.Expect(allowed(g, ctx, ct)).To(EqualCPUs(Host.CPUs), "systemd's AllowedCPUs of %s", ct.Name)
			}
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "plugin log:\n%s", plugin.LogTail())

		By("the next daemon-reload keeps them there")
		systemctl(ctx, "daemon-reload")
		expectAll(ctx, "after the removal and a daemon-reload", Host.CPUs)

		samples, overlaps := sampler.Stop()
		GinkgoWriter.Printf("%d samples of the shared containers' cgroups, %d on an exclusive CPU\n", samples, len(overlaps))
		Expect(samples).To(BeNumerically(">", 0))
		Expect(overlaps).To(BeEmpty(), "shared containers ran on the exclusive CPUs %s", excl)
		// Every change went through systemd on the one connection the
		// plugin keeps: no call may have found it closed.
		line, failed, err := framework.FindLine(plugin.LogPath, 0, "level=warning", "systemd unit ", "closed")
		Expect(err).NotTo(HaveOccurred())
		Expect(failed).To(BeFalse(), "a write through systemd found the bus connection closed: %s", line)
	}, SpecTimeout(10*time.Minute))
})
