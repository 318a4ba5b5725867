//go:build e2e

package kubelet

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The reference for test/e2e's topology specs (topology_vm_test.go there):
// the kubelet's own static CPU manager, the plugin off, on the VM test
// node's machine (scripts/e2e-vm.sh; framework.VMNodeMismatch says how
// another machine differs, and the specs skip with that), with the same
// reserved CPU 0 and the same pods. The expected CPUs are the same as the
// plugin's, worked out by hand: CPU 0 reserved leaves the whole cores 2-3,
// 4-5 and 6-7, node0 3 free CPUs (1-3), node1 4 (4-7).
var _ = Describe("the kubelet's own static policy on the VM test node (the reference for the plugin, which is off)", Label("vm"), Serial, func() {
	BeforeEach(func() {
		RequireEnv()
		if why := framework.VMNodeMismatch(Host, "/sys"); why != "" {
			Skip("needs the machine of the VM test node (make e2e-vm): " + why)
		}
		Expect(Reserved()).To(Equal(cpuset.New(0)))
	})

	It("full-pcpus-only: gives a 2-CPU pod the whole core 2-3 and refuses a 1-CPU pod with SMTAlignmentError", func(ctx SpecContext) {
		kubelet := NewKubelet("ref-full-pcpus", KubeletConfig{CPUManagerPolicy: "static", TopologyManagerPolicy: "best-effort",
			CPUManagerPolicyOptions: map[string]string{"full-pcpus-only": "true"}})
		kubelet.Start(ctx)
		pair := PodName("ref-pair")
		kubelet.Apply(NewPod(pair, Container("app", Guaranteed("2"))))
		Expect(CPUsOf(ctx, kubelet, pair, "app")).To(Equal(cpuset.New(2, 3)))
		single := PodName("ref-single")
		kubelet.Apply(NewPod(single, Container("app", Guaranteed("1"))))
		// The kubelet refuses it at admission: the pod fails with the
		// CPU manager's reason, no container is made.
		Eventually(func(g Gomega) {
			pod := kubelet.Pod(g, ctx, single)
			g.Expect(pod.Status.Reason).To(Equal("SMTAlignmentError"), "pod status %+v", pod.Status)
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())
	}, NodeTimeout(10*time.Minute))

	It("single-numa-node: gives a 4-CPU pod node1, the one node with 4 free CPUs", func(ctx SpecContext) {
		kubelet := NewKubelet("ref-single-numa", KubeletConfig{CPUManagerPolicy: "static", TopologyManagerPolicy: "single-numa-node"})
		kubelet.Start(ctx)
		four := PodName("ref-four")
		kubelet.Apply(NewPod(four, Container("app", Guaranteed("4"))))
		Expect(CPUsOf(ctx, kubelet, four, "app")).To(Equal(cpuset.New(4, 5, 6, 7)))
	}, NodeTimeout(10*time.Minute))
})
