// Package policy joins the static CPU policy (pkg/allocator) and the
// topology manager (pkg/hints) into one pure decision engine, used the same
// way by the NRI daemon and by `nri-cpualign simulate`: given the topology,
// the configuration, the current State and one container's request, it
// returns the decision and the next State. No I/O, no clocks, no globals.
package policy

import (
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
)

// Config is the policy part of the daemon's configuration, with the
// kubelet's names and values.
type Config struct {
	CPUManagerPolicy string            // "none" | "static"
	ReservedCPUs     cpuset.CPUSet     // reserved_system_cpus; wins over ReservedCount
	ReservedCount    int               // reserved_cpu_count, used when ReservedCPUs is empty
	CPUOptions       map[string]string // cpu_manager_policy_options
	TopologyPolicy   string            // "none" | "best-effort" | "restricted" | "single-numa-node"
	TopologyScope    string            // "container" | "pod"
	TopologyOptions  map[string]string // topology_manager_policy_options
	MemoryPolicy     string            // memory_manager_policy: "None" | "Static"
	// ReservedMemory is reserved_memory (the kubelet's reservedMemory),
	// read under Static only.
	ReservedMemory []memorymanager.Reservation
	// MachineMemory is the machine's memory per NUMA node
	// (sysfs.ReadMemory), needed under Static only.
	MachineMemory []memorymanager.NodeCapacity
	// PodLevelResourceManagers is pod_level_resource_managers, the
	// kubelet's feature gate PodLevelResourceManagers (KEP-5526, beta and
	// off by default in 1.37): under the pod scope a Guaranteed pod with a
	// whole-CPU pod budget gets its CPUs as one block, its exclusive
	// containers slices of it and its other containers the rest as a
	// pod-private pool (podlevel.go).
	PodLevelResourceManagers bool
	// KubeletVersion is kubelet_version: the kubelet release whose CPU,
	// topology and memory manager rules the engine follows (zero: 1.38).
	KubeletVersion kubever.Version
}

// QoS is a pod's Kubernetes QoS class.
type QoS string

// QoS classes.
const (
	Guaranteed QoS = "guaranteed"
	Burstable  QoS = "burstable"
	BestEffort QoS = "besteffort"
)

// Request describes one container being created.
type Request struct {
	Pod             string // pod UID
	Container       string // container name
	QoS             QoS
	CPURequestMilli int64
	CPULimitMilli   int64
	Type            allocator.ContainerType
	// Hints are other providers' hints by resource name. A nil slice for a
	// resource means "no preference"; an empty non-nil slice means "cannot
	// be placed".
	Hints map[string][]hints.Hint
	// AffinityOverride, when set, skips the merge: allocate as if the
	// topology manager had chosen this hint.
	AffinityOverride *hints.Hint
	// PodCPURequestMilli is the pod's effective CPU request (larger of the
	// largest init container and the sum of the app containers), used by
	// the pod scope; 0 = unknown (the container's own request is used).
	PodCPURequestMilli int64
	// PodCPULimitMilli is the pod's CPU limit (the pod sandbox's CFS
	// quota), 0 = none or unknown; with PodCPURequestMilli it tells a
	// pod-level pod's budget (see PodBudget).
	PodCPULimitMilli int64
	// Memory is the container's memory and hugepage limits in bytes
	// (requests equal limits in a Guaranteed pod), for the memory
	// manager; PodMemory is the pod's (pod scope), empty when unknown.
	Memory, PodMemory memorymanager.Request
	// MemoryReuse names containers of the pod that have exited, whose
	// memory this container may take over as the kubelet lets a pod's
	// containers take over its init containers' (see memoryReuse).
	MemoryReuse []string
}

// Decision is the outcome for one admitted container.
type Decision struct {
	CPUs      cpuset.CPUSet // the container's cpuset.cpus
	Mems      cpuset.CPUSet // the container's cpuset.mems (NUMA node ids): every memory node under memory_manager_policy None
	Exclusive bool          // CPUs are exclusive to it (false: shared pool)
	Affinity  hints.Hint    // merged hint; empty Affinity = any node
	Existing  bool          // the container already had this assignment
	// MemPinned: the memory manager (Static) assigned the container's
	// memory and Mems is its NUMA nodes.
	MemPinned bool
	// PodPool: the container is a shared container of a pod-level pod
	// (pod_level_resource_managers, pod scope) and CPUs is its pod's
	// private pool, not the node's shared pool; it shrinks when the
	// pod's later exclusive containers take their slices (PodPoolCPUs).
	PodPool bool
}
