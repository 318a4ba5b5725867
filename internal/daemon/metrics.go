package daemon

import (
	"encoding/json"
	"net"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nri-cpualign/nri-cpualign/internal/adapter"
	"github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
)

// metrics are the daemon's Prometheus metrics, on a registry of its own so
// that several daemons can live in one test process. The ledger's commit
// reports a failed save and the shared pool's emptiness (ledger.Observer),
// the applier counts into them (applier.Counts), and the handlers into
// events (the NRI adapter's own); the gauges of the state are read from
// the ledger's view at scrape time (observe's collectors, daemon.New).
type metrics struct {
	reg    *prometheus.Registry
	events *adapter.Metrics

	drift            prometheus.Counter
	updateRepairs    prometheus.Counter
	deferred         prometheus.Counter
	checkpointErrors prometheus.Counter
	poolEmpty        prometheus.Gauge
	buildInfo        *prometheus.GaugeVec
}

func newMetrics() *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		drift: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_reconcile_drift_total",
			Help: "Containers whose cgroup cpuset was found different from their assignment and restored."}),
		updateRepairs: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_update_repairs_total",
			Help: "Containers whose cgroup cpuset was found different from their assignment right after a runtime update of their resources (PostUpdateContainer) and restored."}),
		deferred: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_updates_deferred_total",
			Help: "Pushes of the shared pool and repairs of exclusive containers the plugin deferred to the next CreateContainer, StopContainer or UpdateContainer answer, because the runtime can deadlock on an unsolicited update (containerd before 2.4, CRI-O; docs/runtimes.md)."}),
		checkpointErrors: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_checkpoint_errors_total",
			Help: "Checkpoint writes that failed and corrupt checkpoints set aside."}),
		poolEmpty: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_shared_pool_empty",
			Help: "1 while the shared pool is empty (exclusive containers hold every non-reserved CPU) and shared-pool containers run on the reserved CPUs, else 0."}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "nri_cpualign_build_info",
			Help: "Always 1; the labels say which build of the plugin runs."}, []string{"version", "revision", "go"}),
	}
	m.buildInfo.WithLabelValues(buildinfo.MetricLabels()).Set(1)
	m.reg.MustRegister(m.drift, m.updateRepairs, m.deferred, m.checkpointErrors, m.poolEmpty, m.buildInfo)
	m.events = adapter.NewMetrics(m.reg)
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

// PoolEmpty sets nri_cpualign_shared_pool_empty.
func (m *metrics) PoolEmpty(empty bool) {
	if empty {
		m.poolEmpty.Set(1)
	} else {
		m.poolEmpty.Set(0)
	}
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
