//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Device alignment through a real runtime: the container is given the
// host's /dev/kmsg (a char device this machine's sysfs knows, with no
// NUMA node of its own), and the plugin reads a fake sysfs tree that
// splits the host's CPUs 0..n-1 into two NUMA nodes (node 0 = the first
// half, node 1 = the second, without memory as the host has one node) and hangs kmsg's major:minor off a PCI
// function on node 1. A second PCI function, on node 0, is named by an
// SR-IOV-style PCIDEVICE_* variable. Under single-numa-node with CPU 0
// reserved, a container of n/2 CPUs fits on node 1 only whole and on
// node 0 not at all, so:
//   - with the node-0 function in its environment it is refused with
//     TopologyAffinityError while node 1 is free (without the variable it
//     would get node 1), which proves the variable reached the plugin
//     through the runtime and steered the decision;
//   - with /dev/kmsg it gets all of node 1, CPUs n/2..n-1.
var _ = Describe("device alignment on a real "+RuntimeName+" with a fake two-node sysfs", Ordered, Serial, func() {
	var (
		plugin *Plugin
		kmsg   string // major:minor of /dev/kmsg
		n      int
	)

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		n = Host.CPUs.Size()
		if n%2 != 0 || !Host.CPUs.Equals(cpuRange(0, n)) {
			Skip("the fake tree splits CPUs 0..n-1 into two equal nodes; this machine's CPUs are " + Host.CPUs.String())
		}
		data, err := os.ReadFile("/sys/class/mem/kmsg/dev")
		if err != nil {
			Skip("no /dev/kmsg in this machine's sysfs: " + err.Error())
		}
		kmsg = strings.TrimSpace(string(data))
		sys := filepath.Join(WorkDir, "devices-sysfs")
		Expect(os.RemoveAll(sys)).To(Succeed())
		Expect(sysfstest.Write(sys, sysfstest.Spec{
			Description: "the host's CPUs as two single-thread sockets, one NUMA node each", Sockets: 2, CoresPerSocket: n / 2,
		})).To(Succeed())
		files := map[string]string{
			"devices/pci0000:e1/0000:e1:00.0/numa_node":    "1\n",
			"devices/pci0000:e1/0000:e1:00.0/mem/kmsg/dev": kmsg + "\n",
			"devices/pci0000:e0/0000:e0:00.0/numa_node":    "0\n",
			// The machine's memory is all on its one real node: the plugin
			// writes cpuset.mems from the memory nodes, and the kernel
			// refuses a node it does not have.
			"devices/system/node/node1/meminfo": "Node 1 MemTotal: 0 kB\nNode 1 MemFree: 0 kB\nNode 1 MemUsed: 0 kB\n",
		}
		for p, content := range files {
			Expect(os.MkdirAll(filepath.Dir(filepath.Join(sys, p)), 0o755)).To(Succeed())
			Expect(os.WriteFile(filepath.Join(sys, p), []byte(content), 0o644)).To(Succeed())
		}
		links := map[string]string{
			"dev/char/" + kmsg:             "../../devices/pci0000:e1/0000:e1:00.0/mem/kmsg",
			"bus/pci/devices/0000:e0:00.0": "../../../devices/pci0000:e0/0000:e0:00.0",
		}
		for p, target := range links {
			Expect(os.MkdirAll(filepath.Dir(filepath.Join(sys, p)), 0o755)).To(Succeed())
			Expect(os.Symlink(target, filepath.Join(sys, p))).To(Succeed())
		}
		plugin = NewPlugin("devices", `sysfs_root = "`+sys+`"`, `topology_manager_policy = "single-numa-node"`)
		plugin.Start(ctx)
	}, NodeTimeout(2*time.Minute))

	It("refuses a container whose PCIDEVICE_* function is on node 0 and puts one given /dev/kmsg on node 1", func(ctx SpecContext) {
		r := framework.GuaranteedCPUs(n / 2)

		// Node 1 is free: without the variable the container would get it.
		q := RunPod(ctx, "dev-node0", r)
		before, err := CRI.ContainerCount(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, err = CRI.CreateContainer(ctx, q, "app", r, func(cfg *cri.ContainerConfig) {
			cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: "PCIDEVICE_E2E_IO_VF", Value: []byte("0000:e0:00.0")})
		})
		Expect(err).To(MatchError(ContainSubstring("TopologyAffinityError")), "plugin log:\n%s", plugin.LogTail())
		after, err := CRI.ContainerCount(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before), "the refused CreateContainer left a container behind")

		p := RunPod(ctx, "dev-node1", r)
		ct, err := CRI.RunContainer(ctx, p, "app", r, func(cfg *cri.ContainerConfig) {
			cfg.Devices = append(cfg.Devices, &cri.Device{ContainerPath: "/dev/e2e-kmsg", HostPath: "/dev/kmsg", Permissions: "r"})
		})
		Expect(err).NotTo(HaveOccurred(), "plugin log:\n%s", plugin.LogTail())
		Expect(CPUsOf(ctx, ct)).To(EqualCPUs(cpuRange(n/2, n)), "plugin log:\n%s", plugin.LogTail())
		log, err := os.ReadFile(plugin.LogPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(log)).To(ContainSubstring("(char "+kmsg+") numa 1"), "the debug line naming the device and its node")
	}, NodeTimeout(3*time.Minute))
})

// cpuRange is CPUs lo..hi-1.
func cpuRange(lo, hi int) cpuset.CPUSet {
	var ids []int
	for i := lo; i < hi; i++ {
		ids = append(ids, i)
	}
	return cpuset.New(ids...)
}
