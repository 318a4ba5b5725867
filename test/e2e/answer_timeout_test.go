//go:build e2e

package e2e

import (
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// A CreateContainer answer that times out at the runtime, for real: the
// plugin process is stopped (SIGSTOP) while the runtime creates a
// container, so its NRI request times out (plugin_request_timeout, 2 s in
// the suite's setups). The runtime then drops the plugin and creates and
// runs the container without it, unpinned: on every CPU, the exclusive
// ones included. Once the plugin runs again it reconnects, and the
// reconnection's Synchronize must find that container and put it on the
// shared pool, with the reconcile loop off (events alone).
var _ = Describe("a container whose CreateContainer answer times out at a real "+RuntimeName, Ordered, Serial, func() {
	var (
		plugin *Plugin
		pods   = &Pods{}
		pinned *framework.Container
		excl   cpuset.CPUSet
	)

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		plugin = NewPlugin("answer-timeout")
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin.Start(ctx)
		pinned = pods.RunWith(ctx, "pinned", framework.GuaranteedCPUs(1))
		excl = CPUsOf(ctx, pinned)
		Expect(excl).To(HaveCPUCount(1))
		Expect(excl).To(BeDisjointFrom(Reserved()))
	}, NodeTimeout(3*time.Minute))

	It("finds the container the runtime ran without its answer at the reconnection and takes it off the exclusive CPU", func(ctx SpecContext) {
		logOffset := framework.FileSize(plugin.LogPath)
		rtOffset := framework.FileSize(Env.RuntimeLog)
		pid := plugin.Proc.Pid()
		By("stopping the plugin process: the runtime's CreateContainer request will time out")
		Expect(syscall.Kill(pid, syscall.SIGSTOP)).To(Succeed())
		resumed := false
		resume := func() {
			if !resumed {
				resumed = true
				Expect(syscall.Kill(pid, syscall.SIGCONT)).To(Succeed())
			}
		}
		DeferCleanup(resume)

		p := pods.Run(ctx, "late", framework.Resources{})
		start := time.Now()
		late, err := CRI.CreateContainer(ctx, p, "late", framework.Resources{})
		Expect(err).NotTo(HaveOccurred(), "the runtime must proceed without a plugin that timed out")
		GinkgoWriter.Printf("CreateContainer took %s with the plugin stopped\n", time.Since(start))
		Expect(CRI.StartContainer(ctx, late)).To(Succeed())
		Expect(CPUsOf(ctx, late)).To(EqualCPUs(Host.CPUs),
			"without the plugin's answer the container runs unpinned, on the exclusive CPU %s too", excl)
		line, ok, err := framework.FindLine(Env.RuntimeLog, rtOffset, PluginName)
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the runtime logged nothing about the plugin's timeout")
		GinkgoWriter.Printf("%s: %s\n", RuntimeName, line)

		By("resuming the plugin: it reconnects, and its Synchronize puts the container on the shared pool")
		syncOffset := framework.FileSize(Env.RuntimeLog)
		resume()
		Expect(plugin.WaitSynchronized(ctx, syncOffset, 30*time.Second)).To(Succeed(), "plugin log:\n%s", plugin.LogTail())
		pool := Host.CPUs.Difference(excl)
		Eventually(func(g Gomega) {
			g.Expect(CPUsOfG(g, ctx, late)).To(EqualCPUs(pool), "the container the runtime ran without the plugin's answer")
		}).WithContext(ctx).WithTimeout(10*time.Second).Should(Succeed(), "plugin log:\n%s", plugin.LogTail())
		Expect(CPUsOf(ctx, pinned)).To(EqualCPUs(excl))

		// Whichever came first after SIGCONT: the plugin handled the
		// stale request (it knows the container, which runs elsewhere:
		// moved) or not (placed as a container created while it was away).
		moved, okMoved, err := framework.FindLine(plugin.LogPath, logOffset, "running off its placement", "container=late")
		Expect(err).NotTo(HaveOccurred())
		placed, okPlaced, err := framework.FindLine(plugin.LogPath, logOffset, "placed at synchronize", "container=late")
		Expect(err).NotTo(HaveOccurred())
		Expect(okMoved || okPlaced).To(BeTrue(), "the plugin did not log finding the container; its log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("plugin: %s%s\n", moved, placed)
	}, SpecTimeout(3*time.Minute))
})
