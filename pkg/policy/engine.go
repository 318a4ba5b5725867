package policy

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// CPU manager policy names.
const (
	CPUPolicyNone   = "none"
	CPUPolicyStatic = "static"
)

// Configuration keys named by *ConfigError, the TOML keys of the daemon's
// configuration.
const (
	KeyCPUManagerPolicy             = "cpu_manager_policy"
	KeyCPUManagerPolicyOptions      = "cpu_manager_policy_options"
	KeyReservedSystemCPUs           = "reserved_system_cpus"
	KeyReservedCPUCount             = "reserved_cpu_count"
	KeyTopologyManagerPolicy        = "topology_manager_policy"
	KeyTopologyManagerScope         = "topology_manager_scope"
	KeyTopologyManagerPolicyOptions = "topology_manager_policy_options"
	KeyMemoryManagerPolicy          = "memory_manager_policy"
	KeyPodLevelResourceManagers     = "pod_level_resource_managers"
	// KeyKubeletVersion selects the kubelet release whose rules the
	// engine follows (kubever.Version).
	KeyKubeletVersion = "kubelet_version"
)

// Values of memory_manager_policy, in the kubelet's spelling
// (memoryManagerPolicy).
const (
	// MemoryPolicyNone, the kubelet's default: the memory manager does
	// nothing and every container's cpuset.mems is every memory node.
	MemoryPolicyNone = "None"
	// MemoryPolicyStatic is the kubelet's per-NUMA-node memory accounting
	// for Guaranteed pods (pkg/memorymanager, see memory.go).
	MemoryPolicyStatic = "Static"
)

// State is the engine's whole mutable state: the static policy's pools and
// assignments, and under the pod scope each pod's merged affinity. Treat it
// as immutable: the engine's methods return a new State and never modify
// the one they are given.
type State struct {
	Alloc       allocator.State
	PodAffinity map[string]hints.Hint
	// Baseline is, for the containers an in-place resize changed, the
	// CPUs they were admitted with (pod -> container -> CPUs): a downsize
	// keeps them (see Resize). A container without an entry has its
	// admitted CPUs, which are its baseline.
	Baseline map[string]map[string]cpuset.CPUSet
	// Memory is the memory manager's state under memory_manager_policy
	// Static; the zero State under None.
	Memory memorymanager.State
	// PodShared names, per pod-level pod (podlevel.go), the shared
	// containers that run on its pod-private pool.
	PodShared map[string][]string
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
	// Baseline holds State.Baseline (absent in checkpoints from before
	// in-place resizes: every baseline is then the container's CPUs).
	Baseline map[string]map[string]string `json:"baseline,omitempty"`
	// Memory is State.Memory as memorymanager.Encode writes it; absent
	// under memory_manager_policy None and in earlier checkpoints.
	Memory json.RawMessage `json:"memory,omitempty"`
	// PodShared holds State.PodShared (absent in checkpoints from before
	// pod_level_resource_managers; the pods' blocks are assignments of
	// the container PodPoolEntry).
	PodShared map[string][]string `json:"pod_shared,omitempty"`
}

// SnapshotHint is a hints.Hint in JSON form; NUMA nil = any node.
type SnapshotHint struct {
	NUMA      []int `json:"numa"`
	Preferred bool  `json:"preferred"`
}

// HintOf converts a hint to its JSON form.
func HintOf(h hints.Hint) SnapshotHint {
	if h.Affinity == 0 {
		return SnapshotHint{Preferred: h.Preferred}
	}
	return SnapshotHint{NUMA: h.Affinity.Nodes(), Preferred: h.Preferred}
}

// Hint converts the JSON form back; node ids outside [0, 64) are dropped.
func (s SnapshotHint) Hint() hints.Hint {
	return hints.Hint{Affinity: hints.NewMask(s.NUMA...), Preferred: s.Preferred}
}

// Engine is the configured, validated decision engine. It is immutable and
// safe for concurrent use; all state travels in State values.
type Engine struct {
	topo     *topology.Topology
	cfg      Config
	static   *allocator.Static // nil under cpu_manager_policy none
	numa     hints.NUMAInfo
	merger   *hints.Merger
	reserved cpuset.CPUSet
	memNodes []int // NUMA nodes with memory, ascending
	online   cpumask.Mask
	// reservedMask is where shared-pool containers run while the shared
	// pool is empty (see SharedMask).
	reservedMask cpumask.Mask
	// memStatic is memory_manager_policy Static; memFresh is then the
	// memory manager's state with no assignment.
	memStatic bool
	memFresh  memorymanager.State
}

