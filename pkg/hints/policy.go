package hints

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// Topology manager policy names, identical to the kubelet's
// --topology-manager-policy values.
const (
	PolicyNone           = "none"
	PolicyBestEffort     = "best-effort"
	PolicyRestricted     = "restricted"
	PolicySingleNUMANode = "single-numa-node"
)

// Topology manager scopes (--topology-manager-scope).
const (
	ScopeContainer = "container"
	ScopePod       = "pod"
)

// Topology manager policy option names (topologyManagerPolicyOptions).
const (
	OptPreferClosestNUMANodes = "prefer-closest-numa-nodes"
	OptMaxAllowableNUMANodes  = "max-allowable-numa-nodes"
)

// DefaultMaxAllowableNUMANodes is the kubelet's limit on NUMA nodes: past it
// the number of masks to enumerate explodes, so the topology manager refuses
// to start unless max-allowable-numa-nodes raises it.
const DefaultMaxAllowableNUMANodes = 8

// ValidatePolicy returns an error unless name is a known policy.
func ValidatePolicy(name string) error {
	switch name {
	case PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode:
		return nil
	}
	return fmt.Errorf("unknown topology manager policy %q (want %s, %s, %s or %s)",
		name, PolicyNone, PolicyBestEffort, PolicyRestricted, PolicySingleNUMANode)
}

// ValidateScope returns an error unless name is a known scope.
func ValidateScope(name string) error {
	switch name {
	case ScopeContainer, ScopePod:
		return nil
	}
	return fmt.Errorf("unknown topology manager scope %q (want %s or %s)", name, ScopeContainer, ScopePod)
}

// Options are the parsed topology manager policy options.
type Options struct {
	// PreferClosestNUMA breaks ties between equally narrow hints by the
	// average NUMA distance (ignored by single-numa-node).
	PreferClosestNUMA bool
	// MaxAllowableNUMANodes is the most NUMA nodes the topology manager
	// accepts on a machine.
	MaxAllowableNUMANodes int
	// KubeletVersion is the kubelet release whose merge rules are
	// followed (config key kubelet_version; zero is 1.38). Not a
	// topology manager option: ParseOptions leaves it zero. No merge rule
	// that decides an affinity differs between 1.37 and 1.38; 1.38 gives
	// the merged hint a Score (mergedScore), which decides nothing.
	KubeletVersion kubever.Version
}

// DefaultOptions are the options when none are given.
func DefaultOptions() Options {
	return Options{MaxAllowableNUMANodes: DefaultMaxAllowableNUMANodes}
}

// ParseOptions turns the topology_manager_policy_options table into
// Options. An unknown name or a value that does not parse is an error
// naming the option and the value.
func ParseOptions(opts map[string]string) (Options, error) {
	o := DefaultOptions()
	names := slices.Sorted(maps.Keys(opts)) // report the same first error on every run
	for _, name := range names {
		value := opts[name]
		switch name {
		case OptPreferClosestNUMANodes:
			b, err := strconv.ParseBool(value)
			if err != nil {
				return Options{}, fmt.Errorf("bad value %q for option %q: want true or false", value, name)
			}
			o.PreferClosestNUMA = b
		case OptMaxAllowableNUMANodes:
			n, err := strconv.Atoi(value)
			if err != nil {
				return Options{}, fmt.Errorf("bad value %q for option %q: want an integer", value, name)
			}
			// The kubelet only allows raising the limit; a Mask holds at
			// most MaxNUMANodes nodes.
			if n < DefaultMaxAllowableNUMANodes || n > MaxNUMANodes {
				return Options{}, fmt.Errorf("bad value %q for option %q: want %d to %d", value, name, DefaultMaxAllowableNUMANodes, MaxNUMANodes)
			}
			o.MaxAllowableNUMANodes = n
		default:
			return Options{}, fmt.Errorf("unknown topology manager policy option %q (known: %s, %s)", name, OptPreferClosestNUMANodes, OptMaxAllowableNUMANodes)
		}
	}
	return o, nil
}

