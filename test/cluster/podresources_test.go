//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

const (
	// podresNS holds the PodResources specs' pods.
	podresNS = "cpualign-e2e-podres"
	// gpuResource is the test device plugin's extended resource.
	gpuResource = "e2e.nri-cpualign.io/gpu"
	// gpuPluginSocket is its socket's name in the kubelet's device-plugin
	// directory.
	gpuPluginSocket = "nri-cpualign-e2e-gpu.sock"
)

// podResourcesWarning matches the plugin's warning for an absent socket.
var podResourcesWarning = regexp.MustCompile(`level=warning msg="kubelet PodResources: no socket`)

// gpuNUMA is the test device plugin's devices and the NUMA node each
// reports in its TopologyInfo: one on each of the fake machine's nodes.
var gpuNUMA = map[string]int64{"gpu-0": 0, "gpu-1": 1}

// gpuPlugin is a device plugin that registers with the real kubelet over
// the device-plugin API (k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1):
// ListAndWatch lists gpuNUMA's devices with their TopologyInfo,
// GetPreferredAllocation prefers gpu-1 (so the first pod gets the device
// on node 1, where a 1-CPU pod without a device hint would not land),
// Allocate records the IDs and hands the container nothing (no device
// node, no variable, no mount): only the kubelet knows which device it is.
type gpuPlugin struct {
	pluginapi.UnimplementedDevicePluginServer
	srv  *grpc.Server
	stop chan struct{}

	mu        sync.Mutex
	allocated [][]string // each Allocate's container requests' device IDs, in order
}

func (p *gpuPlugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

func (p *gpuPlugin) ListAndWatch(_ *pluginapi.Empty, s pluginapi.DevicePlugin_ListAndWatchServer) error {
	resp := &pluginapi.ListAndWatchResponse{}
	for _, id := range []string{"gpu-0", "gpu-1"} {
		resp.Devices = append(resp.Devices, &pluginapi.Device{ID: id, Health: pluginapi.Healthy,
			Topology: &pluginapi.TopologyInfo{Nodes: []*pluginapi.NUMANode{{ID: gpuNUMA[id]}}}})
	}
	if err := s.Send(resp); err != nil {
		return err
	}
	select {
	case <-p.stop:
	case <-s.Context().Done():
	}
	return nil
}

func (p *gpuPlugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, cr := range req.GetContainerRequests() {
		var ids []string
		for _, id := range []string{"gpu-1", "gpu-0"} {
			for _, a := range cr.GetAvailableDeviceIDs() {
				if a == id && len(ids) < int(cr.GetAllocationSize()) {
					ids = append(ids, id)
				}
			}
		}
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

func (p *gpuPlugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, cr := range req.GetContainerRequests() {
		p.allocated = append(p.allocated, cr.GetDevicesIds())
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerAllocateResponse{})
	}
	return resp, nil
}

// allocations is what Allocate was asked so far.
func (p *gpuPlugin) allocations() [][]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][]string(nil), p.allocated...)
}

