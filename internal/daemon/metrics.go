package daemon

import (
	"encoding/json"
	"net"
	"net/http"
	"reflect"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Alignment boundaries, the kubelet's label values.
const (
	boundaryPhysicalCPU  = "physical_cpu"
	boundaryNUMANode     = "numa_node"
	boundaryUncoreCache  = "uncore_cache"
	reasonSMT            = "SMTAlignmentError"
	reasonTopologyAffine = "TopologyAffinityError"
)

// metrics are the daemon's Prometheus metrics, on a registry of its own so
// that several daemons can live in one test process. Handlers count into
// them; the ledger's commit sets the gauges.
type metrics struct {
	reg *prometheus.Registry

	pinningRequests   prometheus.Counter
	pinningErrors     prometheus.Counter
	aligned           *prometheus.CounterVec
	alignedFailures   *prometheus.CounterVec
	admissionRequests prometheus.Counter
	admissionErrors   prometheus.Counter
	admissionDuration prometheus.Histogram

	sharedCPUs       prometheus.Gauge
	exclusiveCPUs    prometheus.Gauge
	reservedCPUs     prometheus.Gauge
	containers       prometheus.Gauge
	drift            prometheus.Counter
	updateRepairs    prometheus.Counter
	deferred         prometheus.Counter
	checkpointErrors prometheus.Counter
	abandoned        prometheus.Counter
	poolEmpty        prometheus.Gauge
	eventDuration    *prometheus.HistogramVec
	refusals         *prometheus.CounterVec
	reconnects       prometheus.Counter
	buildInfo        *prometheus.GaugeVec
	resizes          *prometheus.CounterVec
	resizedCPUs      prometheus.Gauge

	// exclusiveCount's last assignments map and count, and its bitmap; under
	// the ledger's lock (Gauges).
	exclOf      map[string]map[string]cpuset.CPUSet
	excl        int
	exclCounted bool
	exclBits    []uint64
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
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
		sharedCPUs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_shared_cpus",
			Help: "CPUs in the shared pool."}),
		exclusiveCPUs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_exclusive_cpus",
			Help: "CPUs assigned exclusively to containers."}),
		reservedCPUs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_reserved_cpus",
			Help: "CPUs reserved for the system."}),
		containers: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_containers",
			Help: "Containers the plugin tracks."}),
		drift: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_reconcile_drift_total",
			Help: "Containers whose cgroup cpuset was found different from their assignment and restored."}),
		updateRepairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_update_repairs_total",
			Help: "Containers whose cgroup cpuset was found different from their assignment right after a runtime update of their resources (PostUpdateContainer) and restored."}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_updates_deferred_total",
			Help: "Pushes of the shared pool and repairs of exclusive containers the plugin deferred to the next CreateContainer, StopContainer or UpdateContainer answer, because the runtime can deadlock on an unsolicited update (containerd before 2.4, CRI-O; docs/runtimes.md)."}),
		checkpointErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_checkpoint_errors_total",
			Help: "Checkpoint writes that failed and corrupt checkpoints set aside."}),
		abandoned: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_abandoned_containers_total",
			Help: "Containers placed at CreateContainer that never started and whose pod created them again (the new attempt takes their place and their CPUs)."}),
		poolEmpty: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_shared_pool_empty",
			Help: "1 while the shared pool is empty (exclusive containers hold every non-reserved CPU) and shared-pool containers run on the reserved CPUs, else 0."}),
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
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nri_cpualign_build_info",
			Help: "Always 1; the labels say which build of the plugin runs."}, []string{"version", "revision", "go"}),
	}
	m.resizes = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "nri_cpualign_resizes_total",
		Help: "In-place resizes of exclusive CPUs done, by kind (upsize, downsize); refusals count in nri_cpualign_admission_errors_total."},
		[]string{"kind"})
	m.resizedCPUs = prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_resized_cpus",
		Help: "Exclusive CPUs containers have beyond their baselines (the CPUs they were admitted with): nri_cpualign_exclusive_cpus minus this is what admissions gave."})
	m.reg.MustRegister(m.resizes, m.resizedCPUs)
	m.buildInfo.WithLabelValues(buildinfo.MetricLabels()).Set(1)
	m.reg.MustRegister(m.pinningRequests, m.pinningErrors, m.aligned, m.alignedFailures, m.admissionRequests,
		m.admissionErrors, m.admissionDuration, m.sharedCPUs, m.exclusiveCPUs, m.reservedCPUs, m.containers,
		m.drift, m.updateRepairs, m.deferred, m.checkpointErrors, m.abandoned, m.eventDuration, m.poolEmpty, m.refusals, m.reconnects, m.buildInfo)
	return m
}

