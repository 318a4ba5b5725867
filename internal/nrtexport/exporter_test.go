package nrtexport

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
)

// fakeAPI records the objects written and answers with errs in turn (nil
// once they run out).
type fakeAPI struct {
	applied chan nrt.Object
	mu      sync.Mutex
	errs    []error
}

func (f *fakeAPI) Apply(ctx context.Context, obj nrt.Object) error {
	select {
	case f.applied <- obj:
	case <-ctx.Done():
		return ctx.Err()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.errs) == 0 {
		return nil
	}
	err := f.errs[0]
	f.errs = f.errs[1:]
	return err
}

// stepped runs an exporter whose waits the test sees (waits) and ends
// (fire), so the test steps the loop without a clock.
type stepped struct {
	t      *testing.T
	e      *Exporter
	api    *fakeAPI
	waits  chan time.Duration
	fire   chan time.Time
	mu     sync.Mutex
	obj    nrt.Object
	builds int
	cancel context.CancelFunc
	done   chan struct{}
}

var now = time.Unix(1700000000, 0)

func start(t *testing.T, errs ...error) *stepped {
	s := &stepped{t: t, api: &fakeAPI{applied: make(chan nrt.Object), errs: errs},
		waits: make(chan time.Duration), fire: make(chan time.Time), done: make(chan struct{})}
	s.obj = nrt.Object{Metadata: nrt.Metadata{Name: "n"}, Zones: []nrt.Zone{{Name: "node-0"}}}
	log := logrus.New()
	log.SetOutput(io.Discard)
	s.e = New(s.api, func() (nrt.Object, error) {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.builds++
		return s.obj, nil
	}, log)
	ctx, cancel := context.WithCancel(context.Background())
	s.e.after = func(d time.Duration) <-chan time.Time {
		select {
		case s.waits <- d:
		case <-ctx.Done():
		}
		return s.fire
	}
	s.e.now = func() time.Time { return now }
	s.cancel = cancel
	go func() { defer close(s.done); s.e.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-s.done })
	return s
}

func (s *stepped) setZone(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.obj.Zones = []nrt.Zone{{Name: name}}
}

func (s *stepped) buildCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.builds
}

// expectApply waits for the next write and returns its first zone's name.
func (s *stepped) expectApply() string {
	s.t.Helper()
	return (<-s.api.applied).Zones[0].Name
}

// expectWait waits for the loop's next wait and checks its length.
func (s *stepped) expectWait(want time.Duration) {
	s.t.Helper()
	if d := <-s.waits; d != want {
		s.t.Fatalf("loop waits %v, want %v", d, want)
	}
}

// Kicks during the minimum interval coalesce into one write of the newest
// object.
func TestKicksCoalesce(t *testing.T) {
	s := start(t)
	if z := s.expectApply(); z != "node-0" {
		t.Fatalf("first write has zone %s", z)
	}
	s.expectWait(DefaultMinInterval)
	s.setZone("node-1")
	s.e.Kick()
	s.e.Kick()
	s.e.Kick()
	s.fire <- now
	s.expectWait(DefaultResync) // idle, a kick pending
	if z := s.expectApply(); z != "node-1" {
		t.Fatalf("second write has zone %s", z)
	}
	s.expectWait(DefaultMinInterval)
	s.fire <- now
	s.expectWait(DefaultResync) // idle: no kick left
	if n := s.buildCount(); n != 2 {
		t.Errorf("%d builds, want 2 (one per write)", n)
	}
	if v := metric(t, s.e, "nri_cpualign_nrt_updates_total"); v != 2 {
		t.Errorf("updates %v, want 2", v)
	}
}

// A failed write is retried after 1 s, then 2 s; the metrics count both
// failures and the success, with its time.
func TestFailureBackoff(t *testing.T) {
	s := start(t, errors.New("connection refused"), errors.New("connection refused"))
	s.expectApply()
	s.expectWait(DefaultBackoffMin)
	s.e.Kick() // a change meanwhile: the retry writes it anyway
	s.fire <- now
	s.expectApply()
	s.expectWait(2 * DefaultBackoffMin)
	s.fire <- now
	s.expectApply()
	s.expectWait(DefaultMinInterval)
	if v := metric(t, s.e, "nri_cpualign_nrt_update_failures_total"); v != 2 {
		t.Errorf("failures %v, want 2", v)
	}
	if v := metric(t, s.e, "nri_cpualign_nrt_updates_total"); v != 1 {
		t.Errorf("updates %v, want 1", v)
	}
	if v := metric(t, s.e, "nri_cpualign_nrt_last_success_timestamp_seconds"); v != 1700000000 {
		t.Errorf("last success %v, want 1700000000", v)
	}
	// After a success the backoff starts over.
	s.api.mu.Lock()
	s.api.errs = []error{errors.New("503")}
	s.api.mu.Unlock()
	s.setZone("node-1")
	s.fire <- now
	s.expectWait(DefaultResync)
	s.e.Kick()
	s.expectApply()
	s.expectWait(DefaultBackoffMin)
}

