//go:build e2e

package kubelet

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// topology_manager_scope = "pod" sizes the pod's alignment from the pod's
// effective CPU request, which the kubelet sends with the sandbox
// (LinuxPodSandboxConfig.Resources) and the runtime hands NRI as the pod's
// resources. Whether it does is the runtime's business: podResourcesPassed
// records what these specs found (README, "Pod scope with a real kubelet").
var podResourcesPassed = map[string]bool{
	"containerd": true,
	"crio":       true,
}

var _ = Describe("the pod scope with a real kubelet", Ordered, Serial, func() {
	var (
		plugin  *Plugin
		kubelet *Kubelet
	)

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		if Host.CPUs.Size() != 2 {
			Skip("the pod's request is sized to one more CPU than is free on a 2-CPU machine; this one has " + Host.CPUs.String())
		}
		plugin = NewPlugin("podscope", `topology_manager_policy = "restricted"`, `topology_manager_scope = "pod"`)
		plugin.Start(ctx)
		kubelet = NewKubelet("podscope", KubeletConfig{})
		kubelet.Start(ctx)
	}, NodeTimeout(3*time.Minute))

	It("sizes a two-container pod by the pod's request when the runtime passes it", func(ctx SpecContext) {
		// Two 1-CPU containers: the kubelet (no reservation) admits 2 CPUs;
		// the plugin has one free. Knowing the pod needs 2, restricted
		// refuses the first container already (TopologyAffinityError);
		// without the pod's resources each container is sized alone, so
		// the first gets the CPU and the second finds none.
		name := PodName("podscope")
		kubelet.Apply(NewPod(name, Container("a", Guaranteed("1")), Container("b", Guaranteed("1"))))
		if podResourcesPassed[Env.Runtime] {
			GinkgoWriter.Printf("%s passes the pod's resources: expecting TopologyAffinityError for both containers\n", Env.Runtime)
			Expect(WaitWaiting(ctx, kubelet, name, "a", "CreateContainerError")).To(ContainSubstring("TopologyAffinityError"))
			Expect(WaitWaiting(ctx, kubelet, name, "b", "CreateContainerError")).To(ContainSubstring("TopologyAffinityError"))
			Expect(plugin.LogCount("container rejected", StaticName(name), "pod effective request 2 CPUs")).To(BeNumerically(">=", 2))
			Expect(Exclusive(plugin.State(Default, ctx))).To(BeEmpty())
		} else {
			GinkgoWriter.Printf("%s does not pass the pod's resources: expecting container scope sizes\n", Env.Runtime)
			a := CPUsOf(ctx, kubelet, name, "a")
			Expect(a.Size()).To(Equal(1))
			Expect(WaitWaiting(ctx, kubelet, name, "b", "CreateContainerError")).To(ContainSubstring("InsufficientCPUs"))
		}
		kubelet.Delete(ctx, name)
		Expect(Exclusive(plugin.State(Default, ctx))).To(BeEmpty())
	}, NodeTimeout(4*time.Minute))

	It("places a pod that fits: the integer container exclusive, the fractional one shared", func(ctx SpecContext) {
		name := PodName("podscope-fit")
		kubelet.Apply(NewPod(name, Container("a", Guaranteed("1")), Container("b", Guaranteed("200m"))))
		a := CPUsOf(ctx, kubelet, name, "a")
		Expect(a.Size()).To(Equal(1))
		Expect(a.Intersection(Reserved()).IsEmpty()).To(BeTrue())
		ExpectCPUs(ctx, kubelet, name, "b", Host.CPUs.Difference(a))
		Expect(Exclusive(plugin.State(Default, ctx))).To(Equal(map[string]string{"default/" + StaticName(name) + "/a": a.String()}))
		kubelet.Delete(ctx, name)
	}, NodeTimeout(4*time.Minute))
})