// registerConnected adds nri_cpualign_connected, read from connected at
// every scrape (the NRI stub's close callback and Synchronize set it).
func (m *metrics) registerConnected(connected *atomic.Bool) {
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "nri_cpualign_connected",
		Help: "1 while the plugin is connected to the runtime and synchronized, else 0."},
		func() float64 {
			if connected.Load() {
				return 1
			}
			return 0
		}))
}

// refused counts one refusal by its reason word.
func (m *metrics) refused(err error) {
	reason := reasonOf(err)
	if reason == "" {
		reason = "AdmissionError"
	}
	m.refusals.WithLabelValues(reason).Inc()
}

// timeEvent observes, when the returned function is called (deferred at a
// handler's start), the time since the handler began.
func (m *metrics) timeEvent(event string) func() {
	t0 := time.Now()
	return func() { m.eventDuration.WithLabelValues(event).Observe(time.Since(t0).Seconds()) }
}

// scopeLabel is the label value for the topology manager scope.
func scopeLabel(scope string) string {
	if scope == "pod" {
		return "pod"
	}
	return "container"
}

// observeAdmission counts one admission under the static policy (static)
// and the topology manager scope. dur 0 (admissions during Synchronize)
// is not put in the histogram.
func (m *metrics) observeAdmission(req policy.Request, err error, dur time.Duration, static bool, scope string) {
	m.admissionRequests.Inc()
	if dur > 0 {
		m.admissionDuration.Observe(dur.Seconds())
	}
	pinning := policy.ExclusiveCPUs(static, req) > 0
	if pinning {
		m.pinningRequests.Inc()
	}
	if err == nil {
		return
	}
	m.admissionErrors.Inc()
	m.refused(err)
	switch reasonOf(err) {
	case reasonSMT:
		m.alignedFailures.WithLabelValues(scopeLabel(scope), boundaryPhysicalCPU).Inc()
	case reasonTopologyAffine:
		m.alignedFailures.WithLabelValues(scopeLabel(scope), boundaryNUMANode).Inc()
	case allocator.ReasonUncoreCacheAlignment:
		m.alignedFailures.WithLabelValues(scopeLabel(scope), boundaryUncoreCache).Inc()
	}
	if pinning {
		m.pinningErrors.Inc()
	}
}

// observeDecision counts the boundaries an exclusive allocation is
// aligned on.
func (m *metrics) observeDecision(dec policy.Decision, topo *topology.Topology, engine *policy.Engine, scope string) {
	if !dec.Exclusive || dec.CPUs.IsEmpty() {
		return
	}
	if topo.CPUsInCores(topo.CoresOf(dec.CPUs)...).Equals(dec.CPUs) {
		m.aligned.WithLabelValues(scopeLabel(scope), boundaryPhysicalCPU).Inc()
	}
	if len(topo.NUMANodesOf(dec.CPUs)) == 1 {
		m.aligned.WithLabelValues(scopeLabel(scope), boundaryNUMANode).Inc()
	}
	// Under strict-align-cpus-by-uncorecache every admitted exclusive
	// container is aligned by its rules (a larger one on whole caches).
	if len(topo.L3GroupsOf(dec.CPUs)) == 1 || (!dec.Existing && engine.StrictUncore() != allocator.UncoreStrictOff) {
		m.aligned.WithLabelValues(scopeLabel(scope), boundaryUncoreCache).Inc()
	}
}

