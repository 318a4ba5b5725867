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

// shared_pool_updates = "after-answer" on the real runtime: the
// CreateContainer and StopContainer answers carry only the container's own
// cpuset, and the plugin pushes the shared pool to the others through the
// runtime's UpdateContainers: once the new container started (its
// PostStartContainer) when the pool shrinks, right after the answer when
// it grows.
var _ = Describe("shared_pool_updates after-answer on a real "+RuntimeName, Ordered, Serial, func() {
	var (
		plugin *Plugin
		pods   = &Pods{}
		shared []*framework.Container
	)
	sharedOn := func(ctx context.Context, want cpuset.CPUSet) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			for _, ct := range shared {
				g.Expect(CPUsOfG(g, ctx, ct)).To(EqualCPUs(want), "shared container %s", ct.Name)
			}
		}).WithContext(ctx).WithTimeout(5*time.Second).Should(Succeed(), "plugin log:\n%s", plugin.LogTail())
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		plugin = NewPlugin("after-answer", `shared_pool_updates = "after-answer"`)
		// Registered after the plugin: the pods go first, while it runs.
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin.Start(ctx)
		shared = []*framework.Container{
			pods.RunWith(ctx, "burstable", framework.Resources{CPURequestMilli: 250, CPULimitMilli: 500, MemLimit: 32 << 20}),
			pods.RunWith(ctx, "besteffort", framework.Resources{}),
		}
		sharedOn(ctx, Host.CPUs)
	}, NodeTimeout(3*time.Minute))

	It("pins a Guaranteed container and moves the shared containers off its CPU once it started, then back when it stops", func(ctx SpecContext) {
		pinned := pods.RunWith(ctx, "pinned", framework.GuaranteedCPUs(1))
		cpus := CPUsOf(ctx, pinned)
		Expect(cpus).To(HaveCPUCount(1))
		Expect(cpus).To(BeDisjointFrom(Reserved()))
		sharedOn(ctx, Host.CPUs.Difference(cpus))
		// The shared containers moved through UpdateContainers: the
		// exclusive admission answered without updates (in-answer would
		// log updates=2).
		_, ok, err := framework.FindLine(plugin.LogPath, 0, "container admitted", "exclusive=true", "updates=0")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "no exclusive admission logged with updates=0; plugin log:\n%s", plugin.LogTail())

		Expect(CRI.StopContainer(ctx, pinned)).To(Succeed())
		sharedOn(ctx, Host.CPUs)
		pods.Remove(ctx, pinned.Pod)
	}, SpecTimeout(2*time.Minute))
})
