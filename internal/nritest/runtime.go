// Package nritest is the runtime side of NRI for tests and benchmarks: the
// pkg/adaptation code containerd and CRI-O embed, with a container store
// kept the way containerd keeps it, driven directly by the caller, who plays
// the CRI server and sends the pod and container events the kubelet's calls
// cause. A plugin (the daemon, in process or not) connects to its socket
// and is exercised over the real NRI protocol without root or real
// containers.
//
// The kubelet's cgroup values (cgroup parents by QoS class, shares and
// quota from milli-CPUs, the pod-level sums) come from internal/podres.
package nritest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/podres"
)

// Runtime is the runtime side of NRI with a store of pods and containers.
// It applies a plugin's adjustments and updates (solicited or not) to its
// containers, optionally writes their cpusets into a fake cgroup v1 tree,
// and hands its pods and containers (running and stopped) to a
// (re)connecting plugin in Synchronize. Like containerd it holds its big
// lock while a plugin handles an event and takes it for unsolicited
// updates (a plugin calling UpdateContainers from an event handler
// deadlocks here as there), and blocks plugin registration during an
// operation, so a plugin that connects never misses a container.
//
// The "Away" operations change the store without any event: what the
// runtime does while no plugin is connected, or when an event never
// reaches the plugin.
//
// A stored container is never modified: a change (an applied cpuset, a
// stop) stores a changed copy. The plugin's unsolicited updates arrive on
// NRI's goroutines at any time, so the containers handed out (by
// Containers, ContainerNamed, and the one given to CreateContainer) are
// snapshots any goroutine may read without a lock; CPUs and Containers
// give the current values.
type Runtime struct {
	name         string
	version      string
	dir          string
	socket       string
	cgroupRoot   string
	unpinned     string // cpuset.cpus of a container created with none
	unpinnedMems string // cpuset.mems of a container created with none
	errorf       func(format string, args ...any)
	// createdState: a created container is stored CONTAINER_CREATED until
	// its StartContainer (WithCreatedUntilStarted).
	createdState bool
	// dropCgroups: a container's cgroup goes when it stops or is removed
	// (WithCgroupsRemoved).
	dropCgroups bool
	// systemd: the systemd cgroup driver on cgroup v2 (WithSystemdCgroups).
	systemd bool

	lock sync.Mutex // the runtime's big lock, held across plugin calls

	mu           sync.Mutex // guards everything below
	r            *adaptation.Adaptation
	pods         map[string]*api.PodSandbox
	ctrs         map[string]*api.Container
	syncs        int
	syncUpdates  []*api.ContainerUpdate
	unsolicited  []*api.ContainerUpdate
	pushes       int
	seq          int
	beforeUpdate func()
	// beforeWrite sees every cgroup write of the runtime (SetBeforeWrite).
	beforeWrite func(c *api.Container, file, value string)
}

// Option configures a Runtime.
type Option func(*Runtime)

// WithName sets the runtime name the plugin sees in Configure (default
// "containerd").
func WithName(name string) Option { return func(rt *Runtime) { rt.name = name } }

// WithVersion sets the runtime version the plugin sees in Configure
// (default "v2.4.2"). With the default name it stands for a containerd
// of that version, whose NRI the plugin infers from it (a test binary's
// adaptation cannot tell its own NRI version): the default is a
// containerd whose NRI takes unsolicited updates, as this adaptation
// (the plugin's own NRI module) does; "v2.3.7" makes the plugin treat it
// as one that deadlocks on them (docs/runtimes.md).
func WithVersion(v string) Option { return func(rt *Runtime) { rt.version = v } }

// WithCgroupRoot makes the runtime write every cpuset it applies into
// root/cpuset/<cgroups path>/cpuset.{cpus,mems}, as a cgroup v1 tree for a
// reconcile loop to read.
func WithCgroupRoot(root string) Option { return func(rt *Runtime) { rt.cgroupRoot = root } }

// WithUnpinnedCPUs gives, with a cgroup root, the cgroup of a container
// stored without a cpuset (created while no plugin was connected, or whose
// answer was lost) the cpuset.cpus cpus, as a real cgroup inherits the
// machine's CPUs: a plugin that writes cgroups itself finds it there.
func WithUnpinnedCPUs(cpus string) Option { return func(rt *Runtime) { rt.unpinned = cpus } }

