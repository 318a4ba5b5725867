package hints

import (
	"fmt"
	"sort"
)

// Merger merges the hints of all providers for one container (container
// scope) or one pod (pod scope) under one topology manager policy, and
// decides admission. It is immutable and safe for concurrent use.
type Merger struct {
	policy string
	numa   NUMAInfo
	opts   Options
}

// NewMerger returns the merger of a policy on a machine. The NUMA-node
// limit (max-allowable-numa-nodes) is checked by NewNUMAInfo; policy "none"
// is accepted with any NUMAInfo.
func NewMerger(policy string, numa NUMAInfo, opts Options) (*Merger, error) {
	if err := ValidatePolicy(policy); err != nil {
		return nil, err
	}
	if policy != PolicyNone && len(numa.nodes) == 0 {
		return nil, fmt.Errorf("topology manager policy %q needs the machine's NUMA nodes", policy)
	}
	return &Merger{policy: policy, numa: numa, opts: opts}, nil
}

// Policy is the merger's policy name.
func (m *Merger) Policy() string { return m.policy }

// NUMA is the merger's NUMA information.
func (m *Merger) NUMA() NUMAInfo { return m.numa }

// Merge returns the best hint for the hints of every provider. Each
// provider maps resource names to hints; a provider with no resources, or a
// resource with a nil list, has no preference ({any, preferred}); a
// resource with an empty non-nil list cannot be placed ({any, not
// preferred}). A hint with an empty Affinity means any node.
//
// The rules are KEP-693's, with the kubelet's tie-breaks:
//
//  1. policy none consults nothing: the result is {any, not preferred};
//  2. single-numa-node first keeps, per resource, only preferred hints that
//     name one node or no node;
//  3. every combination of one hint per resource is merged: the affinity is
//     the AND of the non-empty affinities (starting from all nodes), and is
//     preferred only when every hint is preferred and every non-empty
//     affinity is the same;
//  4. combinations whose affinity is empty are dropped; of the rest the best
//     is chosen by compare;
//  5. no candidate at all gives the default hint {all nodes, not preferred};
//  6. single-numa-node reports a result of all nodes as {any, ...}.
func (m *Merger) Merge(providers ...map[string][]Hint) Hint {
	// Step 1.
	if m.policy == PolicyNone {
		return Hint{}
	}
	lists := flatten(providers)
	// Step 2.
	if m.policy == PolicySingleNUMANode {
		lists = singleNUMAOnly(lists)
	}
	best, ok := m.mergeLists(lists)
	// Step 5.
	if !ok {
		best = Hint{Affinity: m.numa.all}
	}
	// Step 6.
	if m.policy == PolicySingleNUMANode && best.Affinity == m.numa.all {
		best.Affinity = 0
	}
	return best
}

// flatten turns the providers' maps into one hint list per resource, with
// the no-preference and cannot-be-placed cases made explicit. Resources are
// taken in name order so that runs are reproducible.
func flatten(providers []map[string][]Hint) [][]Hint {
	var lists [][]Hint
	for _, p := range providers {
		if len(p) == 0 {
			lists = append(lists, []Hint{{Preferred: true}})
			continue
		}
		names := make([]string, 0, len(p))
		for name := range p {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			hs := p[name]
			switch {
			case hs == nil:
				lists = append(lists, []Hint{{Preferred: true}})
			case len(hs) == 0:
				lists = append(lists, []Hint{{Preferred: false}})
			default:
				lists = append(lists, hs)
			}
		}
	}
	return lists
}

// singleNUMAOnly keeps the preferred hints that name one node or no node.
// A resource left with no hint makes every combination impossible.
func singleNUMAOnly(lists [][]Hint) [][]Hint {
	out := make([][]Hint, len(lists))
	for i, hs := range lists {
		kept := make([]Hint, 0, len(hs))
		for _, h := range hs {
			if h.Preferred && h.Affinity.Count() <= 1 {
				kept = append(kept, h)
			}
		}
		out[i] = kept
	}
	return out
}

// bestNonPreferredCount is, over the resources, the largest of each
// resource's narrowest non-empty affinity size: a non-preferred result is
// best when it is exactly that wide, so that it still covers the resource
// that needs the most nodes.
func bestNonPreferredCount(lists [][]Hint) int {
	best := 0
	for _, hs := range lists {
		var narrowest Mask
		for _, h := range hs {
			if h.Affinity == 0 {
				continue
			}
			if narrowest == 0 || h.Affinity.IsNarrowerThan(narrowest) {
				narrowest = h.Affinity
			}
		}
		if c := narrowest.Count(); c > best {
			best = c
		}
	}
	return best
}

