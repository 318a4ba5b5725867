package daemon

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// manualClock arms timers that fire only when the test says so.
type manualClock struct {
	mu     sync.Mutex
	timers []*manualTimer
}

type manualTimer struct {
	after   time.Duration
	f       func()
	stopped bool
	fired   bool
}

func (c *manualClock) AfterFunc(d time.Duration, f func()) func() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &manualTimer{after: d, f: f}
	c.timers = append(c.timers, t)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		was := !t.stopped && !t.fired
		t.stopped = true
		return was
	}
}

// armed returns the timers neither stopped nor fired.
func (c *manualClock) armed() []*manualTimer {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*manualTimer
	for _, t := range c.timers {
		if !t.stopped && !t.fired {
			out = append(out, t)
		}
	}
	return out
}

// fireAll runs every armed timer's function, as if its time had come, and
// returns how many ran. Stopped timers also run when stale is set: a real
// timer can fire while the handler that stops it waits for the lock.
func (c *manualClock) fireAll(stale bool) int {
	c.mu.Lock()
	var run []func()
	for _, t := range c.timers {
		if !t.fired && (!t.stopped || stale) {
			t.fired = true
			run = append(run, t.f)
		}
	}
	c.mu.Unlock()
	for _, f := range run {
		f()
	}
	return len(run)
}

// handlerDaemon is a daemon driven through its NRI handlers directly (no
// socket), on the fixture ht-1s-4c with core 0 ({0,4}) reserved, with a
// manual clock and a log hook.
type handlerDaemon struct {
	d     *Daemon
	p     *plugin
	clock *manualClock
	log   *logtest.Hook
}

func newHandlerDaemon(t *testing.T, stateDir, extra string) *handlerDaemon {
	t.Helper()
	if !strings.Contains(extra, "shared_pool_updates") {
		extra = "shared_pool_updates = \"in-answer\"\n" + extra // the answers' updates are what these tests read
	}
	cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + stateDir + "\"\nmetrics_address = \"\"\n" + extra))
	if err != nil {
		t.Fatal(err)
	}
	log, hook := logtest.NewNullLogger()
	log.SetLevel(logrus.DebugLevel)
	clk := &manualClock{}
	d, err := New(cfg, WithTopology(loadFixture(t, "ht-1s-4c")), WithLogger(log), withClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.restore(); err != nil {
		t.Fatal(err)
	}
	return &handlerDaemon{d: d, p: &plugin{d: d}, clock: clk, log: hook}
}

func testPod(uid string) *api.PodSandbox {
	return &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: uid, Namespace: "ns", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/pod" + uid}}
}

// testCtr is a container with the kubelet's values for milli CPUs
// (request = limit; 0 = BestEffort).
func testCtr(id, name string, milli uint64) *api.Container {
	cpu := &api.LinuxCPU{}
	if milli > 0 {
		cpu.Shares = &api.OptionalUInt64{Value: milli * 1024 / 1000}
		cpu.Quota = &api.OptionalInt64{Value: int64(milli * 100)}
		cpu.Period = &api.OptionalUInt64{Value: 100000}
	}
	return &api.Container{Id: id, PodSandboxId: "", Name: name, State: api.ContainerState_CONTAINER_CREATED,
		Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Cpu: cpu}}}
}

func (h *handlerDaemon) create(t *testing.T, pod *api.PodSandbox, c *api.Container) (string, []*api.ContainerUpdate) {
	t.Helper()
	c.PodSandboxId = pod.Id
	adj, ups, err := h.p.CreateContainer(context.Background(), pod, c)
	if err != nil {
		t.Fatalf("CreateContainer %s: %v", c.Name, err)
	}
	return adj.GetLinux().GetResources().GetCpu().GetCpus(), ups
}

func (h *handlerDaemon) start(t *testing.T, pod *api.PodSandbox, c *api.Container) {
	t.Helper()
	if err := h.p.StartContainer(context.Background(), pod, c); err != nil {
		t.Fatalf("StartContainer %s: %v", c.Name, err)
	}
	c.State = api.ContainerState_CONTAINER_RUNNING
}

func (h *handlerDaemon) tracked(id string) bool {
	h.d.led.mu.Lock()
	defer h.d.led.mu.Unlock()
	_, ok := h.d.led.ctrs[id]
	return ok
}

func (h *handlerDaemon) shared() string {
	h.d.led.mu.Lock()
	defer h.d.led.mu.Unlock()
	return h.d.led.engine.SharedMask(h.d.led.st).String()
}

