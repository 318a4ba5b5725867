package observe

import (
	"io"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// gauges gathers c's gauges by name.
func gauges(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// The pool gauges read the ledger's view at scrape time: 0 before the
// first commit and with no engine; after a commit the pools, the
// exclusive CPUs (held ones included), the CPUs beyond the baselines and
// the containers tracked.
func TestPoolCollector(t *testing.T) {
	cfg, e := policytest.Engine(t, "ht-1s-4c", "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n")
	log := logrus.New()
	log.SetOutput(io.Discard)
	names := []string{"nri_cpualign_shared_cpus", "nri_cpualign_exclusive_cpus", "nri_cpualign_resized_cpus",
		"nri_cpualign_reserved_cpus", "nri_cpualign_containers"}
	check := func(when string, c prometheus.Collector, want ...float64) {
		t.Helper()
		got := gauges(t, c)
		if len(got) != len(names) {
			t.Errorf("%s: gauges %v, want %v", when, got, names)
		}
		for i, name := range names {
			if got[name] != want[i] {
				t.Errorf("%s: %s = %v, want %v", when, name, got[name], want[i])
			}
		}
	}
	check("no engine", NewPoolCollector(ledger.New(config.Config{}, nil, nil, nil, ledger.Deps{}).View), 0, 0, 0, 0, 0)
	l := ledger.New(cfg, e.Topology(), e, nil, ledger.Deps{Store: nopStore{}, Obs: nopObserver{}, Log: log})
	c := NewPoolCollector(l.View)
	check("before the first commit", c, 0, 0, 0, 0, 0)
	commitResizedAndHeld(t, l, e)
	// ht-1s-4c: 8 CPUs; 0,4 reserved, 1-3,5-7 exclusive: the shared pool
	// is the reserved CPUs.
	check("committed", c, 2, 6, 2, 2, 1)
}

// An app container on its init container's CPUs overlaps it: the
// exclusive CPUs count each CPU once.
func TestExclusiveCPUsOverlap(t *testing.T) {
	assign := map[string]map[string]cpuset.CPUSet{
		"p": {"init": cpuset.New(1, 5), "app": cpuset.New(1, 5, 2, 6)},
		"q": {"c": cpuset.New(3, 70)},
	}
	if n := exclusiveCPUs(assign); n != 6 {
		t.Errorf("exclusive CPUs %d, want 6 (1,2,3,5,6,70)", n)
	}
}
