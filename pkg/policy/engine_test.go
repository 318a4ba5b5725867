package policy_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

func mustParse(t testing.TB, s string) cpuset.CPUSet {
	t.Helper()
	set, err := cpuset.Parse(s)
	if err != nil {
		t.Fatalf("cpuset.Parse(%q): %v", s, err)
	}
	return set
}

func newEngine(t testing.TB, fixture string, cfg policy.Config) *policy.Engine {
	t.Helper()
	e, err := policy.New(sysfstest.Load(t, fixture), cfg)
	if err != nil {
		t.Fatalf("policy.New(%s): %v", fixture, err)
	}
	return e
}

func static(topoPolicy string, reserved string) policy.Config {
	c := policy.Config{CPUManagerPolicy: "static", TopologyPolicy: topoPolicy, TopologyScope: "container"}
	if reserved != "" {
		c.ReservedCPUs, _ = cpuset.Parse(reserved)
	}
	return c
}

// guaranteed is a request for n exclusive CPUs.
func guaranteed(pod, ctr string, n int64) policy.Request {
	return policy.Request{Pod: pod, Container: ctr, QoS: policy.Guaranteed, CPURequestMilli: n * 1000, CPULimitMilli: n * 1000}
}

// want is an expected decision; cpus/mems as Linux lists, numa "" = any.
type want struct {
	cpus, mems string
	exclusive  bool
	numa       string
	preferred  bool
}

func check(t *testing.T, d policy.Decision, w want) {
	t.Helper()
	if d.CPUs.String() != w.cpus || d.Mems.String() != w.mems || d.Exclusive != w.exclusive ||
		d.Affinity.Affinity.String() != w.numa || d.Affinity.Preferred != w.preferred {
		t.Fatalf("decision cpus=%q mems=%q exclusive=%t affinity={%q %t}; want cpus=%q mems=%q exclusive=%t affinity={%q %t}",
			d.CPUs, d.Mems, d.Exclusive, d.Affinity.Affinity, d.Affinity.Preferred,
			w.cpus, w.mems, w.exclusive, w.numa, w.preferred)
	}
}

func add(t *testing.T, e *policy.Engine, st policy.State, req policy.Request) (policy.State, policy.Decision) {
	t.Helper()
	next, d, err := e.Add(st, req)
	if err != nil {
		t.Fatalf("Add(%s/%s): %v", req.Pod, req.Container, err)
	}
	if err := e.Validate(next); err != nil {
		t.Fatalf("state invalid after Add(%s/%s): %v", req.Pod, req.Container, err)
	}
	return next, d
}

func wantAffinityError(t *testing.T, err error, numa string, preferred bool) {
	t.Helper()
	var tae *hints.TopologyAffinityError
	if !errors.As(err, &tae) {
		t.Fatalf("err = %v, want *hints.TopologyAffinityError", err)
	}
	if tae.Reason() != "TopologyAffinityError" || tae.Hint.Affinity.String() != numa || tae.Hint.Preferred != preferred {
		t.Fatalf("rejected hint {%q %t}, want {%q %t}", tae.Hint.Affinity, tae.Hint.Preferred, numa, preferred)
	}
}

// TestStaticOrShared is the CPU manager design's table "Example pod specs
// and interpretation", on ht-1s-4c (core k = {k, k+4}) with CPUs 0,4
// (core 0) reserved.
func TestStaticOrShared(t *testing.T) {
	e := newEngine(t, "ht-1s-4c", static("none", "0,4"))
	type ctr struct {
		name     string
		qos      policy.QoS
		req, lim int64
		want     string // exclusive CPUs, "" = shared pool
	}
	cases := []struct {
		name string
		ctrs []ctr
	}{
		{"guaranteed 0.5 -> shared", []ctr{{"a", policy.Guaranteed, 500, 500, ""}}},
		// Two CPUs on an HT machine are the two threads of one core: the
		// lowest free core, core 1.
		{"guaranteed 2 -> two siblings", []ctr{{"a", policy.Guaranteed, 2000, 2000, "1,5"}}},
		// One CPU: the lowest free CPU of the lowest free core.
		{"guaranteed 1 and 0.5", []ctr{{"a", policy.Guaranteed, 1000, 1000, "1"}, {"b", policy.Guaranteed, 500, 500, ""}}},
		{"guaranteed 1.5 and 0.5 -> both shared", []ctr{{"a", policy.Guaranteed, 1500, 1500, ""}, {"b", policy.Guaranteed, 500, 500, ""}}},
		{"burstable -> shared", []ctr{{"a", policy.Burstable, 2000, 4000, ""}, {"b", policy.Burstable, 2000, 0, ""}}},
		{"besteffort -> shared", []ctr{{"a", policy.BestEffort, 0, 0, ""}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := e.NewState()
			exclusive := cpuset.New()
			for _, c := range tc.ctrs {
				var d policy.Decision
				st, d = add(t, e, st, policy.Request{Pod: "p", Container: c.name, QoS: c.qos, CPURequestMilli: c.req, CPULimitMilli: c.lim})
				if c.want == "" {
					if d.Exclusive {
						t.Fatalf("%s: exclusive %s, want shared", c.name, d.CPUs)
					}
					continue
				}
				if !d.Exclusive || d.CPUs.String() != c.want {
					t.Fatalf("%s: cpus %s exclusive %t, want exclusive %s", c.name, d.CPUs, d.Exclusive, c.want)
				}
				exclusive = exclusive.Union(d.CPUs)
			}
			// The shared cpuset is shrunk to make room for the exclusive CPUs.
			if got, want := e.SharedCPUs(st), mustParse(t, "0-7").Difference(exclusive); !got.Equals(want) {
				t.Fatalf("shared = %s, want %s", got, want)
			}
		})
	}
}

