package allocator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// strict-align-cpus-by-uncorecache: this project's own extension of
// KEP-4800, which leaves "a strict uncore cache alignment policy" to future
// work. prefer-align-cpus-by-uncorecache is best effort: a container that
// cannot be aligned is still admitted, spread over caches. Under the strict
// form an exclusive container is placed so, or refused with
// UncoreCacheAlignmentError:
//
//   - a container asking for at most the CPUs of the largest uncore cache
//     gets CPUs of exactly one cache: the most-used cache whose assignable
//     CPUs hold it (best fit, as KEP-4800's walk), ties in the cache walk
//     order (NUMA nodes most-used first, then cache id);
//   - a larger container gets whole free caches (every CPU of the cache
//     assignable), taken in the walk order while the need is at least a
//     cache, and the rest from exactly one more cache, best fit again.
//
// Inside the chosen cache the CPUs are the packed best fit (whole cores
// first). Under full-pcpus-only only cores whose every thread is assignable
// count. With a topology hint the placement is tried inside the hint's
// NUMA nodes (their sockets under align-by-socket) first and then on the
// whole machine; it never mixes the two as the kubelet's allocateCPUs does.
//
// "exclusive" adds: a cache any CPU of which an exclusive container holds
// is out of bounds for every other exclusive container (the pod's reusable
// init-container CPUs excepted). Its unused CPUs stay in the shared pool.

// UncoreStrictness is the value of strict-align-cpus-by-uncorecache.
type UncoreStrictness int

// The values of strict-align-cpus-by-uncorecache.
const (
	UncoreStrictOff       UncoreStrictness = iota // "false" or absent
	UncoreStrict                                  // "true"
	UncoreStrictExclusive                         // "exclusive"
)

// ValueExclusive is the option value of UncoreStrictExclusive.
const ValueExclusive = "exclusive"

// String is the option value ("false", "true", "exclusive").
func (u UncoreStrictness) String() string {
	switch u {
	case UncoreStrict:
		return "true"
	case UncoreStrictExclusive:
		return ValueExclusive
	}
	return "false"
}

// parseUncoreStrictness reads the option value as the kubelet reads its
// boolean options (strconv.ParseBool), plus "exclusive".
func parseUncoreStrictness(v string) (UncoreStrictness, error) {
	if strings.EqualFold(v, ValueExclusive) {
		return UncoreStrictExclusive, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return UncoreStrictOff, fmt.Errorf("want true, false or %s, got %q", ValueExclusive, v)
	}
	if b {
		return UncoreStrict, nil
	}
	return UncoreStrictOff, nil
}

// ReasonUncoreCacheAlignment is the reason word of a container the strict
// uncore option cannot place.
const ReasonUncoreCacheAlignment = "UncoreCacheAlignmentError"

// UncoreCacheAlignmentError refuses an exclusive container that
// strict-align-cpus-by-uncorecache cannot place.
type UncoreCacheAlignmentError struct {
	RequestedCPUs int
	// CacheCPUs is the size of the largest uncore cache: up to it a
	// container needs one cache, above it whole free caches.
	CacheCPUs int
	Exclusive bool
	// Largest is the most assignable CPUs of one usable cache (a request
	// up to CacheCPUs); WholeFree is the number of whole free usable
	// caches (a larger request).
	Largest, WholeFree int
}

// Error starts with the reason word and says what was missing.
func (e *UncoreCacheAlignmentError) Error() string {
	mode := OptStrictAlignByUncoreCache
	usable := "uncore cache"
	if e.Exclusive {
		mode += "=" + ValueExclusive
		usable = "uncore cache no other exclusive container uses"
	}
	if e.RequestedCPUs <= e.CacheCPUs {
		return fmt.Sprintf("%s: requested %d CPUs do not fit in one %s (%s; the most assignable CPUs in one such cache: %d of %d)",
			ReasonUncoreCacheAlignment, e.RequestedCPUs, usable, mode, e.Largest, e.CacheCPUs)
	}
	return fmt.Sprintf("%s: requested %d CPUs need whole free uncore caches of %d CPUs plus at most one partly used %s (%s; whole free caches: %d)",
		ReasonUncoreCacheAlignment, e.RequestedCPUs, e.CacheCPUs, usable, mode, e.WholeFree)
}

// Reason is "UncoreCacheAlignmentError".
func (e *UncoreCacheAlignmentError) Reason() string { return ReasonUncoreCacheAlignment }

var _ Reasoner = (*UncoreCacheAlignmentError)(nil)

// strict reports whether the strict uncore option is on.
func (s *Static) strict() bool { return s.opts.StrictUncoreCache != UncoreStrictOff }

