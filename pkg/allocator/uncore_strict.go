package allocator

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator/take"
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

// strictAvail is the CPUs a strict placement may use: the allocatable
// ones, minus under full-pcpus-only every core not wholly allocatable, and
// minus under "exclusive" every cache in which a CPU is held by an
// exclusive container (other than the pod's reusable init-container CPUs).
func (s *Static) strictAvail(def, allocatable, reusable take.Bits) take.Bits {
	m := s.m
	avail := allocatable
	if s.opts.FullPCPUsOnly {
		avail = avail.Clone()
		cores := m.Cores()
		for c := range cores.IDs() {
			if !m.CoreWithin(c, allocatable) {
				for _, p := range cores.CPUs(c) {
					avail.Clear(p)
				}
			}
		}
	}
	if s.opts.StrictUncoreCache == UncoreStrictExclusive {
		// Every CPU that is neither shared nor reserved is some
		// container's exclusive CPU.
		held := m.All().AndNot(def).AndNot(s.reservedBits).AndNot(reusable)
		l3s := m.L3s()
		for g := range l3s.IDs() {
			if held.Intersects(l3s.Mask(g)) {
				avail = avail.AndNot(l3s.Mask(g))
			}
		}
	}
	return avail
}

// uncoreError is the refusal of n CPUs that a strict plan missed.
func (s *Static) uncoreError(n int, miss take.StrictMiss) *UncoreCacheAlignmentError {
	return &UncoreCacheAlignmentError{RequestedCPUs: n, CacheCPUs: s.m.LargestL3(),
		Exclusive: s.opts.StrictUncoreCache == UncoreStrictExclusive,
		Largest:   miss.Largest, WholeFree: miss.WholeFree}
}

// placeStrict is Allocate's choice under the strict option: inside the
// hinted NUMA nodes if the rules can be met there, else anywhere, else an
// *UncoreCacheAlignmentError.
func (s *Static) placeStrict(def, allocatable, reusable take.Bits, n int, aff hints.Mask) (take.Bits, error) {
	avail := s.strictAvail(def, allocatable, reusable)
	if aff != 0 {
		inHint := avail.And(s.alignedMask(aff))
		if plan, ok, _ := s.m.PlanStrict(inHint, n); ok {
			if got := s.m.TakeStrict(inHint, plan, s.opts.KubeletVersion == kubever.V137); got != nil {
				return got, nil
			}
		}
	}
	plan, ok, miss := s.m.PlanStrict(avail, n)
	if !ok {
		return nil, s.uncoreError(n, miss)
	}
	got := s.m.TakeStrict(avail, plan, s.opts.KubeletVersion == kubever.V137)
	if got == nil {
		return nil, &InsufficientCPUsError{Requested: n, Available: allocatable.Count()}
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
	def := m.MaskBits(st.Default)
	if s.opts.FullPCPUsOnly {
		if req.CPUs%m.CPUsPerCore() != 0 {
			return &SMTAlignmentError{RequestedCPUs: req.CPUs, CpusPerCore: m.CPUsPerCore()}
		}
		if availPhys := def.AndNotCount(s.reservedPhysBits); req.CPUs > availPhys {
			return &SMTAlignmentError{RequestedCPUs: req.CPUs, CpusPerCore: m.CPUsPerCore(), AvailablePhysicalCPUs: availPhys, CausedByPhysicalCPUs: true}
		}
	}
	reusable := s.reusable(st, req.Pod)
	allocatable := def.AndNot(s.reservedBits).Or(reusable)
	if avail := allocatable.Count(); req.CPUs > avail {
		return &InsufficientCPUsError{Requested: req.CPUs, Available: avail}
	}
	if _, ok, miss := m.PlanStrict(s.strictAvail(def, allocatable, reusable), req.CPUs); !ok {
		return s.uncoreError(req.CPUs, miss)
	}
	return nil
}

// strictHints drops the CPU hints whose NUMA nodes cannot hold the
// container under the strict rules, so that restricted and
// single-numa-node never admit what the allocation then refuses.
// Preference is left as generated.
func (s *Static) strictHints(st State, req Request, in []hints.Hint) []hints.Hint {
	m := s.m
	def := m.MaskBits(st.Default)
	reusable := s.reusable(st, req.Pod)
	avail := s.strictAvail(def, def.AndNot(s.reservedBits).Or(reusable), reusable)
	out := in[:0:0]
	for _, h := range in {
		if _, ok, _ := m.PlanStrict(avail.And(s.alignedMask(h.Affinity)), req.CPUs); ok {
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
	b := s.m.ToBits(cpus)
	l3s := s.m.L3s()
	var out []int
	for g, id := range l3s.IDs() {
		if b.Intersects(l3s.Mask(g)) {
			out = append(out, id)
		}
	}
	return out
}
