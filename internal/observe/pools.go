package observe

import (
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// poolCollector exports the CPU pools' gauges (shared, exclusive,
// resized, reserved) and the containers tracked, read from the ledger's
// view at every scrape: a commit calls out to nothing to keep them.
type poolCollector struct {
	view                                             func() ledger.View
	shared, exclusive, resized, reserved, containers *prometheus.Desc
}

// NewPoolCollector is the pool gauges' collector. Each reads 0 until the
// first commit that changed the state with an engine (a restore, a
// runtime's Configure), as when the commits set them.
func NewPoolCollector(view func() ledger.View) prometheus.Collector {
	return &poolCollector{view: view,
		shared:    prometheus.NewDesc("nri_cpualign_shared_cpus", "CPUs in the shared pool.", nil, nil),
		exclusive: prometheus.NewDesc("nri_cpualign_exclusive_cpus", "CPUs assigned exclusively to containers.", nil, nil),
		resized: prometheus.NewDesc("nri_cpualign_resized_cpus",
			"Exclusive CPUs containers have beyond their baselines (the CPUs they were admitted with): nri_cpualign_exclusive_cpus minus this is what admissions gave.", nil, nil),
		reserved:   prometheus.NewDesc("nri_cpualign_reserved_cpus", "CPUs reserved for the system.", nil, nil),
		containers: prometheus.NewDesc("nri_cpualign_containers", "Containers the plugin tracks.", nil, nil),
	}
}

func (c *poolCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.shared
	ch <- c.exclusive
	ch <- c.resized
	ch <- c.reserved
	ch <- c.containers
}

func (c *poolCollector) Collect(ch chan<- prometheus.Metric) {
	var shared, exclusive, resized, reserved, containers int
	if v := c.view(); v.Engine != nil && v.Gen > 0 {
		shared = v.Engine.SharedPool(v.St).Size()
		exclusive = exclusiveCPUs(v.St.Alloc.Assignments)
		resized = resizedCPUs(v.St)
		reserved = v.Engine.Reserved().Size()
		containers = len(v.Ctrs)
	}
	for _, g := range []struct {
		d *prometheus.Desc
		n int
	}{{c.shared, shared}, {c.exclusive, exclusive}, {c.resized, resized}, {c.reserved, reserved}, {c.containers, containers}} {
		ch <- prometheus.MustNewConstMetric(g.d, prometheus.GaugeValue, float64(g.n))
	}
}

// exclusiveCPUs is how many CPUs the assignments hold, counted in a
// bitmap, one bit per CPU (not a sum of sizes: an app container reusing
// its init container's CPUs overlaps it).
func exclusiveCPUs(assign map[string]map[string]cpuset.CPUSet) int {
	var bits []uint64
	n := 0
	for _, byName := range assign {
		for _, cpus := range byName {
			for _, cpu := range cpus.UnsortedList() {
				w := cpu / 64
				if w >= len(bits) {
					bits = append(bits, make([]uint64, w+1-len(bits))...)
				}
				if bit := uint64(1) << (cpu % 64); bits[w]&bit == 0 {
					bits[w] |= bit
					n++
				}
			}
		}
	}
	return n
}

// resizedCPUs is how many exclusive CPUs containers hold beyond their
// baselines.
func resizedCPUs(st policy.State) int {
	n := 0
	for pod, byName := range st.Baseline {
		for name, base := range byName {
			n += st.Alloc.Assignments[pod][name].Size() - base.Size()
		}
	}
	return n
}