// The backoff stops doubling at its maximum.
func TestBackoffCapped(t *testing.T) {
	errs := make([]error, 8)
	for i := range errs {
		errs[i] = errors.New("down")
	}
	s := start(t, errs...)
	for _, want := range []time.Duration{1, 2, 4, 8, 16, 30, 30} {
		s.expectApply()
		s.expectWait(want * time.Second)
		s.fire <- now
	}
}

// An unchanged object is not written again on a kick, only at the resync.
func TestUnchangedSkippedUntilResync(t *testing.T) {
	s := start(t)
	s.expectApply()
	s.expectWait(DefaultMinInterval)
	s.fire <- now
	s.expectWait(DefaultResync)
	s.e.Kick()
	s.expectWait(DefaultResync) // built, same object, idle again
	if n := s.buildCount(); n != 2 {
		t.Fatalf("%d builds, want 2", n)
	}
	s.fire <- now // the resync
	if z := s.expectApply(); z != "node-0" {
		t.Fatalf("resync wrote zone %s", z)
	}
	s.expectWait(DefaultMinInterval)
	if v := metric(t, s.e, "nri_cpualign_nrt_updates_total"); v != 2 {
		t.Errorf("updates %v, want 2", v)
	}
}

// Kick never blocks, with or without a running loop, and loses nothing:
// kicks made while no loop runs, or while the loop waits on the API
// (the daemon kicks under the ledger's lock), leave one kick pending,
// which brings one more write of the newest object.
func TestKickNeverBlocks(t *testing.T) {
	kickAll := func(e *Exporter, when string) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			for range 100 {
				e.Kick()
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatalf("100 kicks %s not done in 10 s: Kick blocks", when)
		}
		if n := len(e.kick); n != 1 {
			t.Fatalf("%d kicks pending after 100 %s, want 1 (coalesced, not lost)", n, when)
		}
	}
	kickAll(New(&fakeAPI{}, func() (nrt.Object, error) { return nrt.Object{}, nil }, logrus.New()), "without a loop")

	s := start(t)
	// The first write is built and waits in Apply until the test reads it.
	for deadline := time.Now().Add(10 * time.Second); s.buildCount() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the loop built nothing in 10 s")
		}
	}
	s.setZone("node-1")
	kickAll(s.e, "during a write")
	if z := s.expectApply(); z != "node-0" {
		t.Fatalf("first write has zone %s", z)
	}
	s.expectWait(DefaultMinInterval)
	s.fire <- now
	s.expectWait(DefaultResync) // idle, the kick pending
	if z := s.expectApply(); z != "node-1" {
		t.Fatalf("the kicks' write has zone %s, want node-1", z)
	}
	s.expectWait(DefaultMinInterval)
	s.fire <- now
	s.expectWait(DefaultResync) // idle: no kick left
	if n := s.buildCount(); n != 2 {
		t.Errorf("%d builds, want 2 (the first write and one for the 100 kicks)", n)
	}
}

// metric is the value of one of the exporter's metrics as a registry
// gathers it.
func metric(t *testing.T, e *Exporter, name string) float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(e.Collectors()...)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		m := mf.GetMetric()[0]
		if c := m.GetCounter(); c != nil {
			return c.GetValue()
		}
		return m.GetGauge().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A state the object cannot be built from is counted and not written; the
// next change builds again.
func TestBuildErrorWaitsForNextChange(t *testing.T) {
	api := &fakeAPI{applied: make(chan nrt.Object)}
	fail := true
	var mu sync.Mutex
	waits := make(chan time.Duration)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := logrus.New()
	log.SetOutput(io.Discard)
	e := New(api, func() (nrt.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return nrt.Object{}, errors.New("no valid policy configuration yet")
		}
		return nrt.Object{Metadata: nrt.Metadata{Name: "n"}, Zones: []nrt.Zone{{Name: "node-0"}}}, nil
	}, log)
	e.after = func(d time.Duration) <-chan time.Time {
		select {
		case waits <- d:
		case <-ctx.Done():
		}
		return nil
	}
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx) }()
	defer func() { cancel(); <-done }()
	if d := <-waits; d != DefaultResync { // built, failed, idle: no write, no retry
		t.Fatalf("loop waits %v, want the idle resync", d)
	}
	if v := metric(t, e, "nri_cpualign_nrt_update_failures_total"); v != 1 {
		t.Errorf("failures %v, want 1", v)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	e.Kick()
	if z := (<-api.applied).Zones[0].Name; z != "node-0" {
		t.Errorf("wrote zone %s", z)
	}
}