func TestGuaranteedNeedsLimitEqualRequest(t *testing.T) {
	e := newEngine(t, "ht-1s-4c", static("none", "0,4"))
	_, _, err := e.Add(e.NewState(), policy.Request{Pod: "p", Container: "c", QoS: policy.Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 3000})
	var re *policy.RequestError
	if !errors.As(err, &re) || re.Field != "cpu_limit_milli" {
		t.Fatalf("err = %v, want a RequestError on cpu_limit_milli", err)
	}
}

// On xeon-8490h-2p-snc NUMA n holds cores 15n..15n+14 = CPUs 15n..15n+14
// and 120+15n..120+15n+14 (30 CPUs); CPUs 0,120 (core 0, node 0) are
// reserved, so node 0 has 28 assignable CPUs.
func TestSingleNUMANodeXeon(t *testing.T) {
	e := newEngine(t, "xeon-8490h-2p-snc", static("single-numa-node", "0,120"))
	st := e.NewState()

	// 8 CPUs fit one node: {0} is the narrowest preferred hint; four
	// whole cores from the lowest free core of node 0 (core 1).
	st, d := add(t, e, st, guaranteed("p1", "c", 8))
	check(t, d, want{cpus: "1-4,121-124", mems: "0-7", exclusive: true, numa: "0", preferred: true})

	// 30 CPUs fit a node only if it is entirely free: node 0 now has 20,
	// so {1}, the whole node.
	st, d = add(t, e, st, guaranteed("p2", "c", 30))
	check(t, d, want{cpus: "15-29,135-149", mems: "0-7", exclusive: true, numa: "1", preferred: true})

	// 31 CPUs need two nodes: no single-node hint survives the filter, the
	// default hint is reported as any and rejected; nothing changes.
	next, _, err := e.Add(st, guaranteed("p3", "c", 31))
	wantAffinityError(t, err, "", false)
	if !strings.Contains(err.Error(), "31 exclusive CPUs") {
		t.Fatalf("error %q does not carry the request", err)
	}
	if got := e.Snapshot(next); got.Shared != e.Snapshot(st).Shared {
		t.Fatalf("rejected Add changed the state: %+v", got)
	}
}

// On epyc-9654-2p-nps2 (no SMT) NUMA n = CPUs 48n..48n+47; CPU 0 reserved.
func TestSingleNUMANodeEpyc(t *testing.T) {
	e := newEngine(t, "epyc-9654-2p-nps2", static("single-numa-node", "0"))
	st := e.NewState()
	// 48 CPUs: node 0 has only 47 assignable, so {1}, all of it.
	st, d := add(t, e, st, guaranteed("p1", "c", 48))
	check(t, d, want{cpus: "48-95", mems: "0-3", exclusive: true, numa: "1", preferred: true})
	// 47 CPUs still fit node 0 exactly.
	st, d = add(t, e, st, guaranteed("p2", "c", 47))
	check(t, d, want{cpus: "1-47", mems: "0-3", exclusive: true, numa: "0", preferred: true})
	// 49 CPUs never fit one node.
	_, _, err := e.Add(st, guaranteed("p3", "c", 49))
	wantAffinityError(t, err, "", false)
}

