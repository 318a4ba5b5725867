package allocator

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

func TestParseStrictUncoreOption(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    UncoreStrictness
		wantErr string
	}{
		{"true", UncoreStrict, ""},
		{"1", UncoreStrict, ""},
		{"exclusive", UncoreStrictExclusive, ""},
		{"Exclusive", UncoreStrictExclusive, ""},
		{"false", UncoreStrictOff, ""},
		{"yes", UncoreStrictOff, `bad value for option "strict-align-cpus-by-uncorecache": want true, false or exclusive, got "yes"`},
		{"", UncoreStrictOff, `want true, false or exclusive, got ""`},
	} {
		o, err := ParseOptions(map[string]string{OptStrictAlignByUncoreCache: tc.in})
		if tc.wantErr != "" {
			var oe *OptionsError
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &oe) || oe.Option != OptStrictAlignByUncoreCache {
				t.Errorf("%q: got %v, want an *OptionsError containing %s", tc.in, err, tc.wantErr)
			}
			continue
		}
		if err != nil || o.StrictUncoreCache != tc.want {
			t.Errorf("%q: got %v, %v; want %v", tc.in, o.StrictUncoreCache, err, tc.want)
			continue
		}
		back, err := ParseOptions(o.Map())
		if err != nil || back != o {
			t.Errorf("%q: Map round trip %+v -> %v, %+v", tc.in, o, o.Map(), back)
		}
	}
}

func TestStrictUncoreIncompatibleOptions(t *testing.T) {
	topo := sysfstest.Load(t, "ampere-altra")
	for _, tc := range []struct {
		o     Options
		other string
	}{
		{Options{StrictUncoreCache: UncoreStrict, DistributeCPUsAcrossCores: true}, OptDistributeCPUsAcrossCores},
		{Options{StrictUncoreCache: UncoreStrictExclusive, DistributeCPUsAcrossNUMA: true}, OptDistributeCPUsAcrossNUMA},
	} {
		err := tc.o.Validate(topo)
		want := fmt.Sprintf("static policy options %s and %s can not be used at the same time", OptStrictAlignByUncoreCache, tc.other)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: got %v, want %q", tc.o, err, want)
		}
	}
	for _, o := range []Options{
		{StrictUncoreCache: UncoreStrict, FullPCPUsOnly: true},
		{StrictUncoreCache: UncoreStrictExclusive, PreferAlignByUncoreCache: true},
		{StrictUncoreCache: UncoreStrict, AlignBySocket: true, StrictCPUReservation: true},
	} {
		if err := o.Validate(topo); err != nil {
			t.Errorf("%+v: %v", o, err)
		}
	}
}

// strictSeq allocates each request in turn (no hint) and compares with
// the hand-worked CPU sets; "UncoreCacheAlignmentError" expects a refusal.
func strictSeq(t *testing.T, s *Static, reqs []int, want []string) State {
	t.Helper()
	st := s.NewState()
	for i, n := range reqs {
		next, got, err := alloc(t, s, st, fmt.Sprintf("pod%d", i), "c", n, 0)
		if want[i] == ReasonUncoreCacheAlignment {
			if reasonOf(err) != ReasonUncoreCacheAlignment {
				t.Fatalf("request %d (%d CPUs): got %s, %v; want %s", i, n, got, err, ReasonUncoreCacheAlignment)
			}
			if !strings.HasPrefix(err.Error(), ReasonUncoreCacheAlignment+": ") {
				t.Errorf("error text %q does not start with the reason word", err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("request %d (%d CPUs): %v", i, n, err)
		}
		if !got.Equals(mustParse(t, want[i])) {
			t.Fatalf("request %d (%d CPUs): got %s, want %s", i, n, got, want[i])
		}
		st = next
	}
	return st
}

// The seed's 32-core example (4 uncore caches of 8, reserved 0-1;
// containers of 10, 8 and 6 CPUs) on the first caches of an Ampere Altra
// (cache g = CPUs 8g..8g+7, one thread per core).
//
// strict: 10 > 8 is large: whole free caches in walk order (cache 0 holds
// the reserved CPUs, so cache 1 = 8-15), the remaining 2 from the most-used
// cache that holds them: cache 0 (6 assignable) -> 2-3. 8 fits one cache:
// cache 0 has 4 left, so the first cache with 8 is cache 2 = 16-23. 6: cache
// 0 has 4, cache 3 (8) -> 24-29. A fourth container of 2 goes to the
// most-used cache that holds it: cache 3 (30,31 left; cache 0 has 4).
//
// exclusive: the same for the first three (each goes to a cache no other
// container uses); the 2-CPU container may not join cache 3 or cache 0
// (the 10-CPU container uses 2-3): cache 4 = 32-33.
func TestStrictUncoreAmpereKEPExample(t *testing.T) {
	topo := sysfstest.Load(t, "ampere-altra")
	s := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrict}, "0-1")
	strictSeq(t, s, []int{10, 8, 6, 2}, []string{"2-3,8-15", "16-23", "24-29", "30-31"})
	x := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrictExclusive}, "0-1")
	strictSeq(t, x, []int{10, 8, 6, 2}, []string{"2-3,8-15", "16-23", "24-29", "32-33"})
}

