package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/podres"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd/systemdtest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// entriesAt are the log lines at level that name key in their "key" field.
func entriesAt(hook *logtest.Hook, level logrus.Level) []*logrus.Entry {
	var out []*logrus.Entry
	for _, e := range hook.AllEntries() {
		if e.Level == level && e.Data["key"] == config.KeySharedPoolUpdates {
			out = append(out, e)
		}
	}
	return out
}

// sdDials are the ways to systemd a test gives the daemon: a working
// fake, or none (no bus socket), counting the dials.
func sdDial(f *systemdtest.Fake, dials *atomic.Int32) func(context.Context) (systemd.Manager, error) {
	return func(context.Context) (systemd.Manager, error) {
		dials.Add(1)
		if f == nil {
			return nil, errors.New("dial unix /run/dbus/system_bus_socket: connect: no such file or directory")
		}
		return f, nil
	}
}

// TestModeOnSystemd: the mode follows what the node is. Where systemd
// runs the cgroup v2 hierarchy (its init.scope, before any kubelet slice;
// or the kubelet's slice) the default "direct" goes through systemd when
// systemd answers, and falls back to "in-answer" when it cannot be
// reached, saying so once with the reason; "direct" asked for in so many
// words is kept with a warning. Without systemd nothing is dialed and
// nothing is said.
func TestModeOnSystemd(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	for _, tc := range []struct {
		name, extra, want string
		dirs              []string
		bus               bool
		level             logrus.Level // of the one line naming the key; 0: none
		dials             int
	}{
		{"systemd before the kubelet, bus", "", config.SharedUpdatesDirect, []string{"init.scope", "system.slice"}, true, logrus.InfoLevel, 1},
		{"systemd and kubelet, bus", "", config.SharedUpdatesDirect, []string{"kubepods.slice/kubepods-burstable.slice", "init.scope"}, true, logrus.InfoLevel, 1},
		{"systemd, no bus", "", config.SharedUpdatesInAnswer, []string{"init.scope"}, false, logrus.WarnLevel, 1},
		{"kubelet slice only, no bus", "", config.SharedUpdatesInAnswer, []string{"kubepods.slice"}, false, logrus.WarnLevel, 1},
		{"systemd, no bus, direct asked for", "shared_pool_updates = \"direct\"\n", config.SharedUpdatesDirect, []string{"init.scope"}, false, logrus.WarnLevel, 1},
		{"systemd, in-answer asked for", "shared_pool_updates = \"in-answer\"\n", config.SharedUpdatesInAnswer, []string{"init.scope"}, true, 0, 0},
		{"no systemd", "", config.SharedUpdatesDirect, []string{"kubepods/burstable"}, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := systemdtest.UnifiedRoot(t, tc.dirs...)
			cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\nmetrics_address = \"\"\ncgroup_root = \"" + root + "\"\n" + tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			var fake *systemdtest.Fake
			if tc.bus {
				fake = systemdtest.New(252)
			}
			var dials atomic.Int32
			log, hook := logtest.NewNullLogger()
			d, err := New(cfg, WithTopology(topo), WithLogger(log), WithSystemd(sdDial(fake, &dials)))
			if err != nil {
				t.Fatal(err)
			}
			if got, mode := d.Config().SharedPoolUpdates, d.applier().Mode(); got != tc.want || mode != tc.want {
				t.Errorf("shared_pool_updates %q, applier %q; want %q", got, mode, tc.want)
			}
			if int(dials.Load()) != tc.dials {
				t.Errorf("dialed systemd %d times, want %d", dials.Load(), tc.dials)
			}
			var lines []*logrus.Entry
			for _, lv := range []logrus.Level{logrus.InfoLevel, logrus.WarnLevel} {
				lines = append(lines, entriesAt(hook, lv)...)
			}
			switch {
			case tc.level == 0 && len(lines) != 0:
				t.Errorf("log line about shared_pool_updates without systemd: %q", lines[0].Message)
			case tc.level != 0 && (len(lines) != 1 || lines[0].Level != tc.level || !strings.Contains(lines[0].Message, "systemd")):
				t.Errorf("want one %s line about systemd naming shared_pool_updates, got %d: %v", tc.level, len(lines), lines)
			case tc.level != 0 && lines[0].Data["using"] != tc.want:
				t.Errorf("the line says using %v, want %s", lines[0].Data["using"], tc.want)
			case tc.level != 0 && !tc.bus && !strings.Contains(fmt.Sprint(lines[0].Data["error"]), "system_bus_socket"):
				t.Errorf("the line does not give the reason: %v", lines[0].Data)
			}
		})
	}
}

