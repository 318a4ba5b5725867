package nritest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/podres"
)

// plugin is an NRI plugin whose answers the test sets; it records what the
// runtime sent it.
type plugin struct {
	mu       sync.Mutex
	synced   []*api.Container
	onSync   func([]*api.Container) []*api.ContainerUpdate
	onCreate func(*api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error)
	onStop   func(*api.Container) []*api.ContainerUpdate
	onUpdate func(*api.Container, *api.LinuxResources) error
	events   []string
}

func (p *plugin) Synchronize(_ context.Context, _ []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.synced = ctrs
	if p.onSync != nil {
		return p.onSync(ctrs), nil
	}
	return nil, nil
}

func (p *plugin) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "create "+c.Name)
	if p.onCreate != nil {
		return p.onCreate(c)
	}
	return nil, nil, nil
}

func (p *plugin) StartContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "start "+c.Name)
	return nil
}

func (p *plugin) UpdateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container, r *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "update "+c.Name)
	if p.onUpdate != nil {
		return nil, p.onUpdate(c, r)
	}
	return nil, nil
}

func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) ([]*api.ContainerUpdate, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "stop "+c.Name)
	if p.onStop != nil {
		return p.onStop(c), nil
	}
	return nil, nil
}

func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "remove "+c.Name)
	return nil
}

func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.events = append(p.events, "remove-pod "+pod.Name)
	return nil
}

func (p *plugin) syncedNames() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for _, c := range p.synced {
		out = append(out, fmt.Sprintf("%s:%s:%q", c.Name, c.State, c.GetLinux().GetResources().GetCpu().GetCpus()))
	}
	return out
}

func (p *plugin) eventList() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.events...)
}

func update(id, cpus, mems string) *api.ContainerUpdate {
	u := &api.ContainerUpdate{ContainerId: id}
	u.SetLinuxCPUSetCPUs(cpus)
	if mems != "" {
		u.SetLinuxCPUSetMems(mems)
	}
	return u
}

func adjust(cpus, mems string) *api.ContainerAdjustment {
	a := &api.ContainerAdjustment{}
	a.SetLinuxCPUSetCPUs(cpus)
	a.SetLinuxCPUSetMems(mems)
	return a
}

// start starts a runtime with a fake cgroup tree and errors collected in
// *errs.
func start(t *testing.T, errs *[]string) *Runtime {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir() can be long.
	dir, err := os.MkdirTemp("", "nritest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var mu sync.Mutex
	rt := New(dir, WithCgroupRoot(dir+"/cgroup"), WithErrorf(func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		*errs = append(*errs, fmt.Sprintf(format, args...))
	}))
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	return rt
}

