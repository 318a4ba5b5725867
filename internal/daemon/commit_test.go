package daemon

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// One event, one Change, one Commit, at most one fdatasync
// (docs/architecture.md): every event that changes what is durable saves
// once, and a failed save leaves the ledger and the disk as they were.

// countingStore stands between the ledger and the daemon's store: it
// counts the saves and, while fail is set, fails them without writing.
type countingStore struct {
	mu    sync.Mutex
	next  ledger.Store
	saves int
	fail  bool
}

func (s *countingStore) Save(v ledger.Save) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saves++
	if s.fail {
		return errors.New("injected: no space left on device")
	}
	return s.next.Save(v)
}

func (s *countingStore) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.saves
}

func (s *countingStore) setFail(fail bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = fail
}

// withStoreWrap puts wrap between the ledger and the store.
func withStoreWrap(wrap func(ledger.Store) ledger.Store) Option {
	return func(o *options) { o.wrapStore = wrap }
}

// newCountedDaemon is a handler daemon (ht-1s-4c, core 0 reserved,
// in-answer) whose saves cs counts, synchronized with an empty runtime.
func newCountedDaemon(t *testing.T, stateDir string) (*handlerDaemon, *countingStore) {
	t.Helper()
	cs := &countingStore{}
	h := newHandlerDaemon(t, stateDir, "", withStoreWrap(func(next ledger.Store) ledger.Store {
		cs.next = next
		return cs
	}))
	if _, err := h.p.Synchronize(context.Background(), nil, nil); err != nil {
		t.Fatal(err)
	}
	return h, cs
}

// ledgerFacts is what the ledger holds, read through its queries, and
// the files of the state directory: the state as text (no map shared
// with the ledger), the index, the generation and the lifecycle facts of
// the containers and pods named.
type ledgerFacts struct {
	Gen       uint64
	State     policy.Snapshot
	Index     map[string]ledger.Record
	Syncs     int
	Awaiting  map[string]bool
	Stopped   map[string]ledger.PodContainer
	Shrinking map[string]ledger.Shrink
	Sandboxes map[string]string
	Devices   map[string][]ledger.DeviceView
	Disk      map[string][sha256.Size]byte
}

