package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Runtime is the runtime side of NRI (pkg/adaptation, the code containerd
// embeds) with a small container store, driven directly: the caller plays
// containerd's CRI server and sends the pod and container events. It applies
// the plugin's adjustments and updates to its containers and hands them to a
// connecting plugin in Synchronize, as containerd does, so a plugin can be
// measured over the real NRI protocol without root or real containers.
//
// The test/e2e suite's NRIRuntime and internal/daemon's fakeRuntime do the
// same inside their test packages, which cannot be imported; this one is a
// plain package so the benchmarks and the RSS tool share it.
type Runtime struct {
	Socket string
	r      *adaptation.Adaptation

	mu      sync.Mutex
	pods    map[string]*api.PodSandbox
	ctrs    map[string]*api.Container
	order   []string // container ids in creation order
	syncs   int      // completed plugin Synchronize calls
	pushes  int      // unsolicited UpdateContainers calls from the plugin
	seq     int
	syncedC chan struct{}
}

// StartRuntime listens on dir/nri.sock (dir must be short: unix socket
// paths are limited to 108 bytes). Stop it with Stop.
//
// It raises NRI's plugin request timeout (2 s in containerd) to 30 s for
// the whole process: on a loaded machine a slow answer must be measured,
// not turned into a dropped plugin. NRI's own info lines are dropped too
// (warnings and errors still go to stderr): they would land in the middle
// of the benchmark result lines.
func StartRuntime(dir string) (*Runtime, error) {
	adaptation.SetPluginRequestTimeout(30 * time.Second)
	nrilog.Set(quietLogger{})
	rt := &Runtime{Socket: filepath.Join(dir, "nri.sock"), pods: map[string]*api.PodSandbox{},
		ctrs: map[string]*api.Container{}, syncedC: make(chan struct{}, 1)}
	r, err := adaptation.New("bench-runtime", "v0.0.0", rt.synchronize, rt.update,
		adaptation.WithSocketPath(rt.Socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		return nil, err
	}
	if err := r.Start(); err != nil {
		return nil, err
	}
	// Start synchronized the (absent) pre-installed plugins through the
	// same callback: count plugin connections from here on.
	rt.mu.Lock()
	rt.syncs = 0
	rt.mu.Unlock()
	select {
	case <-rt.syncedC:
	default:
	}
	rt.r = r
	return rt, nil
}

// Stop stops listening and closes the plugin connections.
func (rt *Runtime) Stop() { rt.r.Stop() }

func (rt *Runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
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
	rt.applyLocked(updates)
	rt.syncs++
	rt.mu.Unlock()
	select {
	case rt.syncedC <- struct{}{}:
	default:
	}
	return nil
}

func (rt *Runtime) update(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.applyLocked(updates)
	rt.pushes++
	return nil, nil
}

func (rt *Runtime) applyLocked(updates []*api.ContainerUpdate) {
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

// WaitForPlugin waits until a plugin has connected, synchronized and been
// registered for events.
func (rt *Runtime) WaitForPlugin(timeout time.Duration) error {
	select {
	case <-rt.syncedC:
	case <-time.After(timeout):
		return fmt.Errorf("no plugin synchronized within %s", timeout)
	}
	// The plugin joins the event list right after Synchronize, under the
	// lock BlockPluginSync takes.
	rt.r.BlockPluginSync().Unblock()
	return nil
}

// Pushes is the number of unsolicited update calls the plugin made.
func (rt *Runtime) Pushes() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.pushes
}

// Containers is the number of containers in the store.
func (rt *Runtime) Containers() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return len(rt.ctrs)
}

func (rt *Runtime) next(prefix, name string) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.seq++
	return fmt.Sprintf("%s-%s-%d", prefix, name, rt.seq)
}

func nriCPU(shares, quota, period int64) *api.LinuxCPU {
	return &api.LinuxCPU{Shares: api.UInt64(uint64(shares)), Quota: api.Int64(quota), Period: api.UInt64(uint64(period))}
}

// RunPod sends RunPodSandbox for a pod whose containers have the given
// resources, with the kubelet's pod-level values and cgroup parent.
func (rt *Runtime) RunPod(ctx context.Context, name string, ctrs ...framework.Resources) (*api.PodSandbox, error) {
	uid := rt.next("uid", name)
	q := framework.PodQOS(ctrs...)
	pr := framework.PodCRI(q, ctrs...)
	pod := &api.PodSandbox{
		Id: "sandbox-" + uid, Name: name, Uid: uid, Namespace: "bench",
		Labels: map[string]string{}, Annotations: map[string]string{},
		Linux: &api.LinuxPodSandbox{
			CgroupParent: framework.CgroupParent(q, uid),
			Resources: &api.LinuxResources{Cpu: nriCPU(pr.CpuShares, pr.CpuQuota, pr.CpuPeriod),
				Memory: &api.LinuxMemory{Limit: api.Int64(pr.MemoryLimitInBytes)}},
		},
	}
	if err := rt.r.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod}); err != nil {
		return nil, err
	}
	rt.mu.Lock()
	rt.pods[pod.Id] = pod
	rt.mu.Unlock()
	return pod, nil
}

