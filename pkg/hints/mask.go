// Package hints is the topology manager: NUMA affinity masks, topology hints
// from hint providers, their merge under a policy and scope, and admission.
// It is pure: no I/O, no clocks, no globals.
package hints

import (
	"math/bits"
	"strconv"
	"strings"
)

// MaxNUMANodes is the largest NUMA node id + 1 a Mask can hold.
const MaxNUMANodes = 64

// Mask is a set of NUMA node ids, bit i standing for node i. The zero Mask
// is empty; as a hint's affinity it means "no NUMA preference" (any node).
type Mask uint64

// NewMask returns the mask of the given nodes. Ids outside [0, 64) are
// ignored; callers validate node ids when they read the topology.
func NewMask(nodes ...int) Mask {
	var m Mask
	for _, n := range nodes {
		if n >= 0 && n < MaxNUMANodes {
			m |= 1 << uint(n)
		}
	}
	return m
}

// Count is the number of nodes in m.
func (m Mask) Count() int { return bits.OnesCount64(uint64(m)) }

// IsEmpty reports whether m has no node.
func (m Mask) IsEmpty() bool { return m == 0 }

// IsSet reports whether node is in m.
func (m Mask) IsSet(node int) bool {
	return node >= 0 && node < MaxNUMANodes && m&(1<<uint(node)) != 0
}

// And returns the nodes in both m and o.
func (m Mask) And(o Mask) Mask { return m & o }

// Or returns the nodes in m or o.
func (m Mask) Or(o Mask) Mask { return m | o }

// Nodes returns the node ids in m, ascending.
func (m Mask) Nodes() []int {
	out := make([]int, 0, m.Count())
	for v := uint64(m); v != 0; v &= v - 1 {
		out = append(out, bits.TrailingZeros64(v))
	}
	return out
}

// IsNarrowerThan reports whether m has fewer nodes than o, or as many and a
// numerically smaller value (the kubelet's tie-break: {1,2} beats {0,3}).
func (m Mask) IsNarrowerThan(o Mask) bool {
	if m.Count() != o.Count() {
		return m.Count() < o.Count()
	}
	return m < o
}

// String formats m as a Linux list ("0-1,3"); the empty mask is "".
func (m Mask) String() string {
	nodes := m.Nodes() // ascending
	var b strings.Builder
	for i := 0; i < len(nodes); {
		j := i
		for j+1 < len(nodes) && nodes[j+1] == nodes[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(nodes[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(nodes[j]))
		}
		i = j + 1
	}
	return b.String()
}

// Hint is a topology hint: an affinity and whether it is preferred. An empty
// Affinity means any NUMA node.
type Hint struct {
	Affinity  Mask
	Preferred bool
	// Score is kubelet v1.38's utilization signal (#141796): the share of
	// the hint's allocatable resources already assigned, 1-100, 0 for no
	// signal (always 0 under kubelet_version 1.37). It decides nothing:
	// merging and admission ignore it, and a merged hint carries the mean
	// of its permutation's scores (MergeScore).
	Score int64
}

// UtilizationScore is the kubelet's Score of a hint whose nodes hold
// allocatable resources of which assigned are taken: 0 when nothing is
// allocatable (no signal), else assigned*100/allocatable, at least 1 and
// not capped (more assigned than allocatable gives over 100).
func UtilizationScore(allocatable, assigned int64) int64 {
	if allocatable <= 0 {
		return 0
	}
	return max(1, assigned*100/allocatable)
}

// AggregateScores is the merged Score of a permutation of hints: the
// truncated mean of the scores of the hints with an affinity and a
// non-zero score (0 is no signal, not idle), and whether there was any.
func AggregateScores(perm []Hint) (int64, bool) {
	var sum, n int64
	for _, h := range perm {
		if h.Affinity != 0 && h.Score > 0 {
			sum += h.Score
			n++
		}
	}
	if n == 0 {
		return 0, false
	}
	return sum / n, true
}
