//go:build e2e

package kubelet

import (
	"os"
	"path/filepath"
	"strconv"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// The kubelet runs with cpuManagerPolicy none; the plugin reserves the
// first CPU and hands out the others. On this project's 2-CPU machine that
// is CPU 0 reserved, CPU 1 exclusive; the expectations below are written for
// any size from the host's CPUs.
// Label "vm": part of the subset make test runs in the VM test node (scripts/e2e-vm.sh).
var _ = Describe("a real kubelet with the plugin", Label("vm"), Ordered, Serial, func() {
	var (
		plugin  *Plugin
		kubelet *Kubelet
		// manifest names of the pods that live through the specs
		be, bu, gfrac, g1 string
		exclusive         cpuset.CPUSet
	)

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		plugin = NewPlugin("placement", `topology_manager_policy = "best-effort"`)
		plugin.Start(ctx)
		kubelet = NewKubelet("placement", KubeletConfig{})
		kubelet.Start(ctx)
	}, NodeTimeout(3*time.Minute))

	It("runs Burstable, BestEffort and fractional Guaranteed pods on the shared pool (every CPU while none is exclusive)", func(ctx SpecContext) {
		be, bu, gfrac = PodName("besteffort"), PodName("burstable"), PodName("gfrac")
		kubelet.Apply(NewPod(be, Container("app", BestEffort())))
		kubelet.Apply(NewPod(bu, Container("app", Burstable("100m", "200m"))))
		kubelet.Apply(NewPod(gfrac, Container("app", Guaranteed("250m"))))
		for _, p := range []string{be, bu, gfrac} {
			ExpectCPUs(ctx, kubelet, p, "app", Host.CPUs)
		}
		Expect(kubelet.Pod(Default, ctx, gfrac).Status.QOSClass).To(BeEquivalentTo("Guaranteed"))
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(BeEmpty())
		Expect(v.Shared).To(Equal(Host.CPUs.String()))
	}, NodeTimeout(3*time.Minute))

	It("gives a Guaranteed pod with an integer CPU request an exclusive CPU and takes it out of the shared pods", func(ctx SpecContext) {
		g1 = PodName("g1")
		kubelet.Apply(NewPod(g1, Container("app", Guaranteed("1"))))
		exclusive = CPUsOf(ctx, kubelet, g1, "app")
		Expect(exclusive.Size()).To(Equal(1))
		Expect(exclusive.Intersection(Reserved()).IsEmpty()).To(BeTrue(), "exclusive %s includes the reserved CPU %s", exclusive, Reserved())
		pool := Host.CPUs.Difference(exclusive)
		for _, p := range []string{be, bu, gfrac} {
			ExpectCPUs(ctx, kubelet, p, "app", pool)
		}
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(g1) + "/app": exclusive.String()}))
		Expect(v.Shared).To(Equal(pool.String()))
		Expect(plugin.Metric(Default, ctx, "nri_cpualign_exclusive_cpus")).To(BeEquivalentTo(1))
	}, NodeTimeout(3*time.Minute))

	It("refuses a Guaranteed pod the kubelet admits but the free CPUs cannot hold: CreateContainerError with InsufficientCPUs, and the kubelet's retries leak nothing", func(ctx SpecContext) {
		// Make room in the kubelet's node allocatable (it reserves nothing)
		// so that the kubelet admits a request of every free CPU + 1.
		kubelet.Delete(ctx, bu)
		kubelet.Delete(ctx, gfrac)
		free := Host.CPUs.Difference(Reserved()).Difference(exclusive).Size()
		errsBefore := plugin.Metric(Default, ctx, "cpu_manager_pinning_errors_total")
		big := PodName("toobig")
		kubelet.Apply(NewPod(big, Container("app", Guaranteed(strconv.Itoa(free+1)))))
		msg := WaitWaiting(ctx, kubelet, big, "app", "CreateContainerError")
		Expect(msg).To(ContainSubstring("InsufficientCPUs"))
		// The kubelet retries (pod worker back-off, 10 s): wait for a second
		// refusal, then nothing may have moved.
		Eventually(func() int {
			return plugin.LogCount("container rejected", StaticName(big), "InsufficientCPUs")
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(time.Second).Should(BeNumerically(">=", 2))
		Expect(plugin.Metric(Default, ctx, "cpu_manager_pinning_errors_total")).To(BeNumerically(">=", errsBefore+2))
		pool := Host.CPUs.Difference(exclusive)
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(g1) + "/app": exclusive.String()}))
		Expect(v.Shared).To(Equal(pool.String()))
		Expect(plugin.Metric(Default, ctx, "nri_cpualign_exclusive_cpus")).To(BeEquivalentTo(1))
		Expect(CPUsOf(ctx, kubelet, g1, "app")).To(Equal(exclusive))
		ExpectCPUs(ctx, kubelet, be, "app", pool)

		kubelet.Delete(ctx, big)
		v = plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(g1) + "/app": exclusive.String()}))
		Expect(v.Shared).To(Equal(pool.String()))
	}, NodeTimeout(5*time.Minute))

	It("keeps every container where it is when the kubelet is SIGKILLed and restarted", func(ctx SpecContext) {
		before := map[string]map[string]ctrIdentity{}
		for _, p := range []string{be, g1} {
			before[p] = ContainerIDs(WaitRunning(ctx, kubelet, p, "app"))
		}
		state := plugin.State(Default, ctx)
		requests := plugin.Metric(Default, ctx, "topology_manager_admission_requests_total")
		admitted := plugin.LogCount("container admitted")

		kubelet.Kill()
		kubelet.Start(ctx)
		for p, ids := range before {
			Eventually(func(g Gomega) map[string]ctrIdentity {
				return ContainerIDs(kubelet.Pod(g, ctx, p))
			}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Equal(ids))
		}
		// The restarted kubelet's first sync has reported the pods; for a
		// few seconds more nothing may change: no container re-created, no
		// CPU moved, no admission, the same assignments.
		pool := Host.CPUs.Difference(exclusive)
		Consistently(func(g Gomega) {
			for p, ids := range before {
				pod := kubelet.Pod(g, ctx, p)
				g.Expect(ContainerIDs(pod)).To(Equal(ids))
			}
			g.Expect(ContainerCPUs(g, kubelet.Pod(g, ctx, g1), "app").Equals(exclusive)).To(BeTrue())
			g.Expect(ContainerCPUs(g, kubelet.Pod(g, ctx, be), "app").Equals(pool)).To(BeTrue())
			g.Expect(plugin.State(g, ctx).Containers).To(Equal(state.Containers))
			g.Expect(plugin.Metric(g, ctx, "topology_manager_admission_requests_total")).To(Equal(requests))
			g.Expect(plugin.LogCount("container admitted")).To(Equal(admitted))
		}).WithContext(ctx).WithTimeout(5 * time.Second).WithPolling(500 * time.Millisecond).Should(Succeed())
	}, NodeTimeout(4*time.Minute))

	It("gives the exclusive CPU back to the shared pods when the Guaranteed pod is deleted", func(ctx SpecContext) {
		kubelet.Delete(ctx, g1)
		ExpectCPUs(ctx, kubelet, be, "app", Host.CPUs)
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(BeEmpty())
		Expect(v.Shared).To(Equal(Host.CPUs.String()))
		Expect(plugin.Metric(Default, ctx, "nri_cpualign_exclusive_cpus")).To(BeEquivalentTo(0))
		// On a systemd node every cpuset and quota goes through systemd's
		// D-Bus API on one connection kept for the plugin's life: no call
		// may have found it closed. (A call that times out on a slow
		// emulated node is retried and is no fault of the connection.)
		Expect(plugin.LogCount("level=warning", "systemd unit ", "closed")).To(BeZero(), "a write through systemd found the bus connection closed; plugin log:\n%s", logTail(plugin.LogPath, 40))
	}, NodeTimeout(3*time.Minute))
})