// Under exclusive each container takes a cache of its own: sixteen 1-CPU
// containers on an Ampere Altra (16 caches) get 2 (cache 0, the most used:
// CPUs 0-1 reserved), then 8, 16, ..., 120; the seventeenth is refused
// although 111 CPUs are still free. Under plain strict the same 1-CPU
// containers all fit in cache 0 and 1 (best fit: most-used first).
func TestStrictUncoreExclusiveOneCacheEach(t *testing.T) {
	topo := sysfstest.Load(t, "ampere-altra")
	x := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrictExclusive}, "0-1")
	reqs := make([]int, 17)
	want := make([]string, 17)
	for i := range reqs {
		reqs[i] = 1
		want[i] = fmt.Sprint(8 * i)
	}
	want[0] = "2"
	want[16] = ReasonUncoreCacheAlignment
	st := strictSeq(t, x, reqs, want)
	if free := x.AvailableCPUs(st).Size(); free != 126-16 {
		t.Fatalf("free CPUs %d, want 110", free)
	}
	_, _, err := x.Allocate(st, Request{Pod: "p", Container: "c", CPUs: 1}, hints.Hint{})
	var ue *UncoreCacheAlignmentError
	if !errors.As(err, &ue) || !ue.Exclusive || !strings.Contains(err.Error(), "no other exclusive container uses") {
		t.Fatalf("got %v", err)
	}
	// Plain strict: cache 0 (2-7) fills first, then cache 1.
	s := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrict}, "0-1")
	strictSeq(t, s, []int{1, 1, 1, 1, 1, 1, 1}, []string{"2", "3", "4", "5", "6", "7", "8"})
}

// The seed's 16-core example (reserved 0-1, three 4-CPU containers) on an
// AMD EPYC 7702P with SMT (cache g = cores 4g..4g+3 = CPUs 4g..4g+3 and
// 64+4g..64+4g+3; core k = {k, k+64}).
//
// strict: cache 0 has 2,3,64-67 assignable (6, the most used): the whole
// cores 2 and 3 -> 2-3,66-67. Then cache 0 has 64,65 (2 < 4): cache 1,
// whole cores 4,5 -> 4-5,68-69; then cache 1's other half 6-7,70-71 (4
// left, most used). A 2-CPU container: cache 0's 64,65. A 12-CPU one (more
// than a cache): whole free cache 2 (8-11,72-75) plus 4 from the most-used
// cache that holds them: cache 3 is free (8), nothing else has 4 -> cores
// 12,13 = 12-13,76-77.
//
// exclusive: 2-3,66-67 (cache 0); 4-5,68-69 (cache 1); 8-9,72-73 (cache
// 2); the 2-CPU container the first whole core of cache 3: 12,76; the
// 12-CPU one whole cache 4 (16-19,80-83) and cores 20,21 of cache 5.
func TestStrictUncoreEPYCKEPExample(t *testing.T) {
	topo := sysfstest.Load(t, "epyc-7702p-smt")
	s := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrict}, "0-1")
	strictSeq(t, s, []int{4, 4, 4, 2, 12}, []string{"2-3,66-67", "4-5,68-69", "6-7,70-71", "64-65", "8-13,72-77"})
	x := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrictExclusive}, "0-1")
	strictSeq(t, x, []int{4, 4, 4, 2, 12}, []string{"2-3,66-67", "4-5,68-69", "8-9,72-73", "12,76", "16-21,80-85"})
}