// connect connects p and waits for plugin Synchronize number n.
func connect(t *testing.T, rt *Runtime, p *plugin, n int) stub.Stub {
	t.Helper()
	s, err := stub.New(p, stub.WithSocketPath(rt.Socket()), stub.WithPluginName("test"), stub.WithPluginIdx("10"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	if err := rt.WaitForPlugin(n, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	return s
}

func cpusOf(t *testing.T, rt *Runtime, c *api.Container) string {
	t.Helper()
	cpus, mems, ok := rt.CPUs(c.Id)
	if !ok {
		return "<gone>"
	}
	if mems != "" {
		return cpus + "/" + mems
	}
	return cpus
}

func TestNewContainerHasTheKubeletValues(t *testing.T) {
	rt := New(t.TempDir())
	for _, tc := range []struct {
		name     string
		q        podres.QOS
		r        podres.Resources
		parent   string
		shares   uint64
		quota    int64
		memLimit int64
	}{
		// 2 CPUs: shares 2*1024, quota 2*100000 per 100000 period.
		{"guaranteed", podres.Guaranteed, podres.GuaranteedCPUs(2), "/kubepods/podg", 2048, 200000, 64 << 20},
		// 500m request, no limit: shares 500*1024/1000 = 512, no quota.
		{"burstable", podres.Burstable, podres.Resources{CPURequestMilli: 500}, "/kubepods/burstable/podb", 512, 0, 0},
		// Nothing requested: the kubelet's minimum of 2 shares.
		{"besteffort", podres.BestEffort, podres.Resources{}, "/kubepods/besteffort/podbe", 2, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			uid := strings.TrimPrefix(tc.parent[strings.LastIndex(tc.parent, "/")+1:], "pod")
			pod := NewPod(uid, tc.name, "ns", tc.q)
			if got := pod.Linux.CgroupParent; got != tc.parent {
				t.Errorf("cgroup parent %q, want %q", got, tc.parent)
			}
			c := rt.NewContainer(pod, "c", tc.r)
			if want := tc.parent + "/" + c.Id; c.Linux.CgroupsPath != want {
				t.Errorf("cgroups path %q, want %q", c.Linux.CgroupsPath, want)
			}
			cpu := c.Linux.Resources.Cpu
			if cpu.GetShares().GetValue() != tc.shares || cpu.GetQuota().GetValue() != tc.quota || cpu.GetPeriod().GetValue() != 100000 {
				t.Errorf("shares %d quota %d period %d, want %d %d 100000", cpu.GetShares().GetValue(), cpu.GetQuota().GetValue(),
					cpu.GetPeriod().GetValue(), tc.shares, tc.quota)
			}
			if got := c.Linux.Resources.GetMemory().GetLimit().GetValue(); got != tc.memLimit {
				t.Errorf("memory limit %d, want %d", got, tc.memLimit)
			}
		})
	}
	// Unique ids, creation times in order.
	pod := NewPod("u", "u", "ns", podres.BestEffort)
	a, b := rt.NewContainer(pod, "c", podres.Resources{}), rt.NewContainer(pod, "c", podres.Resources{})
	if a.Id == b.Id || a.CreatedAt >= b.CreatedAt {
		t.Errorf("containers %s@%d and %s@%d", a.Id, a.CreatedAt, b.Id, b.CreatedAt)
	}
}

// TestSynchronizeHandsOverTheStore: what the runtime did while no plugin
// was connected is in the first Synchronize, in creation order; its
// updates are applied to running containers only, and written to the fake
// cgroup tree.
func TestSynchronizeHandsOverTheStore(t *testing.T) {
	var errs []string
	rt := start(t, &errs)
	pod := NewPod("p", "p", "ns", podres.Guaranteed)
	rt.RunPodAway(pod)
	a := rt.NewContainer(pod, "a", podres.GuaranteedCPUs(2))
	b := rt.NewContainer(pod, "b", podres.GuaranteedCPUs(1))
	rt.CreateContainerAway(b) // stored before a, created after it
	rt.CreateContainerAway(a)
	rt.StopContainerAway(b)
	p := &plugin{onSync: func(ctrs []*api.Container) []*api.ContainerUpdate {
		return []*api.ContainerUpdate{update(a.Id, "1-2", "0"), update(b.Id, "3", "")}
	}}
	connect(t, rt, p, 1)
	if got, want := p.syncedNames(), []string{`a:CONTAINER_RUNNING:""`, `b:CONTAINER_STOPPED:""`}; !reflect.DeepEqual(got, want) {
		t.Errorf("Synchronize saw %v, want %v", got, want)
	}
	if got := cpusOf(t, rt, a); got != "1-2/0" {
		t.Errorf("a: %q, want 1-2/0", got)
	}
	if got := cpusOf(t, rt, b); got != "" {
		t.Errorf("stopped b was updated to %q", got)
	}
	if n := len(rt.SyncUpdates()); n != 2 || rt.Syncs() != 1 {
		t.Errorf("%d Synchronize calls, %d updates in the last; want 1 and 2", rt.Syncs(), n)
	}
	if data, err := os.ReadFile(rt.CgroupFile(a)); err != nil || string(data) != "1-2\n" {
		t.Errorf("cgroup file of a: %q, %v", data, err)
	}
	if _, err := os.Stat(rt.CgroupFile(b)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cgroup file of stopped b: %v, want none", err)
	}
	if len(errs) != 0 {
		t.Errorf("runtime errors: %v", errs)
	}
}

func TestContainerLifecycle(t *testing.T) {
	var errs []string
	rt := start(t, &errs)
	ctx := context.Background()
	pod := NewPod("p", "p", "ns", podres.Guaranteed)
	shared := rt.NewContainer(pod, "s", podres.Resources{})
	p := &plugin{}
	connect(t, rt, p, 1)
	if err := rt.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	rt.CreateContainerAway(shared)

	p.onCreate = func(c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
		switch c.Name {
		case "x":
			return adjust("4-5", "0"), []*api.ContainerUpdate{update(shared.Id, "0-3", "")}, nil
		case "self":
			return adjust("6", "0"), []*api.ContainerUpdate{update(c.Id, "7", "")}, nil
		}
		return nil, nil, errors.New("no room")
	}
	x := rt.NewContainer(pod, "x", podres.GuaranteedCPUs(2))
	resp, err := rt.CreateContainer(ctx, pod, x)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.GetUpdate()) != 1 {
		t.Errorf("CreateContainer answer %v", resp)
	}
	if got := cpusOf(t, rt, x); got != "4-5/0" || x.State != api.ContainerState_CONTAINER_RUNNING {
		t.Errorf("x: %q %s, want 4-5/0 running", got, x.State)
	}
	if got := cpusOf(t, rt, shared); got != "0-3" {
		t.Errorf("shared after x: %q, want 0-3", got)
	}
	if got := rt.UpdatesByName(resp.GetUpdate()); !reflect.DeepEqual(got, map[string]string{"s": "0-3"}) {
		t.Errorf("UpdatesByName %v", got)
	}
	if err := rt.StartContainer(ctx, x); err != nil {
		t.Fatal(err)
	}

	// An update for the container being created is the plugin's bug; NRI
	// itself fails the creation.
	self := rt.NewContainer(pod, "self", podres.GuaranteedCPUs(1))
	if _, err := rt.CreateContainer(ctx, pod, self); err == nil || !strings.Contains(err.Error(), "during creation") {
		t.Errorf("create with an update for itself: %v", err)
	}
	if got := cpusOf(t, rt, self); got != "<gone>" || len(errs) != 0 {
		t.Errorf("a failed create is stored (%q), runtime errors %v", got, errs)
	}

	// A rejection stores nothing.
	full := rt.NewContainer(pod, "full", podres.GuaranteedCPUs(8))
	if _, err := rt.CreateContainer(ctx, pod, full); err == nil || !strings.Contains(err.Error(), "no room") {
		t.Errorf("rejected create: %v", err)
	}
	if got := cpusOf(t, rt, full); got != "<gone>" {
		t.Errorf("a rejected container is stored: %q", got)
	}

	// Stop marks the container stopped before the answer is applied.
	p.onStop = func(c *api.Container) []*api.ContainerUpdate {
		return []*api.ContainerUpdate{update(shared.Id, "0-5", ""), update(x.Id, "1", "")}
	}
	if _, err := rt.StopContainer(ctx, x); err != nil {
		t.Fatal(err)
	}
	if got := cpusOf(t, rt, shared); got != "0-5" {
		t.Errorf("shared after the stop of x: %q, want 0-5", got)
	}
	if got := cpusOf(t, rt, x); got != "4-5/0" {
		t.Errorf("stopped x was updated to %q", got)
	}
	applied, err := rt.Running()
	if err != nil {
		t.Fatal(err)
	}
	want := map[invariant.Key]cpuset.CPUSet{{Pod: "p", Container: "s"}: cpuset.New(0, 1, 2, 3, 4, 5)}
	if !reflect.DeepEqual(applied, want) {
		t.Errorf("Running() = %v, want %v", applied, want)
	}
	if err := rt.RemoveContainer(ctx, x); err != nil {
		t.Fatal(err)
	}
	if err := rt.RemovePod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	if n, m := len(rt.Containers()), len(rt.Pods()); n != 0 || m != 0 {
		t.Errorf("after RemovePodSandbox: %d containers, %d pods", n, m)
	}
	wantEvents := []string{"create x", "start x", "create self", "create full", "stop x", "remove x", "remove-pod p"}
	if got := p.eventList(); !reflect.DeepEqual(got, wantEvents) {
		t.Errorf("plugin saw %v, want %v", got, wantEvents)
	}
}

// TestUnsolicitedUpdates: pushed updates go through the hook, then apply to
// running containers only.
func TestUnsolicitedUpdates(t *testing.T) {
	var errs []string
	rt := start(t, &errs)
	pod := NewPod("p", "p", "ns", podres.BestEffort)
	rt.RunPodAway(pod)
	a, b := rt.NewContainer(pod, "a", podres.Resources{}), rt.NewContainer(pod, "b", podres.Resources{})
	rt.CreateContainerAway(a)
	rt.CreateContainerAway(b)
	rt.StopContainerAway(b)
	s := connect(t, rt, &plugin{}, 1)
	var hooked atomic.Int32
	rt.SetBeforeUpdate(func() { hooked.Add(1) })
	if _, err := s.UpdateContainers([]*api.ContainerUpdate{update(a.Id, "5", ""), update(b.Id, "9", ""), update("gone", "1", "")}); err != nil {
		t.Fatal(err)
	}
	if got := cpusOf(t, rt, a); got != "5" {
		t.Errorf("a: %q, want 5", got)
	}
	if got := cpusOf(t, rt, b); got != "" {
		t.Errorf("stopped b: %q, want unchanged", got)
	}
	if rt.Pushes() != 1 || len(rt.Unsolicited()) != 3 || hooked.Load() != 1 {
		t.Errorf("pushes %d, updates %d, hook ran %d times; want 1, 3, 1", rt.Pushes(), len(rt.Unsolicited()), hooked.Load())
	}
}

// TestSnapshotsStayAsHandedOut: the plugin's pushes arrive on NRI's
// goroutines, so a container the runtime handed out (the one given to
// CreateContainer, Containers' list) is never changed afterwards; the
// store has the new values. Reading the old ones while a push is applied
// is no data race (this test runs under -race in make test).
func TestSnapshotsStayAsHandedOut(t *testing.T) {
	var errs []string
	rt := start(t, &errs)
	ctx := context.Background()
	p := &plugin{onCreate: func(c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
		return adjust("1-2", "0"), nil, nil
	}}
	s := connect(t, rt, p, 1)
	pod := NewPod("p", "p", "ns", podres.Guaranteed)
	if err := rt.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	x := rt.NewContainer(pod, "x", podres.GuaranteedCPUs(2))
	if _, err := rt.CreateContainer(ctx, pod, x); err != nil {
		t.Fatal(err)
	}
	listed, ok := rt.ContainerNamed("x")
	if !ok {
		t.Fatal("x not stored")
	}
	pushed := make(chan error, 1)
	go func() {
		_, err := s.UpdateContainers([]*api.ContainerUpdate{update(x.Id, "3-4", "1")})
		pushed <- err
	}()
	// Read while the push may be applied.
	before := x.Linux.Resources.Cpu.Cpus + "/" + listed.Linux.Resources.Cpu.Cpus
	if err := <-pushed; err != nil {
		t.Fatal(err)
	}
	rt.StopContainerAway(x)
	if got := x.Linux.Resources.Cpu.Cpus + "/" + listed.Linux.Resources.Cpu.Mems; before != "1-2/1-2" || got != "1-2/0" {
		t.Errorf("handed-out containers changed: cpus %q before the push, %q (cpus/mems) after, want 1-2/1-2 and 1-2/0", before, got)
	}
	if x.State != api.ContainerState_CONTAINER_RUNNING || listed.State != api.ContainerState_CONTAINER_RUNNING {
		t.Errorf("handed-out containers stopped: %s, %s", x.State, listed.State)
	}
	if got := cpusOf(t, rt, x); got != "3-4/1" {
		t.Errorf("stored x: %q, want 3-4/1", got)
	}
	if now, _ := rt.ContainerNamed("x"); now.State != api.ContainerState_CONTAINER_STOPPED {
		t.Errorf("stored x: %s, want stopped", now.State)
	}
	if len(errs) != 0 {
		t.Errorf("runtime errors: %v", errs)
	}
}

// TestRestartAndAnswerLost: a stopped runtime keeps its store, changes
// made meanwhile reach the next plugin in Synchronize, and only plugin
// connections count; a create whose answer is lost runs unpinned.
func TestRestartAndAnswerLost(t *testing.T) {
	var errs []string
	rt := start(t, &errs)
	ctx := context.Background()
	pod := NewPod("p", "p", "ns", podres.Guaranteed)
	p := &plugin{onCreate: func(c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
		return adjust("2", "0"), nil, nil
	}}
	connect(t, rt, p, 1)
	if err := rt.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	x := rt.NewContainer(pod, "x", podres.GuaranteedCPUs(1))
	if _, err := rt.CreateContainer(ctx, pod, x); err != nil {
		t.Fatal(err)
	}
	lost := rt.NewContainer(pod, "lost", podres.GuaranteedCPUs(1))
	if err := rt.CreateContainerAnswerLost(ctx, pod, lost); err != nil {
		t.Fatal(err)
	}
	if got := cpusOf(t, rt, lost); got != "" {
		t.Errorf("answer-lost container: %q, want unpinned", got)
	}

	rt.Stop()
	y := rt.NewContainer(pod, "y", podres.GuaranteedCPUs(1))
	rt.CreateContainerAway(y)
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	if rt.Syncs() != 1 {
		t.Errorf("%d Synchronize calls after the restart, before a plugin connected; want 1", rt.Syncs())
	}
	p2 := &plugin{}
	connect(t, rt, p2, 2)
	want := []string{`x:CONTAINER_RUNNING:"2"`, `lost:CONTAINER_RUNNING:""`, `y:CONTAINER_RUNNING:""`}
	if got := p2.syncedNames(); !reflect.DeepEqual(got, want) {
		t.Errorf("Synchronize after the restart saw %v, want %v", got, want)
	}
	if len(errs) != 0 {
		t.Errorf("runtime errors: %v", errs)
	}
}

// TestCreatedUntilStarted: with WithCreatedUntilStarted a container is
// created, then running once its StartContainer is accepted, and the
// plugin's Synchronize sees which; an accepted resize is stored (the
// values it sets, the others kept), a refused one is not.
func TestCreatedUntilStarted(t *testing.T) {
	dir, err := os.MkdirTemp("", "nritest-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	rt := New(dir, WithCreatedUntilStarted(), WithCgroupRoot(dir+"/cgroup"), WithCgroupsRemoved(), WithErrorf(t.Errorf))
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rt.Stop)
	ctx := context.Background()
	p := &plugin{}
	connect(t, rt, p, 1)
	pod := NewPod("p", "p", "ns", podres.Guaranteed)
	if err := rt.RunPod(ctx, pod); err != nil {
		t.Fatal(err)
	}
	x := rt.NewContainer(pod, "x", podres.GuaranteedCPUs(2))
	if _, err := rt.CreateContainer(ctx, pod, x); err != nil {
		t.Fatal(err)
	}
	state := func(name string) api.ContainerState {
		c, ok := rt.ContainerNamed(name)
		if !ok {
			t.Fatalf("%s not stored", name)
		}
		return c.State
	}
	if got := state("x"); got != api.ContainerState_CONTAINER_CREATED {
		t.Errorf("x after CreateContainer: %s, want created", got)
	}
	if err := rt.StartContainer(ctx, x); err != nil {
		t.Fatal(err)
	}
	if got := state("x"); got != api.ContainerState_CONTAINER_RUNNING {
		t.Errorf("x after StartContainer: %s, want running", got)
	}

	// A resize: shares 1024 only, then a refused one.
	res := &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(1024))}}
	if _, err := rt.UpdateContainer(ctx, x, res); err != nil {
		t.Fatal(err)
	}
	p.onUpdate = func(*api.Container, *api.LinuxResources) error { return errors.New("no resize") }
	refused := &api.LinuxResources{Cpu: &api.LinuxCPU{Shares: api.UInt64(uint64(4096)), Quota: api.Int64(int64(400000))}}
	if _, err := rt.UpdateContainer(ctx, x, refused); err == nil || !strings.Contains(err.Error(), "no resize") {
		t.Errorf("refused resize: %v", err)
	}
	now, _ := rt.ContainerNamed("x")
	cpu := now.GetLinux().GetResources().GetCpu()
	// 2 CPUs: quota 200000 per 100000 from NewContainer, shares from the resize.
	if cpu.GetShares().GetValue() != 1024 || cpu.GetQuota().GetValue() != 200000 || cpu.GetPeriod().GetValue() != 100000 {
		t.Errorf("after the resizes: shares %d quota %d period %d, want 1024 200000 100000",
			cpu.GetShares().GetValue(), cpu.GetQuota().GetValue(), cpu.GetPeriod().GetValue())
	}
	if x.GetLinux().GetResources().GetCpu().GetShares().GetValue() != 2048 {
		t.Errorf("the handed-out x changed: shares %d", x.GetLinux().GetResources().GetCpu().GetShares().GetValue())
	}

	// Created while away, one of them started while away too.
	rt.Stop()
	y, z := rt.NewContainer(pod, "y", podres.Resources{}), rt.NewContainer(pod, "z", podres.Resources{})
	rt.CreateContainerAwayNotStarted(y)
	rt.CreateContainerAwayNotStarted(z)
	rt.StartContainerAway(z)
	if err := rt.Start(); err != nil {
		t.Fatal(err)
	}
	p2 := &plugin{}
	connect(t, rt, p2, 2)
	want := []string{`x:CONTAINER_RUNNING:""`, `y:CONTAINER_CREATED:""`, `z:CONTAINER_RUNNING:""`}
	if got := p2.syncedNames(); !reflect.DeepEqual(got, want) {
		t.Errorf("Synchronize saw %v, want %v", got, want)
	}
	wantEvents := []string{"start x", "update x", "update x"}
	if got := p.eventList(); !reflect.DeepEqual(got[1:], wantEvents) {
		t.Errorf("plugin saw %v, want create x then %v", got, wantEvents)
	}

	// The cgroup goes with the container's task: at its stop, event or not.
	rt.SetCPUs(y, "3", "")
	rt.SetCPUs(z, "4", "")
	for _, c := range []*api.Container{y, z} {
		if _, err := os.Stat(rt.CgroupFile(c)); err != nil {
			t.Fatalf("cgroup of %s: %v", c.Name, err)
		}
	}
	rt.StopContainerAway(y)
	if err := rt.RemoveContainer(ctx, z); err != nil {
		t.Fatal(err)
	}
	for _, c := range []*api.Container{y, z} {
		if _, err := os.Stat(filepath.Dir(rt.CgroupFile(c))); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup of %s after it went: %v, want none", c.Name, err)
		}
	}
}