// New validates cfg against topo (unknown or incompatible options, reserved
// CPUs not online, too many NUMA nodes, ...) and returns the engine. Errors
// are *ConfigError naming the offending key. Empty policy, scope fields
// mean the kubelet's defaults: none, none, container. An empty reservation
// is accepted, as by the kubelet's static policy (the daemon asks for it
// to be explicit).
func New(topo *topology.Topology, cfg Config) (*Engine, error) {
	if topo == nil {
		return nil, &ConfigError{Key: "sysfs_root", Err: errors.New("no topology")}
	}
	if cfg.CPUManagerPolicy == "" {
		cfg.CPUManagerPolicy = CPUPolicyNone
	}
	if cfg.TopologyPolicy == "" {
		cfg.TopologyPolicy = hints.PolicyNone
	}
	if cfg.TopologyScope == "" {
		cfg.TopologyScope = hints.ScopeContainer
	}
	if cfg.MemoryPolicy == "" {
		cfg.MemoryPolicy = MemoryPolicyNone
	}
	if !cfg.KubeletVersion.Valid() {
		return nil, &ConfigError{Key: KeyKubeletVersion, Err: fmt.Errorf("unknown kubelet version %s (want one of %s)", cfg.KubeletVersion, kubever.Accepted)}
	}
	cfg.CPUOptions = copyOptions(cfg.CPUOptions)
	cfg.TopologyOptions = copyOptions(cfg.TopologyOptions)
	// Topology bounds CPU ids by MaxCPUID (= cpumask.MaxID): no error.
	online, _ := cpumask.FromCPUSet(topo.CPUs())
	e := &Engine{topo: topo, cfg: cfg, memNodes: topo.MemoryNodes(), online: online}

	switch cfg.MemoryPolicy {
	case MemoryPolicyNone:
	case MemoryPolicyStatic:
		if err := e.newMemory(cfg); err != nil {
			return nil, err
		}
	default:
		return nil, &ConfigError{Key: KeyMemoryManagerPolicy, Err: fmt.Errorf("unknown policy %q (want %s or %s)", cfg.MemoryPolicy, MemoryPolicyNone, MemoryPolicyStatic)}
	}
	if cfg.CPUManagerPolicy != CPUPolicyNone && cfg.CPUManagerPolicy != CPUPolicyStatic {
		return nil, &ConfigError{Key: KeyCPUManagerPolicy, Err: fmt.Errorf("unknown policy %q (want %s or %s)", cfg.CPUManagerPolicy, CPUPolicyNone, CPUPolicyStatic)}
	}
	if err := hints.ValidatePolicy(cfg.TopologyPolicy); err != nil {
		return nil, &ConfigError{Key: KeyTopologyManagerPolicy, Err: err}
	}
	if err := hints.ValidateScope(cfg.TopologyScope); err != nil {
		return nil, &ConfigError{Key: KeyTopologyManagerScope, Err: err}
	}
	topoOpts, err := hints.ParseOptions(cfg.TopologyOptions)
	if err != nil {
		return nil, &ConfigError{Key: KeyTopologyManagerPolicyOptions, Err: err}
	}
	// The kubelet's order, so that a configuration with several faults
	// names the same one: the none policy refuses any option before
	// reading them; the static policy parses them and checks the
	// incompatible pairs, then align-by-socket against the topology
	// manager policy, then against the hardware.
	if cfg.CPUManagerPolicy == CPUPolicyNone && len(cfg.CPUOptions) > 0 {
		return nil, &ConfigError{Key: KeyCPUManagerPolicyOptions, Err: fmt.Errorf("cpu_manager_policy none takes no options (got %s); use static", optionNames(cfg.CPUOptions))}
	}
	cpuOpts, err := allocator.ParseOptions(cfg.CPUOptions)
	if err != nil {
		return nil, &ConfigError{Key: KeyCPUManagerPolicyOptions, Err: err}
	}
	cpuOpts.KubeletVersion = cfg.KubeletVersion
	topoOpts.KubeletVersion = cfg.KubeletVersion
	if err := cpuOpts.Validate(nil); err != nil {
		return nil, &ConfigError{Key: KeyCPUManagerPolicyOptions, Err: err}
	}
	if cpuOpts.AlignBySocket && cfg.TopologyPolicy == hints.PolicySingleNUMANode {
		return nil, &ConfigError{Key: KeyCPUManagerPolicyOptions, Err: fmt.Errorf("option %s is incompatible with topology_manager_policy %s", allocator.OptAlignBySocket, hints.PolicySingleNUMANode)}
	}
	if err := cpuOpts.Validate(topo); err != nil {
		return nil, &ConfigError{Key: KeyCPUManagerPolicyOptions, Err: err}
	}
	if err := validateStrictUncore(cpuOpts, cfg); err != nil {
		return nil, err
	}

	// The NUMA-node limit binds only a policy that merges hints, as in the
	// kubelet, and counts every NUMA node the kubelet sees, memory-only ones
	// included, although hints only name nodes with CPUs.
	if cfg.TopologyPolicy != hints.PolicyNone {
		nodes := len(cpuset.New(topo.NUMANodes()...).Union(cpuset.New(topo.MemoryNodes()...)).List())
		if nodes > topoOpts.MaxAllowableNUMANodes {
			return nil, &ConfigError{Key: KeyTopologyManagerPolicyOptions, Err: &hints.TooManyNUMANodesError{Nodes: nodes, Max: topoOpts.MaxAllowableNUMANodes}}
		}
	}
	limitOpts := topoOpts
	limitOpts.MaxAllowableNUMANodes = hints.MaxNUMANodes
	e.numa, err = hints.NewNUMAInfo(topo.NUMANodes(), topo.Distances(), limitOpts)
	if err != nil {
		return nil, &ConfigError{Key: KeyTopologyManagerPolicyOptions, Err: err}
	}
	e.merger, err = hints.NewMerger(cfg.TopologyPolicy, e.numa, topoOpts)
	if err != nil {
		return nil, &ConfigError{Key: KeyTopologyManagerPolicy, Err: err}
	}

	if off := cfg.ReservedCPUs.Difference(topo.CPUs()); off.Size() > 0 {
		return nil, &ConfigError{Key: KeyReservedSystemCPUs, Err: fmt.Errorf("CPUs %s are not online (online: %s)", off, topo.CPUs())}
	}
	if cfg.ReservedCount < 0 {
		return nil, &ConfigError{Key: KeyReservedCPUCount, Err: fmt.Errorf("negative count %d", cfg.ReservedCount)}
	}
	if cfg.CPUManagerPolicy == CPUPolicyNone {
		e.reserved = cfg.ReservedCPUs
		return e, nil
	}
	switch {
	case cfg.ReservedCPUs.Size() > 0:
		e.reserved = cfg.ReservedCPUs
	case cfg.ReservedCount > 0:
		if cfg.ReservedCount >= topo.NumCPUs() {
			return nil, &ConfigError{Key: KeyReservedCPUCount, Err: fmt.Errorf("reserving %d CPUs leaves none of the %d online CPUs for workloads", cfg.ReservedCount, topo.NumCPUs())}
		}
		e.reserved, err = allocator.ReservedByCount(topo, cpuOpts, cfg.ReservedCount)
		if err != nil {
			return nil, &ConfigError{Key: KeyReservedCPUCount, Err: err}
		}
	default:
		e.reserved = cpuset.New()
	}
	// Reserved CPUs are online (checked above): no error.
	e.reservedMask, _ = cpumask.FromCPUSet(e.reserved)
	e.static, err = allocator.NewStatic(topo, cpuOpts, e.reserved)
	if err != nil {
		key := KeyReservedSystemCPUs
		if cfg.ReservedCPUs.Size() == 0 {
			key = KeyReservedCPUCount
		}
		return nil, &ConfigError{Key: key, Err: err}
	}
	return e, nil
}