// WithUnpinnedMems gives, with a cgroup root, every container cgroup the
// runtime makes the cpuset.mems mems until something sets it, as a real
// cgroup inherits its parent's: a plugin reading both files finds both.
func WithUnpinnedMems(mems string) Option { return func(rt *Runtime) { rt.unpinnedMems = mems } }

// WithCreatedUntilStarted stores a container CONTAINER_CREATED from its
// CreateContainer until its StartContainer, as containerd and CRI-O report
// it (a plugin's Synchronize then tells created from running containers).
// Without it a created container is stored running at once, for callers
// that send no StartContainer.
func WithCreatedUntilStarted() Option { return func(rt *Runtime) { rt.createdState = true } }

// WithSystemdCgroups makes the runtime use the systemd cgroup driver on
// cgroup v2, as containerd with SystemdCgroup = true does: a container of
// a pod whose cgroup parent is a slice gets the cgroups path
// "<slice>:cri-containerd:<id>", and its cgroup, with a cgroup root, is
// the unified tree's <slice path>/cri-containerd-<id>.scope.
func WithSystemdCgroups() Option { return func(rt *Runtime) { rt.systemd = true } }

// WithCgroupsRemoved removes, with a cgroup root, a container's cgroup
// directory when it stops or is removed (event or not), as the OCI runtime
// deletes it with the container's task: a plugin writing or reading it
// afterwards finds it gone.
func WithCgroupsRemoved() Option { return func(rt *Runtime) { rt.dropCgroups = true } }

// WithErrorf reports what the runtime finds wrong with a plugin's answers
// (a CreateContainer update naming the container being created) and its
// own failures to write the fake cgroup files; typically t.Errorf. Without
// it they panic, so that they cannot go unnoticed.
func WithErrorf(f func(format string, args ...any)) Option {
	return func(rt *Runtime) { rt.errorf = f }
}

// New makes a runtime listening on dir/nri.sock once started (dir must be
// short: unix socket paths are limited to 108 bytes). It does not start.
func New(dir string, opts ...Option) *Runtime {
	rt := &Runtime{name: "containerd", version: "v2.4.2", dir: dir, socket: filepath.Join(dir, "nri.sock"),
		pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	for _, o := range opts {
		o(rt)
	}
	if rt.errorf == nil {
		rt.errorf = func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) }
	}
	return rt
}

// Start starts listening; after Stop it starts again on the same socket
// with the same store, as a restarted containerd does.
func (rt *Runtime) Start() error {
	_ = os.Remove(rt.socket)
	r, err := adaptation.New(rt.name, rt.version, rt.synchronize, rt.update,
		adaptation.WithSocketPath(rt.socket),
		adaptation.WithPluginPath(filepath.Join(rt.dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(rt.dir, "conf.d")))
	if err != nil {
		return err
	}
	rt.mu.Lock()
	before, beforeUpdates := rt.syncs, rt.syncUpdates
	rt.mu.Unlock()
	if err := r.Start(); err != nil {
		return err
	}
	// Start synchronizes the (here absent) pre-installed plugins through
	// the same function: only plugin connections count.
	rt.mu.Lock()
	rt.r = r
	rt.syncs, rt.syncUpdates = before, beforeUpdates
	rt.mu.Unlock()
	return nil
}

// Stop stops listening and drops every plugin connection; the store stays.
func (rt *Runtime) Stop() {
	if r := rt.Adaptation(); r != nil {
		r.Stop()
	}
}

// Socket is the path plugins connect to.
func (rt *Runtime) Socket() string { return rt.socket }

// CgroupRoot is the root of the fake cgroup tree ("" without one).
func (rt *Runtime) CgroupRoot() string { return rt.cgroupRoot }

// Adaptation is the running NRI runtime side (nil before Start).
func (rt *Runtime) Adaptation() *adaptation.Adaptation {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.r
}

func (rt *Runtime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	rt.lock.Lock()
	defer rt.lock.Unlock()
	rt.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.sortedPodsLocked() {
		pods = append(pods, proto.Clone(p).(*api.PodSandbox))
	}
	ctrs := make([]*api.Container, 0, len(rt.ctrs))
	for _, c := range rt.sortedCtrsLocked() {
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
	rt.syncUpdates = updates
	rt.syncs++
	return nil
}

func (rt *Runtime) update(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
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
	rt.pushes++
	rt.unsolicited = append(rt.unsolicited, updates...)
	rt.applyLocked(updates)
	return nil, nil
}

// SetBeforeUpdate sets a function run when an unsolicited update arrives,
// before the runtime takes its lock (tests order events with it).
func (rt *Runtime) SetBeforeUpdate(f func()) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.beforeUpdate = f
}

// SetBeforeWrite sets a function run before each cgroup file the runtime
// writes (with a cgroup root), with the runtime's store locked: tests
// check what the other cgroups hold at that moment by reading the files.
func (rt *Runtime) SetBeforeWrite(f func(c *api.Container, file, value string)) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.beforeWrite = f
}

