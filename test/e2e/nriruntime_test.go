//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// NRIRuntime is the runtime side of NRI (github.com/containerd/nri's
// pkg/adaptation, the code containerd embeds) driven directly by a spec: it
// listens on its own socket, and the spec plays containerd's CRI server,
// sending the pod and container events the kubelet's calls would cause. It
// keeps the containers it created, applies the plugin's adjustments and
// updates to them, and hands them to a (re)connecting plugin in Synchronize,
// as containerd does. No root and no real containers are needed, so it runs
// the plugin on the fixture machines of pkg/sysfs/sysfstest.
type NRIRuntime struct {
	Socket string
	r      *adaptation.Adaptation

	mu          sync.Mutex
	pods        map[string]*api.PodSandbox
	ctrs        map[string]*api.Container
	order       []string // container ids in creation order
	syncs       int
	unsolicited []*api.ContainerUpdate
	seq         int
}

// StartNRIRuntime starts the runtime side listening in dir/nri.sock; it stops
// when the current node's scope ends.
func StartNRIRuntime(dir string) *NRIRuntime {
	GinkgoHelper()
	rt := &NRIRuntime{Socket: filepath.Join(dir, "nri.sock"), pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	r, err := adaptation.New("e2e-runtime", "v0.0.0", rt.synchronize, rt.update,
		adaptation.WithSocketPath(rt.Socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	Expect(err).NotTo(HaveOccurred())
	Expect(r.Start()).To(Succeed())
	// Start synchronizes the (here absent) pre-installed plugins through
	// the same function: count plugin connections from now on.
	rt.mu.Lock()
	rt.syncs = 0
	rt.mu.Unlock()
	rt.r = r
	DeferCleanup(r.Stop)
	return rt
}

func (rt *NRIRuntime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	rt.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.pods {
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(rt.ctrs))
	for _, id := range rt.order {
		if c, ok := rt.ctrs[id]; ok {
			ctrs = append(ctrs, c)
		}
	}
	rt.mu.Unlock()
	updates, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.applyLocked(updates)
	rt.syncs++
	return nil
}

func (rt *NRIRuntime) update(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.unsolicited = append(rt.unsolicited, updates...)
	rt.applyLocked(updates)
	return nil, nil
}

func (rt *NRIRuntime) applyLocked(updates []*api.ContainerUpdate) {
	for _, u := range updates {
		c, ok := rt.ctrs[u.GetContainerId()]
		if !ok {
			continue
		}
		cpu := u.GetLinux().GetResources().GetCpu()
		if cpu.GetCpus() != "" {
			c.Linux.Resources.Cpu.Cpus = cpu.GetCpus()
		}
		if cpu.GetMems() != "" {
			c.Linux.Resources.Cpu.Mems = cpu.GetMems()
		}
	}
}

// Syncs is the number of completed Synchronize calls (plugin connections).
func (rt *NRIRuntime) Syncs() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.syncs
}

// WaitForPlugin waits until the n-th plugin connection has synchronized and
// has been registered for events.
func (rt *NRIRuntime) WaitForPlugin(ctx context.Context, n int) {
	GinkgoHelper()
	Eventually(rt.Syncs).WithContext(ctx).WithTimeout(20 * time.Second).Should(BeNumerically(">=", n))
	// The plugin joins the event list right after Synchronize, under the
	// sync lock that BlockPluginSync waits for.
	rt.r.BlockPluginSync().Unblock()
}

// RunPod sends RunPodSandbox for a pod of the given containers' resources.
func (rt *NRIRuntime) RunPod(ctx context.Context, name string, ctrs ...framework.Resources) *api.PodSandbox {
	GinkgoHelper()
	rt.mu.Lock()
	rt.seq++
	uid := fmt.Sprintf("uid-%s-%d", name, rt.seq)
	rt.mu.Unlock()
	q := framework.PodQOS(ctrs...)
	pr := framework.PodCRI(q, ctrs...)
	pod := &api.PodSandbox{
		Id: "sandbox-" + uid, Name: name, Uid: uid, Namespace: "e2e",
		Labels: map[string]string{}, Annotations: map[string]string{},
		Linux: &api.LinuxPodSandbox{
			CgroupParent: framework.CgroupParent(q, uid),
			Resources:    &api.LinuxResources{Cpu: nriCPU(pr.CpuShares, pr.CpuQuota, pr.CpuPeriod), Memory: &api.LinuxMemory{Limit: api.Int64(pr.MemoryLimitInBytes)}},
		},
	}
	Expect(rt.r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})).To(Succeed())
	rt.mu.Lock()
	rt.pods[pod.Id] = pod
	rt.mu.Unlock()
	return pod
}

