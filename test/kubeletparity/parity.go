// Package kubeletparity is the side-by-side check of the allocator against
// the kubelet's own static policy (k8s.io/kubernetes
// pkg/kubelet/cm/cpumanager): seeded random sequences of Guaranteed pods
// added and removed, every container's CPU hints, admission and chosen CPUs
// compared with the kubelet's on the same machine, options and NUMA
// affinity. The kubelet side lives in the module test/kubeletparity/kubelet
// (one source built against each k8s.io/kubernetes release, by its go.mod
// and by go -modfile=v138.mod; it implements Kubelet); this
// package, in the main module, holds the sequences, the engine side and the
// comparison, so both releases run exactly the same inputs.
//
// Where pkg/allocator/doc.go says the allocator differs from the kubelet
// on purpose, the inputs avoid it (Exclusions); nothing is compared loosely
// to hide a difference.
package kubeletparity

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Container is one Guaranteed container of a pod: CPUs whole CPUs
// (requests = limits), an init container when Init.
type Container struct {
	Name string
	CPUs int
	Init bool
}

// Pod is a Guaranteed pod; Containers are in admission order (init
// containers first).
type Pod struct {
	UID        string
	Containers []Container
}

// Hint is a CPU topology hint as both sides give it. Score is kubelet
// v1.38's (0 from v1.37 and under the 1.37 rules).
type Hint struct {
	Affinity  hints.Mask
	Preferred bool
	Score     int64
}

func (h Hint) String() string { return fmt.Sprintf("{%s %v %d}", h.Affinity, h.Preferred, h.Score) }

// Refusal is an admission error reduced to what both sides must agree on:
// the reason word and, for SMTAlignmentError, its numbers. The
// InsufficientCPUs numbers are not compared: doc.go ("InsufficientCPUs
// names the whole request") says why they differ under a NUMA affinity.
type Refusal struct {
	Reason string
	Detail string
}

func (r *Refusal) String() string {
	if r == nil {
		return "admitted"
	}
	if r.Detail == "" {
		return r.Reason
	}
	return r.Reason + "(" + r.Detail + ")"
}

// SMTDetail is the Detail of an SMTAlignmentError, the same text on both
// sides.
func SMTDetail(requested, perCore, availablePhys int, physical bool) string {
	return fmt.Sprintf("requested=%d perCore=%d availablePhysical=%d causedByPhysical=%v", requested, perCore, availablePhys, physical)
}

// Kubelet is the kubelet's static policy with an in-memory state, driven
// one container at a time as its CPU manager drives it.
type Kubelet interface {
	// Reserved is the reserved set the kubelet chose from the count.
	Reserved() cpuset.CPUSet
	// Default is the state's shared set.
	Default() cpuset.CPUSet
	// Hints is GetTopologyHints' "cpu" list for container c of p.
	Hints(p Pod, c int) []Hint
	// Allocate admits container c of p with the topology manager's
	// affinity aff (0: none) and returns its CPUs or the refusal.
	Allocate(p Pod, c int, aff hints.Mask) (cpuset.CPUSet, *Refusal)
	// Remove is RemoveContainer.
	Remove(pod, container string)
}

// NewKubelet builds the kubelet's static policy on topo with reserved
// CPUs chosen from their count, as the kubelet does, and the options.
type NewKubelet func(topo *topology.Topology, reservedCount int, opts map[string]string) (Kubelet, error)

// Machine is one machine of the check.
type Machine struct {
	Name string
	Topo *topology.Topology
}

// OptionSet is a static-policy option combination, by the kubelet's names.
type OptionSet map[string]string

func (o OptionSet) String() string {
	if len(o) == 0 {
		return "packed"
	}
	var names []string
	for k := range o {
		names = append(names, k)
	}
	slices.Sort(names)
	return strings.Join(names, "+")
}