// TestRestrictedVersusBestEffort: the two policies merge the same way and
// differ only in admission: a preferred merged hint is admitted by both
// with the same CPUs; a non-preferred one is admitted by best-effort and
// rejected by restricted (KEP-693, "Policy Decisions").
func TestRestrictedVersusBestEffort(t *testing.T) {
	// A device on one node offers every mask containing it, {node} preferred.
	device := func(e *policy.Engine, node int) map[string][]hints.Hint {
		return map[string][]hints.Hint{"example.com/nic": e.DeviceHints([]int{node})}
	}
	cases := []struct {
		fixture  string
		reserved string
		req      func(e *policy.Engine) policy.Request
		// best-effort's decision; restricted admits the same or rejects
		// with the same hint.
		want      want
		restrictd bool // restricted admits
	}{
		{
			// xeon: 40 CPUs need two nodes; every pair is preferred, {0,1}
			// is the numerically smallest. Sockets are not free, NUMA node 1
			// is (taken whole), the other 10 CPUs are the lowest whole cores
			// of node 0 (cores 1-5).
			fixture: "xeon-8490h-2p-snc", reserved: "0,120",
			req:       func(e *policy.Engine) policy.Request { return guaranteed("p", "c", 40) },
			want:      want{cpus: "1-5,15-29,121-125,135-149", mems: "0-7", exclusive: true, numa: "0-1", preferred: true},
			restrictd: true,
		},
		{
			// The same with a NIC on node 5 (hints: {5} preferred, every
			// wider mask holding 5 not). No combination is preferred: CPU
			// {a,b} x NIC {5} is {5} or empty with unequal masks, every
			// other NIC mask is not preferred. The target width is 2 (the
			// CPUs' narrowest); width-2 candidates are every pair {a,b}
			// (CPU {a,b} x NIC {a,b,5}, the kubelet's AND drops the NIC's
			// own node), the smallest mask {0,1} wins. Same CPUs as the
			// previous case, but not preferred.
			fixture: "xeon-8490h-2p-snc", reserved: "0,120",
			req: func(e *policy.Engine) policy.Request {
				r := guaranteed("p", "c", 40)
				r.Hints = device(e, 5)
				return r
			},
			want:      want{cpus: "1-5,15-29,121-125,135-149", mems: "0-7", exclusive: true, numa: "0-1", preferred: false},
			restrictd: false,
		},
		{
			// 8 CPUs with the NIC on node 5: CPU {5} x NIC {5} is the only
			// preferred single-node combination: four whole cores of node 5.
			fixture: "xeon-8490h-2p-snc", reserved: "0,120",
			req: func(e *policy.Engine) policy.Request {
				r := guaranteed("p", "c", 8)
				r.Hints = device(e, 5)
				return r
			},
			want:      want{cpus: "75-78,195-198", mems: "0-7", exclusive: true, numa: "5", preferred: true},
			restrictd: true,
		},
		{
			// epyc: 60 CPUs, pairs preferred, {0,1}: socket 0 is not free
			// (CPU 0 reserved), node 1 is taken whole, then CPUs 1-12.
			fixture: "epyc-9654-2p-nps2", reserved: "0",
			req:       func(e *policy.Engine) policy.Request { return guaranteed("p", "c", 60) },
			want:      want{cpus: "1-12,48-95", mems: "0-3", exclusive: true, numa: "0-1", preferred: true},
			restrictd: true,
		},
		{
			// epyc, NIC on node 2: as on the xeon, {0,1} (from CPU {0,1} x
			// NIC {0,1,2}) but not preferred.
			fixture: "epyc-9654-2p-nps2", reserved: "0",
			req: func(e *policy.Engine) policy.Request {
				r := guaranteed("p", "c", 60)
				r.Hints = device(e, 2)
				return r
			},
			want:      want{cpus: "1-12,48-95", mems: "0-3", exclusive: true, numa: "0-1", preferred: false},
			restrictd: false,
		},
		{
			// A shared-pool container with a NIC on node 2 alone: NIC {2}
			// preferred x CPU no-preference = {2} preferred: both admit,
			// shared CPUs, all memory nodes.
			fixture: "epyc-9654-2p-nps2", reserved: "0",
			req: func(e *policy.Engine) policy.Request {
				return policy.Request{Pod: "p", Container: "c", QoS: policy.Burstable, CPURequestMilli: 500, Hints: device(e, 2)}
			},
			want:      want{cpus: "0-191", mems: "0-3", exclusive: false, numa: "2", preferred: true},
			restrictd: true,
		},
	}
	for i, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.fixture, i), func(t *testing.T) {
			be := newEngine(t, tc.fixture, static("best-effort", tc.reserved))
			_, d := add(t, be, be.NewState(), tc.req(be))
			check(t, d, tc.want)

			re := newEngine(t, tc.fixture, static("restricted", tc.reserved))
			_, d, err := re.Add(re.NewState(), tc.req(re))
			if tc.restrictd {
				if err != nil {
					t.Fatalf("restricted rejected: %v", err)
				}
				check(t, d, tc.want)
				return
			}
			wantAffinityError(t, err, tc.want.numa, false)
		})
	}
}

// TestPreferClosestXeon: with nodes 1-3 full, a 40-CPU request's preferred
// pairs are those of {0,4,5,6,7}. The numerically smallest is {0,4}, across
// the sockets (average distance (10+21+21+10)/4 = 15.5); the closest are
// the same-socket pairs of socket 1 (average 11), of which {4,5} is the
// smallest.
func TestPreferClosestXeon(t *testing.T) {
	cases := []struct {
		name string
		opts map[string]string
		want want
	}{
		// Node 4 taken whole, the other 10 CPUs from node 0 (cores 1-5).
		{"narrowest", nil, want{cpus: "1-5,60-74,121-125,180-194", mems: "0-7", exclusive: true, numa: "0,4", preferred: true}},
		// Node 4 taken whole, then cores 75-79 of node 5.
		{"closest", map[string]string{"prefer-closest-numa-nodes": "true"}, want{cpus: "60-79,180-199", mems: "0-7", exclusive: true, numa: "4-5", preferred: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			cfg := static("best-effort", "0,120")
			cfg.TopologyOptions = tc.opts
			e := newEngine(t, "xeon-8490h-2p-snc", cfg)
			st := e.NewState()
			// Fill nodes 1, 2, 3: 30 CPUs fit a whole free node, node 0 has
			// only 28.
			for i, node := range []string{"1", "2", "3"} {
				var d policy.Decision
				st, d = add(t, e, st, guaranteed("fill", string(rune('a'+i)), 30))
				if d.Affinity.Affinity.String() != node {
					t.Fatalf("filler %d went to NUMA %s, want %s", i, d.Affinity.Affinity, node)
				}
			}
			_, d := add(t, e, st, guaranteed("p", "c", 40))
			check(t, d, tc.want)
		})
	}
}

