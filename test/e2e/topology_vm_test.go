//go:build e2e

package e2e

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// vmTopologyMismatch says how this machine differs from the VM's ("" when
// it is that machine, with the suite's reserved CPU 0).
func vmTopologyMismatch() string {
	if why := framework.VMNodeMismatch(Host, "/sys"); why != "" {
		return why
	}
	if !Reserved().Equals(cpuset.New(0)) {
		return "the suite reserves " + Reserved().String() + ", the expectations assume CPU 0"
	}
	return ""
}

// The machine of the VM test node (scripts/e2e-vm.sh), as its guest kernel
// shows it in sysfs: 8 CPUs in 2 sockets x 2 cores x 2 threads, sibling
// pairs 0-1 2-3 4-5 6-7, one L3 per socket (0-3, 4-7), NUMA node0 = 0-3 and
// node1 = 4-7 at distance 20. Two CPUs and the fake sysfs trees of the
// in-process fixtures cannot check what these specs check: the placement
// on a real kernel's topology, through the real runtime, into real cgroups
// and the container's own affinity (framework.VMNodeMismatch reads the
// machine; elsewhere the specs skip, saying how it differs). The expected
// CPUs are worked out by hand from that topology with the suite's reserved
// CPU 0 (Reserved()): it takes CPU 0 out of core 0-1, so the free whole
// cores are 2-3, 4-5 and 6-7, node0 has 3 free CPUs (1-3) and node1 has 4
// (4-7).
var _ = Describe("placement on the VM test node's 2-socket SMT NUMA machine on a real "+RuntimeName, Label("vm"), Serial, func() {
	BeforeEach(func() {
		RequireRuntime()
		if why := vmTopologyMismatch(); why != "" {
			Skip("needs the machine of the VM test node (make e2e-vm: 2 sockets x 2 cores x 2 threads, L3 and NUMA node per socket): " + why)
		}
	})

	// place runs a one-container Guaranteed pod of n CPUs and returns its
	// container's CPUs (both views checked by CPUsOf).
	place := func(ctx SpecContext, name string, r framework.Resources) (*framework.Container, cpuset.CPUSet) {
		GinkgoHelper()
		ct := RunPodWith(ctx, name, r)
		return ct, CPUsOf(ctx, ct)
	}

	It("full-pcpus-only: gives 2 CPUs a whole free core and refuses 1 CPU with SMTAlignmentError", func(ctx SpecContext) {
		plugin := NewPlugin("vm-full-pcpus", "[cpu_manager_policy_options]", `full-pcpus-only = "true"`)
		plugin.Start(ctx)
		// Core 0-1 holds the reserved CPU 0; the free whole cores are 2-3
		// (node0) and 4-5, 6-7 (node1). The topology manager prefers the
		// lowest of the equally narrow single-node hints, node0, and the
		// packing takes its whole core 2-3.
		_, cpus := place(ctx, "pair", framework.GuaranteedCPUs(2))
		Expect(cpus).To(EqualCPUs(cpuset.New(2, 3)), "plugin log:\n%s", plugin.LogTail())
		p := RunPod(ctx, "single", framework.GuaranteedCPUs(1))
		_, err := CRI.CreateContainer(ctx, p, "single", framework.GuaranteedCPUs(1))
		Expect(err).To(MatchError(ContainSubstring("SMTAlignmentError")))
	}, SpecTimeout(10*time.Minute))

	It("single-numa-node: gives 4 CPUs the one node that has them free", func(ctx SpecContext) {
		plugin := NewPlugin("vm-single-numa", `topology_manager_policy = "single-numa-node"`)
		plugin.Start(ctx)
		// node0 has 3 free CPUs (CPU 0 is reserved), node1 all 4.
		_, cpus := place(ctx, "node", framework.GuaranteedCPUs(4))
		Expect(cpus).To(EqualCPUs(cpuset.New(4, 5, 6, 7)), "plugin log:\n%s", plugin.LogTail())
		Expect(Host.NUMANodes(cpus).List()).To(Equal([]int{1}))
	}, SpecTimeout(10*time.Minute))

	It("distribute-cpus-across-numa: splits 4 CPUs evenly over the two nodes when one reserved CPU per socket leaves neither node 4", func(ctx SpecContext) {
		// CPUs 0 and 4 reserved (one per socket, a common node setup):
		// free are 1-3 and 5-7, so no node holds 4 and the request spans
		// both; the distribution gives each node 2, in whole cores (the
		// group size on an SMT machine): 2-3 and 6-7. On a machine this
		// small the packing algorithm lands on the same CPUs; the spec
		// checks the split on a real kernel's topology.
		plugin := NewPlugin("vm-distribute", `reserved_system_cpus = "0,4"`,
			"[cpu_manager_policy_options]", `distribute-cpus-across-numa = "true"`)
		plugin.Start(ctx)
		_, cpus := place(ctx, "spread", framework.GuaranteedCPUs(4))
		Expect(cpus).To(EqualCPUs(cpuset.New(2, 3, 6, 7)), "plugin log:\n%s", plugin.LogTail())
		Expect(cpus.Intersection(cpuset.New(0, 1, 2, 3)).Size()).To(Equal(2), "node0's share")
		Expect(cpus.Intersection(cpuset.New(4, 5, 6, 7)).Size()).To(Equal(2), "node1's share")
	}, SpecTimeout(10*time.Minute))

	It("prefer-align-cpus-by-uncorecache: takes 3 CPUs from one L3 and 4 from the other", func(ctx SpecContext) {
		plugin := NewPlugin("vm-uncore", "[cpu_manager_policy_options]", `prefer-align-cpus-by-uncorecache = "true"`)
		plugin.Start(ctx)
		// L3 0-3 has the free CPUs 1-3, exactly 3: the first cache that
		// holds the request takes it. Then only L3 4-7 holds 4.
		_, three := place(ctx, "three", framework.GuaranteedCPUs(3))
		Expect(three).To(EqualCPUs(cpuset.New(1, 2, 3)), "plugin log:\n%s", plugin.LogTail())
		Expect(Host.L3Groups(three)).To(HaveLen(1))
		_, four := place(ctx, "four", framework.GuaranteedCPUs(4))
		Expect(four).To(EqualCPUs(cpuset.New(4, 5, 6, 7)), "plugin log:\n%s", plugin.LogTail())
		Expect(Host.L3Groups(four)).To(HaveLen(1))
	}, SpecTimeout(10*time.Minute))

	It("memory_manager_policy = Static: cpuset.mems follows the node of the CPUs", func(ctx SpecContext) {
		plugin := NewPlugin("vm-memory", `topology_manager_policy = "single-numa-node"`, `memory_manager_policy = "Static"`,
			"[[reserved_memory]]", "numa_node = 0", `limits = { memory = "256Mi" }`)
		plugin.Start(ctx)
		// 4 CPUs: only node1 has them (as above), and its memory with them.
		big, cpus := place(ctx, "mem-node1", framework.GuaranteedCPUs(4))
		Expect(cpus).To(EqualCPUs(cpuset.New(4, 5, 6, 7)), "plugin log:\n%s", plugin.LogTail())
		cg, err := framework.ReadCpuset(big.CgroupsPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(cg.Mems).To(EqualCPUs(cpuset.New(1)), "cpuset.mems of %s", big.CgroupsPath())
		// 2 CPUs: node0's whole core 2-3, and node0's memory.
		small, cpus := place(ctx, "mem-node0", framework.GuaranteedCPUs(2))
		Expect(cpus).To(EqualCPUs(cpuset.New(2, 3)), "plugin log:\n%s", plugin.LogTail())
		cg, err = framework.ReadCpuset(small.CgroupsPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(cg.Mems).To(EqualCPUs(cpuset.New(0)), "cpuset.mems of %s", small.CgroupsPath())
	}, SpecTimeout(10*time.Minute))
})
