package daemon

import (
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

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
