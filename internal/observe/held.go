package observe

import (
	"maps"
	"slices"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// "Held" CPUs are an exclusive assignment kept for a pod's stopped
// containers (internal/adapter withReuse), which no tracked container holds.

// heldAssignment is one assignment no tracked container holds.
type heldAssignment struct {
	Pod, PodName, Name string
	CPUs               cpuset.CPUSet
}

// heldAssignments lists the assignments of st that no record of ctrs
// holds, by pod key and name; PodName is the pod's namespace/name when a
// record of the pod still says it.
func heldAssignments(st policy.State, ctrs []ledger.Record) []heldAssignment {
	tracked := map[ledger.PodContainer]bool{}
	names := map[string]string{}
	for _, r := range ctrs {
		tracked[ledger.PodContainer{Pod: r.Pod, Name: r.Name}] = true
		names[r.Pod] = r.PodName
	}
	var out []heldAssignment
	assigned := st.Alloc.Assignments
	for _, pod := range slices.Sorted(maps.Keys(assigned)) {
		for _, name := range slices.Sorted(maps.Keys(assigned[pod])) {
			// A pod-level pod's block is no container's (StateView.PodPools).
			if name != policy.PodPoolEntry && !tracked[ledger.PodContainer{Pod: pod, Name: name}] {
				out = append(out, heldAssignment{Pod: pod, PodName: names[pod], Name: name, CPUs: assigned[pod][name]})
			}
		}
	}
	return out
}

// heldOnlyCPUs is how many CPUs are held for stopped containers and used
// by no tracked container (an app container on its init container's CPUs
// runs on them).
func heldOnlyCPUs(st policy.State, ctrs []ledger.Record) int {
	held := cpuset.New()
	for _, h := range heldAssignments(st, ctrs) {
		held = held.Union(h.CPUs)
	}
	if held.IsEmpty() {
		return 0
	}
	for _, r := range ctrs {
		if cpus, ok := st.Alloc.Assignments[r.Pod][r.Name]; ok {
			held = held.Difference(cpus)
		}
	}
	return held.Size()
}

// NewHeldGauge is nri_cpualign_held_cpus, read from the ledger's view at
// every scrape (not at every commit: it walks the whole index).
func NewHeldGauge(view func() ledger.View) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nri_cpualign_held_cpus",
		Help: "Exclusive CPUs held for stopped containers of live pods (crash-looping, in back-off, finished init containers, never started) that no running container uses; counted in nri_cpualign_exclusive_cpus too."},
		func() float64 {
			v := view()
			if v.Engine == nil {
				return 0
			}
			return float64(heldOnlyCPUs(v.St, v.Ctrs))
		})
}
