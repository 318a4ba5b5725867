package policy

import (
	"errors"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// CONTRACT STUB: the signatures below are the API the daemon and simulate
// code against; the bodies are being written.
var errTODO = errors.New("policy: not implemented yet")

// State is the engine's whole mutable state: the static policy's pools and
// assignments, and under the pod scope each pod's merged affinity.
type State struct {
	Alloc       allocator.State
	PodAffinity map[string]hints.Hint
}

// Snapshot is State in a JSON-friendly form (cpusets as Linux list
// strings), the payload the checkpoint stores.
type Snapshot struct {
	Shared      string                       `json:"shared"`
	Reserved    string                       `json:"reserved"`
	Assignments map[string]map[string]string `json:"assignments"`
	ReusablePod string                       `json:"reusable_pod,omitempty"`
	Reusable    string                       `json:"reusable,omitempty"`
	PodAffinity map[string]SnapshotHint      `json:"pod_affinity,omitempty"`
}

// SnapshotHint is a hints.Hint in JSON form; Numa nil = any node.
type SnapshotHint struct {
	NUMA      []int `json:"numa"`
	Preferred bool  `json:"preferred"`
}

// Engine is the configured, validated decision engine. It is immutable and
// safe for concurrent use; all state travels in State values.
type Engine struct {
	topo *topology.Topology
	cfg  Config
}

// New validates cfg against topo (unknown or incompatible options, reserved
// CPUs not online, no reservation under static, too many NUMA nodes, ...)
// and returns the engine. Errors are *ConfigError.
func New(topo *topology.Topology, cfg Config) (*Engine, error) { return nil, errTODO }

// ConfigError is an invalid configuration; Key names the offending setting.
type ConfigError struct {
	Key string
	Err error
}

func (e *ConfigError) Error() string { return "InvalidConfig: " + e.Key + ": " + e.Err.Error() }
func (e *ConfigError) Unwrap() error { return e.Err }

// Reason is "InvalidConfig".
func (e *ConfigError) Reason() string { return "InvalidConfig" }

// NewState is the state of an empty machine.
func (e *Engine) NewState() State { return State{} }

// Add admits one container: merges hints, allocates, and returns the next
// state and the decision. Rejections are errors with a Reason() word
// (SMTAlignmentError, TopologyAffinityError, InsufficientCPUs, ...). Adding
// a container that already has an assignment returns that assignment.
func (e *Engine) Add(st State, req Request) (State, Decision, error) {
	return st, Decision{}, errTODO
}

// Hints returns what the CPU hint provider offers for req, without
// allocating; a nil slice means no preference.
func (e *Engine) Hints(st State, req Request) map[string][]hints.Hint { return nil }

// Remove releases a container's exclusive CPUs; idempotent. CPUs still used
// by another container of the same pod stay out of the shared pool.
func (e *Engine) Remove(st State, pod, container string) State { return st }

// RemovePod releases every container of a pod and forgets its affinity.
func (e *Engine) RemovePod(st State, pod string) State { return st }

// Assign restores an exclusive assignment (from a checkpoint or imported
// kubelet state); an offline, reserved or already held CPU is an
// InvalidState error.
func (e *Engine) Assign(st State, pod, container string, cpus cpuset.CPUSet) (State, error) {
	return st, errTODO
}

// Assignment returns a container's exclusive CPUs, if it has any.
func (e *Engine) Assignment(st State, pod, container string) (cpuset.CPUSet, bool) {
	return cpuset.New(), false
}

// SharedCPUs is the cpuset every shared-pool container runs on.
func (e *Engine) SharedCPUs(st State) cpuset.CPUSet { return cpuset.New() }

// Reserved is the resolved reserved CPU set.
func (e *Engine) Reserved() cpuset.CPUSet { return cpuset.New() }

// Validate checks the pool invariants of st and returns every violation.
func (e *Engine) Validate(st State) error { return errTODO }

// Snapshot converts st for the checkpoint.
func (e *Engine) Snapshot(st State) Snapshot { return Snapshot{} }

// FromSnapshot rebuilds a State from a checkpoint payload written perhaps
// under another reserved set or options: entries that no longer fit (CPU
// offline, now reserved, overlapping) are dropped and described in the
// returned notes rather than trusted blindly.
func (e *Engine) FromSnapshot(s Snapshot) (State, []string, error) { return State{}, nil, errTODO }
