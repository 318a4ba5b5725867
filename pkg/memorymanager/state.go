package memorymanager

import (
	"maps"
	"slices"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// maxNodes bounds NUMA node ids to what a hints.Mask holds.
const maxNodes = hints.MaxNUMANodes

// MemoryTable is one resource of one NUMA node, in bytes, as the kubelet's
// state keeps it: Allocatable = TotalMemSize - SystemReserved (regular
// memory also leaves out the hugepage pools), Reserved is what containers
// hold and Free = Allocatable - Reserved.
type MemoryTable struct {
	TotalMemSize   uint64 `json:"total"`
	SystemReserved uint64 `json:"systemReserved"`
	Allocatable    uint64 `json:"allocatable"`
	Reserved       uint64 `json:"reserved"`
	Free           uint64 `json:"free"`
}

// NodeState is one NUMA node of the machine state.
type NodeState struct {
	// NumberOfAssignments counts the blocks that use the node: a container
	// with memory and hugepages on it counts two.
	NumberOfAssignments int `json:"numberOfAssignments"`
	// MemoryMap holds the node's table per resource.
	MemoryMap map[Resource]MemoryTable `json:"memoryMap"`
	// Cells is the node's group: itself alone, or every node of the
	// multi-node affinity its memory is shared in.
	Cells []int `json:"cells"`
}

// Block is an amount of one resource assigned to a container over a set of
// NUMA nodes.
type Block struct {
	NUMAAffinity []int    `json:"numaAffinity"`
	Type         Resource `json:"type"`
	Size         uint64   `json:"size"`
}

// State is the memory manager's whole state. It is a value: the functions
// of this package return a new State and never modify the one they are
// given.
type State struct {
	// Nodes is the machine state per NUMA node id.
	Nodes map[int]NodeState
	// Assignments holds the blocks per pod UID and container name.
	Assignments map[string]map[string][]Block
	// Reusable is, per pod UID, affinity and resource, the memory of the
	// pod's regular init containers that its later containers may take
	// over (they no longer run when those start).
	Reusable map[string]map[hints.Mask]map[Resource]uint64
}

// Clone returns a deep copy of s.
func (s State) Clone() State {
	out := State{Nodes: make(map[int]NodeState, len(s.Nodes))}
	for id, n := range s.Nodes {
		out.Nodes[id] = NodeState{
			NumberOfAssignments: n.NumberOfAssignments,
			MemoryMap:           maps.Clone(n.MemoryMap),
			Cells:               slices.Clone(n.Cells),
		}
	}
	if s.Assignments != nil {
		out.Assignments = make(map[string]map[string][]Block, len(s.Assignments))
		for pod, ctrs := range s.Assignments {
			c := make(map[string][]Block, len(ctrs))
			for name, blocks := range ctrs {
				c[name] = cloneBlocks(blocks)
			}
			out.Assignments[pod] = c
		}
	}
	if s.Reusable != nil {
		out.Reusable = make(map[string]map[hints.Mask]map[Resource]uint64, len(s.Reusable))
		for pod, byMask := range s.Reusable {
			m := make(map[hints.Mask]map[Resource]uint64, len(byMask))
			for mask, r := range byMask {
				m[mask] = maps.Clone(r)
			}
			out.Reusable[pod] = m
		}
	}
	return out
}

func cloneBlocks(blocks []Block) []Block {
	out := make([]Block, len(blocks))
	for i, b := range blocks {
		out[i] = Block{NUMAAffinity: slices.Clone(b.NUMAAffinity), Type: b.Type, Size: b.Size}
	}
	return out
}

// NodeIDs returns the NUMA node ids of s, ascending.
func (s State) NodeIDs() []int {
	ids := slices.Collect(maps.Keys(s.Nodes))
	slices.Sort(ids)
	return ids
}

// Blocks returns a copy of the blocks of a container, nil if it has none.
func (s State) Blocks(podUID, container string) []Block {
	blocks, ok := s.Assignments[podUID][container]
	if !ok {
		return nil
	}
	return cloneBlocks(blocks)
}

// Mems returns the NUMA nodes a container's memory is assigned on, the
// value of its cpuset.mems; the empty mask when it has no assignment (a
// container that is not Guaranteed, or not yet allocated), for which the
// caller leaves every memory node.
func (s State) Mems(podUID, container string) hints.Mask {
	var m hints.Mask
	for _, b := range s.Assignments[podUID][container] {
		m |= hints.NewMask(b.NUMAAffinity...)
	}
	return m
}

func (s State) table(node int, r Resource) MemoryTable {
	return s.Nodes[node].MemoryMap[r]
}
