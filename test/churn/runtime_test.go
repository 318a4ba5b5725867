package churn

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// runtime is the runtime side of NRI (pkg/adaptation, the code containerd
// and CRI-O embed) with a container store, as containerd keeps it: it sends
// the pod and container events the kubelet's CRI calls cause, applies the
// plugin's adjustments and updates to its containers, and hands its pods
// and containers (running and stopped) to a (re)connecting plugin in
// Synchronize. Like containerd it holds its big lock while a plugin handles
// an event and takes it for unsolicited updates, and blocks plugin
// registration during an operation (BlockPluginSync), so a plugin that
// connects never misses a container.
//
// The kubelet's cgroup values come from test/e2e/framework (shares and
// quota from milli-CPUs, cgroup parents by QoS class).
type runtime struct {
	t      testing.TB
	socket string
	dir    string
	r      *adaptation.Adaptation

	lock sync.Mutex // the runtime's big lock, held across plugin calls

	mu    sync.Mutex // guards the store
	pods  map[string]*api.PodSandbox
	ctrs  map[string]*api.Container
	syncs int
	seq   int
	// beforeUpdate, when set, runs when an unsolicited update arrives,
	// before the runtime takes its lock (tests order events with it).
	beforeUpdate func()
}

// newRuntime starts the runtime side on dir/nri.sock; dir must be short
// (unix socket paths are limited to 108 bytes).
func newRuntime(t testing.TB, dir string) *runtime {
	rt := &runtime{t: t, dir: dir, socket: filepath.Join(dir, "nri.sock"),
		pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	rt.start()
	return rt
}

func (rt *runtime) start() {
	r, err := adaptation.New("churn-runtime", "v0.0.0", rt.synchronize, rt.update,
		adaptation.WithSocketPath(rt.socket),
		adaptation.WithPluginPath(filepath.Join(rt.dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(rt.dir, "conf.d")))
	if err != nil {
		rt.t.Fatal(err)
	}
	rt.mu.Lock()
	before := rt.syncs
	rt.mu.Unlock()
	if err := r.Start(); err != nil {
		rt.t.Fatal(err)
	}
	// Start synchronizes the (here absent) pre-installed plugins through
	// the same function: only plugin connections count.
	rt.mu.Lock()
	rt.r = r
	rt.syncs = before
	rt.mu.Unlock()
}

// restart stops the runtime side (every plugin connection drops) and starts
// it again on the same socket with the same store: a containerd restart.
func (rt *runtime) restart() {
	rt.mu.Lock()
	r := rt.r
	rt.mu.Unlock()
	r.Stop()
	_ = os.Remove(rt.socket)
	rt.start()
}

func (rt *runtime) stop() {
	rt.mu.Lock()
	r := rt.r
	rt.mu.Unlock()
	r.Stop()
}

func (rt *runtime) adaptation() *adaptation.Adaptation {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.r
}

func (rt *runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	rt.lock.Lock()
	defer rt.lock.Unlock()
	rt.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.pods {
		pods = append(pods, proto.Clone(p).(*api.PodSandbox))
	}
	ctrs := make([]*api.Container, 0, len(rt.ctrs))
	for _, c := range rt.ctrs {
		ctrs = append(ctrs, proto.Clone(c).(*api.Container))
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

func (rt *runtime) update(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	rt.mu.Lock()
	hook := rt.beforeUpdate
	rt.mu.Unlock()
	if hook != nil {
		hook()
	}
	rt.lock.Lock()
	defer rt.lock.Unlock()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.applyLocked(updates)
	return nil, nil
}

// applyLocked applies updates as the runtime does: to known containers
// only (an update for a container that is gone fails, ignored when the
// plugin says so).
func (rt *runtime) applyLocked(updates []*api.ContainerUpdate) {
	for _, u := range updates {
		c, ok := rt.ctrs[u.GetContainerId()]
		if !ok || c.State == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		cpu := u.GetLinux().GetResources().GetCpu()
		setCPUs(c, cpu.GetCpus(), cpu.GetMems())
	}
}

func setCPUs(c *api.Container, cpus, mems string) {
	if cpus != "" {
		c.Linux.Resources.Cpu.Cpus = cpus
	}
	if mems != "" {
		c.Linux.Resources.Cpu.Mems = mems
	}
}

// syncCount is the number of completed Synchronize calls.
func (rt *runtime) syncCount() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.syncs
}

// waitForPlugin waits until Synchronize number n has completed and the
// plugin is registered for events.
func (rt *runtime) waitForPlugin(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for rt.syncCount() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("no plugin Synchronize #%d within %s", n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	// Registration happens right after Synchronize, under the sync lock.
	rt.adaptation().BlockPluginSync().Unblock()
	return nil
}

// newPod makes a pod the way the kubelet runs it: cgroup parent by QoS
// class, pod-level CPU resources (the sum over its containers as the
// kubelet sends them) left out so that the plugin sees only what NRI gives
// for every runtime.
func (rt *runtime) newPod(q framework.QOS) *api.PodSandbox {
	rt.mu.Lock()
	rt.seq++
	uid := fmt.Sprintf("pod%d", rt.seq)
	rt.mu.Unlock()
	return &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: uid, Namespace: "churn",
		Linux: &api.LinuxPodSandbox{CgroupParent: framework.CgroupParent(q, uid)}}
}

// newCtr makes a container with the kubelet's cgroup values for r.
func (rt *runtime) newCtr(pod *api.PodSandbox, name string, r framework.Resources) *api.Container {
	rt.mu.Lock()
	rt.seq++
	id := fmt.Sprintf("ctr%d-%s-%s", rt.seq, pod.Uid, name)
	created := int64(rt.seq)
	rt.mu.Unlock()
	req := r.CPURequestMilli
	if req == 0 {
		req = r.CPULimitMilli
	}
	return &api.Container{
		Id: id, PodSandboxId: pod.Id, Name: name, State: api.ContainerState_CONTAINER_CREATED, CreatedAt: created,
		Linux: &api.LinuxContainer{
			CgroupsPath: pod.Linux.CgroupParent + "/" + id,
			Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{
				Shares: api.UInt64(uint64(framework.MilliToShares(req))),
				Quota:  api.Int64(framework.MilliToQuota(r.CPULimitMilli)),
				Period: api.UInt64(100000),
			}},
		},
	}
}

// op runs f as one CRI operation: plugin registration is held off meanwhile,
// and the runtime's lock is held.
func (rt *runtime) op(f func(r *adaptation.Adaptation)) {
	r := rt.adaptation()
	blk := r.BlockPluginSync()
	defer blk.Unblock()
	rt.lock.Lock()
	defer rt.lock.Unlock()
	f(r)
}

// runPod sends RunPodSandbox (away: the plugin is not connected, nothing
// is sent) and stores the pod.
func (rt *runtime) runPod(pod *api.PodSandbox, away bool) error {
	var err error
	if !away {
		rt.op(func(r *adaptation.Adaptation) {
			err = r.RunPodSandbox(context.Background(), &api.RunPodSandboxRequest{Pod: pod})
		})
	}
	if err == nil {
		rt.mu.Lock()
		rt.pods[pod.Id] = pod
		rt.mu.Unlock()
	}
	return err
}

// create sends CreateContainer and, when the plugins accept it, stores the
// container running with the adjustment and updates applied, as
// containerd does. Away, the container is created with no plugin: no
// adjustment, the cpuset left empty (unpinned).
func (rt *runtime) create(pod *api.PodSandbox, name string, r framework.Resources, away bool) (*api.Container, error) {
	return rt.createCtr(pod, rt.newCtr(pod, name, r), away)
}

// createCtr is create for a container made by newCtr and then changed.
func (rt *runtime) createCtr(pod *api.PodSandbox, c *api.Container, away bool) (*api.Container, error) {
	var resp *api.CreateContainerResponse
	var err error
	if !away {
		rt.op(func(a *adaptation.Adaptation) {
			resp, err = a.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: proto.Clone(c).(*api.Container)})
			if err != nil {
				return
			}
			rt.mu.Lock()
			defer rt.mu.Unlock()
			for _, u := range resp.GetUpdate() {
				if u.GetContainerId() == c.Id {
					rt.t.Errorf("CreateContainer's updates name the container being created (%s)", c.Id)
				}
			}
			cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
			setCPUs(c, cpu.GetCpus(), cpu.GetMems())
			c.State = api.ContainerState_CONTAINER_RUNNING
			rt.ctrs[c.Id] = c
			rt.applyLocked(resp.GetUpdate())
		})
		if err != nil {
			return nil, err
		}
		return c, nil
	}
	c.State = api.ContainerState_CONTAINER_RUNNING
	rt.mu.Lock()
	rt.ctrs[c.Id] = c
	rt.mu.Unlock()
	return c, nil
}

