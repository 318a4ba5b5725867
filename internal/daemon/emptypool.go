package daemon

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// The shared pool may become empty, as in the kubelet: under
// strict-cpu-reservation (the reserved CPUs are not in it) or with no
// reserved CPUs, exclusive containers may take its last CPU. The runtime
// must never get an empty cpuset and exclusive CPUs stay exclusive, so
// while the pool is empty its containers run on the reserved CPUs
// (policy.Engine.SharedCPUs), and move back when CPUs return (the usual
// shared-pool updates: the cpuset they run on changed). With no reserved
// CPUs there is nowhere for them: new shared-pool containers are refused
// by the engine, and an exclusive container whose CPUs would empty the
// pool while shared-pool containers run is refused here.

// poolState reports the shared pool's emptiness: a warning when it
// empties, an info line when it has CPUs again, and the gauge
// nri_cpualign_shared_pool_empty (1 while empty).
type poolState struct {
	gauge prometheus.Gauge
	empty bool // as last reported
}

func (p *poolState) register(reg *prometheus.Registry) {
	p.gauge = prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_shared_pool_empty",
		Help: "1 while the shared pool is empty (exclusive containers hold every non-reserved CPU) and shared-pool containers run on the reserved CPUs, else 0."})
	reg.MustRegister(p.gauge)
}

// notePool reports a change of the pool's emptiness; the caller holds d.mu
// (updateGauges runs it after every committed change).
func (d *Daemon) notePool() {
	if d.engine == nil || d.pool.gauge == nil {
		return
	}
	empty := d.engine.SharedPoolEmpty(d.st)
	if empty == d.pool.empty {
		return
	}
	d.pool.empty = empty
	shared := 0
	for _, r := range d.ctrs {
		if !r.Exclusive {
			shared++
		}
	}
	entry := d.log.WithFields(logrus.Fields{"shared_containers": shared, "reserved": d.engine.Reserved().String()})
	switch {
	case !empty:
		d.pool.gauge.Set(0)
		entry.WithField("cpus", d.engine.SharedCPUs(d.st).String()).
			Info("shared pool has CPUs again: shared-pool containers run on it")
	case d.engine.SharedCPUs(d.st).IsEmpty():
		d.pool.gauge.Set(1)
		entry.WithField("reason", allocator.ReasonInsufficientCPUs).
			Warn("shared pool is empty and no CPUs are reserved: shared-pool containers are refused until exclusive CPUs are released")
	default:
		d.pool.gauge.Set(1)
		entry.WithField("cpus", d.engine.SharedCPUs(d.st).String()).
			Warn("shared pool is empty: shared-pool containers run on the reserved CPUs until exclusive CPUs are released")
	}
}

// strandedError refuses an exclusive container whose CPUs would leave the
// running shared-pool containers no CPU (pool empty, nothing reserved).
type strandedError struct {
	Pod, Container string
	CPUs           int
	Shared         int
}

func (e *strandedError) Error() string {
	return fmt.Sprintf("%s: pod %q container %q: its %d exclusive CPUs would take the shared pool's last CPU and no CPUs are reserved: "+
		"the %d running shared-pool containers would have no CPU", e.Reason(), e.Pod, e.Container, e.CPUs, e.Shared)
}

// Reason is "InsufficientCPUs", the kubelet's word for a node out of CPUs.
func (e *strandedError) Reason() string { return allocator.ReasonInsufficientCPUs }

// strands refuses dec, an admission computed as next, when it is exclusive
// and leaves shared-pool containers nowhere to run while sharedOthers of
// them run.
func (d *Daemon) strands(req policy.Request, next policy.State, dec policy.Decision, sharedOthers int) error {
	return stranding(d.engine, req, next, dec, sharedOthers)
}

// sharedRecords counts the shared-pool containers of recs but skip.
func sharedRecords(recs map[string]ctrRecord, skip string) int {
	n := 0
	for id, r := range recs {
		if id != skip && !r.Exclusive {
			n++
		}
	}
	return n
}

// zeroReservation reports whether cfg asks for the static policy with no
// reserved CPUs, and whether it says so explicitly (reserved_cpu_count = 0
// written in a file): the kubelet's policy accepts that, its CPU manager
// does not, and an omitted reservation is more likely a mistake.
func zeroReservation(cfg config.Config) (zero, explicit bool) {
	zero = cfg.CPUManagerPolicy == policy.CPUPolicyStatic && !cfg.HasReservation()
	return zero, zero && cfg.Line(config.KeyReservedCPUCount) > 0
}

// warnZeroReservation is the start-up warning of a static policy with no
// reserved CPUs.
func (d *Daemon) warnZeroReservation() {
	if d.engine == nil || d.cfg.CPUManagerPolicy != policy.CPUPolicyStatic || d.engine.Reserved().Size() > 0 {
		return
	}
	d.log.WithFields(logrus.Fields{"key": config.KeyReservedCPUCount, "reserved": ""}).
		Warn("static policy with no reserved CPUs (reserved_cpu_count = 0): exclusive containers may take every CPU; " +
			"the shared pool then has no CPU, new shared-pool containers are refused and an exclusive container that " +
			"would leave running shared-pool containers no CPU is refused (the kubelet refuses this configuration)")
}
