package main

import (
	"math"
	"testing"
	"time"
)

// TestStartPathSeconds: the start path's events are summed from a
// /metrics page as the plugin's Prometheus handler writes it; other
// events and other series of the histogram are left out.
func TestStartPathSeconds(t *testing.T) {
	page := `# HELP nri_cpualign_event_duration_seconds Time the plugin took to answer each NRI event: how long it held up the runtime.
# TYPE nri_cpualign_event_duration_seconds histogram
nri_cpualign_event_duration_seconds_bucket{event="CreateContainer",le="1e-05"} 0
nri_cpualign_event_duration_seconds_sum{event="CreateContainer"} 0.00125
nri_cpualign_event_duration_seconds_count{event="CreateContainer"} 3
nri_cpualign_event_duration_seconds_sum{event="RemoveContainer"} 7
nri_cpualign_event_duration_seconds_count{event="RemoveContainer"} 2
nri_cpualign_event_duration_seconds_sum{event="StartContainer"} 0.0025
nri_cpualign_event_duration_seconds_sum{event="PostStartContainer"} 1.5e-05
topology_manager_admission_duration_seconds_sum 9
`
	got, err := startPathSeconds(page)
	if err != nil {
		t.Fatal(err)
	}
	if want := 0.00125 + 0.0025 + 0.000015; math.Abs(got-want) > 1e-12 {
		t.Errorf("startPathSeconds = %v, want %v", got, want)
	}
	if _, err := startPathSeconds(`nri_cpualign_event_duration_seconds_sum{event="StartContainer"} x`); err == nil {
		t.Error("a value that is not a number was accepted")
	}
	if got, err := startPathSeconds("# nothing answered yet\n"); err != nil || got != 0 {
		t.Errorf("empty page: %v, %v; want 0, nil", got, err)
	}
}

// TestRatios: the k-th sample of one mode is divided by the k-th of the
// other (the same round), the longer list cut to the shorter; the median
// and its interval come from those ratios.
func TestRatios(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	r := ratios(ms(200, 300, 100, 400, 500, 600), ms(100, 100, 100, 100, 100))
	want := []float64{2, 3, 1, 4, 5}
	if len(r) != len(want) {
		t.Fatalf("ratios = %v, want %v", r, want)
	}
	for i := range want {
		if math.Abs(r[i]-want[i]) > 1e-12 {
			t.Fatalf("ratios = %v, want %v", r, want)
		}
	}
	if got := pct(r, .5); got != 3 {
		t.Errorf("median of %v = %v, want 3", r, got)
	}
	lo, hi, ok := medianCI(r)
	if !ok || lo > 3 || hi < 3 || lo < 1 || hi > 5 {
		t.Errorf("95%% interval of the median of %v = [%v, %v] (%v), want around 3 within [1, 5]", r, lo, hi, ok)
	}
	if _, _, ok := medianCI(r[:4]); ok {
		t.Error("an interval from 4 samples")
	}
}
