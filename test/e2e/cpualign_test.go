//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The static policy on the real machine, whatever its size: CPU 0 is
// reserved, every other CPU can be given out exclusively. The specs build on
// each other (Ordered): one plugin deployment, its state dir and the shared
// pods live through all of them, as on a node.
var _ = Describe("static policy on a real "+RuntimeName, Ordered, Serial, func() {
	var (
		plugin *Plugin
		pods   = &Pods{}
		// the containers that must always sit in the shared pool
		shared []*framework.Container
		// the Guaranteed container that holds an exclusive CPU, and its CPUs
		pinned     *framework.Container
		pinnedCPUs cpuset.CPUSet
		// exclusive CPUs of other Guaranteed containers (machines with 3+ CPUs)
		otherExclusive = cpuset.New()
	)

	// pool is the shared pool while the given CPUs are exclusive: all CPUs
	// but those (the reserved CPU stays in it, as in the kubelet).
	pool := func(exclusive cpuset.CPUSet) cpuset.CPUSet {
		return Host.CPUs.Difference(exclusive).Difference(otherExclusive)
	}

	expectShared := func(ctx context.Context, want cpuset.CPUSet) {
		GinkgoHelper()
		for _, ct := range shared {
			Expect(CPUsOf(ctx, ct)).To(EqualCPUs(want), "shared container %s", ct.Name)
		}
	}

	// expectAllocatable checks the plugin's idea of the free exclusive CPUs
	// through CRI alone: with free = all - reserved - exclusive, a
	// Guaranteed request of free+1 CPUs must fail with InsufficientCPUs and
	// leave no container behind. It proves the plugin still counts the
	// exclusive CPUs as taken (after a restart, a reconnect, a rebuild).
	expectAllocatable := func(ctx context.Context, exclusive cpuset.CPUSet) {
		GinkgoHelper()
		free := Host.CPUs.Difference(Reserved()).Difference(exclusive).Difference(otherExclusive).Size()
		before, err := CRI.ContainerCount(ctx)
		Expect(err).NotTo(HaveOccurred())
		r := framework.GuaranteedCPUs(free + 1)
		p := pods.Run(ctx, "too-big", r)
		_, err = CRI.CreateContainer(ctx, p, "too-big", r)
		Expect(err).To(MatchError(ContainSubstring("InsufficientCPUs")),
			"a Guaranteed request of %d CPUs with %d free must fail; plugin log:\n%s", free+1, free, plugin.LogTail())
		after, err := CRI.ContainerCount(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before), "the failed CreateContainer left a container behind")
		pods.Remove(ctx, p)
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		plugin = NewPlugin("static")
		// Registered after the plugin: the pods go first, while it runs.
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin.Start(ctx)

		// The shared kinds, each started before anything is exclusive:
		// Burstable (250m request, 500m limit), BestEffort, and a fractional
		// Guaranteed (500m = 500m) that the static policy must not pin.
		shared = []*framework.Container{
			pods.RunWith(ctx, "burstable", framework.Resources{CPURequestMilli: 250, CPULimitMilli: 500, MemLimit: 32 << 20}),
			pods.RunWith(ctx, "besteffort", framework.Resources{}),
			pods.RunWith(ctx, "fractional", framework.GuaranteedMilli(500)),
		}
		Expect(shared[0].Pod.QOS).To(Equal(framework.Burstable))
		Expect(shared[1].Pod.QOS).To(Equal(framework.BestEffort))
		Expect(shared[2].Pod.QOS).To(Equal(framework.Guaranteed))
		// Nothing is exclusive yet: the shared pool is every CPU.
		expectShared(ctx, Host.CPUs)
	}, NodeTimeout(3*time.Minute))

	It("gives a Guaranteed 1-CPU container an exclusive CPU, not the reserved one, and shrinks every shared container at once", func(ctx SpecContext) {
		pinned = pods.RunWith(ctx, "pinned", framework.GuaranteedCPUs(1))
		pinnedCPUs = CPUsOf(ctx, pinned)
		Expect(pinnedCPUs).To(HaveCPUCount(1))
		Expect(pinnedCPUs).To(BeDisjointFrom(Reserved()))
		// Read right after StartContainer returned, without polling: the
		// shrink rides on the CreateContainer reply.
		expectShared(ctx, pool(pinnedCPUs))
	}, SpecTimeout(2*time.Minute))

	It("keeps new Burstable, BestEffort and fractional Guaranteed containers in the shared pool", func(ctx SpecContext) {
		for _, ct := range []*framework.Container{
			pods.RunWith(ctx, "burstable-2", framework.Resources{CPURequestMilli: 100}),
			pods.RunWith(ctx, "besteffort-2", framework.Resources{}),
			pods.RunWith(ctx, "fractional-2", framework.GuaranteedMilli(1500)),
		} {
			Expect(CPUsOf(ctx, ct)).To(EqualCPUs(pool(pinnedCPUs)), "new shared container %s", ct.Name)
			shared = append(shared, ct)
		}
	}, SpecTimeout(2*time.Minute))

	It("keeps a stopped Guaranteed container's CPU for its pod: the shared pool unchanged, another pod refused, the restart on the same CPU; the pod's removal gives it back", func(ctx SpecContext) {
		Expect(CRI.StopContainer(ctx, pinned)).To(Succeed())
		// Another pod asking for one CPU more than is free without the
		// held one is refused: the plugin still counts it as taken. The
		// refusal went through the plugin after the stop, so the shared
		// containers' cgroups read next show what the stop left them.
		expectAllocatable(ctx, pinnedCPUs)
		expectShared(ctx, pool(pinnedCPUs))

		By("the restart: a new container of the same pod and name, as the kubelet's after its back-off")
		restarted, err := CRI.RunContainer(ctx, pinned.Pod, pinned.Name, framework.GuaranteedCPUs(1), framework.WithAttempt(1))
		Expect(err).NotTo(HaveOccurred())
		Expect(CPUsOf(ctx, restarted)).To(EqualCPUs(pinnedCPUs), "the restart did not get its pod's CPU back; plugin log:\n%s", plugin.LogTail())
		// The kubelet's container GC removes the exited one later.
		Expect(CRI.RemoveContainer(ctx, pinned)).To(Succeed())
		expectAllocatable(ctx, pinnedCPUs)
		expectShared(ctx, pool(pinnedCPUs))

		By("the pod's removal gives the CPU back to every shared container")
		Expect(CRI.StopContainer(ctx, restarted)).To(Succeed())
		pods.Remove(ctx, pinned.Pod)
		// Polled on the cgroups alone (a file read; the kernel applies a
		// cpuset write to the tasks at once), then both views checked
		// once: an exec into every container per poll costs seconds on a
		// slow node (the VM test node) and outlasted the wait.
		Eventually(func(g Gomega) {
			for _, ct := range shared {
				cg, err := framework.ReadCpuset(ct.CgroupsPath())
				g.Expect(err).NotTo(HaveOccurred())
				g.Expect(cg.CPUs).To(EqualCPUs(Host.CPUs), "shared container %s", ct.Name)
			}
		}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
		expectShared(ctx, Host.CPUs)
		pinned, pinnedCPUs = nil, cpuset.New()
	}, SpecTimeout(2*time.Minute))

	It("fails CreateContainer for a request the machine cannot meet, with the reason, and leaks nothing", func(ctx SpecContext) {
		// Every CPU of the machine: one more than can ever be exclusive.
		expectAllocatable(ctx, cpuset.New())
		expectShared(ctx, Host.CPUs)
		// The next request is placed normally: no CPU was kept for the failed one.
		pinned = pods.RunWith(ctx, "pinned-again", framework.GuaranteedCPUs(1))
		pinnedCPUs = CPUsOf(ctx, pinned)
		Expect(pinnedCPUs).To(HaveCPUCount(1))
		Expect(pinnedCPUs).To(BeDisjointFrom(Reserved()))
		expectShared(ctx, pool(pinnedCPUs))
	}, SpecTimeout(2*time.Minute))

	It("keeps the assignments across a plugin SIGKILL and places a container created while it was down on reconnect", func(ctx SpecContext) {
		plugin.Kill()
		// Created with no plugin connected: the runtime runs it unadjusted.
		down := pods.RunWith(ctx, "made-while-down", framework.Resources{CPURequestMilli: 200, CPULimitMilli: 400})
		GinkgoWriter.Printf("created while the plugin was down: %s\n", CPUsOf(ctx, down))
		// A Guaranteed one too, where the machine has a CPU left to give.
		var downPinned *framework.Container
		if free := Host.CPUs.Difference(Reserved()).Difference(pinnedCPUs).Size(); free >= 1 {
			downPinned = pods.RunWith(ctx, "pinned-while-down", framework.GuaranteedCPUs(1))
		} else {
			GinkgoWriter.Printf("not creating a Guaranteed container while the plugin is down: %d CPUs leave none free\n", Host.CPUs.Size())
		}

		plugin.Start(ctx)
		if downPinned != nil {
			Eventually(func(g Gomega) {
				cpus := CPUsOfG(g, ctx, downPinned)
				g.Expect(cpus).To(HaveCPUCount(1))
				g.Expect(cpus).To(BeDisjointFrom(Reserved().Union(pinnedCPUs)))
				otherExclusive = cpus
			}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
		}
		Eventually(func(g Gomega) {
			g.Expect(CPUsOfG(g, ctx, down)).To(EqualCPUs(pool(pinnedCPUs)), "the container created while the plugin was down")
		}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
		shared = append(shared, down)
		Expect(CPUsOf(ctx, pinned)).To(EqualCPUs(pinnedCPUs))
		expectShared(ctx, pool(pinnedCPUs))
		expectAllocatable(ctx, pinnedCPUs)
	}, SpecTimeout(3*time.Minute))

	It("keeps the state across a "+RuntimeName+" restart under the running plugin", func(ctx SpecContext) {
		offset := framework.FileSize(Env.RuntimeLog)
		Expect(framework.RestartRuntime(ctx, &Env)).To(Succeed())
		// gRPC redials the new runtime with its own backoff; calls made
		// before that fail fast with Unavailable.
		Eventually(func() error {
			_, err := CRI.RT.Version(ctx, &cri.VersionRequest{})
			return err
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		// The plugin either redials by itself or exits so that its
		// DaemonSet restarts it; play the DaemonSet.
		Eventually(func() bool {
			if _, ok, _ := framework.FindLine(Env.RuntimeLog, offset, PluginName, SynchronizedLine); ok {
				return true
			}
			if !plugin.Proc.Running() {
				GinkgoWriter.Printf("plugin exited after the %s restart (%v): restarting it\n", RuntimeName, plugin.Proc.ExitErr())
				plugin.Start(ctx)
				return true
			}
			return false
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(BeTrue(), "plugin neither reconnected nor exited; its log:\n%s", plugin.LogTail())

		Expect(CPUsOf(ctx, pinned)).To(EqualCPUs(pinnedCPUs))
		expectShared(ctx, pool(pinnedCPUs))
		expectAllocatable(ctx, pinnedCPUs)
		ct := pods.RunWith(ctx, "after-runtime-restart", framework.Resources{CPURequestMilli: 100})
		Expect(CPUsOf(ctx, ct)).To(EqualCPUs(pool(pinnedCPUs)))
		shared = append(shared, ct)
	}, SpecTimeout(3*time.Minute))

	It("sets a corrupt checkpoint aside on start, says so, and rebuilds the state from the runtime", func(ctx SpecContext) {
		Expect(plugin.Proc.Terminate(10 * time.Second)).To(Succeed())
		entries, err := os.ReadDir(plugin.StateDir)
		Expect(err).NotTo(HaveOccurred())
		garbage := []byte("{\"version\": 1, \"checksum\": \"sha256:00\", \"data\": {\"entries\": ")
		corrupted := map[string]bool{}
		for _, e := range entries {
			if e.Type().IsRegular() {
				Expect(os.WriteFile(filepath.Join(plugin.StateDir, e.Name()), garbage, 0o600)).To(Succeed())
				corrupted[e.Name()] = true
			}
		}
		Expect(corrupted).NotTo(BeEmpty(), "the plugin left no checkpoint in %s", plugin.StateDir)

		logOffset := framework.FileSize(plugin.LogPath)
		plugin.Start(ctx)
		line, ok, err := framework.FindLine(plugin.LogPath, logOffset, "corrupt")
		Expect(err).NotTo(HaveOccurred())
		Expect(ok).To(BeTrue(), "the plugin did not log the corrupt checkpoint; its log:\n%s", plugin.LogTail())
		GinkgoWriter.Printf("plugin: %s\n", line)

		// Set aside: the corrupt bytes survive under a new name.
		entries, err = os.ReadDir(plugin.StateDir)
		Expect(err).NotTo(HaveOccurred())
		var aside []string
		for _, e := range entries {
			if b, err := os.ReadFile(filepath.Join(plugin.StateDir, e.Name())); err == nil && !corrupted[e.Name()] && bytes.Equal(b, garbage) {
				aside = append(aside, e.Name())
			}
		}
		Expect(aside).NotTo(BeEmpty(), "no copy of the corrupt checkpoint was set aside in %s", plugin.StateDir)

		// Rebuilt from what the runtime reports: the same placements, the
		// exclusive CPU still counted as taken, and given back with its pod.
		Expect(CPUsOf(ctx, pinned)).To(EqualCPUs(pinnedCPUs))
		expectShared(ctx, pool(pinnedCPUs))
		expectAllocatable(ctx, pinnedCPUs)
		Expect(CRI.StopContainer(ctx, pinned)).To(Succeed())
		pods.Remove(ctx, pinned.Pod)
		Eventually(func(g Gomega) {
			for _, ct := range shared {
				g.Expect(CPUsOfG(g, ctx, ct)).To(EqualCPUs(pool(cpuset.New())), "shared container %s", ct.Name)
			}
		}).WithContext(ctx).WithTimeout(5 * time.Second).Should(Succeed())
	}, SpecTimeout(3*time.Minute))
})