// TestSeeDriver: the first container's cgroups path decides again where
// the cgroup root could not tell. Systemd scopes under a "direct" chosen
// without systemd in sight: "in-answer" when systemd cannot be reached,
// "direct" through systemd when it can. cgroupfs paths under the
// "in-answer" chosen because systemd was in sight but out of reach: back
// to "direct". Once only; a mode in the configuration, and cgroup v1,
// stay.
func TestSeeDriver(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	const (
		scopePath = "kubepods-besteffort-podu.slice:cri-containerd:abc"
		fsPath    = "/kubepods/besteffort/podu/abc"
	)
	for _, tc := range []struct {
		name, extra  string
		dirs         []string
		v1, bus      bool
		paths        []string
		before, want string
	}{
		{"scopes, no bus", "", nil, false, false, []string{"", scopePath, fsPath}, config.SharedUpdatesDirect, config.SharedUpdatesInAnswer},
		{"scopes, bus", "", nil, false, true, []string{scopePath}, config.SharedUpdatesDirect, config.SharedUpdatesDirect},
		{"cgroupfs beside systemd, no bus", "", []string{"init.scope"}, false, false, []string{fsPath, scopePath}, config.SharedUpdatesInAnswer, config.SharedUpdatesDirect},
		{"scopes beside systemd, no bus", "", []string{"init.scope"}, false, false, []string{scopePath}, config.SharedUpdatesInAnswer, config.SharedUpdatesInAnswer},
		{"scopes, no bus, direct asked for", "shared_pool_updates = \"direct\"\n", nil, false, false, []string{scopePath}, config.SharedUpdatesDirect, config.SharedUpdatesDirect},
		{"scopes on cgroup v1", "", nil, true, false, []string{scopePath}, config.SharedUpdatesDirect, config.SharedUpdatesDirect},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := systemdtest.UnifiedRoot(t, tc.dirs...)
			if tc.v1 {
				root = t.TempDir()
				if err := os.MkdirAll(filepath.Join(root, "cpuset"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			cfg, err := config.Load([]byte(reserveCore0 + "state_dir = \"" + t.TempDir() + "\"\nmetrics_address = \"\"\ncgroup_root = \"" + root + "\"\n" + tc.extra))
			if err != nil {
				t.Fatal(err)
			}
			var fake *systemdtest.Fake
			if tc.bus {
				fake = systemdtest.New(252)
			}
			var dials atomic.Int32
			log, hook := logtest.NewNullLogger()
			d, err := New(cfg, WithTopology(topo), WithLogger(log), WithSystemd(sdDial(fake, &dials)))
			if err != nil {
				t.Fatal(err)
			}
			if mode := d.applier().Mode(); mode != tc.before {
				t.Fatalf("applier %q at start-up, want %q", mode, tc.before)
			}
			hook.Reset()
			_ = d.led.Update(func(l *ledger.Tx) error {
				for _, p := range tc.paths {
					d.seeDriver(l, p)
				}
				return nil
			})
			if got, mode := d.Config().SharedPoolUpdates, d.applier().Mode(); got != tc.want || mode != tc.want {
				t.Errorf("shared_pool_updates %q, applier %q; want %q", got, mode, tc.want)
			}
			lines := append(entriesAt(hook, logrus.InfoLevel), entriesAt(hook, logrus.WarnLevel)...)
			changed := tc.before != tc.want || (tc.bus && !tc.v1)
			if changed != (len(lines) == 1) || len(lines) > 1 {
				t.Errorf("%d lines naming shared_pool_updates, want %v: %v", len(lines), changed, lines)
			}
		})
	}
}

// startSystemdRuntime is a fake runtime on the systemd driver over a
// cgroup v2 tree (containers are scopes in pod slices).
func startSystemdRuntime(t *testing.T) *fakeRuntime {
	t.Helper()
	rt := startRuntime(t, nritest.WithSystemdCgroups())
	if err := os.MkdirAll(rt.CgroupRoot(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rt.CgroupRoot(), "cgroup.controllers"), []byte("cpuset cpu memory\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return rt
}

// addSlicePod adds a pod of class qos whose cgroup parent is the slice
// the kubelet's systemd driver names.
func addSlicePod(rt *fakeRuntime, uid, qos string) *api.PodSandbox {
	pod := rt.addPod(podSpec{uid: uid, name: uid, qos: qos})
	pod.Linux.CgroupParent = podres.PodSlice(podres.QOS(qos), uid)
	return pod
}

// createScope creates a container in pod; under direct the answer
// carries no update for other containers.
func createScope(t *testing.T, rt *fakeRuntime, pod *api.PodSandbox, name string, req, lim int64) *api.Container {
	t.Helper()
	c, ups, err := rt.create(pod, name, req, lim)
	if err != nil || len(ups) != 0 {
		t.Fatalf("create %s: %v, updates %q", name, err, rt.describe(ups))
	}
	return c
}

// TestDirectThroughSystemd: on the systemd driver (containers are scopes
// in a cgroup v2 tree) the plugin started where the root showed no
// systemd; the first container's scope makes it reach systemd, and
// "direct" goes on through it. A new exclusive container's start returns
// only once systemd was asked for the shrunk pool of the shared scope
// (while its file still held the old one) and the file holds it; the pod
// slice's quota is lifted in systemd; a removed pod's CPUs come back the
// same way. The runtime is never asked to update anything.
func TestDirectThroughSystemd(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startSystemdRuntime(t)
	scopes := map[string]*api.Container{}
	var scopesMu sync.Mutex
	fake := systemdtest.New(252)
	fake.File = func(unit string) string {
		scopesMu.Lock()
		c := scopes[unit]
		scopesMu.Unlock()
		if c == nil {
			return "?"
		}
		b, _ := os.ReadFile(rt.cgroupFile(c))
		return strings.TrimSpace(string(b))
	}
	var dials atomic.Int32
	log, hook := hookedLogger(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo, WithLogger(log), WithSystemd(sdDial(fake, &dials)))
	if mode := r.d.applier().Mode(); mode != config.SharedUpdatesDirect || dials.Load() != 0 {
		t.Fatalf("start-up: %s, %d dials; want direct and none (no systemd in sight)", mode, dials.Load())
	}
	slicePod := func(uid, qos string) *api.PodSandbox { return addSlicePod(rt, uid, qos) }
	create := func(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
		t.Helper()
		c := createScope(t, rt, pod, name, req, lim)
		scopesMu.Lock()
		scopes["cri-containerd-"+c.Id+".scope"] = c
		scopesMu.Unlock()
		if err := rt.StartContainer(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		return c
	}

	be1 := create(slicePod("be", "besteffort"), "be1", 0, 0)
	if !strings.Contains(be1.Linux.CgroupsPath, ":cri-containerd:") {
		t.Fatalf("cgroups path %q is not the systemd driver's", be1.Linux.CgroupsPath)
	}
	if mode := r.d.applier().Mode(); mode != config.SharedUpdatesDirect || dials.Load() != 1 {
		t.Fatalf("after the first scope: %s, %d dials; want direct through systemd", mode, dials.Load())
	}
	if !logged(hook, logrus.InfoLevel, "through systemd's D-Bus API") {
		t.Error("no line saying the plugin goes through systemd")
	}
	be1Unit := "cri-containerd-" + be1.Id + ".scope"

	g1 := slicePod("g1", "guaranteed")
	create(g1, "c2", 2000, 2000)
	// No settle: the start of c2 returned, so be1 is off core 1 already.
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Errorf("be1's scope %q once c2 started, want 0,2-4,6-7", got)
	}
	want := "SetCPUSet " + be1Unit + " cpus=0,2-4,6-7 mems= file=0-7"
	if calls := fake.Calls(); !slices.Contains(calls, want) {
		t.Errorf("systemd calls %q lack %q", calls, want)
	}
	if calls := fake.Calls(); !slices.Contains(calls, "LiftQuota kubepods-podg1.slice") {
		t.Errorf("systemd calls %q: the exclusive pod's slice quota was not lifted", calls)
	}

	rt.removePod(g1)
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, be1); got != "0-7" {
		t.Errorf("be1's scope %q once g1 was removed, want 0-7", got)
	}
	want = "SetCPUSet " + be1Unit + " cpus=0-7 mems= file=0,2-4,6-7"
	if calls := fake.Calls(); !slices.Contains(calls, want) {
		t.Errorf("systemd calls %q lack %q", calls, want)
	}
	if n := len(rt.Unsolicited()); n != 0 {
		t.Errorf("%d updates pushed to the runtime, want none", n)
	}
}

// TestDirectRewritesAfterFailedWrite: a write of the shared pool that
// failed in systemd (the file took it, systemd's record did not) is done
// again at the next pass, even when that pass brings back the pool the
// container was created with. The VM's CRI-O run lost its D-Bus
// connection once, and the BestEffort container then kept 0,2-7 after
// the exclusive pod went: the daemon still believed it held 0-7, the
// pool it came back to, and skipped it. The reconcile loop is off, as in
// the suites, so only the pass can put it right.
func TestDirectRewritesAfterFailedWrite(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startSystemdRuntime(t)
	fake := systemdtest.New(252)
	var dials atomic.Int32
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo, WithSystemd(sdDial(fake, &dials)))
	slicePod := func(uid, qos string) *api.PodSandbox { return addSlicePod(rt, uid, qos) }
	create := func(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
		t.Helper()
		c := createScope(t, rt, pod, name, req, lim)
		if err := rt.StartContainer(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	be1 := create(slicePod("be", "besteffort"), "be1", 0, 0)
	unit := "cri-containerd-" + be1.Id + ".scope"

	fake.FailSets(errors.New("read unix @->/run/dbus/system_bus_socket: use of closed network connection"))
	g1 := slicePod("g1", "guaranteed")
	create(g1, "c2", 2000, 2000)
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Fatalf("be1's scope file %q once c2 started, want 0,2-4,6-7 (systemd failed, the file not)", got)
	}
	fake.FailSets(nil)
	before := len(fake.Calls())

	rt.removePod(g1)
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, be1); got != "0-7" {
		t.Errorf("be1's scope file %q once g1 was removed, want 0-7", got)
	}
	want := "SetCPUSet " + unit + " cpus=0-7 mems= file="
	if calls := fake.Calls()[before:]; !slices.Contains(calls, want) {
		t.Errorf("systemd calls after the removal %q lack %q", calls, want)
	}

	// With no pool change after the failure, the reconcile round redoes
	// the write: the file is right, so only the forgotten record tells.
	fake.FailSets(errors.New("context deadline exceeded"))
	create(slicePod("g2", "guaranteed"), "c3", 2000, 2000)
	settle(t, r.d)
	fake.FailSets(nil)
	before = len(fake.Calls())
	if n := r.d.ReconcileNow(); n != 0 {
		t.Errorf("reconcile found %d drifted cgroups, want 0 (the files are right)", n)
	}
	want = "SetCPUSet " + unit + " cpus=0,2-4,6-7 mems= file="
	if calls := fake.Calls()[before:]; !slices.Contains(calls, want) {
		t.Errorf("systemd calls of the reconcile round %q lack %q", calls, want)
	}
}

// retryTimer stands in for time.AfterFunc: a test receives each retry the
// daemon schedules, with its wait, and runs it when it chooses.
type retryTimer chan scheduled

type scheduled struct {
	wait time.Duration
	run  func()
}

func (r retryTimer) after(d time.Duration, f func()) { r <- scheduled{d, f} }

// next is the retry scheduled so far, if any. Every pass that schedules
// one has ended when settle returns (the worker's) or when the
// StartContainer whose barrier ran it returned, so nothing is waited for.
func (r retryTimer) next() (scheduled, bool) {
	select {
	case s := <-r:
		return s, true
	default:
		return scheduled{}, false
	}
}

// first is the first retry of a run, scheduled after what failed: it
// must come, applier.SystemdRetryFirst after the failure.
func (r retryTimer) first(t *testing.T, after string) scheduled {
	t.Helper()
	s, ok := r.next()
	if !ok {
		t.Fatalf("no retry scheduled after %s (the reconcile loop is off: nothing else would redo it)", after)
	}
	if s.wait != applier.SystemdRetryFirst {
		t.Errorf("first retry after %v, want %v", s.wait, applier.SystemdRetryFirst)
	}
	return s
}

// none checks that no retry is scheduled.
func (r retryTimer) none(t *testing.T, why string) {
	t.Helper()
	if s, ok := r.next(); ok {
		t.Errorf("a retry scheduled (after %v) %s", s.wait, why)
	}
}

// startRetrying is a daemon on the systemd driver (ht-1s-4c, core 0
// reserved, the reconcile loop off) over a fake systemd, whose retries
// after transient systemd failures wait for timer.
func startRetrying(t *testing.T) (*fakeRuntime, *systemdtest.Fake, retryTimer, *running) {
	t.Helper()
	rt := startSystemdRuntime(t)
	fake := systemdtest.New(252)
	timer := make(retryTimer, applier.SystemdRetries+1)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), loadFixture(t, "ht-1s-4c"),
		WithSystemd(sdDial(fake, new(atomic.Int32))), withRetryTimer(timer.after))
	if p := r.d.Config().ReconcilePeriod; p != 0 {
		t.Fatalf("reconcile_period %v, want 0 (off)", p)
	}
	return rt, fake, timer, r
}