// abandoned is nri_cpualign_abandoned_containers_total as /metrics serves it.
func (h *handlerDaemon) abandoned() float64 {
	mfs, err := h.d.Registry().Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "nri_cpualign_abandoned_containers_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return -1
}

// abandonLines are the log entries about containers that never started.
func (h *handlerDaemon) abandonLines() []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range h.log.AllEntries() {
		if e.Data["reason"] == reasonNeverStarted {
			out = append(out, e)
		}
	}
	return out
}

func (h *handlerDaemon) kicked() bool {
	select {
	case <-h.d.kickC():
		return true
	default:
		return false
	}
}

// A Guaranteed container placed at CreateContainer that never gets
// StartContainer (runc failed after the answer) gives its CPUs back when
// container_start_timeout (30 s by default) passes, with one line and the
// metric; a started one keeps them.
func TestNeverStartedContainerGivesCPUsBack(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	bePod, gPod, g2Pod := testPod("be"), testPod("g"), testPod("g2")
	be := testCtr("be-1", "be", 0)
	if cpus, _ := h.create(t, bePod, be); cpus != "0-7" {
		t.Fatalf("be on %q, want 0-7", cpus)
	}
	h.start(t, bePod, be)

	// 2 CPUs: core 1 = {1,5}; the shared pool is the rest.
	app := testCtr("g-1", "app", 2000)
	if cpus, ups := h.create(t, gPod, app); cpus != "1,5" || len(ups) != 1 {
		t.Fatalf("app on %q with %d updates, want 1,5 and be's update", cpus, len(ups))
	}
	armed := h.clock.armed()
	if len(armed) != 1 || armed[0].after != 30*time.Second {
		t.Fatalf("armed timers %+v, want one of 30s (app's; be started)", armed)
	}
	if h.shared() != "0,2-4,6-7" {
		t.Fatalf("shared %s, want 0,2-4,6-7", h.shared())
	}
	h.kicked() // drain

	// The timeout passes: app is released, the pool is whole again.
	if n := h.clock.fireAll(false); n != 1 {
		t.Fatalf("fired %d timers, want 1", n)
	}
	if h.tracked("g-1") {
		t.Error("app is still tracked after its start timeout")
	}
	if h.shared() != "0-7" {
		t.Errorf("shared %s after the release, want 0-7", h.shared())
	}
	if !h.kicked() {
		t.Error("the release did not wake the worker to push the grown pool to be")
	}
	if got := h.abandoned(); got != 1 {
		t.Errorf("nri_cpualign_abandoned_containers_total = %v, want 1", got)
	}
	lines := h.abandonLines()
	if len(lines) != 1 {
		t.Fatalf("%d abandon lines, want 1", len(lines))
	}
	l := lines[0]
	if l.Level != logrus.WarnLevel || l.Data["pod"] != "ns/g" || l.Data["container"] != "app" || l.Data["cpus"] != "1,5" ||
		!strings.Contains(l.Data["detail"].(string), "30s") {
		t.Errorf("abandon line %v %q %v", l.Level, l.Message, l.Data)
	}
	// The checkpoint no longer holds it: a restarted daemon has nothing.
	h2 := newHandlerDaemon(t, h.d.led.cfg.StateDir, "")
	if h2.tracked("g-1") || h2.shared() != "0-7" {
		t.Errorf("after a restart: g-1 tracked=%v, shared %s; want gone and 0-7", h2.tracked("g-1"), h2.shared())
	}

	// A container that starts keeps its CPUs: its timer is stopped, and
	// a stale firing (the timer raced the StartContainer) does nothing.
	app2 := testCtr("g2-1", "app", 2000)
	if cpus, _ := h.create(t, g2Pod, app2); cpus != "1,5" {
		t.Fatalf("app2 on %q, want 1,5 (core 1 is free again)", cpus)
	}
	h.start(t, g2Pod, app2)
	if len(h.clock.armed()) != 0 {
		t.Errorf("a timer is still armed after StartContainer")
	}
	h.clock.fireAll(true)
	if !h.tracked("g2-1") || h.shared() != "0,2-4,6-7" || h.abandoned() != 1 {
		t.Errorf("started app2: tracked=%v shared=%s abandoned=%v; want tracked, 0,2-4,6-7, 1", h.tracked("g2-1"), h.shared(), h.abandoned())
	}
}