// TestMemoryOnlyNode: memory-only-node has CPUs on NUMA 0 (0-3,8-11) and 1
// (4-7,12-15) and memory on 0, 1 and 2. Node 2 never appears in a CPU
// affinity; it is in every container's mems (memory_manager_policy None).
func TestMemoryOnlyNode(t *testing.T) {
	e := newEngine(t, "memory-only-node", static("best-effort", "0,8"))
	if got := e.NUMA().DefaultAffinity().String(); got != "0-1" {
		t.Fatalf("CPU NUMA nodes = %s, want 0-1", got)
	}
	st := e.NewState()
	st, d := add(t, e, st, guaranteed("p", "a", 4))
	check(t, d, want{cpus: "1-2,9-10", mems: "0-2", exclusive: true, numa: "0", preferred: true})
	// 10 CPUs need both nodes: {0,1} preferred. Node 1 whole (8), then
	// core 3 of node 0.
	st, d = add(t, e, st, guaranteed("p", "b", 10))
	check(t, d, want{cpus: "3-7,11-15", mems: "0-2", exclusive: true, numa: "0-1", preferred: true})
	_, d = add(t, e, st, policy.Request{Pod: "q", Container: "c", QoS: policy.BestEffort})
	check(t, d, want{cpus: "0,8", mems: "0-2", exclusive: false, numa: "0-1", preferred: true})
}

// TestTopologyNoneMemsEveryNode: with topology policy none nothing is
// merged, the affinity is any, and mems are every memory node, as the
// kubelet leaves them with its memory manager at None, even for CPUs all
// on one node.
func TestTopologyNoneMemsEveryNode(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("none", ""))
	st := e.NewState()
	// ht-2s-6c: socket/NUMA 0 = 0-5,12-17, 1 = 6-11,18-23; core k = {k,k+12}.
	// 16 CPUs: NUMA node 0 whole (12), then two whole cores of node 1.
	st, d := add(t, e, st, guaranteed("p", "a", 16))
	check(t, d, want{cpus: "0-7,12-19", mems: "0-1", exclusive: true, numa: "", preferred: false})
	_, d = add(t, e, st, guaranteed("p", "b", 2))
	check(t, d, want{cpus: "8,20", mems: "0-1", exclusive: true, numa: "", preferred: false})
	// The case: a 4-CPU pod on epyc-9654-2p-nps2 (NUMA n = CPUs
	// 48n..48n+47, every node with memory) has all its CPUs on node 0 and
	// every node's memory.
	e = newEngine(t, "epyc-9654-2p-nps2", static("none", "0"))
	_, d = add(t, e, e.NewState(), guaranteed("p", "a", 4))
	check(t, d, want{cpus: "1-4", mems: "0-3", exclusive: true, numa: "", preferred: false})
}

// TestPodScope: the KEP-693 example pod (inits 2 and 2, apps 2 and 1 CPUs:
// effective request 3) on ht-2s-6c after a 10-CPU pod has left node 0 with
// two free CPUs (5,17). In container scope the 2-CPU app container fits
// node 0; in pod scope the pod's 3 CPUs do not, so the whole pod goes to
// node 1.
func TestPodScope(t *testing.T) {
	effective := hints.EffectiveRequest([]hints.InitContainer{{Request: 2000}, {Request: 2000}}, []int64{2000, 1000})
	if effective != 3000 {
		t.Fatalf("effective request = %d, want 3000", effective)
	}
	cases := []struct {
		scope string
		a, b  want
	}{
		{"container",
			want{cpus: "5,17", mems: "0-1", exclusive: true, numa: "0", preferred: true},
			// Node 0 is full now: one CPU on node 1, its lowest.
			want{cpus: "6", mems: "0-1", exclusive: true, numa: "1", preferred: true}},
		{"pod",
			want{cpus: "6,18", mems: "0-1", exclusive: true, numa: "1", preferred: true},
			want{cpus: "7", mems: "0-1", exclusive: true, numa: "1", preferred: true}},
	}
	for _, tc := range cases {
		t.Run(tc.scope, func(t *testing.T) {
			cfg := static("restricted", "")
			cfg.TopologyScope = tc.scope
			e := newEngine(t, "ht-2s-6c", cfg)
			st, _ := add(t, e, e.NewState(), guaranteed("filler", "c", 10))
			ra, rb := guaranteed("kep", "app1", 2), guaranteed("kep", "app2", 1)
			ra.PodCPURequestMilli, rb.PodCPURequestMilli = effective, effective
			st, d := add(t, e, st, ra)
			check(t, d, tc.a)
			st, d = add(t, e, st, rb)
			check(t, d, tc.b)
			_, stored := st.PodAffinity["kep"]
			if stored != (tc.scope == "pod") {
				t.Fatalf("pod affinity stored = %t under scope %s", stored, tc.scope)
			}
			if st = e.RemovePod(st, "kep"); st.PodAffinity["kep"] != (hints.Hint{}) || len(st.Alloc.Assignments["kep"]) != 0 {
				t.Fatalf("RemovePod left %+v", st)
			}
		})
	}
}