// TestDirectRetriesTimedOutWrite: a write of the shared pool whose call to
// systemd timed out (systemd busy with a daemon-reload on the loaded VM
// node) is tried again by the worker after a short wait, with the
// reconcile loop off and no later pool change: systemd ends up holding the
// pool, so its next re-apply keeps it. A systemd that keeps timing out
// gets a bounded number of retries, each wait longer, then none; an error
// systemd answers is not retried this way.
func TestDirectRetriesTimedOutWrite(t *testing.T) {
	rt, fake, timer, r := startRetrying(t)
	create := func(pod *api.PodSandbox, name string, req, lim int64) *api.Container {
		t.Helper()
		c := createScope(t, rt, pod, name, req, lim)
		if err := rt.StartContainer(context.Background(), c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	timedOut := fmt.Errorf("systemd call: %w", context.DeadlineExceeded)
	be1 := create(addSlicePod(rt, "be", "besteffort"), "be1", 0, 0)
	unit := "cri-containerd-" + be1.Id + ".scope"

	// c2 takes core 1 = {1,5}: writing the shrunk pool into be1's scope
	// times out in systemd (in the start barrier's pass, and in the
	// worker's if it comes after); the file takes it. Then systemd
	// answers again, and only the retry can tell it.
	fake.FailSets(timedOut)
	create(addSlicePod(rt, "g1", "guaranteed"), "c2", 2000, 2000)
	settle(t, r.d)
	fake.FailSets(nil)
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Fatalf("be1's scope file %q once c2 started, want 0,2-4,6-7", got)
	}
	if got := fake.Allowed(unit); got != "" {
		t.Fatalf("systemd holds %q for be1 after the timed-out calls, want nothing", got)
	}
	timer.first(t, "the timed-out write").run()
	settle(t, r.d)
	if got := fake.Allowed(unit); got != "0,2-4,6-7" {
		t.Errorf("systemd holds %q for be1 after the retry, want 0,2-4,6-7", got)
	}
	timer.none(t, "though the retry wrote everything")

	// An answer from systemd (access denied) is no reason to retry at
	// once: c3 takes core 2 = {2,6}.
	fake.FailSets(errors.New("Access denied"))
	g2 := addSlicePod(rt, "g2", "guaranteed")
	create(g2, "c3", 2000, 2000)
	settle(t, r.d)
	if got := cgroupCPUs(t, rt, be1); got != "0,3-4,7" {
		t.Fatalf("be1's scope file %q once c3 started, want 0,3-4,7", got)
	}
	timer.none(t, "for an error systemd answered")

	// systemd keeps timing out: applier.SystemdRetries retries, each wait double the
	// last, then the worker stops asking.
	fake.FailSets(timedOut)
	rt.removePod(g2)
	settle(t, r.d)
	var waits []time.Duration
	for {
		s, ok := timer.next()
		if !ok {
			break
		}
		if len(waits) > applier.SystemdRetries {
			t.Fatalf("more than %d retries: %v", applier.SystemdRetries, waits)
		}
		waits = append(waits, s.wait)
		s.run()
		settle(t, r.d)
	}
	if len(waits) != applier.SystemdRetries {
		t.Errorf("%d retries %v, want %d", len(waits), waits, applier.SystemdRetries)
	}
	for i := 1; i < len(waits); i++ {
		if waits[i] != 2*waits[i-1] {
			t.Errorf("retry waits %v: not doubling", waits)
			break
		}
	}
	if got := cgroupCPUs(t, rt, be1); got != "0,2-4,6-7" {
		t.Errorf("be1's scope file %q once g2 was removed, want 0,2-4,6-7", got)
	}
	if got := fake.Allowed(unit); got != "0,2-4,6-7" {
		t.Errorf("systemd holds %q for be1 while every call fails, want the last pool it took, 0,2-4,6-7", got)
	}
}

// TestQuotaLiftRetriedAfterTimeout: lifting an exclusive pod's quota in
// systemd at its CreateContainer timed out; the plugin lifts it again off
// the request path after a short wait, the reconcile loop off, so that
// systemd's next re-apply does not bring the kubelet's quota back.
func TestQuotaLiftRetriedAfterTimeout(t *testing.T) {
	rt, fake, timer, r := startRetrying(t)
	// A shared container first: its scope makes the daemon reach systemd
	// (seeDriver), as on a node where the root showed none.
	createScope(t, rt, addSlicePod(rt, "be", "besteffort"), "be1", 0, 0)
	fake.FailNextLift(fmt.Errorf("systemd unit kubepods-podg1.slice: %w", context.DeadlineExceeded))
	createScope(t, rt, addSlicePod(rt, "g1", "guaranteed"), "c2", 2000, 2000)
	settle(t, r.d)
	if fake.Lifted("kubepods-podg1.slice") {
		t.Fatal("systemd holds no quota for g1's slice though the lift timed out")
	}
	timer.first(t, "the timed-out quota lift").run()
	if !fake.Lifted("kubepods-podg1.slice") {
		t.Errorf("systemd still holds g1's quota after the retry; calls %q", fake.Calls())
	}
	timer.none(t, "though the lift went through")
}
