package daemon

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
)

// fakeAPIServer takes the exporter's server-side apply requests and
// passes each object on.
func fakeAPIServer(t *testing.T) (kubeconfig string, objs chan nrt.Object) {
	t.Helper()
	objs = make(chan nrt.Object, 100)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var o nrt.Object
		b, _ := io.ReadAll(r.Body)
		if r.Method != http.MethodPatch || !strings.HasSuffix(r.URL.Path, "/noderesourcetopologies/w1") || json.Unmarshal(b, &o) != nil {
			t.Errorf("unexpected request %s %s: %s", r.Method, r.URL, b)
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		objs <- o
	}))
	t.Cleanup(srv.Close)
	kubeconfig = filepath.Join(t.TempDir(), "kubeconfig")
	doc := fmt.Sprintf("current-context: c\ncontexts: [{name: c, context: {cluster: k}}]\nclusters: [{name: k, cluster: {server: %q}}]\n", srv.URL)
	if err := os.WriteFile(kubeconfig, []byte(doc), 0o600); err != nil {
		t.Fatal(err)
	}
	return kubeconfig, objs
}

// waitObject returns the first object written from now on whose node-0
// has want available CPUs (earlier writes may still be in flight).
func waitObject(t *testing.T, objs chan nrt.Object, want int64) nrt.Object {
	t.Helper()
	deadline := time.After(10 * time.Second) // a hang guard, not a timing assertion
	for {
		select {
		case o := <-objs:
			if o.Zones[0].Resources[0].Available == want {
				return o
			}
		case <-deadline:
			t.Fatalf("no NodeResourceTopology with %d available CPUs on node-0", want)
		}
	}
}

// With node_resource_topology on, the object follows the assignments: a
// 4-CPU Guaranteed container on ht-2s-6c (node 0 = 0-5,12-17, CPUs 0 and
// 12 reserved) takes node 0 from 10 available CPUs to 6, and its pod's
// removal gives them back.
func TestNodeResourceTopologyFollowsAssignments(t *testing.T) {
	rt := startRuntime(t)
	kc, objs := fakeAPIServer(t)
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\n"+
		"node_resource_topology = \"on\"\nkubeconfig = %q\nnode_name = \"w1\"\n", kc))
	r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))

	first := waitObject(t, objs, 10)
	if first.Metadata.Name != "w1" || len(first.Zones) != 2 || first.Zones[1].Resources[0] != (nrt.Resource{Name: "cpu", Capacity: 12, Allocatable: 12, Available: 12}) {
		t.Errorf("first object %+v", first)
	}
	if len(first.Attributes) != 2 || first.Attributes[0] != (nrt.Attribute{Name: "topologyManagerPolicy", Value: "single-numa-node"}) {
		t.Errorf("attributes %+v", first.Attributes)
	}

	pod := rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"})
	if _, _, err := rt.create(pod, "c", 4000, 4000); err != nil {
		t.Fatal(err)
	}
	waitObject(t, objs, 6)
	rt.removePod(pod)
	waitObject(t, objs, 10)

	// The third write is on its way back; the two before it are counted.
	mfs, err := r.d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, mf := range mfs {
		if mf.GetName() == "nri_cpualign_nrt_updates_total" {
			found = mf.GetMetric()[0].GetCounter().GetValue() >= 2
		}
	}
	if !found {
		t.Error("nri_cpualign_nrt_updates_total missing or below 2 writes")
	}
}

// Turned on without a node name, or with a kubeconfig that does not load,
// the daemon refuses to start and names the key.
func TestNodeResourceTopologyConfigErrors(t *testing.T) {
	t.Setenv("NODE_NAME", "")
	rt := startRuntime(t)
	for _, tc := range []struct{ extra, want string }{
		{"node_resource_topology = \"on\"\nreserved_cpu_count = 1\nkubeconfig = \"/nonexistent\"\n", `key "node_name"`},
		{"node_resource_topology = \"on\"\nreserved_cpu_count = 1\nnode_name = \"w\"\nkubeconfig = \"/nonexistent\"\n", `key "kubeconfig": bad value "/nonexistent"`},
	} {
		cfg := testConfig(t, rt, t.TempDir(), tc.extra)
		if _, err := New(cfg, WithTopology(loadFixture(t, "ht-1s-4c")), WithLogger(testLogger(t))); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %s", tc.extra, err, tc.want)
		}
	}
	cfg := testConfig(t, rt, t.TempDir(), "reserved_cpu_count = 1\n")
	if cfg.NodeResourceTopology != config.NRTOff {
		t.Errorf("default node_resource_topology %q", cfg.NodeResourceTopology)
	}
}

// Under memory_manager_policy Static the zones carry the memory manager's
// rows. memoryConfig's node 0 has 16 GiB, a 1 GiB pool of 2 MiB pages, one
// 1 GiB page and 1 GiB reserved: 13 GiB of memory allocatable. A pod of
// 2 CPUs, 4 GiB and 512 MiB of 2 MiB pages on node 0 leaves 9 GiB of memory
// and 512 MiB of 2 MiB pages available there, and node 0's CPUs at 8 (12
// less 0,12 reserved, less 1,13).
func TestNodeResourceTopologyMemoryManager(t *testing.T) {
	rt := startRuntime(t)
	kc, objs := fakeAPIServer(t)
	// The export's keys go first: those after [[reserved_memory]] would be its.
	cfg := testConfig(t, rt, t.TempDir(), fmt.Sprintf("node_resource_topology = \"on\"\nkubeconfig = %q\nnode_name = \"w1\"\n", kc)+
		memoryConfig(t, "single-numa-node"))
	startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"))
	waitObject(t, objs, 10)

	a := rt.addPod(podSpec{uid: "a", name: "a", qos: "guaranteed"})
	if _, err := rt.createMem(a, "app", 2000, 4*gib, 512*mib); err != nil {
		t.Fatal(err)
	}
	o := waitObject(t, objs, 8)
	want := map[string]nrt.Resource{
		"memory":        {Name: "memory", Capacity: 16 * gib, Allocatable: 13 * gib, Available: 9 * gib},
		"hugepages-2Mi": {Name: "hugepages-2Mi", Capacity: gib, Allocatable: gib, Available: 512 * mib},
		"hugepages-1Gi": {Name: "hugepages-1Gi", Capacity: gib, Allocatable: gib, Available: gib},
	}
	got := map[string]nrt.Resource{}
	for _, r := range o.Zones[0].Resources[1:] {
		got[r.Name] = r
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("node-0 memory rows %+v\nwant %+v", got, want)
	}
	if n := len(o.Zones[1].Resources); n != 4 {
		t.Errorf("node-1 has %d resources %+v, want cpu, memory and two hugepage sizes", n, o.Zones[1].Resources)
	}
}