// A larger container is refused when whole free caches run out: on the
// EPYC 7702P without SMT (cache g = CPUs 4g..4g+3), reserved 0-1, a 2-CPU
// container fills cache 0 (2-3) and fifteen 3-CPU containers leave one CPU
// in each of caches 1-15. No whole free cache is left, so a 5-CPU
// container (more than a cache of 4) is refused, and so is a 2-CPU one (no
// cache has 2); a 1-CPU one takes the first of the best fits, 7 (cache 1).
func TestStrictUncoreLargeRefused(t *testing.T) {
	topo := sysfstest.Load(t, "epyc-7702p-nosmt")
	s := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrict}, "0-1")
	// 2 CPUs: cache 0 (2-3, exactly 2 left, most used). Then 3-CPU
	// containers take caches 1..15 one each: 4-6, 8-10, ..., 60-62.
	reqs := []int{2}
	want := []string{"2-3"}
	for g := 1; g < 16; g++ {
		reqs = append(reqs, 3)
		want = append(want, fmt.Sprintf("%d-%d", 4*g, 4*g+2))
	}
	reqs = append(reqs, 5, 2, 1)
	want = append(want, ReasonUncoreCacheAlignment, ReasonUncoreCacheAlignment, "7")
	st := strictSeq(t, s, reqs, want)
	_, _, err := s.Allocate(st, Request{Pod: "p", Container: "c", CPUs: 5}, hints.Hint{})
	if err == nil || !strings.Contains(err.Error(), "whole free caches: 0") {
		t.Fatalf("got %v", err)
	}
	_, _, err = s.Allocate(st, Request{Pod: "p", Container: "c", CPUs: 2}, hints.Hint{})
	if err == nil || !strings.Contains(err.Error(), "the most assignable CPUs in one such cache: 1 of 4") {
		t.Fatalf("got %v", err)
	}
}