func (h *handlerDaemon) facts(t *testing.T, stateDir string, ids, pods []string) ledgerFacts {
	t.Helper()
	var f ledgerFacts
	h.d.led.Read(func(l *ledger.Tx) {
		f = ledgerFacts{Gen: l.Gen(), State: l.Engine().Snapshot(l.State()), Index: l.Index(), Syncs: l.Syncs(),
			Awaiting: map[string]bool{}, Stopped: map[string]ledger.PodContainer{}, Shrinking: l.Shrinks(),
			Sandboxes: map[string]string{}, Disk: map[string][sha256.Size]byte{}}
		for _, id := range ids {
			f.Awaiting[id] = l.AwaitingStart(id)
			if pc, ok := l.StoppedAs(id); ok {
				f.Stopped[id] = pc
			}
		}
		for _, pod := range pods {
			if sb, ok := l.Sandbox(pod); ok {
				f.Sandboxes[pod] = sb
			}
		}
	})
	f.Devices = h.d.led.View().Devices
	entries, err := os.ReadDir(stateDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(stateDir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		f.Disk[e.Name()] = sha256.Sum256(b)
	}
	return f
}

// resources is what the kubelet sends for a resize to milli CPUs.
func resources(milli uint64) *api.LinuxResources { return testCtr("", "", milli).Linux.Resources }

// A failed save leaves the ledger (state, index, generation, lifecycle
// facts) and the disk as they were, for every event that saves, and the
// runtime gets what the event's documentation says: CreateContainer,
// StopContainer, RemoveContainer, the pod's end, Synchronize and an
// upsize fail with PersistError; a start of a container never placed and
// a downsize's completion are logged and the container keeps its CPUs.
// Each event tries exactly one save.
func TestFailedSaveChangesNothing(t *testing.T) {
	ctx := context.Background()
	pod := testPod("g")
	type event struct {
		name string
		// setup runs with a working store and returns the containers
		// the event is about.
		setup func(t *testing.T, h *handlerDaemon) []*api.Container
		// run is the event, with every save failing; it returns what
		// the handler returned to the runtime.
		run func(h *handlerDaemon, ctrs []*api.Container) error
		// wantErr: the runtime gets PersistError.
		wantErr bool
	}
	created := func(t *testing.T, h *handlerDaemon, names ...string) []*api.Container {
		var out []*api.Container
		for _, n := range names {
			c := testCtr("g-"+n, n, 2000)
			h.create(t, pod, c)
			h.start(t, pod, c)
			out = append(out, c)
		}
		return out
	}
	// stopped leaves a of the pod stopped and b running: the pod's end
	// forgets a's stop and b's record.
	stopped := func(t *testing.T, h *handlerDaemon) []*api.Container {
		ctrs := created(t, h, "a", "b")
		if _, err := h.p.StopContainer(ctx, pod, ctrs[0]); err != nil {
			t.Fatal(err)
		}
		return ctrs
	}
	// shrinking leaves a downsize of c from 4 to 2 CPUs (its baseline)
	// answered and not committed.
	shrinking := func(t *testing.T, h *handlerDaemon) []*api.Container {
		ctrs := created(t, h, "c")
		for _, milli := range []uint64{4000, 2000} {
			if _, err := h.p.UpdateContainer(ctx, pod, ctrs[0], resources(milli)); err != nil {
				t.Fatal(err)
			}
		}
		return ctrs
	}
	events := []event{
		{name: "CreateContainer", wantErr: true,
			setup: func(t *testing.T, h *handlerDaemon) []*api.Container {
				// An attempt never started: the new one would supersede it.
				c := testCtr("g-c0", "c", 2000)
				h.create(t, pod, c)
				return []*api.Container{c, testCtr("g-c1", "c", 2000)}
			},
			run: func(h *handlerDaemon, ctrs []*api.Container) error {
				ctrs[1].PodSandboxId = pod.Id
				adj, ups, err := h.p.CreateContainer(ctx, pod, ctrs[1])
				if adj != nil || ups != nil {
					return fmt.Errorf("answered %v, %v with %w", adj, ups, err)
				}
				return err
			}},
		{name: "StartContainer/unplaced",
			setup: func(*testing.T, *handlerDaemon) []*api.Container {
				c := testCtr("g-u", "u", 2000)
				c.PodSandboxId = pod.Id
				return []*api.Container{c}
			},
			run: func(h *handlerDaemon, ctrs []*api.Container) error { return h.p.StartContainer(ctx, pod, ctrs[0]) }},
		{name: "UpdateContainer/upsize", wantErr: true, setup: shrinking,
			run: func(h *handlerDaemon, ctrs []*api.Container) error {
				ups, err := h.p.UpdateContainer(ctx, pod, ctrs[0], resources(5000))
				if ups != nil {
					return fmt.Errorf("answered %v with %w", ups, err)
				}
				return err
			}},
		{name: "PostUpdateContainer/downsize", setup: shrinking,
			run: func(h *handlerDaemon, ctrs []*api.Container) error {
				return h.p.PostUpdateContainer(ctx, pod, ctrs[0])
			}},
		{name: "StopContainer", wantErr: true,
			setup: func(t *testing.T, h *handlerDaemon) []*api.Container { return created(t, h, "c") },
			run: func(h *handlerDaemon, ctrs []*api.Container) error {
				ups, err := h.p.StopContainer(ctx, pod, ctrs[0])
				if ups != nil {
					return fmt.Errorf("answered %v with %w", ups, err)
				}
				return err
			}},
		{name: "RemoveContainer/last", wantErr: true,
			setup: func(t *testing.T, h *handlerDaemon) []*api.Container {
				ctrs := created(t, h, "c")
				if _, err := h.p.StopContainer(ctx, pod, ctrs[0]); err != nil {
					t.Fatal(err)
				}
				return ctrs
			},
			run: func(h *handlerDaemon, ctrs []*api.Container) error { return h.p.RemoveContainer(ctx, pod, ctrs[0]) }},
		{name: "RemoveContainer/running", wantErr: true,
			setup: func(t *testing.T, h *handlerDaemon) []*api.Container { return created(t, h, "c") },
			run:   func(h *handlerDaemon, ctrs []*api.Container) error { return h.p.RemoveContainer(ctx, pod, ctrs[0]) }},
		{name: "StopPodSandbox", wantErr: true, setup: stopped,
			run: func(h *handlerDaemon, _ []*api.Container) error { return h.p.StopPodSandbox(ctx, pod) }},
		{name: "RemovePodSandbox", wantErr: true, setup: stopped,
			run: func(h *handlerDaemon, _ []*api.Container) error { return h.p.RemovePodSandbox(ctx, pod) }},
		{name: "Synchronize", wantErr: true, setup: stopped,
			run: func(h *handlerDaemon, ctrs []*api.Container) error {
				// The runtime lost b: its CPUs would be released.
				ups, err := h.p.Synchronize(ctx, []*api.PodSandbox{pod}, ctrs[:1])
				if ups != nil {
					return fmt.Errorf("answered %v with %w", ups, err)
				}
				return err
			}},
	}
	for _, ev := range events {
		t.Run(ev.name, func(t *testing.T) {
			dir := t.TempDir()
			h, cs := newCountedDaemon(t, dir)
			ctrs := ev.setup(t, h)
			var ids []string
			for _, c := range ctrs {
				ids = append(ids, c.Id)
			}
			before := h.facts(t, dir, ids, []string{"g"})
			saves := cs.count()
			cs.setFail(true)
			err := ev.run(h, ctrs)
			switch {
			case ev.wantErr && (err == nil || !strings.Contains(err.Error(), "PersistError")):
				t.Errorf("%s with a failing store returned %v; want PersistError", ev.name, err)
			case !ev.wantErr && err != nil:
				t.Errorf("%s with a failing store returned %v; want nil (logged)", ev.name, err)
			}
			if n := cs.count() - saves; n != 1 {
				t.Errorf("%s tried %d saves; want 1", ev.name, n)
			}
			if after := h.facts(t, dir, ids, []string{"g"}); !reflect.DeepEqual(before, after) {
				t.Errorf("%s changed the ledger or the disk with a failed save:\nbefore %+v\nafter  %+v", ev.name, before, after)
			}
		})
	}
}

// A lifecycle fact alone is never saved, so no store can fail it: a start
// of a container placed, a downsize's answer, a Configure and the end of
// a pod the ledger knows nothing of go through with every save failing.
func TestLifecycleOnlyEventsSaveNothing(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	h, cs := newCountedDaemon(t, dir)
	pod := testPod("g")
	c := testCtr("g-c", "c", 2000)
	h.create(t, pod, c)
	if _, err := h.p.UpdateContainer(ctx, pod, c, resources(4000)); err != nil {
		t.Fatal(err)
	}
	cs.setFail(true)
	saves := cs.count()
	if err := h.p.StartContainer(ctx, pod, c); err != nil {
		t.Fatal(err)
	}
	if ups, err := h.p.UpdateContainer(ctx, pod, c, resources(2000)); err != nil || len(ups) == 0 {
		t.Fatalf("downsize answered %v, %v; want the narrowed cpuset", ups, err)
	}
	if err := h.p.StopPodSandbox(ctx, testPod("other")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.p.Configure(ctx, "reserved_system_cpus = \"0,3-4,7\"\n", "containerd", "2.1.0"); err != nil {
		t.Fatal(err)
	}
	if n := cs.count() - saves; n != 0 {
		t.Errorf("lifecycle-only events tried %d saves; want none", n)
	}
	h.d.led.Read(func(l *ledger.Tx) {
		if _, shrinking := l.Shrinking(c.Id); l.AwaitingStart(c.Id) || !shrinking {
			t.Errorf("awaiting %v, shrinking %v; want the start and the downsize noted", l.AwaitingStart(c.Id), shrinking)
		}
		if got := l.Engine().Reserved().String(); got != "0,3-4,7" {
			t.Errorf("reserved %s after Configure; want 0,3-4,7", got)
		}
	})
}

// Every event that changes what is durable saves exactly once (one
// journal record, one fdatasync): a RemoveContainer that ends its pod (its
// container stopped or not), a
// RemovePodSandbox with stopped and running containers, a resize and its
// completion included.
func TestOneSavePerEvent(t *testing.T) {
	ctx := context.Background()
	h, cs := newCountedDaemon(t, t.TempDir())
	g, p2, p3, p4 := testPod("g"), testPod("p2"), testPod("p3"), testPod("p4")
	c, a, b, x := testCtr("g-c", "c", 2000), testCtr("p2-a", "a", 2000), testCtr("p2-b", "b", 1000), testCtr("p3-x", "x", 0)
	y := testCtr("p4-y", "y", 2000)
	steps := []struct {
		name  string
		saves int
		run   func() error
	}{
		{"Synchronize", 1, func() error { _, err := h.p.Synchronize(ctx, nil, nil); return err }},
		{"CreateContainer", 1, func() error { h.create(t, g, c); return nil }},
		{"StartContainer", 0, func() error { return h.p.StartContainer(ctx, g, c) }},
		{"UpdateContainer/upsize", 1, func() error { _, err := h.p.UpdateContainer(ctx, g, c, resources(3000)); return err }},
		{"UpdateContainer/downsize", 0, func() error { _, err := h.p.UpdateContainer(ctx, g, c, resources(2000)); return err }},
		{"PostUpdateContainer/downsize", 1, func() error { return h.p.PostUpdateContainer(ctx, g, c) }},
		{"StopContainer", 1, func() error { _, err := h.p.StopContainer(ctx, g, c); return err }},
		{"RemoveContainer/last", 1, func() error { return h.p.RemoveContainer(ctx, g, c) }},
		{"CreateContainer p4/y", 1, func() error { h.create(t, p4, y); return nil }},
		// Out of the index and its pod's end: one change.
		{"RemoveContainer/last, not stopped", 1, func() error { return h.p.RemoveContainer(ctx, p4, y) }},
		{"CreateContainer p2/a", 1, func() error { h.create(t, p2, a); return nil }},
		{"CreateContainer p2/b", 1, func() error { h.create(t, p2, b); return nil }},
		{"StopContainer p2/a", 1, func() error { _, err := h.p.StopContainer(ctx, p2, a); return err }},
		{"RemovePodSandbox", 1, func() error { return h.p.RemovePodSandbox(ctx, p2) }},
		{"StopPodSandbox/gone", 0, func() error { return h.p.StopPodSandbox(ctx, p2) }},
		{"CreateContainer p3/x", 1, func() error { h.create(t, p3, x); return nil }},
		{"StopPodSandbox", 1, func() error { return h.p.StopPodSandbox(ctx, p3) }},
		{"StartContainer/unplaced", 1, func() error {
			u := testCtr("g-u", "u", 0)
			u.PodSandboxId = g.Id
			return h.p.StartContainer(ctx, g, u)
		}},
		{"Configure", 0, func() error {
			_, err := h.p.Configure(ctx, "reserved_system_cpus = \"0,3-4,7\"\n", "containerd", "2.1.0")
			return err
		}},
	}
	for _, s := range steps {
		before := cs.count()
		if err := s.run(); err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if n := cs.count() - before; n != s.saves {
			t.Errorf("%s saved %d times; want %d", s.name, n, s.saves)
		}
	}
	if n := readLedger(h.d, (*ledger.Tx).Len); n != 1 {
		t.Errorf("%d containers in the index at the end; want the unplaced one", n)
	}
}

// A pre-registered plugin's first Configure is one change: the engine it
// builds and the state read from disk for it are one commit (one
// generation), and nothing is saved.
func TestFirstConfigureOneCommit(t *testing.T) {
	cfg := config.Default()
	cfg.StateDir = t.TempDir()
	cfg.CgroupRoot = offHostRoot(t)
	cs := &countingStore{fail: true}
	d, err := New(cfg, WithTopology(loadFixture(t, "ht-1s-4c")), WithLogger(testLogger(t)), WithConfigFromRuntime(),
		withStoreWrap(func(next ledger.Store) ledger.Store {
			cs.next = next
			return cs
		}))
	if err != nil {
		t.Fatal(err)
	}
	if err := d.configure("reserved_cpu_count = 2\n"); err != nil {
		t.Fatal(err)
	}
	if gen, restored := d.led.Gen(), readLedger(d, (*ledger.Tx).Restored); gen != 1 || !restored || cs.count() != 0 {
		t.Errorf("first Configure: generation %d, restored %v, %d saves; want 1, true, 0", gen, restored, cs.count())
	}
}