// OptionSets are the combinations the check runs on every machine that
// accepts them (align-by-socket needs no more sockets than NUMA nodes).
func OptionSets() []OptionSet {
	on := func(names ...string) OptionSet {
		o := OptionSet{}
		for _, n := range names {
			o[n] = "true"
		}
		return o
	}
	return []OptionSet{
		on(),
		on(allocator.OptFullPCPUsOnly),
		on(allocator.OptDistributeCPUsAcrossNUMA),
		on(allocator.OptDistributeCPUsAcrossNUMA, allocator.OptFullPCPUsOnly),
		on(allocator.OptDistributeCPUsAcrossNUMA, allocator.OptAlignBySocket),
		on(allocator.OptDistributeCPUsAcrossNUMA, allocator.OptFullPCPUsOnly, allocator.OptAlignBySocket),
		on(allocator.OptAlignBySocket, allocator.OptFullPCPUsOnly),
		on(allocator.OptDistributeCPUsAcrossCores),
		on(allocator.OptDistributeCPUsAcrossCores, allocator.OptStrictCPUReservation),
		on(allocator.OptPreferAlignByUncoreCache),
		on(allocator.OptPreferAlignByUncoreCache, allocator.OptFullPCPUsOnly),
		on(allocator.OptStrictCPUReservation, allocator.OptFullPCPUsOnly),
	}
}

// Case is one machine, option set and rule set; Seeds sequences of Steps
// operations each are run on it.
type Case struct {
	Machine Machine
	Options OptionSet
	// Version is the rule set the engine follows; the kubelet side is
	// whatever release NewKubelet builds.
	Version kubever.Version
	Seed    int64
	Steps   int
}

func (c Case) String() string {
	return fmt.Sprintf("%s/%s/rules-%s/seed-%d", c.Machine.Name, c.Options, c.Version, c.Seed)
}

// Mismatch is the first difference of a sequence: where, what, and the
// operations that led there (enough to replay it by seed).
type Mismatch struct {
	Case Case
	Step int
	What string
	Ops  []string
}

func (m *Mismatch) Error() string {
	ops := m.Ops
	if len(ops) > 12 {
		ops = append([]string{fmt.Sprintf("... %d earlier", len(ops)-12)}, ops[len(ops)-12:]...)
	}
	return fmt.Sprintf("%s step %d: %s\n  ops: %s", m.Case, m.Step, m.What, strings.Join(ops, "; "))
}

// Exclusion is a case the inputs stay away from, and why (doc.go's
// "Where this differs from the kubelet").
type Exclusion struct {
	Why string
}

// Excluded reports whether the rule set and kubelet release on a machine
// with an option set reach a documented deviation as a whole (nil: run it).
// Narrower avoidances are in the request sizes (requestCap) and the
// reserved counts (reservedCount).
func Excluded(m Machine, o OptionSet, v kubever.Version) *Exclusion {
	if _, ok := o[allocator.OptAlignBySocket]; ok && m.Topo.NumSockets() > m.Topo.NumNUMANodes() {
		return &Exclusion{"align-by-socket is refused where sockets outnumber NUMA nodes (both sides)"}
	}
	if !v.AtLeast138() && !uniform(m.Topo) {
		// doc.go: a core or socket counted free by the machine average
		// while larger; kubelet v1.37 hands out its busy sibling. v1.38
		// (#140498) compares real sizes: those machines run there.
		return &Exclusion{"non-uniform cores or sockets: kubelet v1.37 takes a busy sibling (doc.go, free cores under v1.37)"}
	}
	if _, ok := o[allocator.OptDistributeCPUsAcrossNUMA]; ok && !v.AtLeast138() && m.Topo.NumNUMANodes() >= 5 {
		// doc.go: kubelet v1.37 builds its NUMA combinations by append
		// into a shared array, so from 4 nodes up the combination it
		// scored best can be overwritten by a later one before it is used
		// (#141238, fixed in v1.38). The 1.37 rules place on the best.
		return &Exclusion{"distribute-cpus-across-numa on 5+ NUMA nodes: kubelet v1.37 may place on another combination than the best (#141238; doc.go, combination aliasing)"}
	}
	return nil
}

