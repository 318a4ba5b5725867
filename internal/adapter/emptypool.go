package daemon

import (
	"fmt"

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
func warnZeroReservation(engine *policy.Engine, cfg config.Config, log *logrus.Logger) {
	if engine == nil || cfg.CPUManagerPolicy != policy.CPUPolicyStatic || engine.Reserved().Size() > 0 {
		return
	}
	log.WithFields(logrus.Fields{"key": config.KeyReservedCPUCount, "reserved": ""}).
		Warn("static policy with no reserved CPUs (reserved_cpu_count = 0): exclusive containers may take every CPU; " +
			"the shared pool then has no CPU, new shared-pool containers are refused and an exclusive container that " +
			"would leave running shared-pool containers no CPU is refused (the kubelet refuses this configuration)")
}
