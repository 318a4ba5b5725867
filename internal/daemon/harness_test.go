package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/podres"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// fakeRuntime is the runtime side of NRI from internal/nritest (the
// pkg/adaptation code containerd embeds, with containerd's store and lock
// discipline: a plugin calling UpdateContainers from a handler deadlocks
// here too, and the test then times out), writing the cpusets it applies
// into a fake cgroup v1 tree for the reconcile loop. Its helpers below take
// the kubelet's milli-CPU values and fail the test when a request the test
// expects to pass fails.
type fakeRuntime struct {
	*nritest.Runtime
	t *testing.T
}

func startRuntime(t *testing.T, opts ...nritest.Option) *fakeRuntime {
	t.Helper()
	// Unix socket paths are limited to 108 bytes; t.TempDir() can be long.
	dir, err := os.MkdirTemp("", "nri-rt-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := nritest.New(dir, append([]nritest.Option{nritest.WithCgroupRoot(filepath.Join(dir, "cgroup")),
		nritest.WithErrorf(t.Errorf)}, opts...)...)
	if err := r.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return &fakeRuntime{Runtime: r, t: t}
}

// podSpec describes a pod the way the kubelet would create it.
type podSpec struct {
	uid, name, qos string
	podMilli       int64 // pod-level CPU request, 0 = not sent
}

// addPod stores the pod (no RunPodSandbox is sent).
func (rt *fakeRuntime) addPod(p podSpec) *api.PodSandbox {
	pod := nritest.NewPod(p.uid, p.name, "default", podres.QOS(p.qos))
	if p.podMilli > 0 {
		pod.Linux.PodResources = milliCPU(p.podMilli, p.podMilli)
	}
	rt.RunPodAway(pod)
	return pod
}

// milliCPU is what the kubelet sends for a request/limit in milli-CPUs.
func milliCPU(req, lim int64) *api.LinuxResources {
	return nritest.ContainerResources(podres.Resources{CPURequestMilli: req, CPULimitMilli: lim})
}

func (rt *fakeRuntime) newCtr(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
	return rt.NewContainer(pod, name, podres.Resources{CPURequestMilli: req, CPULimitMilli: lim})
}

// create runs CreateContainer through the plugins and, on success, stores
// the container with the adjustment applied and applies the updates.
func (rt *fakeRuntime) create(pod *api.PodSandbox, name string, req, lim int64) (*api.Container, []*api.ContainerUpdate, error) {
	c := rt.newCtr(pod, name, req, lim)
	resp, err := rt.CreateContainer(context.Background(), pod, c)
	if err != nil {
		return nil, nil, err
	}
	return c, resp.GetUpdate(), nil
}

// createAway adds a container as the runtime does with no plugin
// connected: no adjustment, no cpuset.
func (rt *fakeRuntime) createAway(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
	c := rt.newCtr(pod, name, req, lim)
	rt.CreateContainerAway(c)
	return c
}

func (rt *fakeRuntime) stop(c *api.Container) []*api.ContainerUpdate {
	updates, err := rt.StopContainer(context.Background(), c)
	if err != nil {
		rt.t.Fatalf("StopContainer %s: %v", c.Name, err)
	}
	return updates
}

func (rt *fakeRuntime) remove(c *api.Container) {
	if err := rt.RemoveContainer(context.Background(), c); err != nil {
		rt.t.Fatalf("RemoveContainer %s: %v", c.Name, err)
	}
}

// removeAway drops a container while no plugin is connected.
func (rt *fakeRuntime) removeAway(c *api.Container) { rt.RemoveContainerAway(c) }

func (rt *fakeRuntime) removePod(pod *api.PodSandbox) {
	if err := rt.RemovePod(context.Background(), pod); err != nil {
		rt.t.Fatalf("RemovePodSandbox %s: %v", pod.Name, err)
	}
}

func (rt *fakeRuntime) resize(c *api.Container, req, lim int64) error {
	_, err := rt.UpdateContainer(context.Background(), c, milliCPU(req, lim))
	return err
}

// cpus is the container's current cpuset.cpus in the runtime.
func (rt *fakeRuntime) cpus(c *api.Container) string {
	cpus, _, ok := rt.CPUs(c.Id)
	if !ok {
		return "<gone>"
	}
	return cpus
}

func (rt *fakeRuntime) mems(c *api.Container) string {
	_, mems, _ := rt.CPUs(c.Id)
	return mems
}

func (rt *fakeRuntime) cgroupFile(c *api.Container) string { return rt.CgroupFile(c) }

// describe lists the container names an update list touches, sorted,
// with the cpuset: "name=cpus".
func (rt *fakeRuntime) describe(updates []*api.ContainerUpdate) string {
	names := map[string]string{}
	for _, c := range rt.Containers() {
		names[c.Id] = c.Name
	}
	var out []string
	for _, u := range updates {
		name := u.GetContainerId()
		if n, ok := names[name]; ok {
			name = n
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

// testConfig is a config for the fixture machine with a state dir, the
// runtime's socket and its fake cgroup tree; extra is TOML appended to it.
// shared_pool_updates is the shipped default (direct) unless extra sets
// it: under direct the cgroups are the truth (cgroupCPUs), the runtime's
// record of a shared-pool container keeps its creation's cpuset.
func testConfig(t *testing.T, rt *fakeRuntime, stateDir, extra string) config.Config {
	t.Helper()
	mode := ""
	if err := os.MkdirAll(filepath.Join(rt.CgroupRoot(), "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	// The kubelet's PodResources socket is the host's by default: a test
	// that does not ask for it stays off it, whatever runs on the machine.
	if !strings.Contains(extra, "pod_resources") {
		mode += "pod_resources = false\n"
	}
	doc := fmt.Sprintf("state_dir = %q\nsocket_path = %q\ncgroup_root = %q\nmetrics_address = \"\"\nreconcile_period = \"0\"\nlog_level = \"debug\"\n%s%s",
		stateDir, rt.Socket(), rt.CgroupRoot(), mode, extra)
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

// offHostRoot is the cgroup_root of a daemon that must stay off the
// host's cgroups and systemd: a cgroup v1 layout in a temporary directory
// (cpuset/, so that the default "direct" stays the mode, as on a cgroup
// v1 host). With the default cgroup_root, /sys/fs/cgroup, a daemon on a
// cgroup v2 host with systemd as PID 1 sees systemd there and dials the
// host's system bus (applier.ChooseMode), and its cgroup writes would reach the
// host's cgroups.
func offHostRoot(t testing.TB) string {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// offHostCgroups is offHostRoot as a configuration line.
func offHostCgroups(t testing.TB) string {
	t.Helper()
	return fmt.Sprintf("cgroup_root = %q\n", offHostRoot(t))
}

// startDaemon starts a daemon and waits for its first Synchronize.
func startDaemon(t *testing.T, rt *fakeRuntime, cfg config.Config, topo *topology.Topology, opts ...Option) *running {
	t.Helper()
	syncs := rt.Syncs()
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
		return rt.Syncs() > syncs
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

// settle waits until the update worker has pushed the shared pool for
// every kick so far and the runtime has answered (the bound only keeps a
// hung worker from hanging the test).
func settle(t *testing.T, d *Daemon) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := d.applier().Kicks().Wait(ctx); err != nil {
		t.Fatalf("the update worker did not settle: %v", err)
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
