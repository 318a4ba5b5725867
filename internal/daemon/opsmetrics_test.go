package daemon

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
)

// gatherByLabels is each sample of the metric family name, keyed by its
// label values joined with ",", as a number (counter or gauge).
func gatherByLabels(t *testing.T, d *Daemon, name string) map[string]float64 {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			key := ""
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += l.GetValue()
			}
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}

// TestOperatorMetrics: the metrics an operator alerts on. Connected
// follows the synchronization, a second Synchronize is a reconnect, each
// refusal is counted under its reason word (an admission and a resize),
// and the build is labelled.
func TestOperatorMetrics(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := t.Context()
	if got := gatherByLabels(t, h.d, "nri_cpualign_connected"); got[""] != 0 {
		t.Errorf("connected before Synchronize = %v, want 0", got)
	}
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := gatherByLabels(t, h.d, "nri_cpualign_connected"); got[""] != 1 {
		t.Errorf("connected after Synchronize = %v, want 1", got)
	}
	if got := gatherByLabels(t, h.d, "nri_cpualign_reconnects_total"); got[""] != 0 {
		t.Errorf("reconnects after the first Synchronize = %v, want 0", got)
	}
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	if got := gatherByLabels(t, h.d, "nri_cpualign_reconnects_total"); got[""] != 1 {
		t.Errorf("reconnects after a second Synchronize = %v, want 1", got)
	}

	// ht-1s-4c: 8 CPUs, core 0 (CPUs 0 and 4) reserved, 6 assignable.
	pod := testPod("p1")
	c := testCtr("c1", "app", 2000)
	h.create(t, pod, c)
	h.start(t, pod, c)
	big := testCtr("c2", "big", 6000) // 6 CPUs, 4 left
	big.PodSandboxId = pod.Id
	if _, _, err := h.p.CreateContainer(ctx, pod, big); err == nil {
		t.Fatal("CreateContainer of 6 CPUs with 4 free succeeded")
	}
	if _, err := h.p.UpdateContainer(ctx, pod, c, milliCPU(1000, 1000)); err == nil {
		t.Fatal("a resize from 2 to 1 exclusive CPU (below the baseline) was accepted")
	}
	got := gatherByLabels(t, h.d, "nri_cpualign_admission_errors_total")
	want := map[string]float64{"InsufficientCPUs": 1, "InPlaceResizeRejected": 1}
	if len(got) != len(want) || got["InsufficientCPUs"] != 1 || got["InPlaceResizeRejected"] != 1 {
		t.Errorf("admission_errors_total by reason = %v, want %v", got, want)
	}

	v, r, g := buildinfo.MetricLabels()
	if got := gatherByLabels(t, h.d, "nri_cpualign_build_info"); len(got) != 1 || got[g+","+r+","+v] != 1 {
		t.Errorf("build_info = %v, want one sample labelled go=%s revision=%s version=%s", got, g, r, v)
	}
}