// applyLocked applies updates as the runtime does: to known containers
// that have not stopped (an update for any other fails, ignored when the
// plugin says so).
func (rt *Runtime) applyLocked(updates []*api.ContainerUpdate) {
	for _, u := range updates {
		c, ok := rt.ctrs[u.GetContainerId()]
		if !ok || c.State == api.ContainerState_CONTAINER_STOPPED {
			continue
		}
		cpu := u.GetLinux().GetResources().GetCpu()
		rt.storeCPUsLocked(c, cpu.GetCpus(), cpu.GetMems())
		if cpu.GetQuota() != nil {
			c = proto.Clone(rt.ctrs[c.Id]).(*api.Container)
			setQuota(c, cpu)
			rt.ctrs[c.Id] = c
		}
	}
}

// setQuota records the CFS quota cpu sets, if any, in the resources of c
// (not stored, or a copy), as a runtime keeps an adjusted or updated quota
// in the container's spec and reports it from then on.
func setQuota(c *api.Container, cpu *api.LinuxCPU) {
	if cpu.GetQuota() == nil {
		return
	}
	cpuOf(c).Quota = api.Int64(cpu.GetQuota().GetValue())
}

// cpuOf is the CPU resources of c, created where c has none yet.
func cpuOf(c *api.Container) *api.LinuxCPU {
	if c.Linux == nil {
		c.Linux = &api.LinuxContainer{}
	}
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	if c.Linux.Resources.Cpu == nil {
		c.Linux.Resources.Cpu = &api.LinuxCPU{}
	}
	return c.Linux.Resources.Cpu
}

// storeCPUsLocked stores a copy of the stored container c with a new
// cpuset (see setCPUs); "" leaves a value as is.
func (rt *Runtime) storeCPUsLocked(c *api.Container, cpus, mems string) {
	if cpus == "" && mems == "" {
		return
	}
	c = proto.Clone(c).(*api.Container)
	rt.setCPUs(c, cpus, mems)
	rt.ctrs[c.Id] = c
}

// setCPUs records a cpuset in the resources of c, which is not stored (or
// not yet), and, with a cgroup root, in its cgroup v1 cpuset directory; ""
// leaves a value as is.
func (rt *Runtime) setCPUs(c *api.Container, cpus, mems string) {
	cpu := cpuOf(c)
	if cpus != "" {
		cpu.Cpus = cpus
		rt.writeCgroup(c, "cpuset.cpus", cpus)
	}
	if mems != "" {
		cpu.Mems = mems
		rt.writeCgroup(c, "cpuset.mems", mems)
	}
}

func (rt *Runtime) writeCgroup(c *api.Container, file, value string) {
	if rt.cgroupRoot == "" {
		return
	}
	if rt.beforeWrite != nil {
		rt.beforeWrite(c, file, value)
	}
	dir := rt.cgroupDir(c)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		rt.errorf("nritest: %v", err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value+"\n"), 0o644); err != nil {
		rt.errorf("nritest: %v", err)
	}
	// A new cgroup has both files, inherited (WithUnpinnedCPUs/Mems).
	for _, f := range []struct{ name, value string }{{"cpuset.cpus", rt.unpinned}, {"cpuset.mems", rt.unpinnedMems}} {
		path := filepath.Join(dir, f.name)
		if f.name == file || f.value == "" {
			continue
		}
		if _, err := os.Stat(path); err == nil {
			continue
		}
		if err := os.WriteFile(path, []byte(f.value+"\n"), 0o644); err != nil {
			rt.errorf("nritest: %v", err)
		}
	}
}

// CgroupFile is the fake cgroup file holding c's cpuset.cpus.
func (rt *Runtime) CgroupFile(c *api.Container) string {
	return filepath.Join(rt.cgroupDir(c), "cpuset.cpus")
}