// StrictUncore is the strict-align-cpus-by-uncorecache setting.
func (s *Static) StrictUncore() UncoreStrictness { return s.opts.StrictUncoreCache }

// largestL3 is the CPUs of the largest uncore cache.
func (m *machine) largestL3() int {
	n := 0
	for g := range m.l3s.ids {
		if sz := m.l3s.size(g); sz > n {
			n = sz
		}
	}
	return n
}

// strictAvail is the CPUs a strict placement may use: the allocatable
// ones, minus under full-pcpus-only every core not wholly allocatable, and
// minus under "exclusive" every cache in which a CPU is held by an
// exclusive container (other than the pod's reusable init-container CPUs).
func (s *Static) strictAvail(def, allocatable, reusable bitset) bitset {
	m := s.m
	avail := allocatable
	if s.opts.FullPCPUsOnly {
		avail = avail.clone()
		for c, cpus := range m.cores.cpus {
			if !m.coreWithin(c, allocatable) {
				for _, p := range cpus {
					avail.clear(p)
				}
			}
		}
	}
	if s.opts.StrictUncoreCache == UncoreStrictExclusive {
		// Every CPU that is neither shared nor reserved is some
		// container's exclusive CPU.
		held := m.all().andNot(def).andNot(s.reservedBits).andNot(reusable)
		for g := range m.l3s.ids {
			if held.intersects(m.l3s.mask[g]) {
				avail = avail.andNot(m.l3s.mask[g])
			}
		}
	}
	return avail
}

// wholeCores is the CPUs of the cores set holds entirely.
func (m *machine) wholeCores(set bitset) bitset {
	whole := newBitset(m.n)
	for c := range m.cores.cpus {
		if m.coreWithin(c, set) {
			whole = whole.or(m.cores.mask[c])
		}
	}
	return whole
}

func (m *machine) coreWithin(c int, set bitset) bool {
	for _, p := range m.cores.cpus[c] {
		if !set.has(p) {
			return false
		}
	}
	return true
}

// strictPlan is a strict placement: whole caches plus at most one partly
// used cache (partial -1 when none) from which k CPUs are taken.
type strictPlan struct {
	whole      []int
	partial, k int
}

// planStrict chooses the caches for n CPUs out of avail; ok false when the
// strict rules cannot be met. It looks at counts only, so hint generation
// can ask it for every NUMA node combination.
func (m *machine) planStrict(avail bitset, n int) (strictPlan, bool, *UncoreCacheAlignmentError) {
	nl := len(m.l3s.ids)
	free := make([]int, nl)
	for g := range free {
		free[g] = avail.andCount(m.l3s.mask[g])
	}
	// Walk order: NUMA nodes by ascending assignable CPUs then id (the
	// kubelet's best fit), each cache under its lowest NUMA node, then by
	// ascending assignable CPUs and id.
	nodeFree := make([]int, len(m.numas.ids))
	for g := range nodeFree {
		nodeFree[g] = avail.andCount(m.numas.mask[g])
	}
	nodes := make([]int, 0, len(nodeFree))
	for g := range nodeFree {
		nodes = append(nodes, g)
	}
	sortByFree(nodes, nodeFree)
	seen := make([]bool, nl)
	order := make([]int, 0, nl)
	for _, nd := range nodes {
		start := len(order)
		for _, u := range m.numaL3[nd] {
			if !seen[u] && free[u] > 0 {
				seen[u] = true
				order = append(order, u)
			}
		}
		sortByFree(order[start:], free)
	}
	fail := &UncoreCacheAlignmentError{RequestedCPUs: n, CacheCPUs: m.largestL3()}
	for _, u := range order {
		if free[u] > fail.Largest {
			fail.Largest = free[u]
		}
		if free[u] == m.l3s.size(u) {
			fail.WholeFree++
		}
	}
	// bestFit is the cache with the fewest assignable CPUs >= need, ties
	// in walk order.
	bestFit := func(need int, skip []bool) int {
		best := -1
		for _, u := range order {
			if skip[u] || free[u] < need {
				continue
			}
			if best < 0 || free[u] < free[best] {
				best = u
			}
		}
		return best
	}
	taken := make([]bool, nl)
	var plan strictPlan
	need := n
	if n > fail.CacheCPUs {
		for _, u := range order {
			if sz := m.l3s.size(u); free[u] == sz && need >= sz {
				plan.whole = append(plan.whole, u)
				taken[u] = true
				need -= sz
			}
		}
	}
	plan.partial = -1
	if need > 0 {
		u := bestFit(need, taken)
		if u < 0 {
			return strictPlan{}, false, fail
		}
		plan.partial, plan.k = u, need
	}
	return plan, true, nil
}