// CPU hints leave out the NUMA nodes a strict placement does not fit in.
// epyc-9654-2p-nps2: NUMA n = CPUs 48n..48n+47, caches of 8 (six per
// node). Reserved 0-1 and one CPU held in each of caches 1-5 leave node 0
// with 41 free CPUs but no cache with 8: an 8-CPU container's hints start
// at {1} (preferred), never {0} alone; allocated with {1} it gets cache 6
// = 48-55. Given {0} anyway (another provider under best-effort), it is
// placed outside it on the first cache that holds it, the same 48-55.
func TestStrictUncoreHints(t *testing.T) {
	topo := sysfstest.Load(t, "epyc-9654-2p-nps2")
	plain := newStatic(t, topo, Options{}, "0-1")
	s := newStatic(t, topo, Options{StrictUncoreCache: UncoreStrict}, "0-1")
	st := s.NewState()
	for i, cpu := range []int{8, 16, 24, 32, 40} {
		var err error
		if st, err = s.Assign(st, fmt.Sprintf("busy%d", i), "c", cpuset.New(cpu)); err != nil {
			t.Fatal(err)
		}
	}
	req := Request{Pod: "p", Container: "c", CPUs: 8}
	ph := plain.CPUHints(st, req)
	if len(ph) == 0 || ph[0].Affinity != hints.NewMask(0) || !ph[0].Preferred {
		t.Fatalf("without the option the first hint should be {0} preferred: %v", ph)
	}
	sh := s.CPUHints(st, req)
	if len(sh) == 0 || sh[0].Affinity != hints.NewMask(1) || !sh[0].Preferred {
		t.Fatalf("strict hints start %v, want {1} preferred", sh)
	}
	for _, h := range sh {
		if h.Affinity == hints.NewMask(0) {
			t.Fatalf("strict hints offer {0}: %v", sh)
		}
	}
	if len(sh) != len(ph)-1 {
		t.Fatalf("strict hints %d, plain %d: only {0} should be dropped", len(sh), len(ph))
	}
	for _, aff := range []hints.Mask{hints.NewMask(1), hints.NewMask(0)} {
		_, got, err := alloc(t, s, st, "p", "c", 8, aff)
		if err != nil || !got.Equals(mustParse(t, "48-55")) {
			t.Fatalf("hint %v: got %s, %v; want 48-55", aff, got, err)
		}
	}
	// Inside a hint that holds it, the strict placement stays there: {2}
	// -> cache 12 = 96-103.
	if _, got, err := alloc(t, s, st, "p", "c", 8, hints.NewMask(2)); err != nil || !got.Equals(mustParse(t, "96-103")) {
		t.Fatalf("hint {2}: got %s, %v", got, err)
	}
	if err := s.CheckStrictUncore(st, req); err != nil {
		t.Fatal(err)
	}
}

// Property: on every split-L3 fixture, under strict and exclusive (with
// and without full-pcpus-only), random request sequences never break the
// rules: a container up to one cache's CPUs lies in one cache; a larger
// one uses at most one cache partly; under exclusive no two containers
// share a cache; inside a CPU hint the CPUs stay in its nodes; and every
// refusal is justified by counting CPUs per cache from the topology.
func TestStrictUncoreProperties(t *testing.T) {
	ops := 200
	if testing.Short() {
		ops = 60
	}
	var one, large, refused, hinted int
	for _, name := range sysfstest.Names() {
		topo := sysfstest.Load(t, name)
		if topo.NumL3() < 2 {
			continue
		}
		for oi, o := range []Options{
			{StrictUncoreCache: UncoreStrict},
			{StrictUncoreCache: UncoreStrictExclusive},
			{StrictUncoreCache: UncoreStrict, FullPCPUsOnly: true},
			{StrictUncoreCache: UncoreStrictExclusive, FullPCPUsOnly: true, StrictCPUReservation: true},
		} {
			t.Run(fmt.Sprintf("%s/%s", name, optName(o)), func(t *testing.T) {
				reserved, err := ReservedByCount(topo, o, topo.CPUsPerCore())
				if err != nil {
					t.Fatal(err)
				}
				s := newStatic(t, topo, o, reserved.String())
				rng := rand.New(rand.NewSource(int64(oi*7919 + len(name))))
				size := 0
				for _, g := range topo.L3Groups() {
					size = max(size, topo.CPUsInL3Groups(g).Size())
				}
				st := s.NewState()
				type key struct{ pod, ctr string }
				var live []key
				for i := 0; i < ops; i++ {
					if len(live) > 0 && rng.Intn(10) < 3 {
						j := rng.Intn(len(live))
						st = s.Release(st, live[j].pod, live[j].ctr)
						live = append(live[:j], live[j+1:]...)
						continue
					}
					n := 1 + rng.Intn(size+size/2)
					if o.FullPCPUsOnly {
						n = (n + topo.CPUsPerCore() - 1) / topo.CPUsPerCore() * topo.CPUsPerCore()
					}
					req := Request{Pod: fmt.Sprintf("p%d", i), Container: "c", CPUs: n}
					var aff hints.Hint
					if rng.Intn(2) == 0 {
						if hs := s.CPUHints(st, req); len(hs) > 0 {
							aff = narrowest(hs)
						}
					}
					allocatable := s.AvailableCPUs(st)
					next, got, err := alloc(t, s, st, req.Pod, req.Container, n, aff.Affinity)
					if err != nil {
						if reasonOf(err) == ReasonSMTAlignment ||
							(reasonOf(err) == ReasonInsufficientCPUs && n > allocatable.Size()) {
							continue
						}
						if reasonOf(err) != ReasonUncoreCacheAlignment {
							t.Fatalf("op %d %d CPUs: %v", i, n, err)
						}
						refused++
						if why := strictPossible(topo, o, st, allocatable, n, size); why != "" {
							t.Fatalf("op %d: %d CPUs refused (%v) but %s", i, n, err, why)
						}
						continue
					}
					groups := topo.L3GroupsOf(got)
					if n <= size {
						one++
						if len(groups) != 1 {
							t.Fatalf("op %d: %d CPUs on caches %v: %s", i, n, groups, got)
						}
					} else {
						large++
						partial := 0
						for _, g := range groups {
							if !topo.CPUsInL3Groups(g).IsSubsetOf(got) {
								partial++
							}
						}
						if partial > 1 {
							t.Fatalf("op %d: %d CPUs use %d caches partly: %s", i, n, partial, got)
						}
					}
					if aff.Affinity != 0 {
						hinted++
						if !got.IsSubsetOf(topo.CPUsInNUMANodes(aff.Affinity.Nodes()...)) {
							t.Fatalf("op %d: hint %v but got %s", i, aff, got)
						}
					}
					if o.StrictUncoreCache == UncoreStrictExclusive {
						for p, cs := range st.Assignments {
							for _, other := range cs {
								if shared := cpuset.New(topo.L3GroupsOf(other)...).Intersection(cpuset.New(groups...)); shared.Size() > 0 {
									t.Fatalf("op %d: %s shares caches %s with pod %s's %s", i, got, shared, p, other)
								}
							}
						}
					}
					st = next
					live = append(live, key{req.Pod, req.Container})
				}
			})
		}
	}
	if one == 0 || large == 0 || refused == 0 || hinted == 0 {
		t.Fatalf("properties not exercised: one %d, large %d, refused %d, hinted %d", one, large, refused, hinted)
	}
	t.Logf("one-cache %d, large %d, refused %d, inside a hint %d", one, large, refused, hinted)
}