func copyOptions(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func optionNames(m map[string]string) string {
	names := slices.Sorted(maps.Keys(m))
	return fmt.Sprint(names)
}

// ConfigError is an invalid configuration; Key names the offending setting.
type ConfigError struct {
	Key string
	Err error
}

// Error starts with the reason word and names the key.
func (e *ConfigError) Error() string { return "InvalidConfig: " + e.Key + ": " + e.Err.Error() }

// Unwrap returns the underlying error.
func (e *ConfigError) Unwrap() error { return e.Err }

// Reason is "InvalidConfig".
func (e *ConfigError) Reason() string { return "InvalidConfig" }

// NoSharedCPUsError refuses a shared-pool container while the shared pool
// is empty and no CPU is reserved: every online CPU is some container's
// exclusive CPU, and the container would get an empty cpuset or overlap
// them (the kubelet runs it unpinned there).
type NoSharedCPUsError struct {
	Pod, Container string
}

// Error starts with the reason word and says why.
func (e *NoSharedCPUsError) Error() string {
	return fmt.Sprintf("%s: pod %q container %q: no CPU for a shared-pool container: the shared pool is empty "+
		"(every CPU is exclusive) and no CPUs are reserved", e.Reason(), e.Pod, e.Container)
}

// Reason is "InsufficientCPUs", the kubelet's word for a node out of CPUs.
func (e *NoSharedCPUsError) Reason() string { return allocator.ReasonInsufficientCPUs }

// RequestError is a request the engine cannot act on as given (a missing
// name, a negative amount, a hint naming a NUMA node the machine does not
// have, ...). Nothing is allocated.
type RequestError struct {
	Pod, Container string
	Field          string // the request field at fault
	Msg            string
}

// Error starts with the reason word and names the container and field.
func (e *RequestError) Error() string {
	return fmt.Sprintf("%s: pod %q container %q: %s: %s", e.Reason(), e.Pod, e.Container, e.Field, e.Msg)
}

// Reason is "InvalidRequest".
func (e *RequestError) Reason() string { return "InvalidRequest" }

// Topology is the machine the engine was built for.
func (e *Engine) Topology() *topology.Topology { return e.topo }

// Config is the engine's configuration, with defaults filled in.
func (e *Engine) Config() Config {
	c := e.cfg
	c.CPUOptions = copyOptions(c.CPUOptions)
	c.TopologyOptions = copyOptions(c.TopologyOptions)
	return c
}

// NUMA is the NUMA information hints are expressed over (the NUMA nodes
// that have CPUs; memory-only nodes are never part of a CPU affinity).
func (e *Engine) NUMA() hints.NUMAInfo { return e.numa }

// DeviceHints turns the NUMA nodes of a container's devices (from
// sysfs.DeviceNUMANode) into a hint provider's hints, ready for
// Request.Hints: every mask covering the nodes, the narrowest preferred;
// nil (no preference) when no node is known.
func (e *Engine) DeviceHints(nodes []int) []hints.Hint { return hints.DeviceHints(e.numa, nodes) }

// NewState is the state of an empty machine.
func (e *Engine) NewState() State {
	st := State{Memory: e.memFresh}
	if e.static == nil {
		st.Alloc = allocator.State{Default: e.online}
		return st
	}
	st.Alloc = e.static.NewState()
	return st
}

// ExclusiveCPUs is the one place the static policy's rule is written
// (the kubelet's guaranteedCPUs): how many exclusive CPUs a container
// gets under cpu_manager_policy static (static = true). A container of a
// Guaranteed pod whose CPU request equals its limit and is a whole number
// of CPUs (>= 1) gets that many; everything else (Burstable and
// BestEffort pods, fractional requests, no CPU request, the none policy)
// runs on the shared pool: 0.
func ExclusiveCPUs(static bool, req Request) int {
	if !static || req.QoS != Guaranteed || req.CPURequestMilli != req.CPULimitMilli ||
		req.CPURequestMilli < 1000 || req.CPURequestMilli%1000 != 0 {
		return 0
	}
	return int(req.CPURequestMilli / 1000)
}

// isExclusive applies ExclusiveCPUs under the engine's policy.
func (e *Engine) isExclusive(req Request) bool { return ExclusiveCPUs(e.static != nil, req) > 0 }

// CheckRequest returns the *RequestError Add would return for req, or nil.
func (e *Engine) CheckRequest(req Request) error { return e.checkRequest(req) }

func (e *Engine) checkRequest(req Request) error {
	bad := func(field, format string, args ...any) error {
		return &RequestError{Pod: req.Pod, Container: req.Container, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if req.Pod == "" {
		return bad("pod", "empty pod id")
	}
	if err := e.checkMemory(req); err != nil {
		return err
	}
	if req.Container == "" {
		return bad("container", "empty container name")
	}
	if req.Container == PodPoolEntry {
		return bad("container", "%q is the name the engine keeps a pod-level pod's CPUs under", PodPoolEntry)
	}
	switch req.QoS {
	case Guaranteed, Burstable, BestEffort:
	default:
		return bad("qos", "%q is not one of %s, %s, %s", req.QoS, Guaranteed, Burstable, BestEffort)
	}
	if req.CPURequestMilli < 0 || req.CPULimitMilli < 0 || req.PodCPURequestMilli < 0 || req.PodCPULimitMilli < 0 {
		return bad("cpu", "negative CPU amount")
	}
	// A pod with pod-level resources is Guaranteed by its pod-level
	// values: its containers may have a request below their limit
	// (pod_level_resource_managers; they run on a shared pool).
	if req.QoS == Guaranteed && req.CPURequestMilli != req.CPULimitMilli && !e.podLevelPod(req) {
		return bad("cpu_limit_milli", "a guaranteed container has its CPU limit equal to its request (request %d, limit %d)", req.CPURequestMilli, req.CPULimitMilli)
	}
	switch req.Type {
	case allocator.App, allocator.Init, allocator.Sidecar:
	default:
		return bad("container_type", "unknown container type %d", req.Type)
	}
	all := e.numa.DefaultAffinity()
	names := slices.Sorted(maps.Keys(req.Hints))
	for _, name := range names {
		for _, h := range req.Hints[name] {
			if h.Affinity&^all != 0 {
				return bad("hints."+name, "hint names NUMA nodes %s; the machine's NUMA nodes with CPUs are %s", h.Affinity, all)
			}
		}
	}
	if o := req.AffinityOverride; o != nil && o.Affinity&^all != 0 {
		return bad("affinity_override", "names NUMA nodes %s; the machine's NUMA nodes with CPUs are %s", o.Affinity, all)
	}
	return nil
}

// podCPUs is the pod-scope CPU request: the pod's effective request
// (rounded down to whole CPUs), or the container's own when unknown.
func (e *Engine) podCPUs(req Request) int {
	if req.QoS != Guaranteed {
		return 0
	}
	if req.PodCPURequestMilli > 0 {
		return int(req.PodCPURequestMilli / 1000)
	}
	if e.isExclusive(req) {
		return int(req.CPURequestMilli / 1000)
	}
	return 0
}

// cpuHints is the CPU hint provider: nil (no preference) for a shared-pool
// container, else the allocator's hints for the container (container
// scope) or for the pod's effective request (pod scope).
func (e *Engine) cpuHints(st State, req Request) []hints.Hint {
	if e.static == nil {
		return nil
	}
	if e.cfg.TopologyScope == hints.ScopePod {
		n := e.podCPUs(req)
		if n < 1 {
			return nil
		}
		return e.static.PodCPUHints(st.Alloc, req.Pod, n)
	}
	if !e.isExclusive(req) {
		return nil
	}
	return e.static.CPUHints(st.Alloc, allocRequest(req))
}

func allocRequest(req Request) allocator.Request {
	return allocator.Request{Pod: req.Pod, Container: req.Container, Type: req.Type, CPUs: int(req.CPURequestMilli / 1000)}
}

// Hints returns what the CPU hint provider offers for req, without
// allocating: {"cpu": hints}, the list nil when there is no preference
// (shared-pool container, or cpu_manager_policy none), and under
// memory_manager_policy Static the memory manager's per resource. Under
// the pod scope these are the pod-level hints for the pod's effective
// request.
func (e *Engine) Hints(st State, req Request) map[string][]hints.Hint {
	out := map[string][]hints.Hint{"cpu": e.cpuHints(st, req)}
	// Under memory_manager_policy Static the memory manager's hints too,
	// by resource (memory, hugepages-<size>); a request they refuse is
	// CheckRequest's error.
	if mem, err := e.memHints(st, req); err == nil {
		for name, list := range mem {
			out[name] = list
		}
	}
	return out
}

// describe is the request as the TopologyAffinityError text shows it.
func (e *Engine) describe(req Request) string {
	what := "shared CPUs"
	if e.isExclusive(req) {
		what = fmt.Sprintf("%d exclusive CPUs", req.CPURequestMilli/1000)
	}
	if e.cfg.TopologyScope == hints.ScopePod {
		what += fmt.Sprintf(" (pod scope, pod effective request %d CPUs)", e.podCPUs(req))
	}
	return fmt.Sprintf("pod %s container %s: %s", req.Pod, req.Container, what)
}

// affinity decides the topology manager's hint for req: the override, the
// pod's stored affinity (pod scope), or the merge of the CPU hints with
// req.Hints followed by admission. store reports a new pod affinity to
// keep.
func (e *Engine) affinity(st State, req Request) (h hints.Hint, store bool, err error) {
	if req.AffinityOverride != nil {
		return *req.AffinityOverride, false, nil
	}
	if e.cfg.TopologyScope == hints.ScopePod {
		if h, ok := st.PodAffinity[req.Pod]; ok {
			// The kubelet merges every container's hints (its devices)
			// into the pod's; NRI shows a later container only now, so its
			// hints are merged with the pod's affinity and must pass the
			// same admission, else the pod could not have been admitted.
			if len(req.Hints) > 0 {
				if m := e.merger.Merge(map[string][]hints.Hint{"pod": {h}}, req.Hints); !e.merger.Admits(m) {
					return m, false, e.merger.Admit(m, e.describe(req))
				}
			}
			return h, false, nil
		}
	}
	mem, err := e.memHints(st, req)
	if err != nil {
		return hints.Hint{}, false, err
	}
	var best hints.Hint
	if cpu := e.cpuHints(st, req); len(req.Hints) == 0 && mem == nil {
		best = e.merger.MergeLists(cpu) // no map for the usual lone provider
	} else {
		best = e.merger.Merge(map[string][]hints.Hint{"cpu": cpu}, req.Hints, mem)
	}
	if !e.merger.Admits(best) {
		// describe formats text: only a rejection pays for it.
		return best, false, e.merger.Admit(best, e.describe(req))
	}
	return best, e.cfg.TopologyScope == hints.ScopePod && e.cfg.TopologyPolicy != hints.PolicyNone, nil
}

// Add admits one container: merges hints, allocates, and returns the next
// state and the decision. Rejections are errors with a Reason() word
// (SMTAlignmentError, TopologyAffinityError, InsufficientCPUs, ...); on
// error the returned State is st unchanged. Adding a container that
// already has an assignment returns that assignment (Existing), without
// admission.
//
// Steps:
//  1. check the request;
//  2. an existing exclusive assignment is returned as is (the allocator
//     still applies the full-pcpus-only checks first, as the kubelet does);
//  3. the topology manager's hint (see affinity) and admission: the only
//     topology check, on the merged hint alone (restricted and
//     single-numa-node admit a preferred hint), as the kubelet's scopes do
//     (under strict-align-cpus-by-uncorecache, this project's own option,
//     a container no uncore cache can take is refused before it);
//  4. exclusive containers get CPUs from the allocator: as many as fit
//     from the hint's NUMA nodes (under align-by-socket from their whole
//     sockets) and the rest from all other assignable CPUs, as the
//     kubelet's allocateCPUs does. The CPUs may therefore lie partly
//     outside the hint under any policy, e.g. on the socket's other NUMA
//     node under align-by-socket, or when a pod-scope affinity no longer
//     holds the pod's next container because another pod took CPUs in
//     between (the kubelet allocates a whole pod at admission and cannot
//     meet that case);
//  5. cpuset.mems: under memory_manager_policy None every memory node,
//     for exclusive and shared-pool containers alike, as the kubelet
//     leaves memory with its memory manager at None: narrowing mems to
//     the CPUs' NUMA nodes without counting memory could OOM-kill a
//     container while other nodes have free memory. Under Static the
//     memory manager's Allocate on the merged hint (its memory hints
//     took part in the merge) gives a Guaranteed container's mems, and
//     its refusal refuses the container (memory.go). A shared-pool
//     container gets SharedCPUs; when that is empty
//     (no CPU reserved and every CPU exclusive) it is refused with
//     *NoSharedCPUsError instead of an empty cpuset.
func (e *Engine) Add(st State, req Request) (State, Decision, error) {
	// Step 1.
	if err := e.checkRequest(req); err != nil {
		return st, Decision{}, err
	}
	if budget := e.PodBudget(req); budget > 0 {
		return e.addPodLevel(st, req, budget)
	}
	exclusive := e.isExclusive(req)
	// Step 2.
	if exclusive {
		if cpus, ok := e.Assignment(st, req.Pod, req.Container); ok {
			h, _, _ := e.affinity(st, req)
			// The allocator's State is kept: it updates the pod's
			// init-container reuse set even for an existing assignment.
			alloc, got, err := e.static.Allocate(st.Alloc, allocRequest(req), h)
			if err != nil {
				return st, Decision{}, err
			}
			if !got.Equals(cpus) {
				return st, Decision{}, &allocator.InvalidStateError{Pod: req.Pod, Container: req.Container,
					Msg: fmt.Sprintf("allocator returned %s for a container that holds %s", got, cpus)}
			}
			next := st
			next.Alloc = alloc
			next, mems, pinned, err := e.allocMemory(next, req, h)
			if err != nil {
				return st, Decision{}, err
			}
			return next, Decision{CPUs: cpus, Mems: mems, Exclusive: true, Affinity: h, Existing: true, MemPinned: pinned}, nil
		}
	}
	// Step 3, after the strict uncore option's own check (see
	// checkStrictUncore).
	if err := e.checkStrictUncore(st, req, exclusive); err != nil {
		return st, Decision{}, err
	}
	h, store, err := e.affinity(st, req)
	if err != nil {
		return st, Decision{}, err
	}
	next := st
	if store {
		next.PodAffinity = copyAffinities(st.PodAffinity)
		next.PodAffinity[req.Pod] = podAffinity(h)
	}
	if !exclusive {
		// Step 5, shared pool.
		cpus := e.SharedCPUs(next)
		if cpus.IsEmpty() {
			return st, Decision{}, &NoSharedCPUsError{Pod: req.Pod, Container: req.Container}
		}
		next, mems, pinned, err := e.allocMemory(next, req, h)
		if err != nil {
			return st, Decision{}, err
		}
		return next, Decision{CPUs: cpus, Mems: mems, Affinity: h, MemPinned: pinned}, nil
	}
	// Step 4. Admission was step 3's alone, as in the kubelet: CPUs that
	// leave the hint (align-by-socket's other NUMA nodes of the socket, or
	// the rest taken elsewhere) do not reject the container.
	alloc, cpus, err := e.static.Allocate(next.Alloc, allocRequest(req), h)
	if err != nil {
		return st, Decision{}, err
	}
	next.Alloc = alloc
	// Step 5, exclusive.
	next, mems, pinned, err := e.allocMemory(next, req, h)
	if err != nil {
		return st, Decision{}, err
	}
	return next, Decision{CPUs: cpus, Mems: mems, Exclusive: true, Affinity: h, MemPinned: pinned}, nil
}

func copyAffinities(m map[string]hints.Hint) map[string]hints.Hint {
	out := make(map[string]hints.Hint, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Mems is the cpuset.mems the engine gives every container under
// memory_manager_policy None: every memory node.
func (e *Engine) Mems() cpuset.CPUSet { return e.allMems() }

// allMems is every NUMA node with memory (every NUMA node when the
// machine reports no memory at all).
func (e *Engine) allMems() cpuset.CPUSet {
	if len(e.memNodes) == 0 {
		return cpuset.New(e.numa.Nodes()...)
	}
	return cpuset.New(e.memNodes...)
}

// Remove releases a container's exclusive CPUs; idempotent. CPUs still used
// by another container of the same pod stay out of the shared pool.
func (e *Engine) Remove(st State, pod, container string) State {
	if e.memStatic {
		st.Memory = memorymanager.Remove(st.Memory, pod, container)
	}
	if e.static == nil {
		return st
	}
	st.Alloc = e.static.Release(st.Alloc, pod, container)
	st.Baseline = withBaseline(st.Baseline, pod, container, cpuset.New())
	// A pod-level pod keeps its block until the pod ends (RemovePod): a
	// released slice goes back to the pod's private pool.
	st.PodShared = withPodShared(st.PodShared, pod, container, false)
	return st
}

// RemovePod releases every container of a pod and forgets its affinity.
func (e *Engine) RemovePod(st State, pod string) State {
	if e.memStatic {
		st.Memory = memorymanager.RemovePod(st.Memory, pod)
	}
	if e.static != nil {
		names := slices.Sorted(maps.Keys(st.Alloc.Assignments[pod]))
		for _, c := range names {
			st.Alloc = e.static.Release(st.Alloc, pod, c)
		}
	}
	if _, ok := st.PodAffinity[pod]; ok {
		pa := copyAffinities(st.PodAffinity)
		delete(pa, pod)
		st.PodAffinity = pa
	}
	if _, ok := st.Baseline[pod]; ok {
		b := maps.Clone(st.Baseline)
		delete(b, pod)
		st.Baseline = b
	}
	if _, ok := st.PodShared[pod]; ok {
		ps := maps.Clone(st.PodShared)
		delete(ps, pod)
		if len(ps) == 0 {
			ps = nil
		}
		st.PodShared = ps
	}
	return st
}

// Assign restores an exclusive assignment (from a checkpoint or imported
// kubelet state); an offline, reserved or already held CPU is an
// InvalidState error.
func (e *Engine) Assign(st State, pod, container string, cpus cpuset.CPUSet) (State, error) {
	if e.static == nil {
		return st, &allocator.InvalidStateError{Pod: pod, Container: container, Msg: "cpu_manager_policy none has no exclusive CPUs"}
	}
	alloc, err := e.static.Assign(st.Alloc, pod, container, cpus)
	if err != nil {
		return st, err
	}
	st.Alloc = alloc
	if b, ok := st.Baseline[pod][container]; ok && (!b.IsSubsetOf(cpus) || b.Equals(cpus)) {
		st.Baseline = withBaseline(st.Baseline, pod, container, cpuset.New())
	}
	return st, nil
}

// Assignment returns a container's exclusive CPUs, if it has any.
func (e *Engine) Assignment(st State, pod, container string) (cpuset.CPUSet, bool) {
	cpus, ok := st.Alloc.Assignments[pod][container]
	return cpus, ok
}

// SharedCPUs is the cpuset every shared-pool container runs on (see
// SharedMask).
func (e *Engine) SharedCPUs(st State) cpuset.CPUSet {
	if e.static == nil {
		return e.topo.CPUs()
	}
	return e.SharedMask(st).CPUSet()
}

// SharedMask is the cpuset every shared-pool container runs on, as a
// bitmap (comparing and printing it costs no map; the daemon does both on
// every event): the shared pool, or, while the pool is empty, the
// reserved CPUs, which no container holds exclusively. The kubelet leaves
// its shared containers where they were then, on CPUs now exclusive. It
// is empty only when the pool is empty and no CPU is reserved: a
// shared-pool container then has no CPU that is not exclusive.
func (e *Engine) SharedMask(st State) cpumask.Mask {
	if e.static == nil {
		return e.online
	}
	if st.Alloc.Default.IsEmpty() {
		return e.reservedMask
	}
	return st.Alloc.Default
}

// SharedPool is the shared pool itself, the kubelet's default CPU set: it
// is empty once exclusive CPUs took its last CPU, which happens under
// strict-cpu-reservation or with no reserved CPUs.
func (e *Engine) SharedPool(st State) cpumask.Mask {
	if e.static == nil {
		return e.online
	}
	return st.Alloc.Default
}

// SharedPoolEmpty reports whether the shared pool is empty, so that
// shared-pool containers run on the reserved CPUs (or, with none
// reserved, new ones are refused).
func (e *Engine) SharedPoolEmpty(st State) bool { return e.SharedPool(st).IsEmpty() }

// Reserved is the resolved reserved CPU set.
func (e *Engine) Reserved() cpuset.CPUSet { return e.reserved }

// Validate checks the pool invariants of st and the pod affinities, and
// returns every violation.
func (e *Engine) Validate(st State) error {
	var errs []error
	if e.static != nil {
		if err := e.static.Validate(st.Alloc); err != nil {
			errs = append(errs, err)
		}
	} else {
		if len(st.Alloc.Assignments) > 0 {
			errs = append(errs, &allocator.InvalidStateError{Msg: "exclusive assignments under cpu_manager_policy none"})
		}
	}
	all := e.numa.DefaultAffinity()
	pods := slices.Sorted(maps.Keys(st.PodAffinity))
	for _, p := range pods {
		if h := st.PodAffinity[p]; h.Affinity&^all != 0 {
			errs = append(errs, &allocator.InvalidStateError{Pod: p, Msg: fmt.Sprintf("pod affinity names NUMA nodes %s outside %s", h.Affinity, all)})
		}
	}
	if err := validateBaseline(st); err != nil {
		errs = append(errs, err)
	}
	errs = append(errs, e.validatePodLevel(st)...)
	return errors.Join(errs...)
}

// Snapshot converts st for the checkpoint.
func (e *Engine) Snapshot(st State) Snapshot {
	s := e.SnapshotExceptAssignments(st)
	s.Assignments = make(map[string]map[string]string, len(st.Alloc.Assignments))
	for pod, ctrs := range st.Alloc.Assignments {
		s.Assignments[pod] = AssignmentTexts(ctrs)
	}
	return s
}

// AssignmentTexts is one pod's entry of Snapshot.Assignments: container
// name -> CPU list.
func AssignmentTexts(ctrs map[string]cpuset.CPUSet) map[string]string {
	m := make(map[string]string, len(ctrs))
	for c, cpus := range ctrs {
		m[c] = cpus.String()
	}
	return m
}

// SnapshotExceptAssignments is Snapshot with Assignments left nil, for an
// encoder that renders st.Alloc.Assignments itself (the daemon keeps each
// pod's rendering while it is unchanged).
func (e *Engine) SnapshotExceptAssignments(st State) Snapshot {
	s := Snapshot{
		Shared:   e.SharedPool(st).String(),
		Reserved: e.reserved.String(),
	}
	if st.Alloc.ReusablePod != "" && st.Alloc.Reusable.Size() > 0 {
		s.ReusablePod, s.Reusable = st.Alloc.ReusablePod, st.Alloc.Reusable.String()
	}
	if len(st.PodAffinity) > 0 {
		s.PodAffinity = make(map[string]SnapshotHint, len(st.PodAffinity))
		for p, h := range st.PodAffinity {
			s.PodAffinity[p] = HintOf(h)
		}
	}
	if len(st.Baseline) > 0 {
		s.Baseline = make(map[string]map[string]string, len(st.Baseline))
		for p, ctrs := range st.Baseline {
			s.Baseline[p] = AssignmentTexts(ctrs)
		}
	}
	s.Memory = e.MemorySnapshot(st)
	if len(st.PodShared) > 0 {
		s.PodShared = make(map[string][]string, len(st.PodShared))
		for p, names := range st.PodShared {
			s.PodShared[p] = slices.Clone(names)
		}
	}
	return s
}

// FromSnapshot rebuilds a State from a checkpoint payload written perhaps
// under another reserved set or options: entries that no longer fit (CPU
// offline, now reserved, overlapping, unparsable) are dropped and described
// in the returned notes rather than trusted blindly. The shared pool is
// recomputed from the kept assignments. The error is reserved for a
// snapshot that cannot be used at all (none today: every fault is local to
// an entry).
func (e *Engine) FromSnapshot(s Snapshot) (State, []string, error) {
	st := e.NewState()
	var notes []string
	if s.Reserved != "" || e.reserved.Size() > 0 {
		if r, err := topology.ParseList(s.Reserved); err != nil || !r.Equals(e.reserved) {
			notes = append(notes, fmt.Sprintf("reserved CPUs were %q in the checkpoint, now %q", s.Reserved, e.reserved.String()))
		}
	}
	pods := slices.Sorted(maps.Keys(s.Assignments))
	for _, pod := range pods {
		ctrs := slices.Sorted(maps.Keys(s.Assignments[pod]))
		for _, c := range ctrs {
			text := s.Assignments[pod][c]
			cpus, err := topology.ParseList(text)
			if err != nil || cpus.Size() == 0 {
				notes = append(notes, fmt.Sprintf("dropped pod %s container %s: cpuset %q does not parse or is empty", pod, c, text))
				continue
			}
			if e.static == nil {
				notes = append(notes, fmt.Sprintf("dropped pod %s container %s (%s): cpu_manager_policy none has no exclusive CPUs", pod, c, text))
				continue
			}
			// Same-pod overlap is legitimate after init-container reuse.
			alloc, err := e.static.AssignReusing(st.Alloc, pod, c, cpus)
			if err != nil {
				notes = append(notes, fmt.Sprintf("dropped pod %s container %s (%s): %v", pod, c, text, err))
				continue
			}
			st.Alloc = alloc
		}
	}
	if s.ReusablePod != "" && s.Reusable != "" && e.static != nil {
		r, err := topology.ParseList(s.Reusable)
		held := cpuset.New()
		for _, cpus := range st.Alloc.Assignments[s.ReusablePod] {
			held = held.Union(cpus)
		}
		if err != nil || !r.IsSubsetOf(held) {
			notes = append(notes, fmt.Sprintf("dropped reusable CPUs %q of pod %s: not held by that pod", s.Reusable, s.ReusablePod))
		} else {
			st.Alloc.ReusablePod, st.Alloc.Reusable = s.ReusablePod, r
		}
	}
	if len(s.PodAffinity) > 0 {
		all := e.numa.DefaultAffinity()
		st.PodAffinity = map[string]hints.Hint{}
		names := slices.Sorted(maps.Keys(s.PodAffinity))
		for _, p := range names {
			sh := s.PodAffinity[p]
			h := sh.Hint()
			if h.Affinity&^all != 0 || len(h.Affinity.Nodes()) != len(sh.NUMA) {
				notes = append(notes, fmt.Sprintf("dropped affinity %v of pod %s: NUMA nodes outside %s", sh.NUMA, p, all))
				continue
			}
			st.PodAffinity[p] = h
		}
	}
	st, notes = e.baselineFromSnapshot(st, s.Baseline, notes)
	st, notes = e.memoryFromSnapshot(st, s.Memory, notes)
	st, notes = podSharedFromSnapshot(st, s.PodShared, notes)
	// "" is also an empty pool's text: nothing to compare then.
	if pool := e.SharedPool(st).CPUSet(); s.Shared != "" {
		if sh, err := topology.ParseList(s.Shared); err != nil || !sh.Equals(pool) {
			notes = append(notes, fmt.Sprintf("shared pool recomputed: %q in the checkpoint, now %q", s.Shared, pool.String()))
		}
	}
	return st, notes, nil
}

// podAffinity is a pod's merged hint as State.PodAffinity keeps it:
// without its Score, which the checkpoint does not keep (SnapshotHint),
// so that a restored State equals the one written.
func podAffinity(h hints.Hint) hints.Hint {
	h.Score = 0
	return h
}