func nriCPU(shares, quota, period int64) *api.LinuxCPU {
	return &api.LinuxCPU{Shares: api.UInt64(shares), Quota: api.Int64(quota), Period: api.UInt64(period)}
}

// Placement is the plugin's answer to one CreateContainer.
type Placement struct {
	Container *api.Container
	CPUs      cpuset.CPUSet     // the adjustment's cpuset.cpus
	Mems      string            // the adjustment's cpuset.mems
	Updates   map[string]string // other containers' new cpuset.cpus, by container name
}

// CreateContainer sends CreateContainer (then StartContainer, when it is
// accepted) for a container with the kubelet's values for r, as containerd
// would: shares, quota, period, memory limit and the cgroups path under the
// pod's cgroup parent.
func (rt *NRIRuntime) CreateContainer(ctx context.Context, pod *api.PodSandbox, name string, r framework.Resources) (Placement, error) {
	GinkgoHelper()
	cr := r.CRI(qosOf(pod))
	rt.mu.Lock()
	rt.seq++
	id := fmt.Sprintf("ctr-%s-%d", name, rt.seq)
	rt.mu.Unlock()
	c := &api.Container{
		Id: id, PodSandboxId: pod.Id, Name: name, State: api.ContainerState_CONTAINER_CREATED,
		Labels: map[string]string{}, Annotations: map[string]string{},
		Linux: &api.LinuxContainer{
			Resources:   &api.LinuxResources{Cpu: nriCPU(cr.CpuShares, cr.CpuQuota, cr.CpuPeriod), Memory: &api.LinuxMemory{Limit: api.Int64(cr.MemoryLimitInBytes)}},
			CgroupsPath: pod.GetLinux().GetCgroupParent() + "/" + id,
		},
	}
	resp, err := rt.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: c})
	if err != nil {
		return Placement{}, err
	}
	cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
	p := Placement{Container: c, Mems: cpu.GetMems(), Updates: map[string]string{}}
	p.CPUs, err = cpuset.Parse(cpu.GetCpus())
	Expect(err).NotTo(HaveOccurred(), "adjusted cpuset %q", cpu.GetCpus())
	c.Linux.Resources.Cpu.Cpus, c.Linux.Resources.Cpu.Mems = cpu.GetCpus(), cpu.GetMems()
	rt.mu.Lock()
	rt.ctrs[id] = c
	rt.order = append(rt.order, id)
	rt.applyLocked(resp.GetUpdate())
	for _, u := range resp.GetUpdate() {
		if o, ok := rt.ctrs[u.GetContainerId()]; ok {
			p.Updates[o.Name] = u.GetLinux().GetResources().GetCpu().GetCpus()
		}
	}
	rt.mu.Unlock()
	c.State = api.ContainerState_CONTAINER_RUNNING
	Expect(rt.r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: c})).To(Succeed())
	return p, nil
}

// StopContainer sends StopContainer and RemoveContainer and returns the
// updates the plugin sent for other containers, by name.
func (rt *NRIRuntime) StopContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) map[string]string {
	GinkgoHelper()
	c.State = api.ContainerState_CONTAINER_STOPPED
	resp, err := rt.r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: c})
	Expect(err).NotTo(HaveOccurred())
	Expect(rt.r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: c})).To(Succeed())
	rt.mu.Lock()
	defer rt.mu.Unlock()
	delete(rt.ctrs, c.Id)
	rt.applyLocked(resp.GetUpdate())
	out := map[string]string{}
	for _, u := range resp.GetUpdate() {
		if o, ok := rt.ctrs[u.GetContainerId()]; ok {
			out[o.Name] = u.GetLinux().GetResources().GetCpu().GetCpus()
		}
	}
	return out
}

// CPUsOfContainer is the cpuset the runtime currently has for the container
// named name (after every adjustment and update).
func (rt *NRIRuntime) CPUsOfContainer(name string) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, c := range rt.ctrs {
		if c.Name == name {
			return c.Linux.Resources.Cpu.Cpus
		}
	}
	return ""
}

func qosOf(pod *api.PodSandbox) framework.QOS {
	parent := pod.GetLinux().GetCgroupParent()
	switch {
	case filepath.Base(filepath.Dir(parent)) == string(framework.Burstable):
		return framework.Burstable
	case filepath.Base(filepath.Dir(parent)) == string(framework.BestEffort):
		return framework.BestEffort
	}
	return framework.Guaranteed
}