func TestAffinityOverride(t *testing.T) {
	// ht-2s-6c, no reservation. Override {1}: 4 CPUs on node 1.
	for _, policyName := range []string{"best-effort", "restricted"} {
		t.Run(policyName, func(t *testing.T) {
			e := newEngine(t, "ht-2s-6c", static(policyName, ""))
			req := guaranteed("p", "a", 4)
			req.AffinityOverride = &hints.Hint{Affinity: hints.NewMask(1), Preferred: true}
			st, d := add(t, e, e.NewState(), req)
			check(t, d, want{cpus: "6-7,18-19", mems: "0-1", exclusive: true, numa: "1", preferred: true})
			// 14 CPUs do not fit node 1 (8 left): both policies spill to
			// node 0, as the kubelet's allocateCPUs does with any hint it
			// admitted (restricted admits a preferred hint and checks
			// nothing else).
			big := guaranteed("p", "b", 14)
			big.AffinityOverride = req.AffinityOverride
			next, d, err := e.Add(st, big)
			if err != nil {
				t.Fatal(err)
			}
			// Node 1's remaining 8 (cores 8-11), then cores 0-2 of node 0.
			check(t, d, want{cpus: "0-2,8-14,20-23", mems: "0-1", exclusive: true, numa: "1", preferred: true})
			if err := e.Validate(next); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestAddExistingReturnsAssignment(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("single-numa-node", "0,12"))
	st, first := add(t, e, e.NewState(), guaranteed("p", "a", 4))
	next, again := add(t, e, st, guaranteed("p", "a", 4))
	if !again.Existing || !again.CPUs.Equals(first.CPUs) || !again.Mems.Equals(first.Mems) {
		t.Fatalf("second Add = %+v, want the existing %+v", again, first)
	}
	if e.SharedCPUs(next).String() != e.SharedCPUs(st).String() {
		t.Fatal("second Add changed the shared pool")
	}
}

func TestInsufficientCPUs(t *testing.T) {
	e := newEngine(t, "ht-1s-4c", static("best-effort", "0,4"))
	_, _, err := e.Add(e.NewState(), guaranteed("p", "c", 7))
	var ie *allocator.InsufficientCPUsError
	if !errors.As(err, &ie) {
		t.Fatalf("err = %v, want InsufficientCPUs", err)
	}
}

func TestCPUPolicyNone(t *testing.T) {
	e := newEngine(t, "memory-only-node", policy.Config{CPUManagerPolicy: "none", TopologyPolicy: "best-effort"})
	st, d := add(t, e, e.NewState(), guaranteed("p", "c", 2))
	check(t, d, want{cpus: "0-15", mems: "0-2", exclusive: false, numa: "0-1", preferred: true})
	if h := e.Hints(st, guaranteed("p", "c", 2)); h["cpu"] != nil {
		t.Fatalf("hints under none = %v, want nil", h)
	}
	if _, err := e.Assign(st, "p", "c", mustParse(t, "1")); err == nil {
		t.Fatal("Assign accepted under cpu_manager_policy none")
	}
}

func TestHintsMatchAdd(t *testing.T) {
	// ht-2s-6c, reserved 0,12: 4 CPUs fit either node; {0} and {1}
	// preferred, {0,1} not; nothing assigned, so every Score is 1
	// (kubelet v1.38).
	e := newEngine(t, "ht-2s-6c", static("best-effort", "0,12"))
	got := e.Hints(e.NewState(), guaranteed("p", "c", 4))["cpu"]
	wantHints := []hints.Hint{{Affinity: hints.NewMask(0), Preferred: true, Score: 1}, {Affinity: hints.NewMask(1), Preferred: true, Score: 1}, {Affinity: hints.NewMask(0, 1), Score: 1}}
	if len(got) != len(wantHints) {
		t.Fatalf("hints = %v, want %v", got, wantHints)
	}
	for i := range got {
		if got[i] != wantHints[i] {
			t.Fatalf("hints = %v, want %v", got, wantHints)
		}
	}
	if h := e.Hints(e.NewState(), policy.Request{Pod: "p", Container: "c", QoS: policy.Burstable, CPURequestMilli: 4000}); h["cpu"] != nil {
		t.Fatalf("burstable hints = %v, want nil", h["cpu"])
	}
}

func TestConfigErrors(t *testing.T) {
	nineNUMA := nineNodeTopology(t)
	cases := []struct {
		name    string
		topo    *topology.Topology
		cfg     policy.Config
		key     string
		errHave []string
	}{
		{"unknown cpu policy", nil, policy.Config{CPUManagerPolicy: "dynamic"}, "cpu_manager_policy", []string{`"dynamic"`}},
		{"unknown topology policy", nil, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "strict"}, "topology_manager_policy", []string{`"strict"`}},
		{"unknown scope", nil, policy.Config{CPUManagerPolicy: "static", TopologyScope: "node"}, "topology_manager_scope", []string{`"node"`}},
		{"memory manager static without the machine's memory", nil, policy.Config{CPUManagerPolicy: "static", MemoryPolicy: "Static"}, "memory_manager_policy", []string{"Static", "memory per NUMA node"}},
		{"unknown memory policy", nil, policy.Config{CPUManagerPolicy: "static", MemoryPolicy: "none"}, "memory_manager_policy", []string{`"none"`, "None"}},
		{"bad topology option value", nil, policy.Config{CPUManagerPolicy: "static", TopologyOptions: map[string]string{"prefer-closest-numa-nodes": "maybe"}}, "topology_manager_policy_options", []string{"prefer-closest-numa-nodes", "maybe"}},
		{"unknown cpu option", nil, policy.Config{CPUManagerPolicy: "static", CPUOptions: map[string]string{"turbo": "true"}}, "cpu_manager_policy_options", []string{"turbo"}},
		{"incompatible cpu options", nil, policy.Config{CPUManagerPolicy: "static", CPUOptions: map[string]string{"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"}}, "cpu_manager_policy_options", []string{"full-pcpus-only", "distribute-cpus-across-cores"}},
		{"align-by-socket with single-numa-node", nil, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "single-numa-node", CPUOptions: map[string]string{"align-by-socket": "true"}}, "cpu_manager_policy_options", []string{"align-by-socket", "single-numa-node"}},
		{"options under none", nil, policy.Config{CPUManagerPolicy: "none", CPUOptions: map[string]string{"full-pcpus-only": "true"}}, "cpu_manager_policy_options", []string{"full-pcpus-only"}},
		{"reserved offline", nil, policy.Config{CPUManagerPolicy: "static", ReservedCPUs: cpuset.New(0, 99)}, "reserved_system_cpus", []string{"99"}},
		{"reserved count too big", nil, policy.Config{CPUManagerPolicy: "static", ReservedCount: 24}, "reserved_cpu_count", []string{"24"}},
		{"nine NUMA nodes", nineNUMA, policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "best-effort"}, "topology_manager_policy_options", []string{"8", "9", "max-allowable-numa-nodes"}},
		// The kubelet counts memory-only nodes too: 8 with CPUs + 2 = 10.
		{"memory-only nodes count", numaTopology(t, 8, 2), policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "restricted"}, "topology_manager_policy_options", []string{"at most 8", "has 10"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo := tc.topo
			if topo == nil {
				topo = sysfstest.Load(t, "ht-2s-6c")
			}
			_, err := policy.New(topo, tc.cfg)
			var ce *policy.ConfigError
			if !errors.As(err, &ce) || ce.Key != tc.key || ce.Reason() != "InvalidConfig" {
				t.Fatalf("err = %v, want a ConfigError on %s", err, tc.key)
			}
			for _, s := range tc.errHave {
				if !strings.Contains(err.Error(), s) {
					t.Fatalf("error %q does not mention %s", err, s)
				}
			}
		})
	}
	// The limit can be raised, and does not apply to policy none.
	for _, cfg := range []policy.Config{
		{CPUManagerPolicy: "static", TopologyPolicy: "best-effort", TopologyOptions: map[string]string{"max-allowable-numa-nodes": "9"}},
		{CPUManagerPolicy: "static", TopologyPolicy: "none"},
	} {
		if _, err := policy.New(nineNUMA, cfg); err != nil {
			t.Fatalf("New(%+v) on 9 NUMA nodes: %v", cfg, err)
		}
	}
}

