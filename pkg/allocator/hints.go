package allocator

import (
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// CPUHints is the kubelet's CPU hint generation for one container: every
// NUMA node combination (by size, then lexicographic) whose free plus
// reusable CPUs can hold the request and that contains every reusable CPU;
// preferred iff its size is the minimum number of nodes whose total CPUs
// could hold the request (align-by-socket also prefers hints spanning the
// minimum number of sockets). A container that already has CPUs gets hints
// regenerated from its assignment, or an empty (non-nil) list when the
// assignment's size differs from the request. A request below 1 CPU has no
// preference (nil), and so does a machine with more than 16 NUMA nodes
// (whose masks are too many to enumerate).
func (s *Static) CPUHints(st State, req Request) []hints.Hint {
	if req.CPUs < 1 {
		return nil
	}
	if cur, ok := st.Assignments[req.Pod][req.Container]; ok {
		if cur.Size() != req.CPUs {
			return []hints.Hint{}
		}
		return s.generateHints(s.m.toBits(cur), newBitset(s.m.n), req.CPUs)
	}
	return s.generateHints(s.m.maskBits(st.Default).andNot(s.reservedBits), s.reusable(st, req.Pod), req.CPUs)
}

// PodCPUHints is CPU hint generation for the pod scope: cpus is the pod's
// effective exclusive CPU request. When the CPUs already assigned to the
// pod's containers add up to it, hints are regenerated from them; otherwise
// they count as reusable along with the init-container CPUs. (The kubelet
// also returns an empty list when one container's assignment differs from
// that container's request; use PodCPUHintsFor to get that check.)
func (s *Static) PodCPUHints(st State, pod string, cpus int) []hints.Hint {
	return s.PodCPUHintsFor(st, pod, cpus, nil)
}

// PodCPUHintsFor is PodCPUHints with the pod's per-container exclusive CPU
// requests (container name -> CPUs, 0 for shared containers): a container
// whose existing assignment differs in size from its request makes the
// result an empty list, as in the kubelet. A nil map skips that check.
func (s *Static) PodCPUHintsFor(st State, pod string, cpus int, containers map[string]int) []hints.Hint {
	if cpus < 1 {
		return nil
	}
	assigned := cpuset.New()
	for c, set := range st.Assignments[pod] {
		if containers != nil {
			if want, known := containers[c]; known && want != set.Size() {
				return []hints.Hint{}
			}
		}
		assigned = assigned.Union(set)
	}
	if assigned.Size() == cpus {
		return s.generateHints(s.m.toBits(assigned), newBitset(s.m.n), cpus)
	}
	return s.generateHints(s.m.maskBits(st.Default).andNot(s.reservedBits), s.reusable(st, pod).or(s.m.toBits(assigned)), cpus)
}

func (s *Static) reusableSet(st State, pod string) cpuset.CPUSet {
	if st.ReusablePod != pod || st.Reusable.IsEmpty() {
		return cpuset.New()
	}
	return s.m.toSet(s.reusable(st, pod))
}

// maxHintNodes bounds the NUMA nodes hint generation enumerates masks for
// (2^16-1 masks).
const maxHintNodes = 16

// generateHints is the kubelet's generateCPUTopologyHints. Reusable and
// available CPUs are counted separately, as there.
func (s *Static) generateHints(available, reusable bitset, request int) []hints.Hint {
	m := s.m
	nNodes := len(m.numas.ids)
	if nNodes > maxHintNodes {
		// 2^nodes masks would take forever; the topology manager refuses
		// such machines unless max-allowable-numa-nodes is raised, and
		// then the CPU provider states no preference.
		return nil
	}
	availPer := make([]int, nNodes)
	totalPer := make([]int, nNodes)
	var reusableNodes hints.Mask
	for g := range m.numas.ids {
		totalPer[g] = m.numas.size(g)
		availPer[g] = available.andCount(m.numas.mask[g])
		if reusable.intersects(m.numas.mask[g]) {
			reusableNodes |= hints.NewMask(m.numas.ids[g])
		}
	}
	nReusable := reusable.count()

	minSize := nNodes
	out := []hints.Hint{}
	if nNodes <= 10 {
		out = make([]hints.Hint, 0, 1<<nNodes-1)
	}
	idx := make([]int, nNodes)
	for i := range idx {
		idx[i] = i
	}
	for k := 1; k <= nNodes; k++ {
		iterateCombinations(idx, k, func(combo []int) bool {
			var mask hints.Mask
			total, free := 0, nReusable
			for _, g := range combo {
				mask |= hints.NewMask(m.numas.ids[g])
				total += totalPer[g]
				free += availPer[g]
			}
			if total >= request && k < minSize {
				minSize = k
			}
			if reusableNodes&^mask != 0 || free < request {
				return true
			}
			out = append(out, hints.Hint{Affinity: mask})
			return true
		})
	}
	for i := range out {
		if s.opts.AlignBySocket && s.socketAligned(out[i].Affinity, minSize) {
			out[i].Preferred = true
			continue
		}
		out[i].Preferred = out[i].Affinity.Count() == minSize
	}
	return out
}

// socketAligned: the hint spans exactly the minimum number of sockets the
// narrowest NUMA combination needs.
func (s *Static) socketAligned(mask hints.Mask, minSize int) bool {
	m := s.m
	perSocket := len(m.numas.ids) / len(m.socks.ids)
	if perSocket == 0 {
		return false
	}
	minSockets := (minSize + perSocket - 1) / perSocket
	seen := make([]bool, len(m.socks.ids))
	n := 0
	for g, id := range m.numas.ids {
		if !mask.IsSet(id) {
			continue
		}
		for _, p := range m.numas.cpus[g] {
			if sk := m.sockOf[p]; !seen[sk] {
				seen[sk] = true
				n++
			}
		}
	}
	return n == minSockets
}
