package daemon

import (
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
)

// strict-align-cpus-by-uncorecache = "exclusive" through the daemon on the
// Ampere Altra fixture (16 caches of 8 CPUs, cache g = CPUs 8g..8g+7),
// reserved 0-1: the seed's 10/8/6 containers and a 2-CPU one get caches
// of their own (2-3,8-15; 16-23; 24-29; 32-33, worked out in
// pkg/allocator's TestStrictUncoreAmpereKEPExample), an 88-CPU one the 11
// remaining whole caches (40-127); then a 1-CPU container finds no cache
// and its CreateContainer fails with UncoreCacheAlignmentError. /state
// shows each container's caches, the metrics count 5 admissions and 1
// refusal at the uncore_cache boundary.
func TestStrictUncoreExclusiveDaemon(t *testing.T) {
	topo := loadFixture(t, "ampere-altra")
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0-1\"\n"+
		"[cpu_manager_policy_options]\nstrict-align-cpus-by-uncorecache = \"exclusive\"\n")
	r := startDaemon(t, rt, cfg, topo)
	srv := httptest.NewServer(r.d.Handler())
	defer srv.Close()

	for _, c := range []struct {
		name string
		cpus int64
	}{{"c10", 10}, {"c8", 8}, {"c6", 6}, {"c2", 2}, {"c88", 88}} {
		pod := rt.addPod(podSpec{uid: c.name, name: c.name, qos: "guaranteed"})
		if _, _, err := rt.create(pod, "app", c.cpus*1000, c.cpus*1000); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
	}
	late := rt.addPod(podSpec{uid: "late", name: "late", qos: "guaranteed"})
	_, _, err := rt.create(late, "app", 1000, 1000)
	if err == nil || !strings.Contains(err.Error(), "UncoreCacheAlignmentError: requested 1 CPUs do not fit in one uncore cache no other exclusive container uses") {
		t.Fatalf("1-CPU container after every cache is taken: %v", err)
	}

	var v observe.StateView
	if err := json.Unmarshal([]byte(get(t, srv.URL+"/state")), &v); err != nil {
		t.Fatal(err)
	}
	if v.StrictUncore != "exclusive" {
		t.Errorf("/state strict_align_cpus_by_uncorecache = %q", v.StrictUncore)
	}
	type got struct {
		cpus string
		l3   []int
	}
	want := map[string]got{
		"c10": {"2-3,8-15", []int{0, 1}}, "c8": {"16-23", []int{2}}, "c6": {"24-29", []int{3}},
		"c2": {"32-33", []int{4}}, "c88": {"40-127", []int{5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}},
	}
	seen := map[string]got{}
	for _, c := range v.Containers {
		seen[c.PodUID] = got{c.CPUs, c.L3}
	}
	if !reflect.DeepEqual(seen, want) {
		t.Errorf("/state containers %+v\nwant %+v", seen, want)
	}
	// The shared pool keeps the reserved CPUs and the caches' leftovers.
	if v.Shared != "0-1,4-7,30-31,34-39" {
		t.Errorf("shared %q", v.Shared)
	}

	body := get(t, srv.URL+"/metrics")
	for _, line := range []string{
		`container_aligned_compute_resources_count{boundary="uncore_cache",scope="container"} 5`,
		`container_aligned_compute_resources_failure_count{boundary="uncore_cache",scope="container"} 1`,
		"topology_manager_admission_errors_total 1",
	} {
		if !strings.Contains(body, line+"\n") {
			t.Errorf("/metrics lacks %q:\n%s", line, grepLines(body, "aligned"))
		}
	}
}