// nineNodeTopology is a machine with nine NUMA nodes of two CPUs each.
func nineNodeTopology(t *testing.T) *topology.Topology { return numaTopology(t, 9, 0) }

// numaTopology is a machine with cpuNodes NUMA nodes of two CPUs each and
// memOnly more nodes with memory and no CPU.
func numaTopology(t *testing.T, cpuNodes, memOnly int) *topology.Topology {
	t.Helper()
	var m topology.Machine
	m.MemoryBytes = map[int]uint64{}
	for n := cpuNodes; n < cpuNodes+memOnly; n++ {
		m.MemoryBytes[n] = 1 << 30
	}
	for n := 0; n < cpuNodes; n++ {
		for i := 0; i < 2; i++ {
			cpu := 2*n + i
			m.CPUs = append(m.CPUs, topology.CPUInfo{CPU: cpu, Core: cpu, Socket: 0, NUMA: n})
		}
		m.MemoryBytes[n] = 1 << 30
	}
	topo, err := topology.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return topo
}

func TestSnapshotRoundTripAndReconcile(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", policy.Config{CPUManagerPolicy: "static", TopologyPolicy: "restricted", TopologyScope: "pod", ReservedCPUs: cpuset.New(0, 12)})
	st, _ := add(t, e, e.NewState(), guaranteed("p", "a", 4))
	snap := e.Snapshot(st)
	back, notes, err := e.FromSnapshot(snap)
	if err != nil || len(notes) != 0 {
		t.Fatalf("FromSnapshot = %v, notes %v", err, notes)
	}
	if got := e.Snapshot(back); got.Shared != snap.Shared || got.Assignments["p"]["a"] != snap.Assignments["p"]["a"] || got.PodAffinity["p"].NUMA[0] != 0 {
		t.Fatalf("round trip: %+v, want %+v", got, snap)
	}

	// A checkpoint from elsewhere: an offline CPU, a reserved one, an
	// overlap with another pod, garbage, a bad pod affinity.
	bad := policy.Snapshot{
		Shared:   "0-23",
		Reserved: "0,12",
		Assignments: map[string]map[string]string{
			"a": {"c": "1-2"},
			"b": {"offline": "30-31", "reserved": "0,1"},
			"c": {"overlap": "2-3", "garbage": "x-y"},
			"d": {"ok": "6,18"},
		},
		PodAffinity: map[string]policy.SnapshotHint{"a": {NUMA: []int{0}, Preferred: true}, "z": {NUMA: []int{7}}},
	}
	st, notes, err = e.FromSnapshot(bad)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Validate(st); err != nil {
		t.Fatalf("reconciled state invalid: %v", err)
	}
	got := e.Snapshot(st)
	if len(got.Assignments) != 2 || got.Assignments["a"]["c"] != "1-2" || got.Assignments["d"]["ok"] != "6,18" {
		t.Fatalf("kept assignments %v, want a/c=1-2 and d/ok=6,18", got.Assignments)
	}
	// 0,12 reserved stay shared; 1-2 and 6,18 are out.
	if got.Shared != "0,3-5,7-17,19-23" {
		t.Fatalf("shared = %s", got.Shared)
	}
	joined := strings.Join(notes, "\n")
	for _, s := range []string{"offline", "reserved", "overlap", "garbage", "pod z", "shared pool recomputed"} {
		if !strings.Contains(joined, s) {
			t.Fatalf("notes %q do not mention %s", joined, s)
		}
	}
}

