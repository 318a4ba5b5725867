package allocator

import (
	"math/bits"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator/take"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
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
// (whose masks are too many to enumerate). Under
// strict-align-cpus-by-uncorecache a new container's hints are only the
// NUMA node sets its strict placement fits in.
func (s *Static) CPUHints(st State, req Request) []hints.Hint {
	if req.CPUs < 1 {
		return nil
	}
	if cur, ok := st.Assignments[req.Pod][req.Container]; ok {
		if cur.Size() != req.CPUs {
			return []hints.Hint{}
		}
		return s.generateHints(s.m.ToBits(cur), take.NewBits(s.m.N()), s.free(st), req.CPUs)
	}
	free := s.free(st)
	out := s.generateHints(free, s.reusable(st, req.Pod), free, req.CPUs)
	if s.strict() && out != nil {
		out = s.strictHints(st, req, out)
	}
	return out
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
	free := s.free(st)
	if assigned.Size() == cpus {
		return s.generateHints(s.m.ToBits(assigned), take.NewBits(s.m.N()), free, cpus)
	}
	return s.generateHints(free, s.reusable(st, pod).Or(s.m.ToBits(assigned)), free, cpus)
}

// free is the shared pool less the reserved CPUs: what hints can take,
// and what a hint's Score counts as not assigned.
func (s *Static) free(st State) take.Bits {
	return s.m.MaskBits(st.Default).AndNot(s.reservedBits)
}

func (s *Static) reusableSet(st State, pod string) cpuset.CPUSet {
	if st.ReusablePod != pod || st.Reusable.IsEmpty() {
		return cpuset.New()
	}
	return s.m.ToSet(s.reusable(st, pod))
}

// maxHintNodes bounds the NUMA nodes hint generation enumerates masks for
// (2^16-1 masks).
const maxHintNodes = 16

// generateHints is the kubelet's generateCPUTopologyHints. Reusable and
// available CPUs are counted separately, as there. Under kubelet v1.38
// each hint's Score is the share of its nodes' unreserved CPUs that are
// not free (free: the shared pool less the reserved CPUs, on every path,
// so a container's own and its pod's reusable CPUs count as assigned),
// the nodes of a mask taken as one pool.
func (s *Static) generateHints(available, reusable, free take.Bits, request int) []hints.Hint {
	m := s.m
	numas := m.NUMAs()
	nNodes := len(numas.IDs())
	if nNodes > maxHintNodes {
		// 2^nodes masks would take forever; the topology manager refuses
		// such machines unless max-allowable-numa-nodes is raised, and
		// then the CPU provider states no preference.
		return nil
	}
	t := s.hintTable
	var reusableNodes hints.Mask
	// free[c] is the free CPUs of combination c (bit i: the i-th NUMA
	// node), built from c without its lowest node: one addition each.
	var buf [1 << maxTableNodes]int32
	var avail []int32
	if t != nil {
		avail = buf[:1<<nNodes]
	} else {
		avail = make([]int32, 1<<nNodes)
	}
	for g, id := range numas.IDs() {
		avail[1<<g] = int32(available.AndCount(numas.Mask(g)))
		if reusable.Intersects(numas.Mask(g)) {
			reusableNodes |= hints.NewMask(id)
		}
	}
	sumCombinations(avail)
	// Per combination for the Score: unreserved CPUs and free ones.
	var unreserved, unused []int32
	if s.opts.KubeletVersion != kubever.V137 {
		unreserved, unused = make([]int32, 1<<nNodes), make([]int32, 1<<nNodes)
		for g := range numas.IDs() {
			unreserved[1<<g] = int32(numas.Mask(g).AndNotCount(s.reservedBits))
			unused[1<<g] = int32(free.AndCount(numas.Mask(g)))
		}
		sumCombinations(unreserved)
		sumCombinations(unused)
	}
	nReusable := int32(reusable.Count())
	if t == nil {
		t = newHintTable(m)
	}

	minSize := nNodes
	for _, c := range t.order {
		if t.total[c] >= int32(request) {
			minSize = bits.OnesCount16(c)
			break
		}
	}
	out := make([]hints.Hint, 0, len(t.order))
	for _, c := range t.order {
		aff := t.affinity[c]
		if reusableNodes&^aff != 0 || avail[c]+nReusable < int32(request) {
			continue
		}
		h := hints.Hint{Affinity: aff}
		if unreserved != nil {
			h.Score = hints.UtilizationScore(int64(unreserved[c]), int64(unreserved[c]-unused[c]))
		}
		out = append(out, h)
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

// sumCombinations fills v[c] for every combination c of two or more nodes
// from the single nodes' v[1<<g]: v[c] = v[c without its lowest node] +
// v[its lowest node], one addition each.
func sumCombinations(v []int32) {
	for c := 1; c < len(v); c++ {
		if c&(c-1) != 0 {
			v[c] = v[c&(c-1)] + v[c&-c]
		}
	}
}

// maxTableNodes bounds the NUMA nodes for which a Static keeps its hint
// table (2^10 combinations); hint generation on larger machines builds it
// each time.
const maxTableNodes = 10

// hintTable is what hint generation needs that only depends on the
// machine. A combination c of NUMA nodes is a bitmask over node indexes.
type hintTable struct {
	order    []uint16     // every combination: by size, then lexicographic
	affinity []hints.Mask // c -> the NUMA node ids as a hint mask
	total    []int32      // c -> its CPUs
}

func newHintTable(m *take.Machine) *hintTable {
	numas := m.NUMAs()
	n := len(numas.IDs())
	t := &hintTable{
		order:    make([]uint16, 0, 1<<n-1),
		affinity: make([]hints.Mask, 1<<n),
		total:    make([]int32, 1<<n),
	}
	for c := 1; c < 1<<n; c++ {
		low := bits.TrailingZeros(uint(c))
		t.affinity[c] = t.affinity[c&(c-1)] | hints.NewMask(numas.IDs()[low])
		t.total[c] = t.total[c&(c-1)] + int32(numas.Size(low))
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	for k := 1; k <= n; k++ {
		take.IterateCombinations(idx, k, func(combo []int) bool {
			var c uint16
			for _, g := range combo {
				c |= 1 << uint(g)
			}
			t.order = append(t.order, c)
			return true
		})
	}
	return t
}

// socketAligned: the hint spans exactly the minimum number of sockets the
// narrowest NUMA combination needs.
func (s *Static) socketAligned(mask hints.Mask, minSize int) bool {
	m := s.m
	numas := m.NUMAs()
	perSocket := len(numas.IDs()) / len(m.Sockets().IDs())
	if perSocket == 0 {
		return false
	}
	minSockets := (minSize + perSocket - 1) / perSocket
	seen := make([]bool, len(m.Sockets().IDs()))
	n := 0
	for g, id := range numas.IDs() {
		if !mask.IsSet(id) {
			continue
		}
		for _, p := range numas.CPUs(g) {
			if sk := m.SocketOf(p); !seen[sk] {
				seen[sk] = true
				n++
			}
		}
	}
	return n == minSockets
}
