//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// strict-cpu-reservation on the real runtime: the reserved CPU is not in
// the shared pool, so exclusive containers may take every other CPU, as the
// kubelet lets them. The shared pool is then empty; its containers must
// never get an empty cpuset nor stay on the exclusive CPUs: they run on
// the reserved CPU until the exclusive ones come back. On a 2-CPU machine:
// reserved 0, shared 1; a Guaranteed 1-CPU container takes 1 and the
// shared containers move to 0, then back to 1 when its pod goes.
var _ = Describe("an empty shared pool under strict-cpu-reservation on a real "+RuntimeName, Ordered, Serial, func() {
	var (
		plugin      *Plugin
		pods        = &Pods{}
		shared      []*framework.Container
		base        string        // http://host:port of the plugin's /metrics
		nonReserved cpuset.CPUSet // the shared pool of an idle machine
	)
	sharedOn := func(ctx context.Context, want cpuset.CPUSet) {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			for _, ct := range shared {
				g.Expect(CPUsOfG(g, ctx, ct)).To(EqualCPUs(want), "shared container %s", ct.Name)
			}
		}).WithContext(ctx).WithTimeout(5*time.Second).Should(Succeed(), "plugin log:\n%s", plugin.LogTail())
	}
	metric := func(ctx context.Context, line string) {
		GinkgoHelper()
		_, b, err := framework.HTTPGet(ctx, base+"/metrics")
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(ContainSubstring("\n" + line + "\n"))
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		nonReserved = Host.CPUs.Difference(Reserved())
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin = NewPlugin("empty-pool", `metrics_address = "127.0.0.1:0"`,
			"[cpu_manager_policy_options]", `strict-cpu-reservation = "true"`)
		plugin.Start(ctx)
		addr, err := framework.MetricsAddress(plugin.LogPath, 0)
		Expect(err).NotTo(HaveOccurred(), "its log:\n%s", plugin.LogTail())
		base = "http://" + addr
		// Strict: the reserved CPU is not shared.
		shared = []*framework.Container{pods.RunWith(ctx, "besteffort", framework.Resources{})}
		sharedOn(ctx, nonReserved)
		metric(ctx, "nri_cpualign_shared_pool_empty 0")
	}, NodeTimeout(3*time.Minute))

	It("gives a Guaranteed container every non-reserved CPU, runs the shared containers on the reserved CPU meanwhile, and moves them back when its pod goes", func(ctx SpecContext) {
		logOffset := framework.FileSize(plugin.LogPath)
		r := framework.GuaranteedCPUs(nonReserved.Size())
		pinned := pods.RunWith(ctx, "takes-all", r)
		Expect(CPUsOf(ctx, pinned)).To(EqualCPUs(nonReserved))
		sharedOn(ctx, Reserved())
		line, ok, err := framework.FindLine(plugin.LogPath, logOffset, "shared pool is empty", "level=warning")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "no warning when the pool emptied; plugin log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("plugin: %s\n", line)
		metric(ctx, "nri_cpualign_shared_pool_empty 1")
		metric(ctx, "nri_cpualign_shared_cpus 0")

		By("a shared-pool container created while the pool is empty starts on the reserved CPU")
		late := pods.RunWith(ctx, "burstable", framework.Resources{CPURequestMilli: 100, CPULimitMilli: 200, MemLimit: 32 << 20})
		Expect(CPUsOf(ctx, late)).To(EqualCPUs(Reserved()))
		shared = append(shared, late)

		By(fmt.Sprintf("removing the Guaranteed container's pod gives %s back to the shared containers", nonReserved))
		Expect(CRI.StopContainer(ctx, pinned)).To(Succeed())
		pods.Remove(ctx, pinned.Pod)
		sharedOn(ctx, nonReserved)
		metric(ctx, "nri_cpualign_shared_pool_empty 0")
		_, ok, err = framework.FindLine(plugin.LogPath, logOffset, "shared pool has CPUs again")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "no line when the pool had CPUs again; plugin log:\n%s", plugin.LogTail())
	}, SpecTimeout(2*time.Minute))
})
