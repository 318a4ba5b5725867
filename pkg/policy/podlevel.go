package policy

// Pod-level resource managers (KEP-5526, the kubelet's feature gate
// PodLevelResourceManagers, beta and off by default in v1.37), behind
// Config.PodLevelResourceManagers.
//
// What the kubelet v1.37.2 does (pkg/kubelet/cm/cpumanager/policy_static.go
// AllocatePod and validatePodScopeResources, called by the topology
// manager's pod-scope admit handler), for a Guaranteed pod with
// spec.resources:
//   - one NUMA hint for the whole pod, for the pod's CPU budget;
//   - the budget allocated as one block of CPUs from the node's shared pool;
//   - each container whose CPU request equals its limit and is a whole
//     number gets an exclusive slice of the block (takeByTopology inside
//     the block less the sidecars' and earlier app containers' slices: a
//     regular init container's slice is reused, as it has finished);
//   - every other container runs on what is left of the block, the pod's
//     private shared pool, and keeps its CFS quota;
//   - a pod whose exclusive slices add up to the whole budget while one of
//     its long-running containers needs the shared pool is refused with the
//     reason EmptyPodSharedPoolError;
//   - the block goes back to the node's shared pool with the pod's last
//     container.
//
// Kubelet v1.38 (kubelet_version) adds: the block and every slice are
// taken with the pod hint's NUMA node count (distribute-cpus-across-numa
// spreads over all the hint's nodes); a kubelet restart keeps the
// checkpointed block and slices and carves the missing ones (the plugin
// restores its own checkpoint, under either version); a failed partition
// gives the block back (the engine commits nothing on an error).
//
// The plugin sees one container at a time (NRI CreateContainer), not the
// pod's spec: the block is allocated with the pod's first container, the
// slices as the containers come, and a refusal falls on the container that
// would empty the pool, not on the whole pod before any container starts
// (docs/pod-level-resources.md). Under the container scope the kubelet
// makes no block: the pod's exclusive containers take CPUs from the node's
// pool and its other containers run on the node's shared pool, which is
// the engine's ordinary per-container path; only a pod-level pod may then
// mix containers whose request equals their limit with others
// (checkRequest).