// cgroupDir is the fake cgroup directory of c: under the cgroup v1 cpuset
// hierarchy, or the systemd scope in the unified tree.
func (rt *Runtime) cgroupDir(c *api.Container) string {
	p := c.GetLinux().GetCgroupsPath()
	if slice, id, ok := strings.Cut(p, ":cri-containerd:"); ok && rt.systemd {
		return filepath.Join(rt.cgroupRoot, cgroups.ExpandSlice(slice), "cri-containerd-"+id+".scope")
	}
	return filepath.Join(rt.cgroupRoot, "cpuset", p)
}

// SetCPUs sets the cpuset of a stored container as if someone else (the
// kubelet, an operator) had written it; "" leaves a value as is.
func (rt *Runtime) SetCPUs(c *api.Container, cpus, mems string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if cur, ok := rt.ctrs[c.Id]; ok {
		rt.storeCPUsLocked(cur, cpus, mems)
	}
}

// WriteCgroup writes cpus into the cgroup of a stored container only, as
// an operator or another agent would behind the runtime's back: the
// runtime's record keeps what it applied.
func (rt *Runtime) WriteCgroup(c *api.Container, cpus string) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if cur, ok := rt.ctrs[c.Id]; ok {
		rt.writeCgroup(cur, "cpuset.cpus", cpus)
	}
}

// Syncs is the number of completed plugin Synchronize calls.
func (rt *Runtime) Syncs() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.syncs
}

// SyncUpdates is what the last plugin Synchronize answered.
func (rt *Runtime) SyncUpdates() []*api.ContainerUpdate {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.syncUpdates
}

// Unsolicited is every update the plugin pushed with UpdateContainers, in
// order.
func (rt *Runtime) Unsolicited() []*api.ContainerUpdate {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return append([]*api.ContainerUpdate(nil), rt.unsolicited...)
}

// Pushes is the number of UpdateContainers calls the plugin made.
func (rt *Runtime) Pushes() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.pushes
}

// WaitForPlugin waits until plugin Synchronize number n has completed and
// the plugin is registered for events.
func (rt *Runtime) WaitForPlugin(n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for rt.Syncs() < n {
		if time.Now().After(deadline) {
			return fmt.Errorf("no plugin Synchronize #%d within %s", n, timeout)
		}
		time.Sleep(time.Millisecond)
	}
	// The plugin joins the event list right after Synchronize, under the
	// lock BlockPluginSync waits for.
	rt.Adaptation().BlockPluginSync().Unblock()
	return nil
}

// Next is a new number from the runtime's sequence (for unique names).
func (rt *Runtime) Next() int {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.seq++
	return rt.seq
}

// NewPod makes a pod the way the kubelet runs it: its cgroup parent by QoS
// class, no pod-level resources (set Linux.Resources or
// Linux.PodResources to send them, see PodResources).
func NewPod(uid, name, namespace string, q podres.QOS) *api.PodSandbox {
	return &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: name, Namespace: namespace,
		Linux: &api.LinuxPodSandbox{CgroupParent: podres.CgroupParent(q, uid)}}
}

// PodResources is the kubelet's pod-level resources for a pod of the
// given containers: the sums of their shares, quota and memory limit.
func PodResources(ctrs ...podres.Resources) *api.LinuxResources {
	pr := podres.PodCRI(podres.PodQOS(ctrs...), ctrs...)
	return &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(pr.CpuShares)),
		Quota: api.Int64(pr.CpuQuota), Period: api.UInt64(uint64(pr.CpuPeriod))},
		Memory: &api.LinuxMemory{Limit: api.Int64(pr.MemoryLimitInBytes)}}
}

// ContainerResources is what the kubelet sends for a container of r:
// shares from the request, quota from the limit, period 100000, the memory
// limit.
func ContainerResources(r podres.Resources) *api.LinuxResources {
	cr := r.CRI(podres.PodQOS(r))
	return &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(cr.CpuShares)),
		Quota: api.Int64(cr.CpuQuota), Period: api.UInt64(uint64(cr.CpuPeriod))},
		Memory: &api.LinuxMemory{Limit: api.Int64(cr.MemoryLimitInBytes)}}
}

// NewContainer makes the container containerd would hand to CreateContainer
// for r in pod: the kubelet's resources, the cgroups path under the pod's
// cgroup parent, a unique id and creation time. It is not stored or sent.
func (rt *Runtime) NewContainer(pod *api.PodSandbox, name string, r podres.Resources) *api.Container {
	n := rt.Next()
	id := fmt.Sprintf("%s-%s-%d", pod.Uid, name, n)
	path := pod.GetLinux().GetCgroupParent() + "/" + id
	if parent := pod.GetLinux().GetCgroupParent(); rt.systemd && strings.HasSuffix(parent, ".slice") {
		path = parent + ":cri-containerd:" + id
	}
	return &api.Container{
		Id: id, PodSandboxId: pod.Id, Name: name, State: api.ContainerState_CONTAINER_CREATED, CreatedAt: int64(n),
		Linux: &api.LinuxContainer{
			CgroupsPath: path,
			Resources:   ContainerResources(r),
		},
	}
}

