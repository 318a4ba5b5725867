package daemon

import (
	"fmt"
	"testing"
)

// TestConfigureRefreshesObservers: a runtime's Configure goes through the
// ledger's Commit, so the gauges, /state and the NodeResourceTopology
// export reflect the runtime's configuration at once. Before, Configure
// swapped the engine beside the commit: the gauges kept the start-up
// reservation and the exporter was not told until the next event, or its
// 5-minute resync.
func TestConfigureRefreshesObservers(t *testing.T) {
	rt := startRuntime(t)
	kc, objs := fakeAPIServer(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\n"+
		"node_resource_topology = \"on\"\nkubeconfig = %q\nnode_name = \"w1\"\n", kc))
	r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))
	// ht-2s-6c: node 0 = 0-5,12-17; 0 and 12 reserved leave it 10.
	waitObject(t, objs, 10)
	if got := gatherByLabels(t, r.d, "nri_cpualign_reserved_cpus")[""]; got != 2 {
		t.Fatalf("nri_cpualign_reserved_cpus before Configure = %v, want 2", got)
	}

	// The runtime reserves two cores of node 0; no event follows.
	if err := r.d.configure("reserved_system_cpus = \"0-1,12-13\"\n"); err != nil {
		t.Fatal(err)
	}
	if got := gatherByLabels(t, r.d, "nri_cpualign_reserved_cpus")[""]; got != 4 {
		t.Errorf("nri_cpualign_reserved_cpus after Configure = %v, want 4", got)
	}
	if v := r.d.State(); v.Reserved != "0-1,12-13" {
		t.Errorf("/state after Configure: reserved %q, want 0-1,12-13", v.Reserved)
	}
	// The exporter was kicked by the Configure itself.
	waitObject(t, objs, 8)
}
