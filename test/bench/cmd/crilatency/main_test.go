package main

import (
	"math"
	"testing"
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
