package policy

import (
	"encoding/json"
	"fmt"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
)

// KeyReservedMemory is the kubelet's reservedMemory, per NUMA node and
// memory resource.
const KeyReservedMemory = "reserved_memory"

// MemoryStatic reports memory_manager_policy Static.
func (e *Engine) MemoryStatic() bool { return e.memStatic }

// newMemory builds the memory manager's empty machine state under Static:
// the machine's nodes (Config.MachineMemory) less reserved_memory.
func (e *Engine) newMemory(cfg Config) error {
	if len(cfg.MachineMemory) == 0 {
		return &ConfigError{Key: KeyMemoryManagerPolicy, Err: fmt.Errorf("policy Static needs the machine's memory per NUMA node, which was not read")}
	}
	st, err := memorymanager.NewState(cfg.MachineMemory, cfg.ReservedMemory)
	if err != nil {
		return &ConfigError{Key: KeyReservedMemory, Err: err}
	}
	e.memStatic, e.memFresh = true, st
	return nil
}

// memPod is req's container as the memory manager sees it: accounted
// only in a Guaranteed pod, and only with a memory limit (a Guaranteed
// pod's containers all have one; a request without is left alone rather
// than refused). A container is an app container: NRI does not tell init
// containers apart (see internal/request For).
func memPod(req Request, r memorymanager.Request) memorymanager.Pod {
	p := memorymanager.Pod{
		UID:        req.Pod,
		Guaranteed: req.QoS == Guaranteed && r[memorymanager.Memory] > 0,
		Containers: []memorymanager.Container{{Name: req.Container, Request: r}},
	}
	// The exited containers whose memory it may take over play the
	// pod's regular init containers: Allocate shrinks their blocks by
	// what it takes over.
	for _, name := range req.MemoryReuse {
		if name != req.Container {
			p.InitContainers = append(p.InitContainers, memorymanager.Container{Name: name})
		}
	}
	return p
}

// memoryReuse is mem with the pod's reusable memory made the blocks of
// req.MemoryReuse (per affinity and resource the largest, as the kubelet
// counts its init containers'), for a container that has no blocks yet:
// the hints count it as free on its nodes and Allocate takes it first.
// mem is not modified; it is returned as is when there is nothing to
// reuse.
func memoryReuse(mem memorymanager.State, req Request) memorymanager.State {
	if len(req.MemoryReuse) == 0 || len(mem.Blocks(req.Pod, req.Container)) > 0 {
		return mem
	}
	reuse := map[hints.Mask]map[memorymanager.Resource]uint64{}
	for _, name := range req.MemoryReuse {
		for _, b := range mem.Blocks(req.Pod, name) {
			m := hints.NewMask(b.NUMAAffinity...)
			if reuse[m] == nil {
				reuse[m] = map[memorymanager.Resource]uint64{}
			}
			reuse[m][b.Type] = max(reuse[m][b.Type], b.Size)
		}
	}
	if len(reuse) == 0 && len(mem.Reusable[req.Pod]) == 0 {
		return mem
	}
	out := mem.Clone()
	if out.Reusable == nil {
		out.Reusable = map[string]map[hints.Mask]map[memorymanager.Resource]uint64{}
	}
	out.Reusable[req.Pod] = reuse
	return out
}

// memHints is the memory hint provider: nil under memory_manager_policy
// None and for a container the memory manager does not account; under
// the pod scope the hints of the pod's request (PodMemory, else the
// container's own).
func (e *Engine) memHints(st State, req Request) (map[string][]hints.Hint, error) {
	if !e.memStatic {
		return nil, nil
	}
	var hs map[string][]hints.Hint
	var err error
	if e.cfg.TopologyScope == hints.ScopePod {
		r := req.PodMemory
		if len(r) == 0 {
			r = req.Memory
		}
		// The pod's request already counts its init containers
		// (PodRequest): the exited ones are not listed again.
		whole := req
		whole.MemoryReuse = nil
		hs, err = memorymanager.PodHints(memoryReuse(st.Memory, req), memPod(whole, r), e.cfg.KubeletVersion)
	} else {
		hs, err = memorymanager.Hints(memoryReuse(st.Memory, req), memPod(req, req.Memory), req.Container, e.cfg.KubeletVersion)
	}
	if err != nil {
		return nil, &RequestError{Pod: req.Pod, Container: req.Container, Field: "memory", Msg: err.Error()}
	}
	return hs, nil
}

// allocMemory is the memory manager's Allocate after the merge, on the
// merged hint h; it returns the next state and the container's
// cpuset.mems, pinned when the memory manager assigned its memory
// (otherwise every memory node).
func (e *Engine) allocMemory(st State, req Request, h hints.Hint) (State, cpuset.CPUSet, bool, error) {
	if !e.memStatic {
		return st, e.allMems(), false, nil
	}
	mem, a, err := memorymanager.Allocate(memoryReuse(st.Memory, req), memPod(req, req.Memory), req.Container, h)
	if err != nil {
		if _, ok := err.(*memorymanager.Error); ok {
			return st, cpuset.New(), false, err
		}
		return st, cpuset.New(), false, &RequestError{Pod: req.Pod, Container: req.Container, Field: "memory", Msg: err.Error()}
	}
	st.Memory = mem
	if len(a.Blocks) == 0 {
		return st, e.allMems(), false, nil
	}
	return st, cpuset.New(a.Mems.Nodes()...), true, nil
}

