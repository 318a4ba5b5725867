package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"google.golang.org/protobuf/proto"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// fakeRuntime is the runtime side of NRI (the pkg/adaptation code
// containerd embeds) with a tiny container store: it applies adjustments
// and updates to its containers, writes their cpusets into a fake cgroup v1
// tree (for the reconcile loop), and hands its pods and containers to a
// (re)connecting plugin in Synchronize, as containerd does. Like
// containerd it holds its lock while a plugin handles an event, and takes
// it for unsolicited updates: a plugin calling UpdateContainers from a
// handler deadlocks here too (the test then times out).
type fakeRuntime struct {
	t          *testing.T
	socket     string
	cgroupRoot string
	r          *adaptation.Adaptation

	// lock is the runtime's big lock, held across plugin calls.
	lock sync.Mutex

	mu          sync.Mutex // guards the store below
	pods        map[string]*api.PodSandbox
	ctrs        map[string]*api.Container
	syncs       int
	syncUpdates []*api.ContainerUpdate
	unsolicited []*api.ContainerUpdate
}

func startRuntime(t *testing.T) *fakeRuntime {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir() can be long.
	dir, err := os.MkdirTemp("", "nri-rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt := &fakeRuntime{t: t, socket: filepath.Join(dir, "nri.sock"), cgroupRoot: filepath.Join(dir, "cgroup"),
		pods: map[string]*api.PodSandbox{}, ctrs: map[string]*api.Container{}}
	r, err := adaptation.New("fake-runtime", "v0.0.1", rt.synchronize, rt.update,
		adaptation.WithSocketPath(rt.socket),
		adaptation.WithPluginPath(filepath.Join(dir, "plugins")),
		adaptation.WithPluginConfigPath(filepath.Join(dir, "conf.d")))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	rt.r = r
	t.Cleanup(r.Stop)
	return rt
}

func (rt *fakeRuntime) synchronize(ctx context.Context, cb adaptation.SyncCB) error {
	rt.lock.Lock()
	defer rt.lock.Unlock()
	rt.mu.Lock()
	pods := make([]*api.PodSandbox, 0, len(rt.pods))
	for _, p := range rt.pods {
		pods = append(pods, p)
	}
	ctrs := make([]*api.Container, 0, len(rt.ctrs))
	for _, c := range rt.ctrs {
		ctrs = append(ctrs, cloneCtr(c))
	}
	rt.mu.Unlock()
	updates, err := cb(ctx, pods, ctrs)
	if err != nil {
		return err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.syncs++
	rt.syncUpdates = updates
	rt.applyLocked(updates)
	return nil
}

func (rt *fakeRuntime) update(_ context.Context, updates []*api.ContainerUpdate) ([]*api.ContainerUpdate, error) {
	rt.lock.Lock()
	defer rt.lock.Unlock()
	rt.mu.Lock()
	defer rt.mu.Unlock()
	rt.unsolicited = append(rt.unsolicited, updates...)
	rt.applyLocked(updates)
	return nil, nil
}

func (rt *fakeRuntime) applyLocked(updates []*api.ContainerUpdate) {
	for _, u := range updates {
		c, ok := rt.ctrs[u.GetContainerId()]
		if !ok {
			continue
		}
		cpu := u.GetLinux().GetResources().GetCpu()
		rt.setCPUSetLocked(c, cpu.GetCpus(), cpu.GetMems())
	}
}

// setCPUSetLocked records a cpuset like the runtime would: in the
// container's resources and in its cgroup v1 cpuset directory.
func (rt *fakeRuntime) setCPUSetLocked(c *api.Container, cpus, mems string) {
	if c.Linux == nil {
		c.Linux = &api.LinuxContainer{}
	}
	if c.Linux.Resources == nil {
		c.Linux.Resources = &api.LinuxResources{}
	}
	if c.Linux.Resources.Cpu == nil {
		c.Linux.Resources.Cpu = &api.LinuxCPU{}
	}
	dir := filepath.Join(rt.cgroupRoot, "cpuset", c.Linux.CgroupsPath)
	if cpus != "" {
		c.Linux.Resources.Cpu.Cpus = cpus
		rt.writeCgroup(dir, "cpuset.cpus", cpus)
	}
	if mems != "" {
		c.Linux.Resources.Cpu.Mems = mems
		rt.writeCgroup(dir, "cpuset.mems", mems)
	}
}

func (rt *fakeRuntime) writeCgroup(dir, file, value string) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		rt.t.Error(err)
		return
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(value+"\n"), 0o644); err != nil {
		rt.t.Error(err)
	}
}

func cloneCtr(c *api.Container) *api.Container {
	return proto.Clone(c).(*api.Container)
}

// podSpec describes a pod the way the kubelet would create it.
type podSpec struct {
	uid, name, qos string
	podMilli       int64 // pod-level CPU request, 0 = not sent
}

