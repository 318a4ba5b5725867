package adapter

import (
	"fmt"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
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
