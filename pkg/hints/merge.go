package hints

import (
	"fmt"
	"maps"
	"slices"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
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
	return m.merge(flatten(providers))
}

// MergeLists is Merge for a caller that holds one hint list per resource,
// in merge order, with a provider map's conventions: a nil list is no
// preference, an empty one cannot be placed. It spares the admission path
// the maps Merge takes.
func (m *Merger) MergeLists(lists ...[]Hint) Hint {
	if m.policy == PolicyNone {
		return Hint{}
	}
	out := make([][]Hint, len(lists))
	for i, hs := range lists {
		out[i] = explicit(hs)
	}
	return m.merge(out)
}

// merge is Merge from step 2 on, over one explicit list per resource.
func (m *Merger) merge(lists [][]Hint) Hint {
	// Step 2.
	if m.policy == PolicySingleNUMANode {
		lists = singleNUMAOnly(lists)
	}
	best, ok := m.mergeLists(lists)
	// Step 5.
	if !ok {
		best = Hint{Affinity: m.numa.all}
	} else if m.opts.KubeletVersion != kubever.V137 {
		best.Score = mergedScore(lists, best, m.numa.all)
	}
	// Step 6: the kubelet rewrites the hint as {nil, preferred}, Score 0.
	if m.policy == PolicySingleNUMANode && best.Affinity == m.numa.all {
		best = Hint{Preferred: best.Preferred}
	}
	return best
}

// maxScoreWalk bounds the combinations mergedScore visits; past it the
// merged hint gets Score 0 (no signal), which moves nothing.
const maxScoreWalk = 1 << 20

// mergedScore is the Score the kubelet's merge gives best (kubelet v1.38):
// the mean score (AggregateScores) of the first combination, in its walk
// order (the first resource's hints outermost), whose merged hint is best,
// as compare keeps the current hint against an equal one. mergeLists folds
// equal merges together, so the combination is looked for again here,
// leaving every branch that can no longer merge to best. (Across the
// resources of one provider the kubelet's order is its map's, random; it
// is by resource name here.)
func mergedScore(lists [][]Hint, best Hint, all Mask) int64 {
	// Only hints that keep the AND a superset of best can be in such a
	// combination; floor[i] is the narrowest AND lists i.. could reach
	// with them (the AND of all their masks), so a branch whose AND with
	// it is still wider than best is left at once.
	cand := make([][]Hint, len(lists))
	floor := make([]Mask, len(lists)+1)
	floor[len(lists)] = all
	scored := false
	for i := len(lists) - 1; i >= 0; i-- {
		narrow := all
		for _, h := range lists[i] {
			if a := maskOr(h.Affinity, all); a&best.Affinity == best.Affinity && (h.Preferred || !best.Preferred) {
				cand[i] = append(cand[i], h)
				narrow &= a
				scored = scored || (h.Affinity != 0 && h.Score > 0)
			}
		}
		if len(cand[i]) == 0 {
			return 0
		}
		floor[i] = floor[i+1] & narrow
	}
	if !scored {
		return 0
	}
	perm := make([]Hint, 0, len(lists))
	steps := 0
	var walk func(p partial) (int64, bool)
	walk = func(p partial) (int64, bool) {
		i := len(perm)
		if i == len(lists) {
			if p.affinity(all) != best.Affinity || p.pref != best.Preferred {
				return 0, false
			}
			score, _ := AggregateScores(perm)
			return score, true
		}
		for _, h := range cand[i] {
			if steps++; steps > maxScoreWalk {
				return 0, true
			}
			q := p.extend(h, all)
			if q.affinity(all)&floor[i+1] != best.Affinity || (best.Preferred && !q.pref) {
				continue
			}
			perm = append(perm, h)
			score, ok := walk(q)
			perm = perm[:i]
			if ok {
				return score, true
			}
		}
		return 0, false
	}
	score, _ := walk(partial{pref: true})
	return score
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
		names := slices.Sorted(maps.Keys(p))
		for _, name := range names {
			lists = append(lists, explicit(p[name]))
		}
	}
	return lists
}