import (
	"fmt"
	"maps"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// PodPoolEntry is the container name under which a pod-level pod's block
// is kept in the static policy's assignments (State.Alloc.Assignments), so
// that the allocator's invariants and the checkpoint's assignments cover
// it unchanged. Kubernetes container names are DNS labels, which never
// hold '@'.
const PodPoolEntry = "@pod"

// ReasonEmptyPodSharedPool is the kubelet's admission reason
// (admission.ErrorReasonEmptyPodSharedPool).
const ReasonEmptyPodSharedPool = "EmptyPodSharedPoolError"

// EmptyPodSharedPoolError refuses a pod-level pod's container that would
// leave the pod's private pool empty while a container of the pod needs
// it: a shared container of a pod whose exclusive slices took the whole
// budget, or an exclusive container whose slice would take the last CPUs
// of the pool that the pod's shared containers run on.
type EmptyPodSharedPoolError struct {
	Pod, Container string
	Budget         int // the pod's CPU budget, whole CPUs
	Exclusive      int // CPUs of the pod's exclusive slices, with this container's
}

// Error is the kubelet's message, with the pod, container and numbers.
func (e *EmptyPodSharedPoolError) Error() string {
	return fmt.Sprintf("%s: pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers "+
		"(pod %q container %q: budget %d CPUs, exclusive %d CPUs)", e.Reason(), e.Pod, e.Container, e.Budget, e.Exclusive)
}

// Reason is "EmptyPodSharedPoolError".
func (e *EmptyPodSharedPoolError) Reason() string { return ReasonEmptyPodSharedPool }

// podLevelPod reports whether req belongs to a pod the kubelet would
// treat with pod-level resources: the option on, the pod Guaranteed and a
// pod-level CPU request known.
func (e *Engine) podLevelPod(req Request) bool {
	return e.cfg.PodLevelResourceManagers && req.QoS == Guaranteed && req.PodCPURequestMilli > 0
}

// PodBudget is the CPU budget, in whole CPUs, of req's pod when the
// engine manages it as one block: cpu_manager_policy static,
// pod_level_resource_managers on, topology_manager_scope pod, a
// Guaranteed pod whose CPU request is a whole number of CPUs equal to its
// limit (no limit known counts as equal, as the kubelet's cpuCFSQuota off
// writes none). 0 otherwise: the pod's containers are placed one by one.
func (e *Engine) PodBudget(req Request) int {
	if e.static == nil || e.cfg.TopologyScope != hints.ScopePod || !e.podLevelPod(req) {
		return 0
	}
	r, l := req.PodCPURequestMilli, req.PodCPULimitMilli
	if r%1000 != 0 || (l != 0 && l != r) {
		return 0
	}
	return int(r / 1000)
}

// PodPoolCPUs is the private shared pool of a pod-level pod: its block
// less its containers' exclusive slices. false when the pod has no block.
func (e *Engine) PodPoolCPUs(st State, pod string) (cpuset.CPUSet, bool) {
	block, ok := st.Alloc.Assignments[pod][PodPoolEntry]
	if !ok {
		return cpuset.New(), false
	}
	return block.Difference(e.podSlices(st, pod)), true
}

// PodPoolOf is the cpuset of a container that runs on its pod's private
// pool (a shared container of a pod-level pod, State.PodShared): the
// pod's block less its exclusive slices. false for every other container
// (exclusive, or on the node's shared pool).
func (e *Engine) PodPoolOf(st State, pod, container string) (cpuset.CPUSet, bool) {
	if !slices.Contains(st.PodShared[pod], container) {
		return cpuset.New(), false
	}
	return e.PodPoolCPUs(st, pod)
}

// podSlices is the union of a pod's exclusive slices (every assignment of
// the pod but its block).
func (e *Engine) podSlices(st State, pod string) cpuset.CPUSet {
	used := cpuset.New()
	for c, cpus := range st.Alloc.Assignments[pod] {
		if c != PodPoolEntry {
			used = used.Union(cpus)
		}
	}
	return used
}

// addPodLevel is Add for a container of a pod with a block (PodBudget
// budget > 0): the block with the pod's first container, then an
// exclusive slice or the pod's private pool.
func (e *Engine) addPodLevel(st State, req Request, budget int) (State, Decision, error) {
	k := ExclusiveCPUs(true, req)
	if k > 0 {
		if cpus, ok := e.Assignment(st, req.Pod, req.Container); ok {
			h := st.PodAffinity[req.Pod]
			next := st
			next.Alloc.ReusablePod, next.Alloc.Reusable = podReuse(st, req, cpus)
			next, mems, pinned, err := e.allocMemory(next, req, h)
			if err != nil {
				return st, Decision{}, err
			}
			return next, Decision{CPUs: cpus, Mems: mems, Exclusive: true, Affinity: h, Existing: true, MemPinned: pinned}, nil
		}
	} else if slices.Contains(st.PodShared[req.Pod], req.Container) {
		pool, _ := e.PodPoolCPUs(st, req.Pod)
		h := st.PodAffinity[req.Pod]
		next, mems, pinned, err := e.allocMemory(st, req, h)
		if err != nil {
			return st, Decision{}, err
		}
		return next, Decision{CPUs: pool, Mems: mems, Affinity: h, Existing: true, MemPinned: pinned, PodPool: true}, nil
	}
	if k > budget {
		return st, Decision{}, &allocator.InsufficientCPUsError{Requested: k, Available: budget}
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
	if _, ok := next.Alloc.Assignments[req.Pod][PodPoolEntry]; !ok {
		// The pod's first container: the whole budget as one block, placed
		// as the kubelet's AllocatePod places it (allocateCPUs on the pod's
		// hint, full-pcpus-only checked on the budget).
		alloc, _, err := e.static.Allocate(next.Alloc, allocator.Request{Pod: req.Pod, Container: PodPoolEntry, Type: allocator.App, CPUs: budget}, h)
		if err != nil {
			return st, Decision{}, err
		}
		next.Alloc = alloc
	}
	pool, _ := e.PodPoolCPUs(next, req.Pod)
	if k == 0 {
		if pool.IsEmpty() {
			return st, Decision{}, &EmptyPodSharedPoolError{Pod: req.Pod, Container: req.Container, Budget: budget, Exclusive: e.podSlices(next, req.Pod).Size()}
		}
		next.PodShared = withPodShared(next.PodShared, req.Pod, req.Container, true)
		next, mems, pinned, err := e.allocMemory(next, req, h)
		if err != nil {
			return st, Decision{}, err
		}
		return next, Decision{CPUs: pool, Mems: mems, Affinity: h, MemPinned: pinned, PodPool: true}, nil
	}
	// A slice is taken from the pool plus the slices of the pod's finished
	// init containers (the reuse set), as the kubelet's partition takes
	// every container's slice from the block less the sidecars' and the
	// earlier app containers' slices. The init containers' slices stay
	// theirs (held), so the pod's pool never gets them back.
	free := pool.Union(podReusable(next, req.Pod))
	if k > free.Size() {
		return st, Decision{}, &allocator.InsufficientCPUsError{Requested: k, Available: free.Size()}
	}
	cpus, err := e.static.Take(free, k, h.Affinity)
	if err != nil {
		return st, Decision{}, err
	}
	if len(next.PodShared[req.Pod]) > 0 && pool.Difference(cpus).IsEmpty() {
		return st, Decision{}, &EmptyPodSharedPoolError{Pod: req.Pod, Container: req.Container, Budget: budget, Exclusive: e.podSlices(next, req.Pod).Union(cpus).Size()}
	}
	alloc, err := e.static.AssignReusing(next.Alloc, req.Pod, req.Container, cpus)
	if err != nil {
		return st, Decision{}, err
	}
	alloc.ReusablePod, alloc.Reusable = podReuse(next, req, cpus)
	next.Alloc = alloc
	next, mems, pinned, err := e.allocMemory(next, req, h)
	if err != nil {
		return st, Decision{}, err
	}
	return next, Decision{CPUs: cpus, Mems: mems, Exclusive: true, Affinity: h, MemPinned: pinned}, nil
}

// podReusable is the part of the allocator's reuse set that belongs to
// pod: the slices of its finished init containers (an Init request's, or,
// in the daemon, those held for its stopped containers). Empty when the
// set is another pod's.
func podReusable(st State, pod string) cpuset.CPUSet {
	if st.Alloc.ReusablePod != pod || st.Alloc.Reusable.IsEmpty() {
		return cpuset.New()
	}
	return st.Alloc.Reusable
}

// podReuse is the reuse set after req's pod-level container got (or kept)
// cpus, as the allocator keeps it for the per-container path: an init
// container's slice joins it, a sidecar's or an app container's leaves it.
func podReuse(st State, req Request, cpus cpuset.CPUSet) (string, cpuset.CPUSet) {
	reuse := podReusable(st, req.Pod)
	if req.Type == allocator.Init {
		return req.Pod, reuse.Union(cpus)
	}
	return req.Pod, reuse.Difference(cpus)
}

// withPodShared returns m with container added to (add) or removed from
// pod's shared containers; m is not modified. A pod left with none is
// dropped.
func withPodShared(m map[string][]string, pod, container string, add bool) map[string][]string {
	cur := m[pod]
	has := slices.Contains(cur, container)
	if has == add {
		return m
	}
	out := maps.Clone(m)
	if out == nil {
		out = map[string][]string{}
	}
	if add {
		names := append(slices.Clone(cur), container)
		slices.Sort(names)
		out[pod] = names
		return out
	}
	names := slices.DeleteFunc(slices.Clone(cur), func(c string) bool { return c == container })
	if len(names) == 0 {
		delete(out, pod)
	} else {
		out[pod] = names
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// validatePodLevel checks that every pod with shared containers on a
// private pool has a block, and that a pod's exclusive slices lie inside
// its block.
func (e *Engine) validatePodLevel(st State) []error {
	var errs []error
	for _, p := range slices.Sorted(maps.Keys(st.PodShared)) {
		if _, ok := st.Alloc.Assignments[p][PodPoolEntry]; !ok {
			errs = append(errs, &allocator.InvalidStateError{Pod: p, Msg: fmt.Sprintf("shared containers %v on a pod pool, but the pod has no block", st.PodShared[p])})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(st.Alloc.Assignments)) {
		block, ok := st.Alloc.Assignments[p][PodPoolEntry]
		if !ok {
			continue
		}
		if out := e.podSlices(st, p).Difference(block); !out.IsEmpty() {
			errs = append(errs, &allocator.InvalidStateError{Pod: p, Msg: fmt.Sprintf("exclusive CPUs %s outside the pod's block %s", out, block)})
		}
	}
	return errs
}

// podSharedFromSnapshot restores State.PodShared for the pods whose block
// was kept.
func podSharedFromSnapshot(st State, in map[string][]string, notes []string) (State, []string) {
	for _, p := range slices.Sorted(maps.Keys(in)) {
		if _, ok := st.Alloc.Assignments[p][PodPoolEntry]; !ok {
			notes = append(notes, fmt.Sprintf("dropped the pod-pool containers %v of pod %s: the pod has no block", in[p], p))
			continue
		}
		for _, c := range in[p] {
			st.PodShared = withPodShared(st.PodShared, p, c, true)
		}
	}
	return st, notes
}