// Op runs f as one CRI operation: plugin registration is held off and the
// runtime's lock is held meanwhile. For requests the methods below do not
// send as wanted; f must not touch the store.
func (rt *Runtime) Op(f func(r *adaptation.Adaptation)) {
	r := rt.Adaptation()
	blk := r.BlockPluginSync()
	defer blk.Unblock()
	rt.lock.Lock()
	defer rt.lock.Unlock()
	f(r)
}

// away runs f on the store under the runtime's lock, sending nothing.
func (rt *Runtime) away(f func()) {
	rt.lock.Lock()
	defer rt.lock.Unlock()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	f()
}

// RunPod sends RunPodSandbox and, when accepted, stores the pod.
func (rt *Runtime) RunPod(ctx context.Context, pod *api.PodSandbox) error {
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		err = a.RunPodSandbox(ctx, &api.RunPodSandboxRequest{Pod: pod})
	})
	if err != nil {
		return err
	}
	rt.RunPodAway(pod)
	return nil
}

// RunPodAway stores the pod without an event.
func (rt *Runtime) RunPodAway(pod *api.PodSandbox) {
	rt.away(func() { rt.pods[pod.Id] = pod })
}

// CreateContainer sends CreateContainer for c (from NewContainer, perhaps
// changed) and, when the plugins accept it, stores it running with the
// adjustment and the updates applied, as containerd does. The updates must
// not name the container being created (NRI fails such a creation; the
// runtime reports it too, should that change).
func (rt *Runtime) CreateContainer(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.CreateContainerResponse, error) {
	resp, _, err := rt.CreateContainerTimed(ctx, pod, c)
	return resp, err
}

// CreateContainerTimed is CreateContainer that also returns how long the
// NRI exchange took: the request sent, the plugins' answers received and
// merged. What this fake runtime does with the answer afterwards (storing
// it, writing a fake cgroup tree, which on disk costs a new directory and
// two files) is not in it, as runc's create is not in a real runtime's.
func (rt *Runtime) CreateContainerTimed(ctx context.Context, pod *api.PodSandbox, c *api.Container) (*api.CreateContainerResponse, time.Duration, error) {
	var resp *api.CreateContainerResponse
	var took time.Duration
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		req := &api.CreateContainerRequest{Pod: pod, Container: proto.Clone(c).(*api.Container)}
		t0 := time.Now()
		resp, err = a.CreateContainer(ctx, req)
		took = time.Since(t0)
		if err != nil {
			return
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		for _, u := range resp.GetUpdate() {
			if u.GetContainerId() == c.Id {
				rt.errorf("CreateContainer's updates name the container being created (%s)", c.Id)
			}
		}
		c.State = rt.createdStateOf()
		cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
		rt.setCPUs(c, cpu.GetCpus(), cpu.GetMems())
		setQuota(c, cpu)
		rt.ctrs[c.Id] = c
		rt.applyLocked(resp.GetUpdate())
	})
	return resp, took, err
}

// CreateContainerAway stores c running with no plugin: no adjustment, the
// cpuset left as it is (empty from NewContainer: unpinned).
func (rt *Runtime) CreateContainerAway(c *api.Container) {
	rt.away(func() {
		c.State = api.ContainerState_CONTAINER_RUNNING
		rt.ctrs[c.Id] = c
		rt.writeUnpinned(c)
	})
}

// CreateContainerAwayNotStarted stores c created but not started with no
// plugin (its start still to come): no adjustment, unpinned.
func (rt *Runtime) CreateContainerAwayNotStarted(c *api.Container) {
	rt.away(func() {
		c.State = api.ContainerState_CONTAINER_CREATED
		rt.ctrs[c.Id] = c
		rt.writeUnpinned(c)
	})
}

// writeUnpinned gives the cgroup of c, stored without a cpuset, the
// unpinned CPUs (see WithUnpinnedCPUs).
func (rt *Runtime) writeUnpinned(c *api.Container) {
	if rt.unpinned != "" && c.GetLinux().GetResources().GetCpu().GetCpus() == "" {
		rt.writeCgroup(c, "cpuset.cpus", rt.unpinned)
	} else if rt.unpinnedMems != "" && c.GetLinux().GetResources().GetCpu().GetMems() == "" {
		rt.writeCgroup(c, "cpuset.mems", rt.unpinnedMems)
	}
}

