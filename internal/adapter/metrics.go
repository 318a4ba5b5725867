package adapter

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are what the handlers count: admissions and their refusals by
// reason, the alignment of exclusive allocations, resizes, abandoned
// attempts, reconnects and the time each event took. The daemon makes
// them once, on its registry.
type Metrics struct {
	pinningRequests   prometheus.Counter
	pinningErrors     prometheus.Counter
	aligned           *prometheus.CounterVec
	alignedFailures   *prometheus.CounterVec
	admissionRequests prometheus.Counter
	admissionErrors   prometheus.Counter
	admissionDuration prometheus.Histogram
	abandoned         prometheus.Counter
	eventDuration     *prometheus.HistogramVec
	refusals          *prometheus.CounterVec
	reconnects        prometheus.Counter
	resizes           *prometheus.CounterVec
}

// NewMetrics makes the handlers' metrics and registers them on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		pinningRequests: prometheus.NewCounter(prometheus.CounterOpts{Name: "cpu_manager_pinning_requests_total",
			Help: "Containers that asked for exclusive CPUs."}),
		pinningErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "cpu_manager_pinning_errors_total",
			Help: "Containers that asked for exclusive CPUs and did not get them."}),
		aligned: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "container_aligned_compute_resources_count",
			Help: "Exclusive allocations aligned on a boundary: whole physical cores, one NUMA node, one uncore (L3) cache."},
			[]string{"scope", "boundary"}),
		alignedFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "container_aligned_compute_resources_failure_count",
			Help: "Admissions refused because the alignment could not be met."}, []string{"scope", "boundary"}),
		admissionRequests: prometheus.NewCounter(prometheus.CounterOpts{Name: "topology_manager_admission_requests_total",
			Help: "Containers admitted or rejected by the policy."}),
		admissionErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "topology_manager_admission_errors_total",
			Help: "Containers rejected by the policy."}),
		admissionDuration: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "topology_manager_admission_duration_seconds",
			Help: "Time to decide one admission.", Buckets: prometheus.ExponentialBuckets(0.00001, 4, 10)}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_abandoned_containers_total",
			Help: "Containers placed at CreateContainer that never started and whose pod created them again (the new attempt takes their place and their CPUs)."}),
		// 10 µs to 1.3 s: a handler is ~0.1 ms; a StartContainer that
		// waits for the cgroup writes of 500 containers some ms.
		eventDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "nri_cpualign_event_duration_seconds",
			Help:    "Time the plugin took to answer each NRI event: how long the runtime waited for it.",
			Buckets: prometheus.ExponentialBuckets(0.00001, 2, 18)}, []string{"event"}),
		// The kubelet's topology_manager_admission_errors_total has no
		// reason; an alert wants to tell a full node from a policy that
		// cannot align.
		refusals: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_cpualign_admission_errors_total",
			Help: "Containers refused, by the reason word their error starts with (InsufficientCPUs, SMTAlignmentError, TopologyAffinityError, UncoreCacheAlignmentError, InPlaceResizeRejected, ...)."},
			[]string{"reason"}),
		reconnects: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_reconnects_total",
			Help: "Times the plugin synchronized with the runtime again after its first synchronization (the plugin reconnected, or the runtime restarted)."}),
		resizes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_cpualign_resizes_total",
			Help: "In-place resizes of exclusive CPUs done, by kind (upsize, downsize); refusals count in nri_cpualign_admission_errors_total."},
			[]string{"kind"}),
	}
	reg.MustRegister(m.pinningRequests, m.pinningErrors, m.aligned, m.alignedFailures, m.admissionRequests,
		m.admissionErrors, m.admissionDuration, m.abandoned, m.eventDuration, m.refusals, m.reconnects, m.resizes)
	return m
}

// refused counts one refusal by its reason word.
func (m *Metrics) refused(err error) {
	reason := reasonOf(err)
	if reason == "" {
		reason = "AdmissionError"
	}
	m.refusals.WithLabelValues(reason).Inc()
}
