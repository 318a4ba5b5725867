package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

func strictConfig(topoPolicy, scope, value string) policy.Config {
	c := static(topoPolicy, "0-1")
	c.TopologyScope = scope
	c.CPUOptions = map[string]string{allocator.OptStrictAlignByUncoreCache: value}
	return c
}

func TestStrictUncoreStartupChecks(t *testing.T) {
	topo := sysfstest.Load(t, "epyc-9654-2p-nps2")
	for _, tc := range []struct {
		name string
		cfg  policy.Config
		want []string // substrings; nil = accepted
	}{
		{"container scope restricted", strictConfig("restricted", "container", "true"), nil},
		{"pod scope best-effort", strictConfig("best-effort", "pod", "exclusive"), nil},
		{"pod scope restricted", strictConfig("restricted", "pod", "true"),
			[]string{"cpu_manager_policy_options", "strict-align-cpus-by-uncorecache is incompatible with topology_manager_scope pod under topology_manager_policy restricted"}},
		{"pod scope single-numa-node", strictConfig("single-numa-node", "pod", "exclusive"),
			[]string{"topology_manager_policy single-numa-node"}},
		{"bad value", strictConfig("none", "container", "strict"),
			[]string{"cpu_manager_policy_options", `want true, false or exclusive, got "strict"`}},
		{"with distribute-cpus-across-numa", func() policy.Config {
			c := strictConfig("none", "container", "true")
			c.CPUOptions["distribute-cpus-across-numa"] = "true"
			return c
		}(), []string{"strict-align-cpus-by-uncorecache and distribute-cpus-across-numa can not be used at the same time"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := policy.New(topo, tc.cfg)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ce *policy.ConfigError
			if !errors.As(err, &ce) {
				t.Fatalf("got %v, want a *policy.ConfigError", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// Under restricted the topology manager admits only what the strict
// placement then grants. epyc-9654-2p-nps2 (NUMA n = CPUs 48n..48n+47,
// caches of 8), reserved 0-1, one CPU held in each of caches 1-5: node 0
// has 41 free CPUs but no cache with 8. Without the option an 8-CPU
// container is admitted on node 0 (over several caches); with it the CPU
// hints skip {0}, and it is admitted on {1}, cache 6 = 48-55.
func TestStrictUncoreRestrictedAgrees(t *testing.T) {
	for _, strict := range []bool{false, true} {
		cfg := static("restricted", "0-1")
		if strict {
			cfg = strictConfig("restricted", "container", "true")
		}
		e := newEngine(t, "epyc-9654-2p-nps2", cfg)
		st := e.NewState()
		for i, cpu := range []int{8, 16, 24, 32, 40} {
			var err error
			if st, err = e.Assign(st, fmt.Sprintf("busy%d", i), "c", cpuset.New(cpu)); err != nil {
				t.Fatal(err)
			}
		}
		_, d := add(t, e, st, guaranteed("p", "c", 8))
		if !strict {
			if d.Affinity.Affinity.String() != "0" || len(e.Topology().L3GroupsOf(d.CPUs)) < 2 {
				t.Fatalf("without the option: %s on NUMA %s, want node 0 over several caches", d.CPUs, d.Affinity.Affinity)
			}
			continue
		}
		check(t, d, want{cpus: "48-55", mems: "0-3", exclusive: true, numa: "1", preferred: true})
		if got := e.Hints(st, guaranteed("p", "c", 8))["cpu"]; len(got) == 0 || got[0].Affinity != hints.NewMask(1) {
			t.Fatalf("hints %v, want {1} first", got)
		}
	}
}

// A container no cache can take is refused with UncoreCacheAlignmentError
// under restricted too (its CPU hints would be empty: without the check
// the reason would be TopologyAffinityError). exclusive on
// epyc-9654-2p-nps2, reserved 0-1: 24 caches, so 24 1-CPU containers get
// one cache each, the narrowest hint first: 2 (cache 0, most used), 8, 16,
// ..., 184; the 25th is refused and the state is unchanged.
func TestStrictUncoreExclusiveRefusalReason(t *testing.T) {
	e := newEngine(t, "epyc-9654-2p-nps2", strictConfig("restricted", "container", "exclusive"))
	if e.StrictUncore() != allocator.UncoreStrictExclusive {
		t.Fatalf("StrictUncore %v", e.StrictUncore())
	}
	st := e.NewState()
	for i := 0; i < 24; i++ {
		var d policy.Decision
		st, d = add(t, e, st, guaranteed(fmt.Sprintf("p%d", i), "c", 1))
		wantCPU := 8 * i
		if i == 0 {
			wantCPU = 2
		}
		if d.CPUs.String() != fmt.Sprint(wantCPU) || d.Affinity.Affinity.String() != fmt.Sprint(i/6) || !d.Affinity.Preferred {
			t.Fatalf("container %d: %s on %v, want %d on NUMA %d", i, d.CPUs, d.Affinity, wantCPU, i/6)
		}
	}
	next, _, err := e.Add(st, guaranteed("p24", "c", 1))
	var ue *allocator.UncoreCacheAlignmentError
	if !errors.As(err, &ue) || !strings.HasPrefix(err.Error(), "UncoreCacheAlignmentError: ") {
		t.Fatalf("got %v, want UncoreCacheAlignmentError", err)
	}
	if !e.SharedPool(next).Equals(e.SharedPool(st)) {
		t.Fatal("a refusal changed the state")
	}
	// A shared-pool container is not concerned.
	if _, d, err := e.Add(st, policy.Request{Pod: "b", Container: "c", QoS: policy.BestEffort}); err != nil || d.Exclusive {
		t.Fatalf("best-effort container: %v %+v", err, d)
	}
}