// full-pcpus-only on a machine with SMT: the plugin reads a fake sysfs tree
// that gives the host's real CPU ids SMT siblings (this machine has none),
// so one CPU is not a whole core and the plugin refuses as the kubelet's
// static policy would.
var _ = Describe("a real kubelet with the plugin under full-pcpus-only on a fake SMT topology", Ordered, Serial, func() {
	var (
		plugin  *Plugin
		kubelet *Kubelet
	)

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		n := Host.CPUs.Size()
		if n%2 != 0 || !Host.CPUs.Equals(cpuset.New(seq(n)...)) {
			Skip("the fake SMT tree pairs CPUs 0..n-1 into 2-thread cores; this machine's CPUs are " + Host.CPUs.String())
		}
		sys := filepath.Join(WorkDir, "smt-sysfs")
		Expect(os.RemoveAll(sys)).To(Succeed())
		Expect(sysfstest.Write(sys, sysfstest.Spec{
			Description: "the host's CPUs as 2-thread cores (siblings adjacent)", Sockets: 1,
			CoresPerSocket: n / 2, ThreadsPerCore: 2, Numbering: sysfstest.SiblingsAdjacent,
		})).To(Succeed())
		plugin = NewPlugin("smt", `sysfs_root = "`+sys+`"`, `cpu_manager_policy_options = { "full-pcpus-only" = "true" }`)
		plugin.Start(ctx)
		kubelet = NewKubelet("smt", KubeletConfig{})
		kubelet.Start(ctx)
	}, NodeTimeout(3*time.Minute))

	It("refuses a Guaranteed 1-CPU pod with SMTAlignmentError in the kubelet's status, and the retries leak nothing", func(ctx SpecContext) {
		be := PodName("besteffort")
		kubelet.Apply(NewPod(be, Container("app", BestEffort())))
		ExpectCPUs(ctx, kubelet, be, "app", Host.CPUs)

		odd := PodName("g1-smt")
		kubelet.Apply(NewPod(odd, Container("app", Guaranteed("1"))))
		msg := WaitWaiting(ctx, kubelet, odd, "app", "CreateContainerError")
		Expect(msg).To(ContainSubstring("SMTAlignmentError"))
		Eventually(func() int {
			return plugin.LogCount("container rejected", StaticName(odd), "SMTAlignmentError")
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(time.Second).Should(BeNumerically(">=", 2))
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(BeEmpty())
		Expect(v.Shared).To(Equal(Host.CPUs.String()))
		Expect(plugin.Metric(Default, ctx, "nri_cpualign_exclusive_cpus")).To(BeEquivalentTo(0))
		Expect(plugin.Metric(Default, ctx, "cpu_manager_pinning_errors_total")).To(BeNumerically(">=", 2))
		ExpectCPUs(ctx, kubelet, be, "app", Host.CPUs)
	}, NodeTimeout(4*time.Minute))
})

func seq(n int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = i
	}
	return out
}