// The kubelet retries a failed creation with a new container ID under the
// same pod and name: the attempt that never started is dead at once, its
// CPUs go to the retry, and its timer no longer matters.
func TestRetrySupersedesNeverStartedAttempt(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "container_start_timeout = \"1m\"\n")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pod := testPod("g")
	// 6 CPUs = the three free cores {1,5},{2,6},{3,7}: a retry could not
	// be placed beside a first attempt still holding them.
	first := testCtr("g-1", "app", 6000)
	if cpus, _ := h.create(t, pod, first); cpus != "1-3,5-7" {
		t.Fatalf("first attempt on %q, want 1-3,5-7", cpus)
	}
	retry := testCtr("g-2", "app", 6000)
	if cpus, _ := h.create(t, pod, retry); cpus != "1-3,5-7" {
		t.Fatalf("retry on %q, want 1-3,5-7", cpus)
	}
	if h.tracked("g-1") || !h.tracked("g-2") {
		t.Errorf("tracked: first %v, retry %v; want false, true", h.tracked("g-1"), h.tracked("g-2"))
	}
	if got := h.abandoned(); got != 1 {
		t.Errorf("abandoned = %v, want 1 (the first attempt)", got)
	}
	if lines := h.abandonLines(); len(lines) != 1 || lines[0].Data["id"] != "g-1" || !strings.Contains(lines[0].Data["detail"].(string), "g-2") {
		t.Errorf("abandon lines %v, want one for g-1 naming g-2", lines)
	}
	armed := h.clock.armed()
	if len(armed) != 1 || armed[0].after != time.Minute {
		t.Fatalf("armed %+v, want the retry's 1m timer only", armed)
	}
	// The first attempt's stale timer does nothing to the retry.
	h.clock.fireAll(true)
	if h.tracked("g-2") {
		t.Error("the retry, never started either, is still tracked after its own timeout")
	}
	if h.shared() != "0-7" || h.abandoned() != 2 {
		t.Errorf("shared %s abandoned %v, want 0-7 and 2", h.shared(), h.abandoned())
	}
}

// Stop, Remove and the pod's removal end the wait; a restart of a started
// container (same name, the old one stopped) is no abandoned attempt.
func TestStopRemoveEndTheWait(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	a, b, c := testPod("a"), testPod("b"), testPod("c")
	ca, cb, cc := testCtr("a-1", "app", 1000), testCtr("b-1", "app", 1000), testCtr("c-1", "app", 1000)
	h.create(t, a, ca)
	h.create(t, b, cb)
	h.create(t, c, cc)
	if len(h.clock.armed()) != 3 {
		t.Fatalf("%d armed, want 3", len(h.clock.armed()))
	}
	if _, err := h.p.StopContainer(ctx, a, ca); err != nil {
		t.Fatal(err)
	}
	if err := h.p.RemoveContainer(ctx, b, cb); err != nil {
		t.Fatal(err)
	}
	if err := h.p.RemovePodSandbox(ctx, c); err != nil {
		t.Fatal(err)
	}
	if n := len(h.clock.armed()); n != 0 {
		t.Errorf("%d timers armed after stop/remove/pod removal, want 0", n)
	}

	// A restarted container: started, stopped, created again.
	d := testPod("d")
	old := testCtr("d-1", "app", 1000)
	h.create(t, d, old)
	h.start(t, d, old)
	if _, err := h.p.StopContainer(ctx, d, old); err != nil {
		t.Fatal(err)
	}
	h.create(t, d, testCtr("d-2", "app", 1000))
	if h.abandoned() != 0 || len(h.abandonLines()) != 0 {
		t.Errorf("abandoned %v, lines %d after a plain restart; want 0", h.abandoned(), len(h.abandonLines()))
	}
}

