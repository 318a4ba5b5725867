package allocator

import (
	"errors"
	"fmt"
	"maps"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// propertyOptions are the option sets the property tests run with (every
// compatible family).
var propertyOptions = []Options{
	{},
	{FullPCPUsOnly: true},
	{DistributeCPUsAcrossNUMA: true},
	{DistributeCPUsAcrossNUMA: true, FullPCPUsOnly: true},
	{DistributeCPUsAcrossCores: true},
	{PreferAlignByUncoreCache: true},
	{PreferAlignByUncoreCache: true, FullPCPUsOnly: true},
	{StrictCPUReservation: true, FullPCPUsOnly: true},
	{AlignBySocket: true},
}

// TestPropertiesOnFixtures drives every fixture machine with random
// (seeded) request sequences under every option family and checks, after
// every operation: the pool invariants (Validate); a granted request has
// exactly the requested size and comes from the assignable CPUs; under
// full-pcpus-only (where every core has CPUsPerCore threads) only whole
// cores are handed out; an allocation inside the narrowest CPU hint uses
// exactly that many NUMA nodes, the fewest that could hold it; and under
// the uncore option a request that fits one uncore cache gets one (see
// fitsOneL3 for the cases the kubelet's quirks exempt).
func TestPropertiesOnFixtures(t *testing.T) {
	ops := 150
	if testing.Short() {
		ops = 40
	}
	var c checks
	for _, name := range sysfstest.Names() {
		topo := sysfstest.Load(t, name)
		for oi, o := range propertyOptions {
			if o.Validate(topo) != nil {
				continue
			}
			t.Run(fmt.Sprintf("%s/%v", name, optName(o)), func(t *testing.T) {
				runProperty(t, topo, o, int64(1000*oi+len(name)), ops, &c)
			})
		}
	}
	// The properties must have been exercised, not skipped.
	if c.wholeCores == 0 || c.numaMin == 0 || c.oneL3 == 0 || c.refused == 0 {
		t.Errorf("property checks not exercised: %+v", c)
	}
	t.Logf("checks: %+v", c)
}

// checks counts how often each conditional property was checked.
type checks struct{ granted, refused, wholeCores, numaMin, oneL3 int }

func optName(o Options) string {
	m := o.Map()
	names := slices.Sorted(maps.Keys(m))
	if len(names) == 0 {
		return "default"
	}
	return fmt.Sprint(names)
}

func runProperty(t *testing.T, topo *topology.Topology, o Options, seed int64, ops int, c *checks) {
	rng := rand.New(rand.NewSource(seed))
	resN := topo.CPUsPerCore()
	reserved, err := ReservedByCount(topo, o, resN)
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewStatic(topo, o, reserved)
	if err != nil {
		t.Fatal(err)
	}
	wholeCores := o.FullPCPUsOnly && topo.CPUsPerCore() == topo.MaxThreadsPerCore()
	st := s.NewState()
	type key struct{ pod, ctr string }
	var live []key
	maxReq := topo.NumCPUs() / 6
	if maxReq < 2 {
		maxReq = 2
	}
	for i := 0; i < ops; i++ {
		if len(live) > 0 && rng.Intn(10) < 3 {
			k := live[rng.Intn(len(live))]
			st = s.Release(st, k.pod, k.ctr)
			if err := s.Validate(st); err != nil {
				t.Fatalf("op %d release %v: %v", i, k, err)
			}
			for j := range live {
				if live[j] == k {
					live = append(live[:j], live[j+1:]...)
					break
				}
			}
			continue
		}
		n := 1 + rng.Intn(maxReq)
		if o.FullPCPUsOnly && rng.Intn(4) > 0 {
			n = (n + topo.CPUsPerCore() - 1) / topo.CPUsPerCore() * topo.CPUsPerCore()
		}
		typ := App
		if rng.Intn(6) == 0 {
			typ = Init
		}
		req := Request{Pod: fmt.Sprintf("pod%d", rng.Intn(6)), Container: fmt.Sprintf("c%d", i), Type: typ, CPUs: n}
		var aff hints.Hint
		useHint := rng.Intn(2) == 0
		if useHint {
			hs := s.CPUHints(st, req)
			if len(hs) > 0 {
				aff = narrowest(hs)
			} else {
				useHint = false
			}
		}
		allocatable := s.AvailableCPUs(st).Union(s.reusableSet(st, req.Pod))
		next, got, err := s.Allocate(st, req, aff)
		if verr := s.Validate(next); verr != nil {
			t.Fatalf("op %d %+v: %v", i, req, verr)
		}
		if err != nil {
			c.refused++
			checkRefusal(t, s, st, req, allocatable, err)
			if !next.Default.Equals(st.Default) || len(next.Assignments) != len(st.Assignments) {
				t.Fatalf("op %d: a refused request changed the state", i)
			}
			continue
		}
		if got.Size() != n {
			t.Fatalf("op %d %+v: got %s (%d CPUs)", i, req, got, got.Size())
		}
		if !got.IsSubsetOf(allocatable) {
			t.Fatalf("op %d %+v: got %s outside the assignable %s", i, req, got, allocatable)
		}
		c.granted++
		if wholeCores {
			c.wholeCores++
			for _, c := range topo.CoresOf(got) {
				if !topo.CPUsInCores(c).IsSubsetOf(got) {
					t.Fatalf("op %d %+v: full-pcpus-only handed out part of core %d: %s", i, req, c, got)
				}
			}
		}
		if useHint && !o.AlignBySocket {
			// Inside the hint: never more nodes than it names. Without
			// reusable CPUs (which every hint must contain, so they can
			// widen it) the narrowest hint is the fewest nodes that could
			// hold the request, and the allocation uses exactly those.
			used := len(topo.NUMANodesOf(got))
			if used > aff.Affinity.Count() {
				t.Fatalf("op %d %+v: hint %v but %s spans %d NUMA nodes", i, req, aff, got, used)
			}
			if s.reusableSet(st, req.Pod).IsEmpty() {
				c.numaMin++
				if min := minNUMANodes(topo, allocatable, n); used != min {
					t.Fatalf("op %d %+v: hint %v, %s spans %d NUMA nodes, %d could hold it", i, req, aff, got, used, min)
				}
			}
		}
		if o.PreferAlignByUncoreCache && !useHint {
			if fits, why := fitsOneL3(s, allocatable, n, o.FullPCPUsOnly && wholeCores); fits {
				c.oneL3++
				if l3 := topo.L3GroupsOf(got); len(l3) != 1 {
					t.Fatalf("op %d %+v: %s (from %s) fits one L3 (%s) but got %s on L3s %v", i, req, allocatable, got, why, got, l3)
				}
			}
		}
		st = next
		live = append(live, key{req.Pod, req.Container})
	}
}

// narrowest is the topology manager's choice with the CPU provider alone:
// preferred first, then fewest nodes, then the smaller mask.
func narrowest(hs []hints.Hint) hints.Hint {
	best := hs[0]
	for _, h := range hs[1:] {
		if h.Preferred != best.Preferred {
			if h.Preferred {
				best = h
			}
			continue
		}
		if h.Affinity.IsNarrowerThan(best.Affinity) {
			best = h
		}
	}
	return best
}

func checkRefusal(t *testing.T, s *Static, st State, req Request, allocatable cpuset.CPUSet, err error) {
	t.Helper()
	var smt *SMTAlignmentError
	var ins *InsufficientCPUsError
	switch {
	case errors.As(err, &smt):
		if !s.opts.FullPCPUsOnly {
			t.Fatalf("%+v: SMTAlignmentError without full-pcpus-only: %v", req, err)
		}
		if req.CPUs%s.m.CPUsPerCore() != 0 {
			return
		}
		if !smt.CausedByPhysicalCPUs || req.CPUs <= smt.AvailablePhysicalCPUs {
			t.Fatalf("%+v: bad SMTAlignmentError %+v", req, *smt)
		}
	case errors.As(err, &ins):
		if ins.Available != allocatable.Size() || req.CPUs <= ins.Available {
			t.Fatalf("%+v: InsufficientCPUs %+v with %d assignable", req, *ins, allocatable.Size())
		}
	default:
		t.Fatalf("%+v: unexpected error %v", req, err)
	}
}

// fitsOneL3 says whether the uncore step must place n CPUs inside one
// uncore cache, given the assignable CPUs. Exempt (false) are the cases the
// kubelet's rules do not cover:
//   - n at least a NUMA node's or a socket's size (the whole-node and
//     whole-socket steps come first), or above the average cache size;
//   - n equal to the cache size with no cache entirely free;
//   - without whole-core occupancy: caches whose lowest-id
//     ceil(n/CPUsPerCore) cores with a free CPU do not hold exactly n free
//     CPUs (after dropping the highest one for an odd n on SMT machines) —
//     the partial step claims only an exact match, so a cache with enough
//     free CPUs scattered over half-used cores is passed over.
//
// With whole-core occupancy (full-pcpus-only, uniform SMT) the exact match
// reduces to "the cache has at least n free CPUs".
func fitsOneL3(s *Static, allocatable cpuset.CPUSet, n int, wholeCores bool) (bool, string) {
	topo := s.Topology()
	for _, nd := range topo.NUMANodes() {
		if n >= topo.CPUsInNUMANodes(nd).Size() {
			return false, ""
		}
	}
	for _, sk := range topo.Sockets() {
		if n >= topo.CPUsInSockets(sk).Size() {
			return false, ""
		}
	}
	perL3, perCore := topo.CPUsPerL3(), topo.CPUsPerCore()
	if n > perL3 {
		return false, ""
	}
	for _, id := range topo.L3Groups() {
		l3 := topo.CPUsInL3Groups(id)
		cnt := l3.Intersection(allocatable).Size()
		if n == perL3 {
			if cnt == l3.Size() && cnt >= n {
				return true, fmt.Sprintf("L3 %d entirely free", id)
			}
			continue
		}
		if wholeCores {
			if cnt >= n {
				return true, fmt.Sprintf("L3 %d has %d free", id, cnt)
			}
			continue
		}
		coresNeeded := (n + perCore - 1) / perCore
		var cpus []int
		for _, c := range topo.CoresOf(l3) {
			if coresNeeded == 0 {
				break
			}
			if f := topo.CPUsInCores(c).Intersection(allocatable).List(); len(f) > 0 {
				coresNeeded--
				cpus = append(cpus, f...)
			}
		}
		if n%2 != 0 && perCore > 1 && len(cpus) > n {
			cpus = cpus[:len(cpus)-1]
		}
		if len(cpus) == n {
			return true, fmt.Sprintf("L3 %d partial match", id)
		}
	}
	return false, ""
}

// minNUMANodes is the fewest NUMA nodes whose assignable CPUs can hold n.
func minNUMANodes(topo *topology.Topology, allocatable cpuset.CPUSet, n int) int {
	nodes := topo.NUMANodes()
	free := make([]int, len(nodes))
	for i, nd := range nodes {
		free[i] = allocatable.Intersection(topo.CPUsInNUMANodes(nd)).Size()
	}
	sort.Sort(sort.Reverse(sort.IntSlice(free)))
	sum := 0
	for k, f := range free {
		sum += f
		if sum >= n {
			return k + 1
		}
	}
	return len(nodes) + 1
}
