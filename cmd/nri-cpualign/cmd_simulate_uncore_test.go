package main

import (
	"fmt"
	"strings"
	"testing"
)

// TestSimulateStrictUncoreRestricted traces strict-align-cpus-by-uncorecache
// under restricted on epyc-9654-2p-nps2 (no SMT; NUMA n = CPUs
// 48n..48n+47; uncore cache g = CPUs 8g..8g+7, six per node), reserved 0-1,
// worked out by hand:
//
//   - One CPU held in each of caches 1-5 leaves node 0 with 41 free CPUs
//     and no cache with 8.
//   - 48 CPUs: {0} cannot hold them; the narrowest preferred hint is {1},
//     where the six whole free caches 6-11 are taken (48-95). Then {2}
//     (96-143) and {3} (144-191).
//   - 8 CPUs: no cache anywhere has 8 assignable CPUs: the CPU hints are
//     empty and the container is refused with UncoreCacheAlignmentError
//     (not TopologyAffinityError).
//   - 7 CPUs fit caches 1-5 (7 each; cache 0 has 6): best fit, lowest id:
//     cache 1 = 9-15, on {0}.
func TestSimulateStrictUncoreRestricted(t *testing.T) {
	toml := "reserved_system_cpus = \"0-1\"\ntopology_manager_policy = \"restricted\"\n" +
		"[cpu_manager_policy_options]\nstrict-align-cpus-by-uncorecache = \"true\"\n"
	var lines, want []string
	for i, cpu := range []int{8, 16, 24, 32, 40} {
		lines = append(lines, fmt.Sprintf(`{"op":"assign","pod":"b%d","container":"c","cpus":"%d"}`, i, cpu))
		want = append(want, fmt.Sprintf(`{"pod":"b%d","container":"c","cpus":"%d","exclusive":true}`, i, cpu))
	}
	lines = append(lines,
		g("add", "x1", "c", 48, ""),
		g("add", "x2", "c", 48, ""),
		g("add", "x3", "c", 48, ""),
		g("hints", "p", "c", 8, ""),
		g("add", "p", "c", 8, ""),
		g("add", "q", "c", 7, ""),
		`{"op":"state"}`,
	)
	want = append(want,
		`{"pod":"x1","container":"c","cpus":"48-95","mems":"0-3","exclusive":true,"affinity":{"numa":[1],"preferred":true},"l3":[6,7,8,9,10,11]}`,
		`{"pod":"x2","container":"c","cpus":"96-143","mems":"0-3","exclusive":true,"affinity":{"numa":[2],"preferred":true},"l3":[12,13,14,15,16,17]}`,
		`{"pod":"x3","container":"c","cpus":"144-191","mems":"0-3","exclusive":true,"affinity":{"numa":[3],"preferred":true},"l3":[18,19,20,21,22,23]}`,
		`{"pod":"p","container":"c","hints":{"cpu":[]},"strict_align_cpus_by_uncorecache":"true"}`,
		`{"pod":"p","container":"c","error":"UncoreCacheAlignmentError: requested 8 CPUs do not fit in one uncore cache (strict-align-cpus-by-uncorecache; the most assignable CPUs in one such cache: 7 of 8)","reason":"UncoreCacheAlignmentError"}`,
		`{"pod":"q","container":"c","cpus":"9-15","mems":"0-3","exclusive":true,"affinity":{"numa":[0],"preferred":true},"l3":[1]}`,
		`{"shared":"0-7,17-23,25-31,33-39,41-47","reserved":"0-1","assignments":{"b0":{"c":"8"},"b1":{"c":"16"},"b2":{"c":"24"},"b3":{"c":"32"},"b4":{"c":"40"},"q":{"c":"9-15"},"x1":{"c":"48-95"},"x2":{"c":"96-143"},"x3":{"c":"144-191"}}}`,
	)
	out, code := simulate(t, simFixture(t, "epyc-9654-2p-nps2"), toml, lines...)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	expectLines(t, out, want...)
}

// TestSimulateStrictUncoreStartup: the incompatible combinations stop
// simulate at start-up, naming the option, as the daemon does.
func TestSimulateStrictUncoreStartup(t *testing.T) {
	root := simFixture(t, "ampere-altra")
	for _, tc := range []struct{ toml, msg string }{
		{"topology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\n[cpu_manager_policy_options]\nstrict-align-cpus-by-uncorecache = \"exclusive\"\n",
			"strict-align-cpus-by-uncorecache is incompatible with topology_manager_scope pod under topology_manager_policy single-numa-node"},
		{"[cpu_manager_policy_options]\nstrict-align-cpus-by-uncorecache = \"true\"\ndistribute-cpus-across-cores = \"true\"\n",
			"strict-align-cpus-by-uncorecache and distribute-cpus-across-cores can not be used at the same time"},
		{"[cpu_manager_policy_options]\nstrict-align-cpus-by-uncorecache = \"always\"\n",
			`want true, false or exclusive, got \"always\"`},
	} {
		out, code := simulate(t, root, "reserved_system_cpus = \"0-1\"\n"+tc.toml, `{"op":"state"}`)
		if code == 0 || len(out) != 1 || !strings.Contains(out[0], tc.msg) || !strings.Contains(out[0], `"reason":"InvalidConfig"`) {
			t.Errorf("exit %d, %q; want an InvalidConfig line containing %s", code, out, tc.msg)
		}
	}
}
