package daemon

import (
	"maps"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
)

// fakeNow is a settable clock for ledger.Record.Since.
type fakeNow struct{ ns atomic.Int64 }

func (f *fakeNow) set(t time.Time) { f.ns.Store(t.UnixNano()) }
func (f *fakeNow) now() time.Time  { return time.Unix(0, f.ns.Load()) }
func sinceOf(v observe.StateView) map[string]string {
	out := map[string]string{}
	for _, c := range v.Containers {
		out[c.Container] = c.Since
	}
	return out
}

// TestSinceIsWhenTheCPUsWereGot: /state's since is the admission's time
// (UTC, whole seconds), survives plugin restarts through the journal and
// the compaction snapshot, and is the Synchronize's time for a container
// placed there.
func TestSinceIsWhenTheCPUsWereGot(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, reserveCore0)
	clk := &fakeNow{}
	clk.set(time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC))

	r1 := startDaemon(t, rt, cfg, topo, WithNow(clk.now))
	// 11:05:00.9 in UTC+1 is 10:05:00 UTC, truncated.
	clk.set(time.Date(2026, 11, 25, 11, 5, 0, 900_000_000, time.FixedZone("CET", 3600)))
	g1 := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	if _, _, err := rt.create(g1, "c2", 2000, 2000); err != nil {
		t.Fatal(err)
	}
	clk.set(time.Date(2026, 11, 25, 10, 7, 30, 0, time.UTC))
	bePod := rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"})
	if _, _, err := rt.create(bePod, "be1", 0, 0); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"c2": "2026-11-25T10:05:00Z", "be1": "2026-11-25T10:07:30Z"}
	if got := sinceOf(r1.d.State()); !maps.Equal(got, want) {
		t.Errorf("since after admission %v, want %v", got, want)
	}
	r1.stop(t)

	// Placed by the Synchronize of the next start, at its time; the
	// others keep theirs (read back from the journal).
	g3 := rt.addPod(podSpec{uid: "g3", name: "g3", qos: "guaranteed"})
	rt.createAway(g3, "one", 1000, 1000)
	clk.set(time.Date(2026, 11, 25, 11, 0, 0, 0, time.UTC))
	r2 := startDaemon(t, rt, cfg, topo, WithNow(clk.now))
	want["one"] = "2026-11-25T11:00:00Z"
	if got := sinceOf(r2.d.State()); !maps.Equal(got, want) {
		t.Errorf("since after a restart %v, want %v", got, want)
	}
	r2.stop(t)

	// A start compacts the journal into a snapshot: read back from that.
	clk.set(time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC))
	r3 := startDaemon(t, rt, cfg, topo, WithNow(clk.now))
	if got := sinceOf(r3.d.State()); !maps.Equal(got, want) {
		t.Errorf("since after a second restart %v, want %v", got, want)
	}
}

// TestSinceOfAnImportedContainer: a container adopted from the kubelet's
// state has run on its CPUs since the runtime created it.
func TestSinceOfAnImportedContainer(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	kubelet := filepath.Join(t.TempDir(), "cpu_manager_state")
	doc := `{"policyName":"static","defaultCpuSet":"0,3-4,7","entries":{"uid-g1":{"c2":"1-2,5-6"}},"checksum":0}`
	if err := os.WriteFile(kubelet, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	g1 := rt.addPod(podSpec{uid: "uid-g1", name: "g1", qos: "guaranteed"})
	c2 := rt.createAway(g1, "c2", 4000, 4000)
	rt.SetCPUs(c2, "1-2,5-6", "")
	clk := &fakeNow{}
	clk.set(time.Date(2026, 11, 25, 11, 0, 0, 0, time.UTC))
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0), topo, WithKubeletState(kubelet), WithNow(clk.now))
	// The fake runtime's creation times count up from 1 ns after the epoch.
	if c2.CreatedAt <= 0 || c2.CreatedAt >= int64(time.Second) {
		t.Fatalf("the fake runtime's CreatedAt %d is not the small counter this test expects", c2.CreatedAt)
	}
	if got := sinceOf(r.d.State())["c2"]; got != "1970-01-01T00:00:00Z" {
		t.Errorf("since of the adopted c2 %q, want its creation 1970-01-01T00:00:00Z", got)
	}
}
