//go:build e2e

package e2e

import (
	"os"
	"path/filepath"
	"syscall"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// GPU alignment through a real runtime, without a GPU: the plugin reads
// a fake sysfs that splits the host's CPUs 0..n-1 into two NUMA nodes
// (node 0 = the first half, node 1 = the second, as in the device spec
// above) and a fake procfs with the NVIDIA driver's information files
// of two GPUs: /dev/nvidia0 = 0000:e1:00.0 on node 1, /dev/nvidia1 =
// 0000:e0:00.0 on node 0. The GPUs reach the containers the two ways
// device plugins hand them over: as device nodes (CDI's way: char
// 195:N made with mknod in a temporary directory, plus the control
// nodes, passed as CRI devices) and as NVIDIA_VISIBLE_DEVICES=GPU-<uuid>
// alone (the envvar strategy). Under single-numa-node with CPU 0
// reserved, a container of n/2 CPUs fits whole on node 1 only, so:
//   - with node 1's GPU, by node or by variable, it gets CPUs n/2..n-1;
//   - with node 0's GPU by variable it is refused with
//     TopologyAffinityError while node 1 is free (without the variable it
//     would get node 1): the variable reached the plugin and steered it;
//   - with both GPUs it is refused with TopologyAffinityError.
var _ = Describe("GPU alignment on a real "+RuntimeName+" with a fake two-node sysfs and procfs", Ordered, Serial, func() {
	var (
		plugin *Plugin
		n      int
		devDir string // the mknod'ed device nodes
	)
	gpu1 := sysfstest.GPU{PCI: "0000:e1:00.0", Minor: 0, UUID: "GPU-e1e1e1e1-0000-4000-8000-0000000000e1", NUMA: "1"}
	gpu0 := sysfstest.GPU{PCI: "0000:e0:00.0", Minor: 1, UUID: "GPU-e0e0e0e0-0000-4000-8000-0000000000e0", NUMA: "0"}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		n = Host.CPUs.Size()
		if n%2 != 0 || !Host.CPUs.Equals(cpuRange(0, n)) {
			Skip("the fake tree splits CPUs 0..n-1 into two equal nodes; this machine's CPUs are " + Host.CPUs.String())
		}
		sys := filepath.Join(WorkDir, "gpu-sysfs")
		proc := filepath.Join(WorkDir, "gpu-procfs")
		devDir = filepath.Join(WorkDir, "gpu-dev")
		for _, d := range []string{sys, proc, devDir} {
			Expect(os.RemoveAll(d)).To(Succeed())
		}
		Expect(sysfstest.Write(sys, sysfstest.Spec{
			Description: "the host's CPUs as two single-thread sockets, one NUMA node each", Sockets: 2, CoresPerSocket: n / 2,
		})).To(Succeed())
		// The machine's memory is all on its one real node (see the
		// device spec above).
		meminfo := filepath.Join(sys, "devices/system/node/node1/meminfo")
		Expect(os.WriteFile(meminfo, []byte("Node 1 MemTotal: 0 kB\nNode 1 MemFree: 0 kB\nNode 1 MemUsed: 0 kB\n"), 0o644)).To(Succeed())
		Expect(sysfstest.WriteNVIDIA(sys, proc, gpu1, gpu0)).To(Succeed())

		Expect(os.MkdirAll(devDir, 0o755)).To(Succeed())
		for name, dev := range map[string][2]uint32{
			"nvidia0": {195, 0}, "nvidia1": {195, 1}, "nvidiactl": {195, 255}, "nvidia-modeset": {195, 254},
			// nvidia-uvm's major is dynamic; the real host had 238.
			"nvidia-uvm": {238, 0},
		} {
			// The kernel's old dev_t encoding, exact for majors below 4096
			// and minors below 256.
			Expect(syscall.Mknod(filepath.Join(devDir, name), syscall.S_IFCHR|0o666, int(dev[0]<<8|dev[1]))).To(Succeed(), name)
		}
		plugin = NewPlugin("gpus", `sysfs_root = "`+sys+`"`, `procfs_root = "`+proc+`"`, `topology_manager_policy = "single-numa-node"`)
		plugin.Start(ctx)
	}, NodeTimeout(2*time.Minute))

	// devices hands the container the named nodes of devDir at /dev/<name>.
	devices := func(names ...string) framework.ContainerOption {
		return func(cfg *cri.ContainerConfig) {
			for _, name := range names {
				cfg.Devices = append(cfg.Devices, &cri.Device{ContainerPath: "/dev/" + name, HostPath: filepath.Join(devDir, name), Permissions: "rw"})
			}
		}
	}
	env := func(value string) framework.ContainerOption {
		return func(cfg *cri.ContainerConfig) {
			cfg.Envs = append(cfg.Envs, &cri.KeyValue{Key: "NVIDIA_VISIBLE_DEVICES", Value: []byte(value)})
		}
	}
	refused := func(ctx SpecContext, name string, opt framework.ContainerOption) {
		GinkgoHelper()
		r := framework.GuaranteedCPUs(n / 2)
		p := RunPod(ctx, name, r)
		before, err := CRI.ContainerCount(ctx)
		Expect(err).NotTo(HaveOccurred())
		_, err = CRI.CreateContainer(ctx, p, "app", r, opt)
		Expect(err).To(MatchError(ContainSubstring("TopologyAffinityError")), "plugin log:\n%s", plugin.LogTail())
		after, err := CRI.ContainerCount(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(after).To(Equal(before), "the refused CreateContainer left a container behind")
	}
	logHas := func(s string) {
		GinkgoHelper()
		log, err := os.ReadFile(plugin.LogPath)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(log)).To(ContainSubstring(s))
	}

	It("puts a container given /dev/nvidia0 and the control nodes, as CDI hands them over, on its GPU's node", func(ctx SpecContext) {
		r := framework.GuaranteedCPUs(n / 2)
		p := RunPod(ctx, "gpu-cdi", r)
		ct, err := CRI.RunContainer(ctx, p, "app", r, devices("nvidia0", "nvidiactl", "nvidia-modeset", "nvidia-uvm"))
		Expect(err).NotTo(HaveOccurred(), "plugin log:\n%s", plugin.LogTail())
		Expect(CPUsOf(ctx, ct)).To(EqualCPUs(cpuRange(n/2, n)), "plugin log:\n%s", plugin.LogTail())
		logHas("/dev/nvidia0 0000:e1:00.0 numa 1")
	}, NodeTimeout(3*time.Minute))

	It("steers a container given only NVIDIA_VISIBLE_DEVICES=GPU-<uuid> to its GPU's node", func(ctx SpecContext) {
		// Node 1 is free: without the variable the container would get it.
		refused(ctx, "gpu-env-node0", env(gpu0.UUID))
		r := framework.GuaranteedCPUs(n / 2)
		p := RunPod(ctx, "gpu-env-node1", r)
		ct, err := CRI.RunContainer(ctx, p, "app", r, env(gpu1.UUID))
		Expect(err).NotTo(HaveOccurred(), "plugin log:\n%s", plugin.LogTail())
		Expect(CPUsOf(ctx, ct)).To(EqualCPUs(cpuRange(n/2, n)), "plugin log:\n%s", plugin.LogTail())
		logHas(gpu1.UUID + " 0000:e1:00.0 via NVIDIA_VISIBLE_DEVICES numa 1")
	}, NodeTimeout(3*time.Minute))

	It("refuses a container whose GPUs sit on two nodes with TopologyAffinityError", func(ctx SpecContext) {
		refused(ctx, "gpu-two-nodes", devices("nvidia0", "nvidia1", "nvidiactl"))
		refused(ctx, "gpu-two-uuids", env(gpu1.UUID+","+gpu0.UUID))
	}, NodeTimeout(3*time.Minute))
})