// mergeLists walks the cross product of lists (an odometer over one index
// per resource, so no permutation slice is allocated) and returns the best
// merged hint, or false when no combination has a non-empty affinity.
func (m *Merger) mergeLists(lists [][]Hint) (Hint, bool) {
	for _, hs := range lists {
		if len(hs) == 0 {
			return Hint{}, false
		}
	}
	bestCount := bestNonPreferredCount(lists)
	idx := make([]int, len(lists))
	var best Hint
	found := false
	for {
		// Step 3.
		affinity := m.numa.all
		preferred := true
		var first Mask
		for i, hs := range lists {
			h := hs[idx[i]]
			if h.Affinity != 0 {
				if first == 0 {
					first = h.Affinity
				} else if h.Affinity != first {
					preferred = false
				}
				affinity &= h.Affinity
			}
			if !h.Preferred {
				preferred = false
			}
		}
		// Step 4.
		if affinity != 0 {
			cand := Hint{Affinity: affinity, Preferred: preferred}
			if !found {
				best, found = cand, true
			} else {
				best = m.compare(bestCount, best, cand)
			}
		}
		// Advance the odometer.
		i := len(idx) - 1
		for ; i >= 0; i-- {
			idx[i]++
			if idx[i] < len(lists[i]) {
				break
			}
			idx[i] = 0
		}
		if i < 0 {
			return best, found
		}
	}
}

// fitter returns the better of two masks of the same preference: the
// narrower, or under prefer-closest-numa-nodes (except single-numa-node)
// the closer. Equal masks keep current.
func (m *Merger) fitter(current, candidate Hint) Hint {
	if current.Affinity == candidate.Affinity {
		return current
	}
	var best Mask
	if m.opts.PreferClosestNUMA && m.policy != PolicySingleNUMANode {
		best = m.numa.Closest(current.Affinity, candidate.Affinity)
	} else {
		best = m.numa.Narrowest(current.Affinity, candidate.Affinity)
	}
	if best == current.Affinity {
		return current
	}
	return candidate
}

// compare returns the better of the current best hint and a candidate
// (both with non-empty affinities).
//
//	a. a preferred hint beats a non-preferred one;
//	b. of two preferred hints the fitter wins (see fitter);
//	c. of two non-preferred hints the one whose width is closest to, but not
//	   above, bestCount wins (bestNonPreferredCount), with these cases for
//	   the current width w, the candidate width v and b = bestCount:
//	   c1. w > b: the fitter of the two (a narrower candidate moves toward b);
//	   c2. w == b: keep current unless v == b and the candidate is fitter;
//	   c3. w < b: v > b keeps current; v == b takes the candidate; v < b
//	       takes the wider of the two, the fitter when equally wide.
func (m *Merger) compare(bestCount int, current, candidate Hint) Hint {
	// Case a.
	if current.Preferred != candidate.Preferred {
		if candidate.Preferred {
			return candidate
		}
		return current
	}
	// Case b.
	if current.Preferred {
		return m.fitter(current, candidate)
	}
	w, v := current.Affinity.Count(), candidate.Affinity.Count()
	switch {
	case w > bestCount: // Case c1.
		return m.fitter(current, candidate)
	case w == bestCount: // Case c2.
		if v != bestCount {
			return current
		}
		return m.fitter(current, candidate)
	case v > bestCount: // Case c3, candidate too wide.
		return current
	case v == bestCount: // Case c3, candidate exactly as wide as wanted.
		return candidate
	case v > w: // Case c3, candidate closer to bestCount.
		return candidate
	case v < w: // Case c3, candidate further from bestCount.
		return current
	}
	return m.fitter(current, candidate) // Case c3, equally wide.
}

// Admits reports whether the policy admits a container whose merged hint is
// best: best-effort and none always; restricted and single-numa-node only a
// preferred hint (after single-numa-node's filtering a preferred hint names
// one node, or no node when no provider had a preference).
func (m *Merger) Admits(best Hint) bool {
	switch m.policy {
	case PolicyRestricted, PolicySingleNUMANode:
		return best.Preferred
	}
	return true
}

// Admit returns nil when the policy admits best, else a
// *TopologyAffinityError carrying request (a description of what was asked
// for, for the error text) and the rejected hint.
func (m *Merger) Admit(best Hint, request string) error {
	if m.Admits(best) {
		return nil
	}
	return &TopologyAffinityError{Policy: m.policy, Request: request, Hint: best}
}

// TopologyAffinityError is a rejection by the restricted or
// single-numa-node policy: the resources cannot be allocated with the
// required NUMA locality.
type TopologyAffinityError struct {
	Policy  string // the topology manager policy that rejected
	Request string // what was asked for (e.g. "pod p container c: 4 CPUs")
	Hint    Hint   // the merged hint that was not good enough
}

// Reason is "TopologyAffinityError", the kubelet's admission error name.
func (e *TopologyAffinityError) Reason() string { return "TopologyAffinityError" }

func (e *TopologyAffinityError) Error() string {
	aff := "any"
	if e.Hint.Affinity != 0 {
		aff = "NUMA " + e.Hint.Affinity.String()
	}
	want := "a preferred affinity"
	if e.Policy == PolicySingleNUMANode {
		want = "a preferred single-NUMA-node affinity"
	}
	return fmt.Sprintf("%s: resources cannot be allocated with topology locality: %s: policy %s needs %s, best merged hint is %s (preferred=%t)",
		e.Reason(), e.Request, e.Policy, want, aff, e.Hint.Preferred)
}