// After a plugin restart, Synchronize is the truth: a container the
// runtime lists as created but not started waits again (a full timeout
// from now), a running one does not, and one the runtime no longer lists
// (CRI-O dropped it after runc failed) is released at once.
func TestSynchronizeRearmsStartTimers(t *testing.T) {
	dir := t.TempDir()
	h := newHandlerDaemon(t, dir, "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pa, pb, pc := testPod("a"), testPod("b"), testPod("c")
	ca, cb, cc := testCtr("a-1", "app", 1000), testCtr("b-1", "app", 1000), testCtr("c-1", "app", 1000)
	// One CPU each, packed as the kubelet packs: 1, then its sibling 5
	// (the core already in use), then 2.
	cpusA, _ := h.create(t, pa, ca)
	cpusB, _ := h.create(t, pb, cb)
	cpusC, _ := h.create(t, pc, cc)
	if cpusA != "1" || cpusB != "5" || cpusC != "2" {
		t.Fatalf("placed on %s, %s, %s; want 1, 5, 2", cpusA, cpusB, cpusC)
	}
	// The plugin dies before any StartContainer reaches it.

	h2 := newHandlerDaemon(t, dir, "")
	ca.State = api.ContainerState_CONTAINER_CREATED
	cb.State = api.ContainerState_CONTAINER_RUNNING
	for _, x := range []struct {
		c    *api.Container
		cpus string
	}{{ca, cpusA}, {cb, cpusB}} {
		x.c.Linux.Resources.Cpu.Cpus = x.cpus
	}
	if _, err := h2.p.Synchronize(ctx, []*api.PodSandbox{pa, pb}, []*api.Container{ca, cb}); err != nil {
		t.Fatal(err)
	}
	if h2.tracked("c-1") {
		t.Error("c-1, gone from the runtime, is still tracked")
	}
	armed := h2.clock.armed()
	if len(armed) != 1 {
		t.Fatalf("%d armed after Synchronize, want 1 (a-1, created)", len(armed))
	}
	h2.clock.fireAll(false)
	if h2.tracked("a-1") || !h2.tracked("b-1") {
		t.Errorf("after the timeout: a-1 tracked %v, b-1 tracked %v; want false, true", h2.tracked("a-1"), h2.tracked("b-1"))
	}
	// b-1 keeps CPU 5, as placed before the restart.
	if h2.shared() != "0-4,6-7" {
		t.Errorf("shared %s, want 0-4,6-7 (only b-1 on 5 exclusive)", h2.shared())
	}
}

// container_start_timeout = "0" turns the timers off.
func TestStartTimeoutOff(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "container_start_timeout = \"0\"\n")
	if _, err := h.p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	h.create(t, testPod("g"), testCtr("g-1", "app", 1000))
	if n := len(h.clock.timers); n != 0 {
		t.Errorf("%d timers armed with the timeout off", n)
	}
}

// A container given up by its timer that starts after all is placed again:
// on the CPUs it runs on when they are still free, else afresh (the
// reconcile loop then moves its cgroup there).
func TestLateStartPlacedAgain(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	a, b, c := testPod("a"), testPod("b"), testPod("c")
	ca := testCtr("a-1", "app", 2000)
	cpus, _ := h.create(t, a, ca)
	if cpus != "1,5" {
		t.Fatalf("a-1 on %q, want 1,5", cpus)
	}
	h.clock.fireAll(false)
	if h.tracked("a-1") || h.shared() != "0-7" {
		t.Fatalf("after the timeout: tracked %v shared %s", h.tracked("a-1"), h.shared())
	}
	h.kicked()
	// It starts late, still on 1,5 (the runtime's view of its cpuset).
	ca.Linux.Resources.Cpu.Cpus = "1,5"
	h.start(t, a, ca)
	if !h.tracked("a-1") || h.shared() != "0,2-4,6-7" || !h.kicked() {
		t.Errorf("late start on free CPUs: tracked %v shared %s; want tracked, 0,2-4,6-7 and a push", h.tracked("a-1"), h.shared())
	}

	// Given up again, and its CPUs taken by another container meanwhile.
	cb := testCtr("b-1", "app", 2000)
	h.create(t, b, cb)
	h.start(t, b, cb) // b-1 is a started container: no timer left
	cc := testCtr("c-1", "app", 2000)
	if cpus, _ := h.create(t, c, cc); cpus != "3,7" {
		t.Fatalf("c-1 on %q, want 3,7 (a-1 on 1,5, b-1 on 2,6)", cpus)
	}
	h.clock.fireAll(false)
	if h.tracked("c-1") {
		t.Fatal("c-1 still tracked after its timeout")
	}
	cd := testCtr("d-1", "app", 2000)
	if cpus, _ := h.create(t, testPod("d"), cd); cpus != "3,7" {
		t.Fatalf("d-1 on %q, want 3,7 (given back by c-1)", cpus)
	}
	cc.Linux.Resources.Cpu.Cpus = "3,7"
	h.start(t, c, cc)
	// No core is left for c-1: it runs on d-1's 3,7 until moved, so it is
	// tracked as a shared-pool container and the pool is pushed to it.
	if !h.tracked("c-1") || h.shared() != "0,4" || !h.kicked() {
		t.Errorf("late start with no room: tracked %v shared %s kicked %v; want tracked, 0,4 and a push", h.tracked("c-1"), h.shared(), h.kicked())
	}
	if r := h.d.led.ctrs["c-1"]; r.Exclusive {
		t.Errorf("c-1 recorded as exclusive: %+v", r)
	}
	var warned bool
	for _, e := range h.log.AllEntries() {
		if e.Data["container"] == "app" && e.Data["id"] == "c-1" && strings.Contains(e.Message, "cannot be placed again") {
			warned = true
		}
	}
	if !warned {
		t.Error("no warning for the late container that could not be placed")
	}
}