func TestSMTAlignmentThroughEngine(t *testing.T) {
	cfg := static("restricted", "0,12")
	cfg.CPUOptions = map[string]string{"full-pcpus-only": "true"}
	e := newEngine(t, "ht-2s-6c", cfg)
	// 3 CPUs is not a multiple of the 2 threads per core: admitted by the
	// topology manager (node 0 fits), refused by the static policy.
	next, _, err := e.Add(e.NewState(), guaranteed("p", "c", 3))
	var smt *allocator.SMTAlignmentError
	if !errors.As(err, &smt) || smt.RequestedCPUs != 3 || smt.CpusPerCore != 2 {
		t.Fatalf("err = %v, want SMTAlignmentError{3, 2}", err)
	}
	if len(next.Alloc.Assignments) != 0 || len(next.PodAffinity) != 0 {
		t.Fatalf("rejected Add changed the state: %+v", next)
	}
	// 4 CPUs: two whole cores of node 0 after the reserved core 0.
	_, d := add(t, e, e.NewState(), guaranteed("p", "c", 4))
	check(t, d, want{cpus: "1-2,13-14", mems: "0-1", exclusive: true, numa: "0", preferred: true})
}

func TestFromSnapshotKeepsReusable(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("none", "0,12"))
	init := guaranteed("p", "init", 2)
	init.Type = allocator.Init
	st, d := add(t, e, e.NewState(), init)
	back, notes, err := e.FromSnapshot(e.Snapshot(st))
	if err != nil || len(notes) != 0 {
		t.Fatalf("FromSnapshot: %v %v", err, notes)
	}
	if back.Alloc.ReusablePod != "p" || !back.Alloc.Reusable.Equals(d.CPUs) {
		t.Fatalf("reusable = %s %s, want p %s", back.Alloc.ReusablePod, back.Alloc.Reusable, d.CPUs)
	}
	// The app container reuses the init container's CPUs after the restore.
	_, app := add(t, e, back, guaranteed("p", "app", 2))
	if !app.CPUs.Equals(d.CPUs) {
		t.Fatalf("app got %s, want the init container's %s", app.CPUs, d.CPUs)
	}
}

// TestPodScopeRejectsWholePod: under single-numa-node with the pod scope a
// pod whose effective request (13 CPUs) exceeds a NUMA node of ht-2s-6c
// (12 CPUs) is rejected at every container, even one that alone would fit.
func TestPodScopeRejectsWholePod(t *testing.T) {
	cfg := static("single-numa-node", "")
	cfg.TopologyScope = "pod"
	e := newEngine(t, "ht-2s-6c", cfg)
	req := guaranteed("p", "small", 2)
	req.PodCPURequestMilli = 13000
	if h := e.Hints(e.NewState(), req)["cpu"]; len(h) != 1 || h[0] != (hints.Hint{Affinity: hints.NewMask(0, 1), Preferred: true, Score: 1}) {
		t.Fatalf("pod hints = %v, want only {0-1 preferred}", h)
	}
	next, _, err := e.Add(e.NewState(), req)
	wantAffinityError(t, err, "", false)
	if !strings.Contains(err.Error(), "pod effective request 13 CPUs") {
		t.Fatalf("error %q does not name the pod request", err)
	}
	if len(next.PodAffinity) != 0 {
		t.Fatal("a rejected pod's affinity was stored")
	}
	// Container scope: the same container fits node 0.
	cfg.TopologyScope = "container"
	e = newEngine(t, "ht-2s-6c", cfg)
	_, d := add(t, e, e.NewState(), req)
	check(t, d, want{cpus: "0,12", mems: "0-1", exclusive: true, numa: "0", preferred: true})
}

