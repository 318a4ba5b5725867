package daemon

import (
	"context"
	"reflect"
	"testing"

	"github.com/sirupsen/logrus"
)

// TestEventDurationMetric: every NRI event the plugin answers, refused
// ones included, is one observation of nri_cpualign_event_duration_seconds
// under its own event label.
func TestEventDurationMetric(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	pod := testPod("p1")
	c := testCtr("c1", "app", 2000)
	h.create(t, pod, c)
	h.start(t, pod, c)
	big := testCtr("c2", "big", 8000) // 8 CPUs on a machine of 8 with 2 reserved
	big.PodSandboxId = pod.Id
	if _, _, err := h.p.CreateContainer(context.Background(), pod, big); err == nil {
		t.Fatal("CreateContainer of 8 CPUs with 6 assignable succeeded")
	}
	if err := h.p.RemoveContainer(context.Background(), pod, c); err != nil {
		t.Fatal(err)
	}

	mfs, err := h.d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]uint64{}
	for _, mf := range mfs {
		if mf.GetName() != "nri_cpualign_event_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != 1 || m.GetLabel()[0].GetName() != "event" {
				t.Fatalf("labels %v, want event only", m.GetLabel())
			}
			hist := m.GetHistogram()
			if hist.GetSampleCount() > 0 && hist.GetSampleSum() <= 0 {
				t.Errorf("%s: %d observations summing to %v s", m.GetLabel()[0].GetValue(), hist.GetSampleCount(), hist.GetSampleSum())
			}
			got[m.GetLabel()[0].GetValue()] = hist.GetSampleCount()
		}
	}
	want := map[string]uint64{"CreateContainer": 2, "StartContainer": 1, "RemoveContainer": 1}
	if len(got) != len(want) {
		t.Errorf("events observed %v, want %v", got, want)
	}
	for ev, n := range want {
		if got[ev] != n {
			t.Errorf("%s observed %d times, want %d (all: %v)", ev, got[ev], n, got)
		}
	}
}

// TestShutdownLogged: the runtime's Shutdown is one info line and changes
// nothing (the state is on disk already).
func TestShutdownLogged(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	pod := testPod("p1")
	c := testCtr("c1", "app", 2000)
	h.create(t, pod, c)
	before := h.d.State()
	h.p.Shutdown(context.Background())
	if !logged(h.log, logrus.InfoLevel, "runtime is shutting down") {
		t.Error("no line for the runtime's Shutdown")
	}
	if after := h.d.State(); !reflect.DeepEqual(before, after) {
		t.Errorf("Shutdown changed the state:\n%+v\n%+v", before, after)
	}
}