// strictPossible says why n CPUs could have been placed under the strict
// rules ("" when they could not), counting per cache from the topology:
// usable CPUs are the assignable ones (whole assignable cores under
// full-pcpus-only), in caches no container holds a CPU of (exclusive).
// The large case assumes caches of equal size (true of every split-L3
// fixture): q whole usable caches plus r more in one other cache.
func strictPossible(topo *topology.Topology, o Options, st State, allocatable cpuset.CPUSet, n, size int) string {
	usable := allocatable
	if o.FullPCPUsOnly {
		usable = cpuset.New()
		for _, c := range topo.CoresOf(allocatable) {
			if cs := topo.CPUsInCores(c); cs.IsSubsetOf(allocatable) {
				usable = usable.Union(cs)
			}
		}
	}
	held := cpuset.New()
	for _, cs := range st.Assignments {
		for _, set := range cs {
			held = held.Union(set)
		}
	}
	whole, best, bestPartial := 0, 0, 0
	for _, g := range topo.L3Groups() {
		cache := topo.CPUsInL3Groups(g)
		if o.StrictUncoreCache == UncoreStrictExclusive && cache.Intersection(held).Size() > 0 {
			continue
		}
		k := cache.Intersection(usable).Size()
		best = max(best, k)
		if k == cache.Size() {
			whole++
		} else {
			bestPartial = max(bestPartial, k)
		}
	}
	if n <= size {
		if best >= n {
			return fmt.Sprintf("a cache has %d usable CPUs", best)
		}
		return ""
	}
	q, r := n/size, n%size
	if whole > q || (whole == q && (r == 0 || bestPartial >= r)) {
		return fmt.Sprintf("%d whole usable caches and a partial one of %d", whole, bestPartial)
	}
	return ""
}