// takeStrict turns a plan into CPUs: the whole caches, and the packed best
// fit (whole cores first) inside the partly used cache.
func (m *machine) takeStrict(avail bitset, p strictPlan, v137 bool) bitset {
	out := newBitset(m.n)
	for _, u := range p.whole {
		out = out.or(m.l3s.mask[u])
	}
	if p.partial >= 0 {
		got := m.takePacked(avail.and(m.l3s.mask[p.partial]), p.k, fit{v137: v137})
		if got == nil {
			return nil
		}
		out = out.or(got)
	}
	return out
}

// placeStrict is Allocate's choice under the strict option: inside the
// hinted NUMA nodes if the rules can be met there, else anywhere, else an
// *UncoreCacheAlignmentError.
func (s *Static) placeStrict(def, allocatable, reusable bitset, n int, aff hints.Mask) (bitset, error) {
	avail := s.strictAvail(def, allocatable, reusable)
	if aff != 0 {
		inHint := avail.and(s.alignedMask(aff))
		if plan, ok, _ := s.m.planStrict(inHint, n); ok {
			if got := s.m.takeStrict(inHint, plan, s.opts.KubeletVersion == kubever.V137); got != nil {
				return got, nil
			}
		}
	}
	plan, ok, fail := s.m.planStrict(avail, n)
	if !ok {
		fail.Exclusive = s.opts.StrictUncoreCache == UncoreStrictExclusive
		return nil, fail
	}
	got := s.m.takeStrict(avail, plan, s.opts.KubeletVersion == kubever.V137)
	if got == nil {
		return nil, &InsufficientCPUsError{Requested: n, Available: allocatable.count()}
	}
	return got, nil
}

// CheckStrictUncore is the admission check of the strict uncore option for
// a container without CPUs yet, run before the topology manager's: the
// full-pcpus-only checks Allocate would make (so the kubelet's reason
// comes first), then whether the strict rules can be met anywhere on the
// machine (*UncoreCacheAlignmentError if not). nil when the option is off,
// the container is shared or already has CPUs.
func (s *Static) CheckStrictUncore(st State, req Request) error {
	if !s.strict() || req.CPUs < 1 {
		return nil
	}
	if _, ok := st.Assignments[req.Pod][req.Container]; ok {
		return nil
	}
	m := s.m
	def := m.maskBits(st.Default)
	if s.opts.FullPCPUsOnly {
		if req.CPUs%m.cpusPerCore != 0 {
			return &SMTAlignmentError{RequestedCPUs: req.CPUs, CpusPerCore: m.cpusPerCore}
		}
		if availPhys := def.andNotCount(s.reservedPhysBits); req.CPUs > availPhys {
			return &SMTAlignmentError{RequestedCPUs: req.CPUs, CpusPerCore: m.cpusPerCore, AvailablePhysicalCPUs: availPhys, CausedByPhysicalCPUs: true}
		}
	}
	reusable := s.reusable(st, req.Pod)
	allocatable := def.andNot(s.reservedBits).or(reusable)
	if avail := allocatable.count(); req.CPUs > avail {
		return &InsufficientCPUsError{Requested: req.CPUs, Available: avail}
	}
	if _, ok, fail := m.planStrict(s.strictAvail(def, allocatable, reusable), req.CPUs); !ok {
		fail.Exclusive = s.opts.StrictUncoreCache == UncoreStrictExclusive
		return fail
	}
	return nil
}

// strictHints drops the CPU hints whose NUMA nodes cannot hold the
// container under the strict rules, so that restricted and
// single-numa-node never admit what the allocation then refuses.
// Preference is left as generated.
func (s *Static) strictHints(st State, req Request, in []hints.Hint) []hints.Hint {
	m := s.m
	def := m.maskBits(st.Default)
	reusable := s.reusable(st, req.Pod)
	avail := s.strictAvail(def, def.andNot(s.reservedBits).or(reusable), reusable)
	out := in[:0:0]
	for _, h := range in {
		if _, ok, _ := m.planStrict(avail.and(s.alignedMask(h.Affinity)), req.CPUs); ok {
			out = append(out, h)
		}
	}
	return out
}

// UncoreCaches is the uncore cache ids cpus lie in, ascending.
func (s *Static) UncoreCaches(st State, pod, container string) []int {
	cpus, ok := st.Assignments[pod][container]
	if !ok {
		return nil
	}
	b := s.m.toBits(cpus)
	var out []int
	for g, id := range s.m.l3s.ids {
		if b.intersects(s.m.l3s.mask[g]) {
			out = append(out, id)
		}
	}
	return out
}