// KeepMemory restores the memory assignment a running container lost
// (a rebuild from the runtime after a damaged checkpoint) on the NUMA
// nodes mems it runs on: one block per resource over those nodes, taken
// from their free memory as Allocate takes it, so the nodes' accounting
// holds the memory the container uses and no later admission is given it
// again. It is the memory half of keeping a running container's CPUs and
// runs no admission. It reports false, st unchanged, when the memory
// manager does not account the container (None, not Guaranteed, no
// memory limit), it already holds memory, mems is empty or names a node
// without memory, single-numa-node is the policy and mems is more than
// one node, or those nodes' free memory cannot hold the request (Allocate
// would widen it) or breaks the group rule: the container then runs on
// as it is, unaccounted, and its memory is allocated afresh when a
// container of its pod and name is next created.
func (e *Engine) KeepMemory(st State, req Request, mems cpuset.CPUSet) (State, bool) {
	if !e.memStatic || mems.IsEmpty() || !mems.IsSubsetOf(e.allMems()) || e.MemoryPinned(st, req.Pod, req.Container) {
		return st, false
	}
	if e.cfg.TopologyPolicy == hints.PolicySingleNUMANode && mems.Size() != 1 {
		return st, false
	}
	req.MemoryReuse = nil
	pod := memPod(req, req.Memory)
	if !pod.Guaranteed {
		return st, false
	}
	want := hints.NewMask(mems.List()...)
	mem, a, err := memorymanager.Allocate(st.Memory, pod, req.Container, hints.Hint{Affinity: want, Preferred: true})
	if err != nil || a.Mems != want {
		return st, false
	}
	st.Memory = mem
	return st, true
}

// MemsOf is a container's cpuset.mems now: the nodes of its memory
// manager assignment, else every memory node.
func (e *Engine) MemsOf(st State, pod, container string) cpuset.CPUSet {
	if m := st.Memory.Mems(pod, container); e.memStatic && !m.IsEmpty() {
		return cpuset.New(m.Nodes()...)
	}
	return e.allMems()
}

// MemoryPinned reports whether the memory manager holds memory for a
// container.
func (e *Engine) MemoryPinned(st State, pod, container string) bool {
	return e.memStatic && !st.Memory.Mems(pod, container).IsEmpty()
}

// MemorySnapshot is st's memory manager state for the checkpoint
// (Snapshot.Memory); nil under None.
func (e *Engine) MemorySnapshot(st State) json.RawMessage {
	if !e.memStatic || len(st.Memory.Nodes) == 0 {
		return nil
	}
	data, err := memorymanager.Encode(st.Memory)
	if err != nil {
		return nil // Encode of a State of maps and numbers cannot fail
	}
	return data
}

// memoryFromSnapshot restores the memory manager's state: one that does
// not decode or does not match the machine and reserved_memory (the
// kubelet's start-up check, memorymanager.Compare) is dropped with a
// note, as is one found under None.
func (e *Engine) memoryFromSnapshot(st State, raw json.RawMessage, notes []string) (State, []string) {
	if len(raw) == 0 {
		return st, notes
	}
	if !e.memStatic {
		return st, append(notes, "dropped the memory manager state: memory_manager_policy is None")
	}
	mem, err := memorymanager.Decode(raw)
	if err == nil {
		err = memorymanager.Compare(mem, e.memFresh)
	}
	if err != nil {
		return st, append(notes, fmt.Sprintf("dropped the memory manager state: %v", err))
	}
	st.Memory = mem
	return st, notes
}

// ImportMemory adopts the kubelet's memory_manager_state (data) under
// Static: the state must decode (memorymanager.ImportKubelet) and match
// this machine and reserved_memory as the kubelet checks it at start-up
// (memorymanager.Compare). It returns the next state and how many
// containers have memory assigned. A state that does not match is a
// *MemoryMismatchError.
func (e *Engine) ImportMemory(st State, data []byte) (State, int, error) {
	if !e.memStatic {
		return st, 0, fmt.Errorf("memory_manager_policy is None: nothing to import")
	}
	mem, err := memorymanager.ImportKubelet(data)
	if err != nil {
		return st, 0, err
	}
	if err := memorymanager.Compare(mem, e.memFresh); err != nil {
		return st, 0, &MemoryMismatchError{Err: err}
	}
	n := 0
	for _, ctrs := range mem.Assignments {
		n += len(ctrs)
	}
	st.Memory = mem
	return st, n, nil
}

// MemoryMismatchError is a memory manager state that is consistent in
// itself but not with this machine and reserved_memory.
type MemoryMismatchError struct{ Err error }

func (e *MemoryMismatchError) Error() string { return e.Err.Error() }

// Unwrap returns the memory manager's error.
func (e *MemoryMismatchError) Unwrap() error { return e.Err }

// checkMemory refuses a memory request with a resource the memory
// manager does not know (under Static; None ignores the request).
func (e *Engine) checkMemory(req Request) error {
	if !e.memStatic {
		return nil
	}
	for _, f := range []struct {
		field string
		r     memorymanager.Request
	}{{"memory", req.Memory}, {"pod_memory", req.PodMemory}} {
		field := f.field
		for name := range f.r {
			if name != memorymanager.Memory && !name.IsHugepages() {
				return &RequestError{Pod: req.Pod, Container: req.Container, Field: field,
					Msg: fmt.Sprintf("resource %q is neither memory nor hugepages-<size>", name)}
			}
		}
	}
	return nil
}