// uniform reports whether every core has the same number of CPUs and
// every socket too (the kubelet v1.37 averages are then exact).
func uniform(t *topology.Topology) bool {
	per := -1
	for _, c := range t.Cores() {
		n := t.CPUsInCores(c).Size()
		if per >= 0 && n != per {
			return false
		}
		per = n
	}
	per = -1
	for _, s := range t.Sockets() {
		n := t.CPUsInSockets(s).Size()
		if per >= 0 && n != per {
			return false
		}
		per = n
	}
	return true
}

// uncoreSpansNUMA reports whether some uncore cache holds CPUs of several
// NUMA nodes.
func uncoreSpansNUMA(t *topology.Topology) bool {
	for _, u := range t.L3Groups() {
		if len(t.NUMANodesOf(t.CPUsInL3Groups(u))) > 1 {
			return true
		}
	}
	return false
}

// requestCap is the largest request the sequences make on m: a third of
// the machine, but under prefer-align-cpus-by-uncorecache with the v1.37
// rules, on a machine whose uncore caches span NUMA nodes, less than one
// cache: kubelet v1.37 lists such a cache once per node and takes it
// twice in its whole-cache step (doc.go, a group listed under two
// parents), which only a request of at least a cache reaches. capped says
// the cap is that avoidance (no oversized requests then).
func requestCap(m Machine, o OptionSet, v kubever.Version) (n int, capped bool) {
	n = max(2, m.Topo.NumCPUs()/3)
	if _, ok := o[allocator.OptPreferAlignByUncoreCache]; ok && !v.AtLeast138() && uncoreSpansNUMA(m.Topo) {
		return max(1, min(n, m.Topo.NumCPUs()/m.Topo.NumL3()-1)), true
	}
	return n, false
}

// reservedCount draws the reserved CPU count: 0 to 2 cores' worth, any
// count. Under full-pcpus-only with distribute-cpus-across-numa and the
// v1.37 rules it is whole cores only: a half-reserved core leaves a NUMA
// node an odd number of free CPUs, where kubelet v1.37 never returns
// (#140730; doc.go, remainder subsets in whole groups). The v1.38 run
// keeps odd counts: that is the hang fix's input.
func reservedCount(rng *rand.Rand, m Machine, o OptionSet, v kubever.Version) int {
	per := m.Topo.CPUsPerCore()
	if hangRisk(o, v) {
		return per * rng.Intn(3)
	}
	return rng.Intn(2*per + 1)
}

func hangRisk(o OptionSet, v kubever.Version) bool {
	_, full := o[allocator.OptFullPCPUsOnly]
	_, dist := o[allocator.OptDistributeCPUsAcrossNUMA]
	return full && dist && !v.AtLeast138()
}

// engine is the allocator side of a sequence.
type engine struct {
	s  *allocator.Static
	st allocator.State
}

func newEngine(m Machine, o OptionSet, v kubever.Version, reservedCount int) (*engine, error) {
	opts, err := allocator.ParseOptions(o)
	if err != nil {
		return nil, err
	}
	opts.KubeletVersion = v
	reserved, err := allocator.ReservedByCount(m.Topo, opts, reservedCount)
	if err != nil {
		return nil, err
	}
	s, err := allocator.NewStatic(m.Topo, opts, reserved)
	if err != nil {
		return nil, err
	}
	return &engine{s: s, st: s.NewState()}, nil
}

func request(p Pod, c int) allocator.Request {
	t := allocator.App
	if p.Containers[c].Init {
		t = allocator.Init
	}
	return allocator.Request{Pod: p.UID, Container: p.Containers[c].Name, Type: t, CPUs: p.Containers[c].CPUs}
}

func (e *engine) hints(p Pod, c int) []Hint {
	hs := e.s.CPUHints(e.st, request(p, c))
	out := make([]Hint, 0, len(hs))
	for _, h := range hs {
		out = append(out, Hint{h.Affinity, h.Preferred, h.Score})
	}
	return out
}

func (e *engine) allocate(p Pod, c int, aff hints.Mask) (cpuset.CPUSet, *Refusal) {
	next, cpus, err := e.s.Allocate(e.st, request(p, c), hints.Hint{Affinity: aff, Preferred: true})
	if err != nil {
		return cpuset.New(), engineRefusal(err)
	}
	e.st = next
	return cpus, nil
}

