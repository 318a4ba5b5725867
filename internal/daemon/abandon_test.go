package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/adapter"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// handlerDaemon is a daemon driven through its NRI handlers directly (no
// socket), on the fixture ht-1s-4c with core 0 ({0,4}) reserved, with a
// log hook.
type handlerDaemon struct {
	d   *Daemon
	p   adapter.Handlers
	log *logtest.Hook
	// kicks is how many worker kicks kicked has seen (no worker runs).
	kicks uint64
}

func newHandlerDaemon(t *testing.T, stateDir, extra string, opts ...Option) *handlerDaemon {
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
	d, err := New(cfg, append([]Option{WithTopology(loadFixture(t, "ht-1s-4c")), WithLogger(log)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.restore(); err != nil {
		t.Fatal(err)
	}
	return &handlerDaemon{d: d, p: d.handlers(), log: hook}
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
	var ok bool
	h.d.led.Read(func(l *ledger.Tx) { _, ok = l.Record(id) })
	return ok
}

func (h *handlerDaemon) shared() string {
	return readLedger(h.d, func(l *ledger.Tx) string { return l.Engine().SharedMask(l.State()).String() })
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
		if e.Data["reason"] == "ContainerNeverStarted" { // the adapter's reasonNeverStarted
			out = append(out, e)
		}
	}
	return out
}

// kicked reports whether the worker was kicked since the last call.
func (h *handlerDaemon) kicked() bool {
	asked := h.d.applier().Kicks().Asked()
	seen := h.kicks
	h.kicks = asked
	return asked != seen
}

// A Guaranteed container placed at CreateContainer that never gets
// StartContainer (runc failed after the answer; CRI-O then sends no Stop
// or Remove) keeps its CPUs for its pod, as under the kubelet: no other
// pod gets them, the kubelet's retry (same pod and name, a new ID) gets
// exactly them, and the pod's removal frees them.
func TestNeverStartedContainerKeepsCPUsForItsPod(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	gPod, other := testPod("g"), testPod("o")
	// 2 CPUs: core 1 = {1,5}.
	first := testCtr("g-1", "app", 2000)
	if cpus, _ := h.create(t, gPod, first); cpus != "1,5" {
		t.Fatalf("first attempt on %q, want 1,5", cpus)
	}
	// Another pod takes the two free cores {2,6},{3,7}; a third core is
	// not there: the never-started attempt still holds {1,5}.
	o1 := testCtr("o-1", "big", 4000)
	if cpus, _ := h.create(t, other, o1); cpus != "2-3,6-7" {
		t.Fatalf("other pod on %q, want 2-3,6-7", cpus)
	}
	if _, _, err := h.p.CreateContainer(ctx, testPod("x"), testCtr("x-1", "one", 1000)); err == nil || !strings.Contains(err.Error(), "InsufficientCPUs") {
		t.Fatalf("a third pod's 1-CPU container: err %v, want InsufficientCPUs", err)
	}
	retry := testCtr("g-2", "app", 2000)
	if cpus, _ := h.create(t, gPod, retry); cpus != "1,5" {
		t.Fatalf("retry on %q, want 1,5 (the first attempt's)", cpus)
	}
	if h.tracked("g-1") || !h.tracked("g-2") || h.abandoned() != 1 {
		t.Errorf("first tracked %v, retry tracked %v, abandoned %v; want false, true, 1", h.tracked("g-1"), h.tracked("g-2"), h.abandoned())
	}
	lines := h.abandonLines()
	if len(lines) != 1 || lines[0].Level != logrus.WarnLevel || lines[0].Data["id"] != "g-1" || lines[0].Data["cpus"] != "1,5" ||
		!strings.Contains(lines[0].Data["detail"].(string), "g-2") {
		t.Errorf("abandon lines %v, want one warning for g-1 on 1,5 naming g-2", lines)
	}
	if h.shared() != "0,4" {
		t.Errorf("shared %s, want 0,4", h.shared())
	}
	if err := h.p.RemovePodSandbox(ctx, gPod); err != nil {
		t.Fatal(err)
	}
	if h.shared() != "0-1,4-5" || !h.kicked() {
		t.Errorf("after the pod's removal: shared %s, want 0-1,4-5 and a push", h.shared())
	}
}

// A restart of a started container (same name, the old one stopped) is
// no abandoned attempt.
func TestRestartIsNoAbandonedAttempt(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
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

// After a plugin restart, Synchronize is the truth about which containers
// have not started: the retry of one the runtime lists as created is a
// dead attempt; one the runtime lists as running is not.
func TestSynchronizeFindsNotStarted(t *testing.T) {
	dir := t.TempDir()
	h := newHandlerDaemon(t, dir, "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	pa, pb := testPod("a"), testPod("b")
	ca, cb := testCtr("a-1", "app", 1000), testCtr("b-1", "app", 1000)
	// One CPU each, packed as the kubelet packs: 1, then its sibling 5.
	cpusA, _ := h.create(t, pa, ca)
	cpusB, _ := h.create(t, pb, cb)
	if cpusA != "1" || cpusB != "5" {
		t.Fatalf("placed on %s, %s; want 1, 5", cpusA, cpusB)
	}
	// The plugin dies before any StartContainer reaches it.
	h2 := newHandlerDaemon(t, dir, "")
	ca.State, ca.Linux.Resources.Cpu.Cpus = api.ContainerState_CONTAINER_CREATED, cpusA
	cb.State, cb.Linux.Resources.Cpu.Cpus = api.ContainerState_CONTAINER_RUNNING, cpusB
	if _, err := h2.p.Synchronize(ctx, []*api.PodSandbox{pa, pb}, []*api.Container{ca, cb}); err != nil {
		t.Fatal(err)
	}
	if cpus, _ := h2.create(t, pa, testCtr("a-2", "app", 1000)); cpus != "1" {
		t.Errorf("a's retry on %q, want 1", cpus)
	}
	if cpus, _ := h2.create(t, pb, testCtr("b-2", "app", 1000)); cpus != "5" {
		t.Errorf("b's restart on %q, want 5", cpus)
	}
	if got := h2.abandoned(); got != 1 {
		t.Errorf("abandoned = %v, want 1 (a-1 only)", got)
	}
}

// An operator's file that still sets container_start_timeout starts the
// daemon, with a warning naming the key and its line.
func TestStartTimeoutKeyIgnoredWithWarning(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "container_start_timeout = \"30s\"\n")
	h.d.logStartup()
	var warned []*logrus.Entry
	for _, e := range h.log.AllEntries() {
		if e.Level == logrus.WarnLevel && e.Data["key"] == "container_start_timeout" {
			warned = append(warned, e)
		}
	}
	// reserveCore0 (2 lines), shared_pool_updates, state_dir,
	// metrics_address: the key is on line 6.
	if len(warned) != 1 || warned[0].Data["line"] != 6 || !strings.Contains(warned[0].Message, "ignored") {
		t.Fatalf("warnings %v, want one for container_start_timeout on line 6", warned)
	}
}