// CreateContainerAnswerLost sends CreateContainer but, as containerd does
// when the plugin's answer comes after plugin_request_timeout, stores the
// container running without the adjustment and applies none of the
// updates: it runs unpinned. (The caller then cuts the plugin's
// connection, which the runtime does on a timeout.) A rejection is
// returned as is.
func (rt *Runtime) CreateContainerAnswerLost(ctx context.Context, pod *api.PodSandbox, c *api.Container) error {
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		_, err = a.CreateContainer(ctx, &api.CreateContainerRequest{Pod: pod, Container: proto.Clone(c).(*api.Container)})
		if err != nil {
			return
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		c.State = rt.createdStateOf()
		rt.ctrs[c.Id] = c
		rt.writeUnpinned(c)
	})
	return err
}

// createdStateOf is the state a container is stored in once created.
func (rt *Runtime) createdStateOf() api.ContainerState {
	if rt.createdState {
		return api.ContainerState_CONTAINER_CREATED
	}
	return api.ContainerState_CONTAINER_RUNNING
}

// StartContainer sends StartContainer for a created container and, when
// the plugins accept it, stores it running (the OCI runtime starts it right
// after the event, as in both runtimes).
func (rt *Runtime) StartContainer(ctx context.Context, c *api.Container) error {
	pod := rt.PodOf(c)
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := rt.sendableLocked(c)
		rt.mu.Unlock()
		err = a.StartContainer(ctx, &api.StartContainerRequest{Pod: pod, Container: cur})
		if err != nil {
			return
		}
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.markRunningLocked(c)
	})
	return err
}

// StartContainerAway stores a created container running without an event:
// it started while no plugin was connected.
func (rt *Runtime) StartContainerAway(c *api.Container) {
	rt.away(func() { rt.markRunningLocked(c) })
}

// markRunningLocked stores a running copy of a created container.
func (rt *Runtime) markRunningLocked(c *api.Container) {
	if cur, ok := rt.ctrs[c.Id]; ok && cur.State == api.ContainerState_CONTAINER_CREATED {
		cur = proto.Clone(cur).(*api.Container)
		cur.State = api.ContainerState_CONTAINER_RUNNING
		rt.ctrs[c.Id] = cur
	}
}

// PostStartContainer sends PostStartContainer for a started container, as
// both runtimes do once the OCI runtime started it.
func (rt *Runtime) PostStartContainer(ctx context.Context, c *api.Container) error {
	pod := rt.PodOf(c)
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := rt.sendableLocked(c)
		rt.mu.Unlock()
		err = a.PostStartContainer(ctx, &api.PostStartContainerRequest{Pod: pod, Container: cur})
	})
	return err
}

// StopContainer marks the container stopped and sends StopContainer,
// applying the updates of the answer; it returns them.
func (rt *Runtime) StopContainer(ctx context.Context, c *api.Container) ([]*api.ContainerUpdate, error) {
	pod := rt.PodOf(c)
	var resp *api.StopContainerResponse
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := rt.sendableLocked(c)
		rt.markStoppedLocked(c)
		rt.mu.Unlock()
		resp, err = a.StopContainer(ctx, &api.StopContainerRequest{Pod: pod, Container: cur})
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.applyLocked(resp.GetUpdate())
	})
	return resp.GetUpdate(), err
}

// sendableLocked is a copy of the runtime's current view of c (c itself
// when not stored) for an event.
func (rt *Runtime) sendableLocked(c *api.Container) *api.Container {
	if cur, ok := rt.ctrs[c.Id]; ok {
		c = cur
	}
	return proto.Clone(c).(*api.Container)
}

// markStoppedLocked stores a stopped copy of c; c itself, a snapshot
// others may be reading, is left as is.
func (rt *Runtime) markStoppedLocked(c *api.Container) {
	if cur, ok := rt.ctrs[c.Id]; ok {
		cur = proto.Clone(cur).(*api.Container)
		cur.State = api.ContainerState_CONTAINER_STOPPED
		rt.ctrs[c.Id] = cur
		rt.dropCgroupLocked(cur)
	}
}

