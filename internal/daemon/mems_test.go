package daemon

import (
	"context"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
)

// A record from an earlier release holds an exclusive container's mems
// narrowed to its CPUs' NUMA node; the next Synchronize (a plugin restart)
// widens them to every memory node (memory_manager_policy None), in the
// update and in the record the reconcile loop enforces.
func TestSynchronizeWidensNarrowedMems(t *testing.T) {
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), "reserved_system_cpus = \"0,12\"\n"), loadFixture(t, "ht-2s-6c"))
	g := rt.addPod(podSpec{uid: "g", name: "g", qos: "guaranteed"})
	c, _, err := rt.create(g, "app", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	// ht-2s-6c: NUMA 0 = 0-5,12-17; the container's 2 CPUs are on node 0.
	cpus := rt.cpus(c)
	if mems := rt.mems(c); mems != "0-1" {
		t.Fatalf("created with mems %q, want 0-1", mems)
	}
	if err := r.d.led.Update(func(l *ledger.Tx) error {
		rec, _ := l.Record(c.Id)
		rec.Mems = "0"
		_, err := l.Commit(ledger.Change{Index: ledger.IndexChange{Edit: ledger.Edit{Put: []ledger.Record{rec}}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	rt.SetCPUs(c, cpus, "0")

	updates, err := r.d.handlers().Synchronize(context.Background(), rt.Pods(), rt.Containers())
	if err != nil {
		t.Fatal(err)
	}
	got := ""
	for _, u := range updates {
		if u.GetContainerId() == c.Id {
			got = u.GetLinux().GetResources().GetCpu().GetMems()
		}
	}
	if got != "0-1" {
		t.Errorf("Synchronize's mems for the container = %q, want 0-1", got)
	}
	if m := readLedger(r.d, func(l *ledger.Tx) string { r, _ := l.Record(c.Id); return r.Mems }); m != "0-1" {
		t.Errorf("record's mems after Synchronize = %q, want 0-1", m)
	}
}
