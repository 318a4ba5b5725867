//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// A Guaranteed container whose command does not exist in the image: runc
// fails after the plugin answered CreateContainer (CRI-O runs `runc create`
// inside CreateContainer, containerd at StartContainer), and neither
// runtime tells the plugin. As under the kubelet, the pod keeps the CPU
// while it lives: no other pod gets it, the kubelet's retry (same pod and
// name) gets exactly it, and the pod's removal gives it back.
var _ = Describe("a container that never starts on a real "+RuntimeName, Ordered, Serial, func() {
	var (
		plugin *Plugin
		pods   = &Pods{}
		shared *framework.Container
		base   string // http://host:port of the plugin's /metrics and /state
	)

	get := func(ctx context.Context, path string) []byte {
		GinkgoHelper()
		code, b, err := framework.HTTPGet(ctx, base+path)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusOK), "%s: %s", path, b)
		return b
	}
	state := func(g Gomega, ctx context.Context) observe.StateView {
		var st observe.StateView
		g.Expect(json.Unmarshal(get(ctx, "/state"), &st)).To(Succeed())
		return st
	}
	// placed is the plugin's /state entry of the pod's container, if any.
	placed := func(g Gomega, ctx context.Context, pod string) *observe.ContainerView {
		for _, c := range state(g, ctx).Containers {
			if c.Pod == "e2e/"+pod {
				return &c
			}
		}
		return nil
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		plugin = NewPlugin("never-started", `metrics_address = "127.0.0.1:0"`)
		// Registered after the plugin: the pods go first, while it runs.
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin.Start(ctx)
		addr, err := framework.MetricsAddress(plugin.LogPath, 0)
		Expect(err).NotTo(HaveOccurred(), "its log:\n%s", plugin.LogTail())
		base = "http://" + addr
		shared = pods.RunWith(ctx, "besteffort", framework.Resources{})
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs))
	}, NodeTimeout(3*time.Minute))

	It("keeps the CPU of a Guaranteed container whose command is missing for its pod; the retry gets exactly it, another pod does not, and the pod's removal gives it back", func(ctx SpecContext) {
		logOffset := framework.FileSize(plugin.LogPath)
		r := framework.GuaranteedCPUs(1)
		p := pods.Run(ctx, "never-starts", r)
		// tryRun creates and starts the container as the kubelet does; runc
		// fails after the plugin's answer either way.
		tryRun := func(attempt uint32) {
			GinkgoHelper()
			ct, err := CRI.CreateContainer(ctx, p, "app", r, framework.WithCommand("/no/such/command"), framework.WithAttempt(attempt))
			if Env.IsCRIO() {
				By(fmt.Sprintf("attempt %d: CRI-O's runc create fails inside CreateContainer, after the plugin's answer", attempt))
				Expect(err).To(MatchError(ContainSubstring("/no/such/command")))
			} else {
				By(fmt.Sprintf("attempt %d: containerd's CreateContainer succeeds, runc create fails at StartContainer", attempt))
				Expect(err).NotTo(HaveOccurred())
				Expect(CRI.StartContainer(ctx, ct)).To(MatchError(ContainSubstring("/no/such/command")))
			}
		}
		tryRun(0)

		// The plugin answered, so it holds the CPU; the runtime said
		// nothing since.
		first := placed(Default, ctx, "never-starts")
		Expect(first).NotTo(BeNil(), "the plugin did not place the container at all; its log:\n%s", plugin.LogTail())
		Expect(first.Exclusive).To(BeTrue())
		cpus, err := cpuset.Parse(first.CPUs)
		Expect(err).NotTo(HaveOccurred())
		Expect(cpus).To(HaveCPUCount(1))
		Expect(cpus).To(BeDisjointFrom(Reserved()))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(cpus)), "the shared container runs on the dead attempt's CPU")

		By("another pod asking for one CPU more than is free without it is refused")
		free := Host.CPUs.Difference(Reserved()).Difference(cpus).Size()
		other := pods.Run(ctx, "other", framework.GuaranteedCPUs(free+1))
		_, err = CRI.CreateContainer(ctx, other, "other", framework.GuaranteedCPUs(free+1))
		Expect(err).To(MatchError(ContainSubstring("InsufficientCPUs")), "plugin log:\n%s", plugin.LogTail())
		pods.Remove(ctx, other)

		By("the kubelet's retry (attempt 1, same pod and name) takes the dead attempt's place and its CPU")
		tryRun(1)
		line, ok, err := framework.FindLine(plugin.LogPath, logOffset, "created it again", "reason=ContainerNeverStarted", "container=app")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the retry did not take the first attempt's place; plugin log:\n%s", plugin.LogTail())
		Expect(line).To(ContainSubstring("cpus=" + cpus.String()))
		GinkgoWriter.Printf("plugin: %s\n", line)
		Expect(string(get(ctx, "/metrics"))).To(ContainSubstring("\nnri_cpualign_abandoned_containers_total 1\n"))
		retry := placed(Default, ctx, "never-starts")
		Expect(retry).NotTo(BeNil(), "the retry was not placed; plugin log:\n%s", plugin.LogTail())
		Expect(retry.ID).NotTo(Equal(first.ID))
		Expect(retry.CPUs).To(Equal(first.CPUs))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(cpus)))

		By(fmt.Sprintf("removing the pod gives CPU %s back", cpus))
		pods.Remove(ctx, p)
		Eventually(func(g Gomega) {
			g.Expect(placed(g, ctx, "never-starts")).To(BeNil(), "/state still lists the container")
			g.Expect(state(g, ctx).Held).To(BeEmpty(), "/state still holds CPUs")
			g.Expect(CPUsOfG(g, ctx, shared)).To(EqualCPUs(Host.CPUs), "the shared container's cgroup")
		}).WithContext(ctx).WithTimeout(10*time.Second).Should(Succeed(), "plugin log:\n%s", plugin.LogTail())

		// Nothing leaked: a new Guaranteed container gets an exclusive CPU.
		again := pods.RunWith(ctx, "pinned-after", r)
		got := CPUsOf(ctx, again)
		Expect(got).To(HaveCPUCount(1))
		Expect(got).To(BeDisjointFrom(Reserved()))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(got)))
	}, SpecTimeout(2*time.Minute))
})