// startGPUPlugin serves the plugin in the kubelet's device-plugin
// directory, registers it and waits until the node's allocatable shows
// both devices. It stops when the calling container's cleanups run.
func startGPUPlugin(ctx SpecContext) *gpuPlugin {
	GinkgoHelper()
	// The kubelet's device manager serves its Registration socket at this
	// fixed path, whatever its --root-dir.
	dir := pluginapi.DevicePluginPath
	Expect(pluginapi.KubeletSocket).To(BeAnExistingFile(), "the kubelet's device-plugin registration socket")
	sock := filepath.Join(dir, gpuPluginSocket)
	_ = os.Remove(sock) // an earlier run's
	l, err := net.Listen("unix", sock)
	Expect(err).NotTo(HaveOccurred())
	p := &gpuPlugin{srv: grpc.NewServer(), stop: make(chan struct{})}
	pluginapi.RegisterDevicePluginServer(p.srv, p)
	go func() { _ = p.srv.Serve(l) }()
	DeferCleanup(func() {
		close(p.stop)
		p.srv.Stop()
	})

	conn, err := grpc.NewClient("unix://"+pluginapi.KubeletSocket, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close()
	rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(rctx, &pluginapi.RegisterRequest{
		Version: pluginapi.Version, Endpoint: gpuPluginSocket, ResourceName: gpuResource,
		Options: &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	}, grpc.WaitForReady(true))
	Expect(err).NotTo(HaveOccurred(), "registering %s with the kubelet", gpuResource)

	// The kubelet reports the devices in the node's status (every
	// nodeStatusUpdateFrequency, 2 s here); the bound is the condition's.
	Eventually(func(g Gomega) {
		var node corev1.Node
		g.Expect(getJSON(ctx, &node, "get", "node", Env.Node)).To(Succeed())
		q := node.Status.Allocatable[corev1.ResourceName(gpuResource)]
		g.Expect(q.Value()).To(Equal(int64(2)), "allocatable %s", gpuResource)
	}).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(time.Second).Should(Succeed(),
		"node %s's allocatable did not show 2 %s within 60 s of the device plugin's registration", Env.Node, gpuResource)
	return p
}

// twoNodeSysfs writes the fake machine of the NodeResourceTopology specs:
// this machine's CPU 0 on NUMA node 0 and CPU 1 on node 1, the memory on
// node 0 only (memory_manager_policy None gives containers every memory
// node as cpuset.mems, which the kernel must accept).
func twoNodeSysfs(dir string) string {
	GinkgoHelper()
	root := filepath.Join(dir, "sys")
	Expect(sysfstest.Write(root, sysfstest.Spec{Description: "this machine's 2 CPUs on 2 NUMA nodes",
		Sockets: 2, CoresPerSocket: 1, ThreadsPerCore: 1, MemoryMiBPerNode: 4096})).To(Succeed())
	nodeDir := filepath.Join(root, "devices/system/node")
	Expect(os.WriteFile(filepath.Join(nodeDir, "node1/meminfo"), []byte("Node 1 MemTotal:       0 kB\nNode 1 MemFree:        0 kB\n"), 0o644)).To(Succeed())
	Expect(os.WriteFile(filepath.Join(nodeDir, "has_memory"), []byte("0\n"), 0o644)).To(Succeed())
	return root
}

// gpuPod is a Guaranteed pod of 1 CPU and 1 device.
func gpuPod(name string) *corev1.Pod {
	r := resources("1", "1", "32Mi")
	r.Limits[corev1.ResourceName(gpuResource)] = resource.MustParse("1")
	return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podresNS, Labels: map[string]string{"app": name}}, Spec: podSpec(r)}
}

// requireTwoCPUs skips where the fake topology cannot split the machine.
func requireTwoCPUs() {
	if !HostCPUs.Equals(cpuset.New(0, 1)) {
		Skip(fmt.Sprintf("needs CPUs 0-1 exactly (the fake topology puts one on each NUMA node); this machine has %s", HostCPUs))
	}
}

