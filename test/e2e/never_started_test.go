//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
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
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin = NewPlugin("never-started",
			fmt.Sprintf("container_start_timeout = %q", startTimeout.String()),
			`metrics_address = "127.0.0.1:0"`)
		plugin.Start(ctx)
		line, ok, err := framework.FindLine(plugin.LogPath, 0, "serving /metrics")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the plugin did not log its metrics address; its log:\n%s", plugin.LogTail())
		m := regexp.MustCompile(`address="?([0-9.]+:[0-9]+)`).FindStringSubmatch(line)
		Expect(m).NotTo(BeNil(), "no address in %q", line)
		base = "http://" + m[1]
		shared = pods.RunWith(ctx, "besteffort", framework.Resources{})
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs))
	}, NodeTimeout(3*time.Minute))

	It("gives the CPU of a Guaranteed container whose command is missing back within container_start_timeout, with a log line and a metric", func(ctx SpecContext) {
		logOffset := framework.FileSize(plugin.LogPath)
		r := framework.GuaranteedCPUs(1)
		p := pods.Run(ctx, "never-starts", r)
		ct, err := CRI.CreateContainer(ctx, p, "app", r, framework.WithCommand("/no/such/command"))
		if Env.IsCRIO() {
			By("CRI-O: runc create fails inside CreateContainer, after the plugin's answer")
			Expect(err).To(MatchError(ContainSubstring("/no/such/command")))
		} else {
			By("containerd: CreateContainer succeeds, runc create fails at StartContainer")
			Expect(err).NotTo(HaveOccurred())
			Expect(CRI.StartContainer(ctx, ct)).To(MatchError(ContainSubstring("/no/such/command")))
		}
		failedAt := time.Now()

		// The plugin answered, so it holds the CPU and the shared container
		// was moved off it; the runtime said nothing since.
		held := heldBy(Default, ctx, "never-starts")
		Expect(held).NotTo(BeNil(), "the plugin did not place the container at all; its log:\n%s", plugin.LogTail())
		Expect(held.Exclusive).To(BeTrue())
		cpus, err := cpuset.Parse(held.CPUs)
		Expect(err).NotTo(HaveOccurred())
		Expect(cpus).To(HaveCPUCount(1))
		Expect(cpus).To(BeDisjointFrom(Reserved()))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(cpus)))

		By(fmt.Sprintf("waiting up to container_start_timeout (%s) and a margin for CPU %s to come back", startTimeout, cpus))
		Eventually(func(g Gomega) {
			g.Expect(heldBy(g, ctx, "never-starts")).To(BeNil(), "/state still lists the container")
			g.Expect(CPUsOfG(g, ctx, shared)).To(EqualCPUs(Host.CPUs), "the shared container's cgroup")
		}).WithContext(ctx).WithTimeout(startTimeout+10*time.Second).WithPolling(250*time.Millisecond).
			Should(Succeed(), "plugin log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("CPU %s back in the shared pool %s after the failure\n", cpus, time.Since(failedAt).Round(100*time.Millisecond))

		line, ok, err := framework.FindLine(plugin.LogPath, logOffset, "container never started", "reason=ContainerNeverStarted", "container=app")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "no log line for the container; plugin log:\n%s", plugin.LogTail())
		Expect(line).To(ContainSubstring("cpus="+cpus.String()), "the line names the CPUs")
		Expect(line).To(ContainSubstring("pod=e2e/never-starts"))
		GinkgoWriter.Printf("plugin: %s\n", line)
		Expect(string(get(ctx, "/metrics"))).To(ContainSubstring("\nnri_cpualign_abandoned_containers_total 1\n"))

		// Nothing leaked: a new Guaranteed container gets an exclusive CPU.
		again := pods.RunWith(ctx, "pinned-after", r)
		got := CPUsOf(ctx, again)
		Expect(got).To(HaveCPUCount(1))
		Expect(got).To(BeDisjointFrom(Reserved()))
		Expect(CPUsOf(ctx, shared)).To(EqualCPUs(Host.CPUs.Difference(got)))
	}, SpecTimeout(2*time.Minute))
})