// createAnswerLost sends CreateContainer but, as containerd does when the
// plugin's answer comes after plugin_request_timeout, creates the
// container without the adjustment and applies none of the updates: it
// runs unpinned. (The caller then cuts the plugin's connection, which the
// runtime does on a timeout.) A rejection is returned as is.
func (rt *runtime) createAnswerLost(pod *api.PodSandbox, name string, r framework.Resources) (*api.Container, error) {
	c := rt.newCtr(pod, name, r)
	var err error
	rt.op(func(a *adaptation.Adaptation) {
		_, err = a.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: proto.Clone(c).(*api.Container)})
		if err != nil {
			return
		}
		rt.mu.Lock()
		c.State = api.ContainerState_CONTAINER_RUNNING
		rt.ctrs[c.Id] = c
		rt.mu.Unlock()
	})
	if err != nil {
		return nil, err
	}
	return c, nil
}

func (rt *runtime) pod(c *api.Container) *api.PodSandbox {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.pods[c.PodSandboxId]
}

// stopCtr sends StopContainer (unless away or silent: a container that
// exits without an event reaching the plugin) and marks it stopped.
func (rt *runtime) stopCtr(c *api.Container, away bool) error {
	pod := rt.pod(c)
	var err error
	rt.op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := proto.Clone(c).(*api.Container)
		c.State = api.ContainerState_CONTAINER_STOPPED
		rt.mu.Unlock()
		if away {
			return
		}
		var resp *api.StopContainerResponse
		resp, err = a.StopContainer(context.Background(), &api.StopContainerRequest{Pod: pod, Container: cur})
		rt.mu.Lock()
		rt.applyLocked(resp.GetUpdate())
		rt.mu.Unlock()
	})
	return err
}