func (rt *fakeRuntime) addPod(p podSpec) *api.PodSandbox {
	parent := "/kubepods/pod" + p.uid
	if p.qos != "guaranteed" {
		parent = "/kubepods/" + p.qos + "/pod" + p.uid
	}
	pod := &api.PodSandbox{Id: "sb-" + p.uid, Uid: p.uid, Name: p.name, Namespace: "default",
		Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
	if p.podMilli > 0 {
		pod.Linux.PodResources = &api.LinuxResources{Cpu: milliCPU(p.podMilli, p.podMilli)}
	}
	rt.mu.Lock()
	rt.pods[pod.Id] = pod
	rt.mu.Unlock()
	return pod
}

// milliCPU is what the kubelet sends for a request/limit in milli-CPUs:
// shares = max(2, milli*1024/1000), quota = milli*100 (0 without limit),
// period 100000.
func milliCPU(req, lim int64) *api.LinuxCPU {
	shares := uint64(req * 1024 / 1000)
	if shares < 2 {
		shares = 2
	}
	return &api.LinuxCPU{
		Shares: &api.OptionalUInt64{Value: shares},
		Quota:  &api.OptionalInt64{Value: lim * 100},
		Period: &api.OptionalUInt64{Value: 100000},
	}
}

var ctrSeq int

func (rt *fakeRuntime) newCtr(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
	ctrSeq++
	id := fmt.Sprintf("%s-%s-%d", pod.Uid, name, ctrSeq)
	return &api.Container{
		Id: id, PodSandboxId: pod.Id, Name: name, State: api.ContainerState_CONTAINER_CREATED,
		CreatedAt: int64(ctrSeq),
		Linux: &api.LinuxContainer{
			CgroupsPath: pod.Linux.CgroupParent + "/" + id,
			Resources:   &api.LinuxResources{Cpu: milliCPU(req, lim)},
		},
	}
}

// create runs CreateContainer through the plugins and, on success, stores
// the container with the adjustment applied and applies the updates.
func (rt *fakeRuntime) create(pod *api.PodSandbox, name string, req, lim int64) (*api.Container, []*api.ContainerUpdate, error) {
	c := rt.newCtr(pod, name, req, lim)
	rt.lock.Lock()
	resp, err := rt.r.CreateContainer(context.Background(), &api.CreateContainerRequest{Pod: pod, Container: cloneCtr(c)})
	rt.lock.Unlock()
	if err != nil {
		return nil, nil, err
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for _, u := range resp.GetUpdate() {
		if u.GetContainerId() == c.Id {
			rt.t.Errorf("CreateContainer update names the container being created (%s)", c.Id)
		}
	}
	c.State = api.ContainerState_CONTAINER_RUNNING
	rt.ctrs[c.Id] = c
	cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
	rt.setCPUSetLocked(c, cpu.GetCpus(), cpu.GetMems())
	rt.applyLocked(resp.GetUpdate())
	return c, resp.GetUpdate(), nil
}

// createAway adds a container as the runtime does with no plugin
// connected: no adjustment, no cpuset.
func (rt *fakeRuntime) createAway(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
	c := rt.newCtr(pod, name, req, lim)
	c.State = api.ContainerState_CONTAINER_RUNNING
	rt.mu.Lock()
	rt.ctrs[c.Id] = c
	rt.mu.Unlock()
	return c
}

func (rt *fakeRuntime) stop(c *api.Container) []*api.ContainerUpdate {
	rt.mu.Lock()
	pod := rt.pods[c.PodSandboxId]
	rt.mu.Unlock()
	rt.lock.Lock()
	resp, err := rt.r.StopContainer(context.Background(), &api.StopContainerRequest{Pod: pod, Container: cloneCtr(c)})
	rt.lock.Unlock()
	if err != nil {
		rt.t.Fatalf("StopContainer %s: %v", c.Name, err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if cur, ok := rt.ctrs[c.Id]; ok {
		cur.State = api.ContainerState_CONTAINER_STOPPED
	}
	rt.applyLocked(resp.GetUpdate())
	return resp.GetUpdate()
}

func (rt *fakeRuntime) remove(c *api.Container) {
	rt.mu.Lock()
	pod := rt.pods[c.PodSandboxId]
	rt.mu.Unlock()
	rt.lock.Lock()
	err := rt.r.RemoveContainer(context.Background(), &api.RemoveContainerRequest{Pod: pod, Container: cloneCtr(c)})
	rt.lock.Unlock()
	if err != nil {
		rt.t.Fatalf("RemoveContainer %s: %v", c.Name, err)
	}
	rt.mu.Lock()
	delete(rt.ctrs, c.Id)
	rt.mu.Unlock()
}

// removeAway drops a container while no plugin is connected.
func (rt *fakeRuntime) removeAway(c *api.Container) {
	rt.mu.Lock()
	delete(rt.ctrs, c.Id)
	rt.mu.Unlock()
}

func (rt *fakeRuntime) removePod(pod *api.PodSandbox) {
	rt.lock.Lock()
	err := rt.r.RemovePodSandbox(context.Background(), &api.RemovePodSandboxRequest{Pod: pod})
	rt.lock.Unlock()
	if err != nil {
		rt.t.Fatalf("RemovePodSandbox %s: %v", pod.Name, err)
	}
	rt.mu.Lock()
	defer rt.mu.Unlock()
	for id, c := range rt.ctrs {
		if c.PodSandboxId == pod.Id {
			delete(rt.ctrs, id)
		}
	}
	delete(rt.pods, pod.Id)
}

func (rt *fakeRuntime) resize(c *api.Container, req, lim int64) error {
	rt.mu.Lock()
	pod := rt.pods[c.PodSandboxId]
	rt.mu.Unlock()
	rt.lock.Lock()
	defer rt.lock.Unlock()
	_, err := rt.r.UpdateContainer(context.Background(), &api.UpdateContainerRequest{Pod: pod, Container: cloneCtr(c),
		LinuxResources: &api.LinuxResources{Cpu: milliCPU(req, lim)}})
	return err
}

// cpus is the container's current cpuset.cpus in the runtime.
func (rt *fakeRuntime) cpus(c *api.Container) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	cur, ok := rt.ctrs[c.Id]
	if !ok {
		return "<gone>"
	}
	return cur.GetLinux().GetResources().GetCpu().GetCpus()
}

func (rt *fakeRuntime) mems(c *api.Container) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.ctrs[c.Id].GetLinux().GetResources().GetCpu().GetMems()
}

func (rt *fakeRuntime) cgroupFile(c *api.Container) string {
	return filepath.Join(rt.cgroupRoot, "cpuset", c.Linux.CgroupsPath, "cpuset.cpus")
}

// updatedIDs lists the container names an update list touches, sorted,
// with the cpuset: "name=cpus".
func (rt *fakeRuntime) describe(updates []*api.ContainerUpdate) string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	var out []string
	for _, u := range updates {
		name := u.GetContainerId()
		if c, ok := rt.ctrs[name]; ok {
			name = c.Name
		}
		out = append(out, name+"="+u.GetLinux().GetResources().GetCpu().GetCpus())
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// running is one daemon started against rt.
type running struct {
	d      *Daemon
	cancel context.CancelFunc
	done   chan error
}

// testConfig is a config for the fixture machine with a state dir and the
// runtime's socket; extra is TOML appended to it.
func testConfig(t *testing.T, rt *fakeRuntime, stateDir, extra string) config.Config {
	t.Helper()
	doc := fmt.Sprintf("state_dir = %q\nsocket_path = %q\ncgroup_root = %q\nmetrics_address = \"\"\nreconcile_period = \"0\"\nlog_level = \"debug\"\n%s",
		stateDir, rt.socket, rt.cgroupRoot, extra)
	cfg, err := config.Load([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	return cfg
}

// testLogger writes the daemon's log into the test log.
func testLogger(t *testing.T) *logrus.Logger {
	l := logrus.New()
	l.SetOutput(testWriter{t})
	return l
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

var _ io.Writer = testWriter{}

// startDaemon starts a daemon and waits for its first Synchronize.
func startDaemon(t *testing.T, rt *fakeRuntime, cfg config.Config, topo *topology.Topology, opts ...Option) *running {
	t.Helper()
	rt.mu.Lock()
	syncs := rt.syncs
	rt.mu.Unlock()
	d, err := New(cfg, append([]Option{WithTopology(topo), WithLogger(testLogger(t))}, opts...)...)
	if err != nil {
		t.Fatalf("daemon.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &running{d: d, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- d.Run(ctx) }()
	select {
	case <-d.Synchronized():
	case err := <-r.done:
		t.Fatalf("daemon exited before synchronizing: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("no Synchronize within 10s")
	}
	// The runtime applies the answer after the handler returned.
	waitFor(t, "the runtime to apply the Synchronize answer", func() bool {
		rt.mu.Lock()
		defer rt.mu.Unlock()
		return rt.syncs > syncs
	})
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop cancels the daemon and waits for Run to return (idempotent).
func (r *running) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case err := <-r.done:
		if err != nil {
			t.Errorf("daemon.Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Error("daemon did not stop within 10s")
	}
}

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func loadFixture(t *testing.T, name string) *topology.Topology {
	t.Helper()
	return sysfstest.Load(t, name)
}

func mustSet(t *testing.T, s string) cpuset.CPUSet {
	t.Helper()
	c, err := cpuset.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