func engineRefusal(err error) *Refusal {
	switch e := err.(type) {
	case *allocator.SMTAlignmentError:
		return &Refusal{allocator.ReasonSMTAlignment, SMTDetail(e.RequestedCPUs, e.CpusPerCore, e.AvailablePhysicalCPUs, e.CausedByPhysicalCPUs)}
	case *allocator.InsufficientCPUsError:
		return &Refusal{Reason: allocator.ReasonInsufficientCPUs}
	}
	return &Refusal{Reason: "error", Detail: err.Error()}
}

func (e *engine) remove(pod, container string) { e.st = e.s.Release(e.st, pod, container) }

// scored reports whether the kubelet's hints carry a Score: v1.38 gives
// every CPU hint at least 1, v1.37 none.
func scored(hs []Hint) bool {
	for _, h := range hs {
		if h.Score > 0 {
			return true
		}
	}
	return false
}

// unscored is hs with every Score 0.
func unscored(hs []Hint) []Hint {
	out := make([]Hint, len(hs))
	for i, h := range hs {
		h.Score = 0
		out[i] = h
	}
	return out
}

// hintsEqual compares two hint lists as sets (both sides enumerate the
// same masks; the merge does not depend on their order).
func hintsEqual(a, b []Hint) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	key := func(h Hint) string { return h.String() }
	as, bs := make([]string, len(a)), make([]string, len(b))
	for i := range a {
		as[i], bs[i] = key(a[i]), key(b[i])
	}
	slices.Sort(as)
	slices.Sort(bs)
	return slices.Equal(as, bs)
}

// bestHint is what a single-provider best-effort merge picks: the
// preferred hint with the fewest NUMA nodes, the lowest mask among them
// (nil when there is no preferred hint).
func bestHint(hs []Hint) hints.Mask {
	var best hints.Mask
	for _, h := range hs {
		if !h.Preferred {
			continue
		}
		if best == 0 || h.Affinity.Count() < best.Count() || (h.Affinity.Count() == best.Count() && h.Affinity < best) {
			best = h.Affinity
		}
	}
	return best
}