// dropCgroupLocked removes the cgroup of c (see WithCgroupsRemoved).
func (rt *Runtime) dropCgroupLocked(c *api.Container) {
	if !rt.dropCgroups || rt.cgroupRoot == "" || c.GetLinux().GetCgroupsPath() == "" {
		return
	}
	if err := os.RemoveAll(filepath.Dir(rt.CgroupFile(c))); err != nil {
		rt.errorf("nritest: %v", err)
	}
}

// deleteLocked forgets the stored container id and its cgroup.
func (rt *Runtime) deleteLocked(id string) {
	if c, ok := rt.ctrs[id]; ok {
		rt.dropCgroupLocked(c)
		delete(rt.ctrs, id)
	}
}

// StopContainerAway marks the container stopped without an event: it exited
// while no plugin was connected, or its StopContainer never reached the
// plugin.
func (rt *Runtime) StopContainerAway(c *api.Container) {
	rt.away(func() { rt.markStoppedLocked(c) })
}

// RemoveContainer forgets the container and sends RemoveContainer.
func (rt *Runtime) RemoveContainer(ctx context.Context, c *api.Container) error {
	pod := rt.PodOf(c)
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := rt.sendableLocked(c)
		rt.deleteLocked(c.Id)
		rt.mu.Unlock()
		err = a.RemoveContainer(ctx, &api.RemoveContainerRequest{Pod: pod, Container: cur})
	})
	return err
}

// RemoveContainerAway forgets the container without an event.
func (rt *Runtime) RemoveContainerAway(c *api.Container) {
	rt.away(func() { rt.deleteLocked(c.Id) })
}

// RemovePod forgets the pod and its containers, running or not, and sends
// RemovePodSandbox.
func (rt *Runtime) RemovePod(ctx context.Context, pod *api.PodSandbox) error {
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		rt.forgetPodLocked(pod)
		rt.mu.Unlock()
		err = a.RemovePodSandbox(ctx, &api.RemovePodSandboxRequest{Pod: pod})
	})
	return err
}

// RemovePodAway forgets the pod and its containers without an event.
func (rt *Runtime) RemovePodAway(pod *api.PodSandbox) {
	rt.away(func() { rt.forgetPodLocked(pod) })
}

func (rt *Runtime) forgetPodLocked(pod *api.PodSandbox) {
	for id, c := range rt.ctrs {
		if c.PodSandboxId == pod.Id {
			rt.deleteLocked(id)
		}
	}
	delete(rt.pods, pod.Id)
}

// UpdateContainer sends UpdateContainer (an in-place resize) with the new
// resources and, when the plugins accept it, stores the container with the
// CPU and memory values res sets (the others as they were), applies the
// updates of the answer and, as containerd does, writes the container's
// recorded cpuset (the answer's, or else the one it had) into its cgroup:
// containerd builds the OCI update from its stored spec. Then it sends
// PostUpdateContainer. It returns the answer's updates.
func (rt *Runtime) UpdateContainer(ctx context.Context, c *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	pod := rt.PodOf(c)
	var updates []*api.ContainerUpdate
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := rt.sendableLocked(c)
		rt.mu.Unlock()
		var resp *api.UpdateContainerResponse
		resp, err = a.UpdateContainer(ctx, &api.UpdateContainerRequest{Pod: pod, Container: cur, LinuxResources: res})
		if err != nil {
			return
		}
		updates = resp.GetUpdate()
		rt.mu.Lock()
		defer rt.mu.Unlock()
		rt.resizeLocked(c.Id, res)
		rt.applyLocked(updates)
		if stored, ok := rt.ctrs[c.Id]; ok && stored.State != api.ContainerState_CONTAINER_STOPPED {
			cpu := stored.GetLinux().GetResources().GetCpu()
			if cpu.GetCpus() != "" {
				rt.writeCgroup(stored, "cpuset.cpus", cpu.GetCpus())
			}
			if cpu.GetMems() != "" {
				rt.writeCgroup(stored, "cpuset.mems", cpu.GetMems())
			}
		}
	})
	if err != nil {
		return nil, err
	}
	return updates, rt.PostUpdateContainer(ctx, c)
}

// PostUpdateContainer sends PostUpdateContainer, as both runtimes do once
// the OCI runtime applied an update of the container's resources.
func (rt *Runtime) PostUpdateContainer(ctx context.Context, c *api.Container) error {
	pod := rt.PodOf(c)
	var err error
	rt.Op(func(a *adaptation.Adaptation) {
		rt.mu.Lock()
		cur := rt.sendableLocked(c)
		rt.mu.Unlock()
		err = a.PostUpdateContainer(ctx, &api.PostUpdateContainerRequest{Pod: pod, Container: cur})
	})
	return err
}