// Issue 40: a device plugin's devices, of any vendor, through the real
// kubelet. The suite's device plugin registers two devices, one on each
// NUMA node of the fake machine (CPU 0 on node 0, CPU 1 on node 1); the
// kubelet (topology manager none) allocates them; the plugin, on the host
// under single-numa-node with nothing reserved, learns each container's
// device and its node from the kubelet's PodResources API alone: the
// containers carry no device node, variable or mount naming it.
var _ = Describe("a device plugin's devices on two NUMA nodes, learned from the real kubelet's PodResources API, the plugin on the host under single-numa-node", Ordered, Serial, func() {
	var (
		logPath string
		gpus    *gpuPlugin
	)

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		requireTwoCPUs()
		waitNodeReady(ctx)
		waitNodeEmpty(ctx)
		gpus = startGPUPlugin(ctx)

		// The kubelet's socket under its --root-dir (the DaemonSet's
		// /var/lib/kubelet/pod-resources on a usual node).
		sock := filepath.Join(Env.Dir, "kubelet", "pod-resources", "kubelet.sock")
		Expect(sock).To(BeAnExistingFile(), "the kubelet's PodResources socket")
		dir := filepath.Join(Env.Dir, "podres-plugin")
		sysRoot := twoNodeSysfs(dir)
		logPath, _ = startHostPlugin(ctx, dir, map[string]string{
			"reserved_cpu_count":      "0",
			"topology_manager_policy": `"single-numa-node"`,
			"sysfs_root":              fmt.Sprintf("%q", sysRoot),
			"pod_resources_socket":    fmt.Sprintf("%q", sock),
			// A generous bound: these specs are about the kubelet's answer
			// on a loaded two-CPU machine, not its speed (the 5 ms default
			// and its figures: docs/performance.md; the fallback: the next
			// Describe).
			"pod_resources_timeout": `"1s"`,
			"log_level":             `"info"`,
		}, func(g Gomega, st observe.StateView) {
			g.Expect(st.Topology).To(Equal("single-numa-node"))
		})
		createNamespace(ctx, podresNS)
	}, NodeTimeout(5*time.Minute))

	It("pins each pod's CPU on the NUMA node of the device the kubelet allocated it, and names the device in /state and the decision's log line", func(ctx SpecContext) {
		// cpuOfNode: the fake machine's one CPU of each node.
		cpuOfNode := map[int64]int{0: 0, 1: 1}
		for i, name := range []string{"gpu-a", "gpu-b"} {
			apply(ctx, gpuPod(name))
			var pod corev1.Pod
			Eventually(func(g Gomega) {
				pod = runningPod(g, ctx, podresNS, "app="+name)
			}).WithContext(ctx).WithTimeout(90*time.Second).Should(Succeed(), "plugin log:\n%s", logSince(logPath, 0))

			allocs := gpus.allocations()
			Expect(allocs).To(HaveLen(i+1), "Allocate calls after pod %s", name)
			Expect(allocs[i]).To(HaveLen(1))
			dev := allocs[i][0]
			if i == 0 {
				// The plugin's preference: the first pod's device is on
				// node 1, where a 1-CPU pod without a device hint would not
				// go (the lowest free CPU, 0).
				Expect(dev).To(Equal("gpu-1"), "the kubelet did not take the device plugin's preferred allocation")
			}
			node := gpuNUMA[dev]
			want := cpuset.New(cpuOfNode[node])
			Eventually(func(g Gomega) cpuset.CPUSet { return cpusOf(g, ctx, pod) }).
				WithContext(ctx).WithTimeout(10*time.Second).Should(equalCPUs(want), "pod %s with %s (NUMA node %d)", name, dev, node)

			named := fmt.Sprintf("%s %s via PodResources", gpuResource, dev)
			Expect(hasLine(logSince(logPath, 0), "container admitted", "pod="+podresNS+"/"+name, fmt.Sprintf("%s numa %d", named, node))).
				To(BeTrue(), "the decision's line does not name %s on node %d; plugin log:\n%s", named, node, logSince(logPath, 0))
			Eventually(func(g Gomega) []ledger.DeviceView {
				for _, c := range hostState(g, ctx).Containers {
					if c.Pod == podresNS+"/"+name && c.Container == "app" {
						return c.Devices
					}
				}
				return nil
			}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Equal([]ledger.DeviceView{{Device: named, NUMA: []int{int(node)}}}))
		}
	}, SpecTimeout(4*time.Minute))
})

// The bounded fallback: the plugin pointed at a PodResources socket that
// does not exist admits the device's pod without that hint and warns once.
var _ = Describe("the kubelet's PodResources socket absent, the plugin on the host under single-numa-node", Ordered, Serial, func() {
	var logPath string

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		requireTwoCPUs()
		waitNodeReady(ctx)
		waitNodeEmpty(ctx)
		startGPUPlugin(ctx)
		dir := filepath.Join(Env.Dir, "podres-absent-plugin")
		logPath, _ = startHostPlugin(ctx, dir, map[string]string{
			"reserved_cpu_count":      "0",
			"topology_manager_policy": `"single-numa-node"`,
			"sysfs_root":              fmt.Sprintf("%q", twoNodeSysfs(dir)),
			"pod_resources_socket":    fmt.Sprintf("%q", filepath.Join(dir, "absent", "kubelet.sock")),
			"log_level":               `"info"`,
		}, func(g Gomega, st observe.StateView) {
			g.Expect(st.Topology).To(Equal("single-numa-node"))
		})
		createNamespace(ctx, podresNS)
	}, NodeTimeout(5*time.Minute))

	It("admits a pod with a device without its hint and logs the warning once", func(ctx SpecContext) {
		for _, name := range []string{"gpu-a", "gpu-b"} {
			apply(ctx, gpuPod(name))
			Eventually(func(g Gomega) {
				runningPod(g, ctx, podresNS, "app="+name)
			}).WithContext(ctx).WithTimeout(90*time.Second).Should(Succeed(), "plugin log:\n%s", logSince(logPath, 0))
		}
		log := logSince(logPath, 0)
		Expect(hasLine(log, "level=warning", "kubelet PodResources: no socket", "pod="+podresNS+"/gpu-a")).To(BeTrue(), "plugin log:\n%s", log)
		Expect(countLines(log, podResourcesWarning)).To(Equal(1), "the warning is not once a minute; plugin log:\n%s", log)
		Expect(log).NotTo(ContainSubstring("via PodResources"))
	}, SpecTimeout(4*time.Minute))
})