// Gauges sets the pool gauges from a committed state with n
// containers, from the ledger's Commit.
func (m *metrics) Gauges(e *policy.Engine, st policy.State, n int) {
	m.sharedCPUs.Set(float64(e.SharedPool(st).Size()))
	m.exclusiveCPUs.Set(float64(m.exclusiveCount(st.Alloc.Assignments)))
	m.resizedCPUs.Set(float64(resizedCPUs(st)))
	m.reservedCPUs.Set(float64(e.Reserved().Size()))
	m.containers.Set(float64(n))
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

// PoolEmpty sets nri_cpualign_shared_pool_empty.
func (m *metrics) PoolEmpty(empty bool) {
	if empty {
		m.poolEmpty.Set(1)
	} else {
		m.poolEmpty.Set(0)
	}
}

// sameMap reports whether a and b are the same map (not merely equal).
func sameMap[M ~map[K]V, K comparable, V any](a, b M) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// exclusiveCount is how many CPUs the assignments hold. The engine never
// changes an assignments map in place, so the same map as last time has
// the same count: events that leave the exclusive CPUs alone (shared-pool
// containers) count nothing. The others count into a bitmap, one bit per
// CPU (not a sum of sizes: an app container reusing its init container's
// CPUs overlaps it).
func (m *metrics) exclusiveCount(assign map[string]map[string]cpuset.CPUSet) int {
	if m.exclCounted && sameMap(assign, m.exclOf) {
		return m.excl
	}
	clear(m.exclBits)
	n := 0
	for _, byName := range assign {
		for _, cpus := range byName {
			for _, cpu := range cpus.UnsortedList() {
				w := cpu / 64
				if w >= len(m.exclBits) {
					m.exclBits = append(m.exclBits, make([]uint64, w+1-len(m.exclBits))...)
				}
				if bit := uint64(1) << (cpu % 64); m.exclBits[w]&bit == 0 {
					m.exclBits[w] |= bit
					n++
				}
			}
		}
	}
	m.exclOf, m.excl, m.exclCounted = assign, n, true
	return n
}

// State returns the current assignments as served on /state.
func (d *Daemon) State() observe.StateView { return observe.State(d.led.View(), d.connected.Load()) }

// Handler serves /metrics, /state and /healthz.
func (d *Daemon) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(d.obs.reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		_ = enc.Encode(d.State())
	})
	// Healthy means connected to the runtime and synchronized; between
	// connections (runtime restarting) it answers 503.
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if !d.led.Synced() || !d.connected.Load() {
			http.Error(w, "not connected to the runtime", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// Registry is the daemon's metrics registry (for tests and embedding).
func (d *Daemon) Registry() *prometheus.Registry { return d.obs.reg }

// listen starts the HTTP server for h on addr and returns it (Addr holds
// the bound address, useful with port 0).
func listen(addr string, h http.Handler) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Addr: l.Addr().String(), Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(l) }()
	return srv, nil
}

// The metrics are the ledger's observer.
var _ ledger.Observer = (*metrics)(nil)

// CheckpointError counts a checkpoint write that failed.
func (m *metrics) CheckpointError() { m.checkpointErrors.Inc() }

// Drifted, RepairedAfterUpdate and Deferred are the applier's counts
// (applier.Counts).
func (m *metrics) Drifted(n int)             { m.drift.Add(float64(n)) }
func (m *metrics) RepairedAfterUpdate(n int) { m.updateRepairs.Add(float64(n)) }
func (m *metrics) Deferred(n int)            { m.deferred.Add(float64(n)) }
