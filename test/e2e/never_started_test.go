//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// A Guaranteed container whose command does not exist in the image: runc
// fails after the plugin answered CreateContainer (CRI-O runs `runc create`
// inside CreateContainer, containerd at StartContainer), and neither
// runtime tells the plugin. The plugin must give the CPU back by itself
// within container_start_timeout.
var _ = Describe("a container that never starts on a real "+RuntimeName, Ordered, Serial, func() {
	const startTimeout = 8 * time.Second
	var (
		plugin *Plugin
		pods   = &Pods{}
		shared *framework.Container
		base   string // http://host:port of the plugin's /metrics and /state
	)

	get := func(ctx context.Context, path string) []byte {
		GinkgoHelper()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		Expect(err).NotTo(HaveOccurred())
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.StatusCode).To(Equal(http.StatusOK), "%s: %s", path, b)
		return b
	}
	// heldBy is the plugin's /state entry of the pod's container, if any.
	heldBy := func(g Gomega, ctx context.Context, pod string) *daemon.ContainerView {
		var st daemon.StateView
		g.Expect(json.Unmarshal(get(ctx, "/state"), &st)).To(Succeed())
		for _, c := range st.Containers {
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
		plugin = NewPlugin("never-started",
			fmt.Sprintf("container_start_timeout = %q", startTimeout.String()),
			`metrics_address = "127.0.0.1:0"`)
		// Registered after the plugin: the pods go first, while it runs.
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin.Start(ctx)
		addr, err := framework.MetricsAddress(plugin.LogPath, 0)
		Expect(err).NotTo(HaveOccurred(), "its log:\n%s", plugin.LogTail())
		base = "http://" + addr
		shared = pods.RunWith(ctx, "besteffort", framework.Resources{})
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs))
	}, NodeTimeout(3*time.Minute))

	It("gives the CPU of a Guaranteed container whose command is missing back within container_start_timeout, with a log line and a metric; a retry takes the dead attempt's place at once", func(ctx SpecContext) {
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
		held := heldBy(Default, ctx, "never-starts")
		Expect(held).NotTo(BeNil(), "the plugin did not place the container at all; its log:\n%s", plugin.LogTail())
		Expect(held.Exclusive).To(BeTrue())

		// The kubelet's retry (attempt 1) names the same pod and container:
		// the first attempt is given up at once (long before its timeout)
		// and the retry is placed on its CPU, where the machine may have no
		// other CPU to give.
		tryRun(1)
		failedAt := time.Now()
		cpus, err := cpuset.Parse(held.CPUs)
		Expect(err).NotTo(HaveOccurred())
		Expect(cpus).To(HaveCPUCount(1))
		Expect(cpus).To(BeDisjointFrom(Reserved()))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(cpus)), "the shared container did not leave the dead attempts' CPU")
		line, ok, err := framework.FindLine(plugin.LogPath, logOffset, "created it again", "reason=ContainerNeverStarted", "container=app")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the retry did not give up the first attempt; plugin log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("plugin: %s\n", line)
		Expect(string(get(ctx, "/metrics"))).To(ContainSubstring("\nnri_cpualign_abandoned_containers_total 1\n"))
		retry := heldBy(Default, ctx, "never-starts")
		Expect(retry).NotTo(BeNil(), "the retry was not placed; plugin log:\n%s", plugin.LogTail())
		Expect(retry.ID).NotTo(Equal(held.ID))
		Expect(retry.CPUs).To(Equal(held.CPUs))

		By(fmt.Sprintf("waiting up to container_start_timeout (%s) and a margin for CPU %s to come back", startTimeout, cpus))
		Eventually(func(g Gomega) {
			g.Expect(heldBy(g, ctx, "never-starts")).To(BeNil(), "/state still lists the container")
			g.Expect(CPUsOfG(g, ctx, shared)).To(EqualCPUs(Host.CPUs), "the shared container's cgroup")
		}).WithContext(ctx).WithTimeout(startTimeout+10*time.Second).WithPolling(250*time.Millisecond).
			Should(Succeed(), "plugin log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("CPU %s back in the shared pool %s after the failure\n", cpus, time.Since(failedAt).Round(100*time.Millisecond))

		line, ok, err = framework.FindLine(plugin.LogPath, logOffset, "container never started: CPUs given back", "reason=ContainerNeverStarted", "container=app")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "no log line for the container; plugin log:\n%s", plugin.LogTail())
		Expect(line).To(ContainSubstring("cpus="+cpus.String()), "the line names the CPUs")
		Expect(line).To(ContainSubstring("pod=e2e/never-starts"))
		GinkgoWriter.Printf("plugin: %s\n", line)
		Expect(line).To(ContainSubstring("id=" + retry.ID))
		Expect(string(get(ctx, "/metrics"))).To(ContainSubstring("\nnri_cpualign_abandoned_containers_total 2\n"))

		// Nothing leaked: a new Guaranteed container gets an exclusive CPU.
		again := pods.RunWith(ctx, "pinned-after", r)
		got := CPUsOf(ctx, again)
		Expect(got).To(HaveCPUCount(1))
		Expect(got).To(BeDisjointFrom(Reserved()))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(got)))
	}, SpecTimeout(2*time.Minute))
})