// NewContainer builds the container containerd would hand to
// CreateContainer for r in pod (the kubelet's shares, quota, period,
// memory limit and cgroups path); it is not sent anywhere yet.
func (rt *Runtime) NewContainer(pod *api.PodSandbox, name string, r framework.Resources) *api.Container {
	id := rt.next("ctr", name)
	cr := r.CRI(framework.PodQOS(r))
	return &api.Container{
		Id: id, PodSandboxId: pod.Id, Name: name, State: api.ContainerState_CONTAINER_CREATED,
		Labels: map[string]string{}, Annotations: map[string]string{},
		Linux: &api.LinuxContainer{
			Resources: &api.LinuxResources{Cpu: nriCPU(cr.CpuShares, cr.CpuQuota, cr.CpuPeriod),
				Memory: &api.LinuxMemory{Limit: api.Int64(cr.MemoryLimitInBytes)}},
			CgroupsPath: pod.GetLinux().GetCgroupParent() + "/" + id,
		},
	}
}

// Create sends CreateContainer for c (from NewContainer) and, when it is
// accepted, stores it with the adjustment and applies the updates for the
// other containers. It returns the adjusted cpuset.cpus.
func (rt *Runtime) Create(ctx context.Context, pod *api.PodSandbox, c *api.Container) (string, error) {
	resp, err := rt.r.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: c})
	if err != nil {
		return "", err
	}
	cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
	if cpu.GetCpus() == "" {
		return "", errors.New("the plugin's adjustment sets no cpuset.cpus")
	}
	c.Linux.Resources.Cpu.Cpus, c.Linux.Resources.Cpu.Mems = cpu.GetCpus(), cpu.GetMems()
	rt.mu.Lock()
	rt.ctrs[c.Id] = c
	rt.order = append(rt.order, c.Id)
	rt.applyLocked(resp.GetUpdate())
	rt.mu.Unlock()
	return cpu.GetCpus(), nil
}

// Start sends StartContainer for a created container.
func (rt *Runtime) Start(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	c.State = api.ContainerState_CONTAINER_RUNNING
	return rt.r.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: c})
}

// StopRemove sends StopContainer and RemoveContainer and drops c.
func (rt *Runtime) StopRemove(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	c.State = api.ContainerState_CONTAINER_STOPPED
	resp, err := rt.r.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: c})
	if err != nil {
		return err
	}
	if err := rt.r.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: c}); err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	delete(rt.ctrs, c.Id)
	rt.applyLocked(resp.GetUpdate())
	return nil
}

// Populate creates n running one-container pods: every fifth a Guaranteed
// container with exclusiveCPUs CPUs, the others Burstable (250m request,
// 1 CPU limit) on the shared pool, the mix of a busy node.
func (rt *Runtime) Populate(ctx context.Context, n, exclusiveCPUs int) error {
	for i := 0; i < n; i++ {
		r := framework.Resources{CPURequestMilli: 250, CPULimitMilli: 1000, MemLimit: 128 << 20}
		if i%5 == 0 {
			r = framework.GuaranteedCPUs(exclusiveCPUs)
		}
		pod, err := rt.RunPod(ctx, fmt.Sprintf("pop%d", i), r)
		if err != nil {
			return err
		}
		c := rt.NewContainer(pod, "c", r)
		if _, err := rt.Create(ctx, pod, c); err != nil {
			return fmt.Errorf("container %d of %d: %w", i+1, n, err)
		}
		if err := rt.Start(ctx, pod, c); err != nil {
			return err
		}
	}
	return nil
}

// quietLogger is NRI's logger without the debug and info levels.
type quietLogger struct{}

func (quietLogger) Debugf(context.Context, string, ...any) {}
func (quietLogger) Infof(context.Context, string, ...any)  {}
func (quietLogger) Warnf(ctx context.Context, format string, args ...any) {
	logrus.WithContext(ctx).Warnf(format, args...)
}
func (quietLogger) Errorf(ctx context.Context, format string, args ...any) {
	logrus.WithContext(ctx).Errorf(format, args...)
}