// TestFromSnapshotKeepsSamePodOverlap: after init-container reuse the app
// container holds the init container's CPUs (ht-2s-6c, reserved 0,12: the
// init container gets core 1 = {1,13}, the app reuses it). Both entries
// must survive a checkpoint round trip; restoring them with the plain,
// overlap-refusing Assign would drop the second.
func TestFromSnapshotKeepsSamePodOverlap(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("none", "0,12"))
	init := guaranteed("p", "init", 2)
	init.Type = allocator.Init
	st, d := add(t, e, e.NewState(), init)
	if d.CPUs.String() != "1,13" {
		t.Fatalf("init got %s, want 1,13", d.CPUs)
	}
	st, app := add(t, e, st, guaranteed("p", "app", 2))
	if app.CPUs.String() != "1,13" {
		t.Fatalf("app got %s, want the init container's 1,13", app.CPUs)
	}
	back, notes, err := e.FromSnapshot(e.Snapshot(st))
	if err != nil || len(notes) != 0 {
		t.Fatalf("FromSnapshot: err=%v notes=%v", err, notes)
	}
	for _, c := range []string{"init", "app"} {
		if got, ok := e.Assignment(back, "p", c); !ok || got.String() != "1,13" {
			t.Fatalf("restored %s = %s (%t), want 1,13", c, got, ok)
		}
	}
}

// TestAddExistingKeepsReuseUpdate: re-adding an init container that holds
// CPUs (a restart) puts its CPUs back in the pod's reuse set, as the
// kubelet's allocator does on its existing-assignment path; the engine must
// return that State rather than the one it was given.
func TestAddExistingKeepsReuseUpdate(t *testing.T) {
	e := newEngine(t, "ht-2s-6c", static("none", "0,12"))
	init := guaranteed("p", "init", 2)
	init.Type = allocator.Init
	st, _ := add(t, e, e.NewState(), init)
	st, _ = add(t, e, st, guaranteed("p", "app", 2)) // takes 1,13 out of the reuse set
	if st.Alloc.Reusable.Size() != 0 {
		t.Fatalf("reusable after the app = %s, want empty", st.Alloc.Reusable)
	}
	st, d := add(t, e, st, init)
	if !d.Existing || st.Alloc.ReusablePod != "p" || st.Alloc.Reusable.String() != "1,13" {
		t.Fatalf("after re-adding init: existing=%t reusable=%s/%s, want true p/1,13", d.Existing, st.Alloc.ReusablePod, st.Alloc.Reusable)
	}
}

// TestMemsOfCPUOnlyNodes: cpuset.mems is the memory nodes, never a CPU-only
// node, wherever the CPUs are. Nodes 0-2 have 4 single-thread CPUs each,
// only node 0 and the CPU-less node 3 have memory.
func TestMemsOfCPUOnlyNodes(t *testing.T) {
	var m topology.Machine
	for cpu := 0; cpu < 12; cpu++ {
		m.CPUs = append(m.CPUs, topology.CPUInfo{CPU: cpu, Core: cpu, SysfsCoreID: cpu, NUMA: cpu / 4, L3: cpu / 4})
	}
	d := [4][4]int{{10, 20, 25, 30}, {20, 10, 20, 15}, {25, 20, 10, 25}, {30, 15, 25, 10}}
	m.Distances = map[int]map[int]int{}
	for a := range d {
		m.Distances[a] = map[int]int{}
		for b := range d[a] {
			m.Distances[a][b] = d[a][b]
		}
	}
	m.MemoryBytes = map[int]uint64{0: 1 << 30, 1: 0, 2: 0, 3: 1 << 30}
	topo, err := topology.New(m)
	if err != nil {
		t.Fatal(err)
	}
	e, err := policy.New(topo, static("best-effort", "0"))
	if err != nil {
		t.Fatal(err)
	}
	st := e.NewState()
	// Node 0 keeps 3 free CPUs (0 is reserved): 4 CPUs fit node 1 first.
	st, dec := add(t, e, st, guaranteed("p", "a", 4))
	check(t, dec, want{cpus: "4-7", mems: "0,3", exclusive: true, numa: "1", preferred: true})
	_, dec = add(t, e, st, guaranteed("p", "b", 4))
	check(t, dec, want{cpus: "8-11", mems: "0,3", exclusive: true, numa: "2", preferred: true})
	_, dec = add(t, e, st, guaranteed("q", "c", 2))
	check(t, dec, want{cpus: "1-2", mems: "0,3", exclusive: true, numa: "0", preferred: true})
}