// RunCase runs one seeded sequence on both sides and returns the first
// mismatch (nil when every step agreed). newK builds the kubelet side.
func RunCase(c Case, newK NewKubelet) (*Mismatch, error) {
	rng := rand.New(rand.NewSource(c.Seed))
	resN := reservedCount(rng, c.Machine, c.Options, c.Version)
	eng, err := newEngine(c.Machine, c.Options, c.Version, resN)
	if err != nil {
		return nil, fmt.Errorf("%s: engine: %w", c, err)
	}
	kub, err := newK(c.Machine.Topo, resN, c.Options)
	if err != nil {
		return nil, fmt.Errorf("%s: kubelet: %w", c, err)
	}
	var ops []string
	fail := func(step int, format string, args ...any) *Mismatch {
		return &Mismatch{Case: c, Step: step, What: fmt.Sprintf(format, args...), Ops: ops}
	}
	ops = append(ops, fmt.Sprintf("reserve %d", resN))
	if !eng.s.Reserved().Equals(kub.Reserved()) {
		return fail(0, "reserved: engine %s, kubelet %s", eng.s.Reserved(), kub.Reserved()), nil
	}
	if got, want := eng.st.Default.CPUSet(), kub.Default(); !got.Equals(want) {
		return fail(0, "initial shared set: engine %s, kubelet %s", got, want), nil
	}
	topo := c.Machine.Topo
	perCore := topo.CPUsPerCore()
	_, full := c.Options[allocator.OptFullPCPUsOnly]
	capN, capped := requestCap(c.Machine, c.Options, c.Version)
	numa := topo.NUMANodes()
	var live []Pod
	size := func() int {
		n := 1 + rng.Intn(capN)
		if !capped && rng.Intn(8) == 0 {
			n = 1 + rng.Intn(topo.NumCPUs()) // often too big: InsufficientCPUs
		}
		if full && rng.Intn(5) != 0 && n >= perCore {
			n -= n % perCore
		}
		return n
	}
	for step := 1; step <= c.Steps; step++ {
		if len(live) > 0 && rng.Intn(5) < 2 {
			i := rng.Intn(len(live))
			p := live[i]
			live = slices.Delete(live, i, i+1)
			ops = append(ops, "remove "+p.UID)
			for _, ct := range p.Containers {
				eng.remove(p.UID, ct.Name)
				kub.Remove(p.UID, ct.Name)
			}
		} else {
			p := Pod{UID: fmt.Sprintf("pod%d", step)}
			if rng.Intn(4) == 0 {
				p.Containers = append(p.Containers, Container{Name: "init", CPUs: size(), Init: true})
			}
			for j := range 1 + rng.Intn(2) {
				p.Containers = append(p.Containers, Container{Name: fmt.Sprintf("c%d", j), CPUs: size()})
			}
			admitted := true
			for ci, ct := range p.Containers {
				eh, kh := eng.hints(p, ci), kub.Hints(p, ci)
				if c.Version == kubever.V137 || !scored(kh) {
					// Scores are compared between the 1.38 rules and
					// kubelet 1.38 only: 1.37 has none, so the negative
					// checks see the placement rules alone.
					eh, kh = unscored(eh), unscored(kh)
				}
				if !hintsEqual(eh, kh) {
					return fail(step, "%s/%s (%d CPUs) hints: engine %v, kubelet %v", p.UID, ct.Name, ct.CPUs, eh, kh), nil
				}
				var aff hints.Mask
				switch rng.Intn(3) {
				case 1:
					aff = bestHint(kh)
				case 2: // a device or memory hint over any nodes
					for aff == 0 {
						for _, n := range numa {
							if rng.Intn(2) == 0 {
								aff = aff.Or(hints.NewMask(n))
							}
						}
					}
				}
				ops = append(ops, fmt.Sprintf("add %s/%s %d aff=%s", p.UID, ct.Name, ct.CPUs, aff))
				if hangRisk(c.Options, c.Version) {
					if odd := oddNodes(topo, kub.Default().Difference(kub.Reserved()), perCore); len(odd) > 0 {
						return nil, fmt.Errorf("%s step %d: NUMA nodes %v have free CPUs in part-cores: kubelet v1.37 would never return (the inputs should not get here)", c, step, odd)
					}
				}
				ecpus, eref := eng.allocate(p, ci, aff)
				kcpus, kref := kub.Allocate(p, ci, aff)
				if eref.String() != kref.String() {
					return fail(step, "%s/%s (%d CPUs, aff %s) admission: engine %s, kubelet %s", p.UID, ct.Name, ct.CPUs, aff, eref, kref), nil
				}
				if !ecpus.Equals(kcpus) {
					return fail(step, "%s/%s (%d CPUs, aff %s) CPUs: engine %s, kubelet %s", p.UID, ct.Name, ct.CPUs, aff, ecpus, kcpus), nil
				}
				if eref != nil {
					admitted = false
					break
				}
			}
			if admitted {
				live = append(live, p)
			} else {
				// A refused pod never runs: its admitted containers go.
				ops = append(ops, "refused "+p.UID)
				for _, ct := range p.Containers {
					eng.remove(p.UID, ct.Name)
					kub.Remove(p.UID, ct.Name)
				}
			}
		}
		if got, want := eng.st.Default.CPUSet(), kub.Default(); !got.Equals(want) {
			return fail(step, "shared set: engine %s, kubelet %s", got, want), nil
		}
	}
	return nil, nil
}

// oddNodes lists the NUMA nodes whose free CPUs are not whole cores'
// worth.
func oddNodes(t *topology.Topology, free cpuset.CPUSet, perCore int) []int {
	var out []int
	for _, n := range t.NUMANodes() {
		if free.Intersection(t.CPUsInNUMANodes(n)).Size()%perCore != 0 {
			out = append(out, n)
		}
	}
	return out
}