// resizeLocked stores a copy of the stored container id with the shares,
// quota, period and memory limit res sets.
func (rt *Runtime) resizeLocked(id string, res *api.LinuxResources) {
	cur, ok := rt.ctrs[id]
	if !ok || res == nil {
		return
	}
	cur = proto.Clone(cur).(*api.Container)
	if cur.Linux == nil {
		cur.Linux = &api.LinuxContainer{}
	}
	if cur.Linux.Resources == nil {
		cur.Linux.Resources = &api.LinuxResources{}
	}
	have := cur.Linux.Resources
	if cpu := res.GetCpu(); cpu != nil {
		if have.Cpu == nil {
			have.Cpu = &api.LinuxCPU{}
		}
		if cpu.Shares != nil {
			have.Cpu.Shares = api.UInt64(cpu.Shares.GetValue())
		}
		if cpu.Quota != nil {
			have.Cpu.Quota = api.Int64(cpu.Quota.GetValue())
		}
		if cpu.Period != nil {
			have.Cpu.Period = api.UInt64(cpu.Period.GetValue())
		}
	}
	if lim := res.GetMemory().GetLimit(); lim != nil {
		if have.Memory == nil {
			have.Memory = &api.LinuxMemory{}
		}
		have.Memory.Limit = api.Int64(lim.GetValue())
	}
	rt.ctrs[id] = cur
}

// PodOf is the stored pod of a container (nil when gone).
func (rt *Runtime) PodOf(c *api.Container) *api.PodSandbox {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.pods[c.PodSandboxId]
}

// CPUs is the stored container's applied cpuset.cpus and cpuset.mems;
// ok is false when the runtime no longer has it.
func (rt *Runtime) CPUs(id string) (cpus, mems string, ok bool) {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	c, ok := rt.ctrs[id]
	if !ok {
		return "", "", false
	}
	cpu := c.GetLinux().GetResources().GetCpu()
	return cpu.GetCpus(), cpu.GetMems(), true
}

// Containers lists the stored containers (running and stopped) by
// creation: snapshots, never changed afterwards.
func (rt *Runtime) Containers() []*api.Container {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.sortedCtrsLocked()
}

// ContainerNamed is the first stored container (by creation) named name,
// as a snapshot.
func (rt *Runtime) ContainerNamed(name string) (*api.Container, bool) {
	for _, c := range rt.Containers() {
		if c.Name == name {
			return c, true
		}
	}
	return nil, false
}

func (rt *Runtime) sortedCtrsLocked() []*api.Container {
	out := make([]*api.Container, 0, len(rt.ctrs))
	for _, c := range rt.ctrs {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt < out[j].CreatedAt })
	return out
}

// Pods lists the stored pods, sorted by id.
func (rt *Runtime) Pods() []*api.PodSandbox {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.sortedPodsLocked()
}

func (rt *Runtime) sortedPodsLocked() []*api.PodSandbox {
	out := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.pods {
		out = append(out, p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Id < out[j].Id })
	return out
}

// UpdatesByName maps updates for stored containers to their names, with the
// new cpuset.cpus; updates for containers the runtime does not have are
// left out.
func (rt *Runtime) UpdatesByName(updates []*api.ContainerUpdate) map[string]string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	out := map[string]string{}
	for _, u := range updates {
		if c, ok := rt.ctrs[u.GetContainerId()]; ok {
			out[c.Name] = u.GetLinux().GetResources().GetCpu().GetCpus()
		}
	}
	return out
}

// Running is every running container's applied cpuset.cpus, by pod UID and
// container name: its cgroup's, with a cgroup root, else the one the
// runtime applied (an unpinned container, never updated, has an empty set).
func (rt *Runtime) Running() (map[invariant.Key]cpuset.CPUSet, error) {
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
		s := c.GetLinux().GetResources().GetCpu().GetCpus()
		if rt.cgroupRoot != "" {
			// The cgroup is what the container runs on; a plugin may
			// write it without telling the runtime.
			if b, err := os.ReadFile(rt.CgroupFile(c)); err == nil {
				s = strings.TrimSpace(string(b))
			}
		}
		cpus, err := cpuset.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("container %s has cpuset %q: %w", c.Id, s, err)
		}
		out[k] = cpus
	}
	return out, nil
}