// explicit makes a provider's list explicit: nil (no preference) is one
// preferred any-node hint, empty (cannot be placed) one non-preferred.
func explicit(hs []Hint) []Hint {
	switch {
	case hs == nil:
		return []Hint{{Preferred: true}}
	case len(hs) == 0:
		return []Hint{{Preferred: false}}
	}
	return hs
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

// partial is what matters of a combination of hints from the first k
// resources for the final merged hint. pref: every hint so far preferred
// and every non-empty affinity equal to mask (0: none seen yet), the AND
// being mask (or all nodes). !pref: mask is the AND so far.
type partial struct {
	mask Mask
	pref bool
}

// foldCombinations is the number of combinations up to which mergeLists
// folds rather than counts (about where the two cost the same on 8 nodes).
const foldCombinations = 2048

// maxDenseNodes bounds the table mergeLists uses to spot repeated partial
// merges: 2 x 2^n entries.
const maxDenseNodes = 16

// denseWidth is n when every mask in play fits in the low n bits (all nodes
// are 0..n-1, n <= maxDenseNodes, and no hint names another node), so a
// partial can index a table; else 0 (a map is used).
func denseWidth(all Mask, lists [][]Hint) int {
	n := all.Count()
	if n > maxDenseNodes || all != Mask(1)<<uint(n)-1 {
		return 0
	}
	for _, hs := range lists {
		for _, h := range hs {
			if h.Affinity&^all != 0 {
				return 0
			}
		}
	}
	return n
}

// affinity is the merged affinity of p: the AND with all nodes.
func (p partial) affinity(all Mask) Mask {
	if p.pref && p.mask == 0 {
		return all
	}
	return p.mask & all
}

// extend merges one more hint into p.
func (p partial) extend(h Hint, all Mask) partial {
	switch {
	case !p.pref:
		if h.Affinity != 0 {
			p.mask &= h.Affinity
		}
		return p
	case h.Affinity == 0:
		if h.Preferred {
			return p
		}
	case p.mask == 0:
		if h.Preferred {
			return partial{mask: h.Affinity, pref: true}
		}
		return partial{mask: h.Affinity & all}
	case h.Preferred && h.Affinity == p.mask:
		return p
	}
	return partial{mask: p.affinity(all) & maskOr(h.Affinity, all)}
}

// maskOr is m, or all when m is empty (an any-node hint does not narrow).
func maskOr(m, all Mask) Mask {
	if m == 0 {
		return all
	}
	return m
}

// mergeLists returns the best merged hint over the cross product of lists
// (one hint per resource), or false when no combination has a non-empty
// affinity: by counting (mergeCounted) on machines of up to
// maxCountedNodes nodes numbered from 0, else by folding (mergeFold).
//
// The kubelet walks every combination; compare ranks hints by a total
// order (preference, then width against bestCount, then mask or distance),
// so the best hint depends only on the set of distinct merged hints, not on
// the order or multiplicity of the combinations. The walk is therefore
// folded one resource at a time over the distinct partial merges (at most
// two per mask), and a combination whose AND is already empty is dropped
// early: the result is the kubelet's, at a cost of (distinct partials x
// hints) per resource instead of the product of all list lengths.
func (m *Merger) mergeLists(lists [][]Hint) (Hint, bool) {
	for _, hs := range lists {
		if len(hs) == 0 {
			return Hint{}, false
		}
	}
	// Few combinations: folding them is cheaper than the counting tables.
	combos := 1
	for _, hs := range lists {
		if combos *= len(hs); combos > foldCombinations {
			break
		}
	}
	if n := denseWidth(m.numa.all, lists); combos > foldCombinations && n > 0 && n <= maxCountedNodes {
		if best, found, ok := m.mergeCounted(lists, n); ok {
			return best, found
		}
	}
	return m.mergeFold(lists)
}

// mergeFold is mergeLists by folding one resource at a time over the
// distinct partial merges.
func (m *Merger) mergeFold(lists [][]Hint) (Hint, bool) {
	all := m.numa.all
	if len(lists) == 1 {
		return m.mergeOne(lists[0])
	}
	dense := denseWidth(all, lists)
	var seenDense []uint32 // generation per (mask, pref), when dense > 0
	var seenMap map[partial]struct{}
	if dense > 0 {
		seenDense = make([]uint32, 2<<dense)
	} else {
		seenMap = map[partial]struct{}{}
	}
	states := []partial{{pref: true}}
	for gen, hs := range lists {
		next := make([]partial, 0, len(states)*2)
		clear(seenMap)
		for _, p := range states {
			for _, h := range hs {
				q := p.extend(h, all)
				if q.affinity(all) == 0 {
					continue
				}
				if dense > 0 {
					k := int(q.mask) << 1
					if q.pref {
						k |= 1
					}
					if seenDense[k] == uint32(gen+1) {
						continue
					}
					seenDense[k] = uint32(gen + 1)
				} else {
					if _, dup := seenMap[q]; dup {
						continue
					}
					seenMap[q] = struct{}{}
				}
				next = append(next, q)
			}
		}
		if len(next) == 0 {
			return Hint{}, false
		}
		states = next
	}
	bestCount := bestNonPreferredCount(lists)
	best := Hint{Affinity: states[0].affinity(all), Preferred: states[0].pref}
	for _, p := range states[1:] {
		best = m.compare(bestCount, best, Hint{Affinity: p.affinity(all), Preferred: p.pref})
	}
	return best, true
}

// mergeOne is mergeFold of a single resource (the CPU provider alone, the
// common case): no partials to fold, only the best of its hints. compare is
// a total order, so comparing duplicates again changes nothing.
func (m *Merger) mergeOne(hs []Hint) (Hint, bool) {
	all := m.numa.all
	bestCount := bestNonPreferredCount([][]Hint{hs})
	var best Hint
	found := false
	for _, h := range hs {
		q := partial{pref: true}.extend(h, all)
		c := Hint{Affinity: q.affinity(all), Preferred: q.pref}
		switch {
		case c.Affinity == 0:
		case !found:
			best, found = c, true
		default:
			best = m.compare(bestCount, best, c)
		}
	}
	return best, found
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

// Error starts with the reason word, then names the request, the policy
// and the rejected hint.
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