// removeCtr sends RemoveContainer (unless away) and forgets the container.
func (rt *runtime) removeCtr(c *api.Container, away bool) error {
	pod := rt.pod(c)
	var err error
	rt.op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := proto.Clone(c).(*api.Container)
		delete(rt.ctrs, c.Id)
		rt.mu.Unlock()
		if !away {
			err = a.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: pod, Container: cur})
		}
	})
	return err
}

// removePod sends RemovePodSandbox (unless away) and forgets the pod and
// its containers, running or not.
func (rt *runtime) removePod(pod *api.PodSandbox, away bool) error {
	var err error
	rt.op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		for id, c := range rt.ctrs {
			if c.PodSandboxId == pod.Id {
				delete(rt.ctrs, id)
			}
		}
		delete(rt.pods, pod.Id)
		rt.mu.Unlock()
		if !away {
			err = a.RemovePodSandbox(context.Background(), &api.RemovePodSandboxRequest{Pod: pod})
		}
	})
	return err
}

// running is every running container's applied cpuset.cpus, by pod UID and
// name (an unpinned container, never updated, has an empty set).
func (rt *runtime) running() (map[invariant.Key]cpuset.CPUSet, error) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := map[invariant.Key]cpuset.CPUSet{}
	for _, c := range rt.ctrs {
		if c.State == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		pod := rt.pods[c.PodSandboxId]
		k := invariant.Key{Pod: pod.GetUid(), Container: c.Name}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("two running containers %s", k)
		}
		cpus, err := cpuset.Parse(c.Linux.Resources.Cpu.Cpus)
		if err != nil {
			return nil, fmt.Errorf("container %s has cpuset %q: %v", c.Id, c.Linux.Resources.Cpu.Cpus, err)
		}
		out[k] = cpus
	}
	return out, nil
}

// ids lists the stored containers (running and stopped), sorted.
func (rt *runtime) containers() []*api.Container {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]*api.Container, 0, len(rt.ctrs))
	for _, c := range rt.ctrs {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out
}

// podList lists the stored pods, sorted by creation.
func (rt *runtime) podList() []*api.PodSandbox {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}