// TooManyNUMANodesError is returned at start-up when the machine has more
// NUMA nodes than max-allowable-numa-nodes allows.
type TooManyNUMANodesError struct {
	Nodes int // NUMA nodes on the machine
	Max   int // the configured (or default) limit
}

// Error names both numbers and the option that raises the limit.
func (e *TooManyNUMANodesError) Error() string {
	return fmt.Sprintf("the topology manager supports at most %d NUMA nodes and this machine has %d; raise %s to at least %d or use topology manager policy none",
		e.Max, e.Nodes, OptMaxAllowableNUMANodes, e.Nodes)
}

// NUMAInfo is the NUMA part of the machine the merge needs: the node ids
// that hints may name and the distances between them. It is plain data; the
// caller reads it from the topology.
type NUMAInfo struct {
	nodes     []int
	all       Mask
	distances map[int]map[int]int
}

// NewNUMAInfo checks nodes against the option limit and the Mask capacity
// and returns the NUMAInfo. distances[a][b] is the distance from a to b (as
// in nodeA/distance); missing entries count as 0, which makes
// prefer-closest-numa-nodes fall back to the narrowest-mask tie-break.
func NewNUMAInfo(nodes []int, distances map[int]map[int]int, opts Options) (NUMAInfo, error) {
	if len(nodes) == 0 {
		return NUMAInfo{}, fmt.Errorf("no NUMA nodes")
	}
	max := opts.MaxAllowableNUMANodes
	if max == 0 {
		max = DefaultMaxAllowableNUMANodes
	}
	if len(nodes) > max {
		return NUMAInfo{}, &TooManyNUMANodesError{Nodes: len(nodes), Max: max}
	}
	n := NUMAInfo{nodes: append([]int(nil), nodes...), distances: map[int]map[int]int{}}
	sort.Ints(n.nodes)
	for i, id := range n.nodes {
		if id < 0 || id >= MaxNUMANodes {
			return NUMAInfo{}, fmt.Errorf("NUMA node id %d out of range [0, %d)", id, MaxNUMANodes)
		}
		if i > 0 && n.nodes[i-1] == id {
			return NUMAInfo{}, fmt.Errorf("NUMA node %d listed twice", id)
		}
		n.all |= NewMask(id)
	}
	for a, row := range distances {
		n.distances[a] = make(map[int]int, len(row))
		for b, d := range row {
			n.distances[a][b] = d
		}
	}
	return n, nil
}

// Nodes returns the node ids, ascending.
func (n NUMAInfo) Nodes() []int { return append([]int(nil), n.nodes...) }

// DefaultAffinity is the mask of every node: the affinity of the default
// hint.
func (n NUMAInfo) DefaultAffinity() Mask { return n.all }

// distanceSum is the sum of the distances over all ordered pairs of nodes
// of m, self pairs included. Divided by Count()^2 it is the kubelet's
// average distance; masks of equal size compare the same by either.
func (n NUMAInfo) distanceSum(m Mask) int {
	sum := 0
	nodes := m.Nodes()
	for _, a := range nodes {
		for _, b := range nodes {
			sum += n.distances[a][b]
		}
	}
	return sum
}

// AverageDistance is the mean distance over all ordered pairs of nodes of m
// (self pairs included); 0 for the empty mask.
func (n NUMAInfo) AverageDistance(m Mask) float64 {
	c := m.Count()
	if c == 0 {
		return 0
	}
	return float64(n.distanceSum(m)) / float64(c*c)
}

// Narrowest returns the narrower of a and b: fewer nodes, then the
// numerically smaller mask.
func (n NUMAInfo) Narrowest(a, b Mask) Mask {
	if b.IsNarrowerThan(a) {
		return b
	}
	return a
}

// Closest returns, of two masks, the one with fewer nodes; for equally wide
// masks the one with the smaller average distance, then the numerically
// smaller one.
func (n NUMAInfo) Closest(a, b Mask) Mask {
	if a.Count() != b.Count() {
		return n.Narrowest(a, b)
	}
	// Same size, so the pair counts are equal and the sums compare exactly
	// like the averages.
	da, db := n.distanceSum(a), n.distanceSum(b)
	switch {
	case da < db:
		return a
	case db < da:
		return b
	case b < a:
		return b
	}
	return a
}
