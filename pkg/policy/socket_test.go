package policy_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// The kubelet under align-by-socket (policy_static.go): CPU hints are also
// preferred when they span the fewest sockets the request needs
// (ceil(minimum NUMA nodes / NUMA nodes per socket)); the merged NUMA hint
// is widened to its whole sockets and allocateCPUs takes "aligned first,
// then the rest" from there; restricted admits on the merged hint alone
// (scope_container.go: Merge's admit, nothing after the allocation). So CPUs
// may land on the socket's other NUMA nodes, and the container is admitted.
//
// takeByTopology on these 2-socket machines (fewer sockets than NUMA
// nodes) is sockets first: whole free sockets, whole free NUMA nodes (each
// only when the need is at least its size), whole free cores, then single
// CPUs; NUMA nodes inside a socket, and cores inside a node, go by
// ascending free CPUs, ties by lowest id. So the socket's most-used NUMA
// node is drained first.

// step is one Add (or removal) and its hand-worked outcome.
type step struct {
	pod, ctr string
	cpus     int64
	remove   bool
	want     want
	// rejected: the TopologyAffinityError's hint ("" = admitted); smt:
	// an SMTAlignmentError is expected instead.
	rejected string
	smt      bool
}

func runSteps(t *testing.T, e *policy.Engine, steps []step) {
	t.Helper()
	st := e.NewState()
	for i, s := range steps {
		if s.remove {
			st = e.Remove(st, s.pod, s.ctr)
			continue
		}
		req := guaranteed(s.pod, s.ctr, s.cpus)
		if s.smt {
			_, _, err := e.Add(st, req)
			var se *allocator.SMTAlignmentError
			if !errors.As(err, &se) || se.Reason() != "SMTAlignmentError" {
				t.Fatalf("step %d (%s/%s): err = %v, want SMTAlignmentError", i, s.pod, s.ctr, err)
			}
			continue
		}
		if s.rejected != "" {
			next, _, err := e.Add(st, req)
			wantAffinityError(t, err, s.rejected, false)
			if e.SharedCPUs(next).String() != e.SharedCPUs(st).String() {
				t.Fatalf("step %d: a rejection changed the shared pool", i)
			}
			continue
		}
		var d policy.Decision
		st, d = add(t, e, st, req)
		check(t, d, s.want)
	}
}

func socketConfig(topoPolicy, reserved string, alignBySocket bool) policy.Config {
	cfg := static(topoPolicy, reserved)
	cfg.CPUOptions = map[string]string{"full-pcpus-only": "true"}
	if alignBySocket {
		cfg.CPUOptions["align-by-socket"] = "true"
	}
	return cfg
}

// TestAlignBySocketRestrictedXeon: xeon-8490h-2p-snc, SNC4: NUMA n<4 =
// CPUs 15n..15n+14 and 120+15n..+14 (socket 0), NUMA 4-7 the same from 60
// and 180 (socket 1); core k = {k, k+120}; 30 CPUs a node. Reserved 0,120
// (core 0). restricted, full-pcpus-only (CPUsPerCore 2).
func TestAlignBySocketRestrictedXeon(t *testing.T) {
	fill := []step{
		// Node 0 has 28 assignable CPUs: every single node holds 28, the
		// minimum is 1 node (1 socket); {0} is the narrowest preferred.
		// Socket 0 is the aligned set; no socket or node is free enough to
		// take whole (node 0 is short of its reserved core, nodes 1-3
		// hold 30 > 28); node 0 has the fewest free CPUs, so its 14 free
		// cores 1-14.
		{pod: "f1", ctr: "c", cpus: 28, want: want{cpus: "1-14,121-134", mems: "0-7", exclusive: true, numa: "0", preferred: true}},
		// Node 0 is empty: {1} is the narrowest. Nodes 1-3 tie at 30 free:
		// node 1's cores 15-28, leaving core 29 = {29,149}.
		{pod: "f2", ctr: "c", cpus: 28, want: want{cpus: "15-28,135-148", mems: "0-7", exclusive: true, numa: "1", preferred: true}},
	}
	t.Run("align-by-socket", func(t *testing.T) {
		e := newEngine(t, "xeon-8490h-2p-snc", socketConfig("restricted", "0,120", true))
		runSteps(t, e, append(fill,
			// 4 CPUs: node 1 has 2 free, so {2} is the narrowest preferred
			// hint and restricted admits it. Widened to socket 0 (node 1's
			// core 29, nodes 2 and 3), node 1 has the fewest free CPUs: its
			// core 29 first, then node 2's lowest core 30. Two of the four
			// CPUs are outside NUMA 2; the kubelet admits them (the project
			// used to refuse: "only 2 of the CPUs fit in NUMA 2").
			step{pod: "t", ctr: "c", cpus: 4, want: want{cpus: "29-30,149-150", mems: "0-7", exclusive: true, numa: "2", preferred: true}},
			// full-pcpus-only: 3 is not a multiple of 2 threads per core.
			step{pod: "u", ctr: "c", cpus: 3, smt: true},
		))
	})
	t.Run("without align-by-socket", func(t *testing.T) {
		// The same steps place f1 and f2 identically (each fits its hinted
		// node); t is taken from node 2 alone: its lowest cores 30, 31.
		e := newEngine(t, "xeon-8490h-2p-snc", socketConfig("restricted", "0,120", false))
		runSteps(t, e, append(fill,
			step{pod: "t", ctr: "c", cpus: 4, want: want{cpus: "30-31,150-151", mems: "0-7", exclusive: true, numa: "2", preferred: true}},
		))
	})
}

// TestAlignBySocketRestrictedEpyc: epyc-9654-2p-nps2, NPS2, no SMT (so
// full-pcpus-only accepts any count): NUMA n = CPUs 48n..48n+47, socket 0 =
// nodes 0 and 1, socket 1 = nodes 2 and 3. Reserved 0. restricted.
func TestAlignBySocketRestrictedEpyc(t *testing.T) {
	t.Run("align-by-socket", func(t *testing.T) {
		e := newEngine(t, "epyc-9654-2p-nps2", socketConfig("restricted", "0", true))
		runSteps(t, e, []step{
			// 20 fit any node: {0} is the narrowest preferred. Socket 0
			// (1-95): node 0 has fewer free CPUs (47) than node 1 (48).
			{pod: "a1", ctr: "c", cpus: 20, want: want{cpus: "1-20", mems: "0-3", exclusive: true, numa: "0", preferred: true}},
			// Node 0 still holds 27: {0} again.
			{pod: "a2", ctr: "c", cpus: 20, want: want{cpus: "21-40", mems: "0-3", exclusive: true, numa: "0", preferred: true}},
			// Node 0 has 7 left: {1} is the narrowest preferred hint.
			// Widened to socket 0, node 0 (7 free) comes before node 1
			// (48): 41-47, then 17 from node 1. Admitted with 7 CPUs
			// outside NUMA 1, as the kubelet does.
			{pod: "b", ctr: "c", cpus: 24, want: want{cpus: "41-64", mems: "0-3", exclusive: true, numa: "1", preferred: true}},
			// Node 0 gets 1-20 back (20 free); node 1 has 65-95 (31).
			{pod: "a1", ctr: "c", remove: true},
			// 48: only nodes 2 and 3 hold it; {2}. Socket 1 is free but
			// larger than the need; node 2 is free and exactly the need:
			// taken whole.
			{pod: "c", ctr: "c", cpus: 48, want: want{cpus: "96-143", mems: "0-3", exclusive: true, numa: "2", preferred: true}},
			// 40: only node 3 holds it: 144-183, leaving 184-191 (8).
			{pod: "d", ctr: "c", cpus: 40, want: want{cpus: "144-183", mems: "0-3", exclusive: true, numa: "3", preferred: true}},
			// 40 fit one node's total (minimum 1 node, 1 socket) but no
			// node has 40 free (20, 31, 0, 8). Hints: {0,1} (51 free, one
			// socket: preferred under align-by-socket), {0,1,2}, {0,1,3},
			// {0,1,2,3} (two sockets, more than 1 node: not preferred);
			// {1,3} has 39. restricted admits {0,1}. Socket 0: node 0
			// (20 free) before node 1 (31): 1-20, then 65-84.
			{pod: "g", ctr: "c", cpus: 40, want: want{cpus: "1-20,65-84", mems: "0-3", exclusive: true, numa: "0-1", preferred: true}},
			// Free now: node 1 85-95 (11), node 3 184-191 (8). 12 CPUs:
			// the only hints span both sockets ({1,3}: 19 free, and the
			// wider masks), none preferred; restricted still rejects, with
			// the narrowest ({1,3}) as the best non-preferred hint.
			{pod: "r", ctr: "c", cpus: 12, rejected: "1,3"},
		})
	})
	t.Run("without align-by-socket", func(t *testing.T) {
		e := newEngine(t, "epyc-9654-2p-nps2", socketConfig("restricted", "0", false))
		runSteps(t, e, []step{
			{pod: "a1", ctr: "c", cpus: 20, want: want{cpus: "1-20", mems: "0-3", exclusive: true, numa: "0", preferred: true}},
			{pod: "a2", ctr: "c", cpus: 20, want: want{cpus: "21-40", mems: "0-3", exclusive: true, numa: "0", preferred: true}},
			// {1} alone: node 1's lowest 24.
			{pod: "b", ctr: "c", cpus: 24, want: want{cpus: "48-71", mems: "0-3", exclusive: true, numa: "1", preferred: true}},
			{pod: "a1", ctr: "c", remove: true},
			{pod: "c", ctr: "c", cpus: 48, want: want{cpus: "96-143", mems: "0-3", exclusive: true, numa: "2", preferred: true}},
			{pod: "d", ctr: "c", cpus: 40, want: want{cpus: "144-183", mems: "0-3", exclusive: true, numa: "3", preferred: true}},
			// Free: node 0 27 (1-20,41-47), node 1 24, node 3 8. No single
			// node holds 40; {0,1} (51) is the narrowest hint but spans 2
			// nodes where 1 is the minimum: not preferred, rejected.
			{pod: "g", ctr: "c", cpus: 40, rejected: "0-1"},
		})
	})
}

// TestPodScopeSpillsLikeAllocateCPUs: under the pod scope the pod's
// affinity is fixed by its first container; here another pod empties that
// NUMA node before the pod's second container arrives (possible with NRI,
// which sees containers one by one; the kubelet allocates a pod whole at
// admission). The second container gets what allocateCPUs gives for the
// pod's hint: nothing is left in it, so all from elsewhere; restricted
// does not reject (the hint is preferred).
func TestPodScopeSpillsLikeAllocateCPUs(t *testing.T) {
	// ht-2s-6c: NUMA 0 = 0-5,12-17, NUMA 1 = 6-11,18-23; core k = {k,k+12}.
	cfg := static("restricted", "")
	cfg.TopologyScope = "pod"
	e := newEngine(t, "ht-2s-6c", cfg)
	app1, app2 := guaranteed("kep", "app1", 2), guaranteed("kep", "app2", 2)
	app1.PodCPURequestMilli, app2.PodCPURequestMilli = 4000, 4000
	// 4 fit either node: {0}; core 0.
	st, d := add(t, e, e.NewState(), app1)
	check(t, d, want{cpus: "0,12", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	// Node 0 holds exactly 10 more: {0}, cores 1-5.
	st, d = add(t, e, st, guaranteed("other", "c", 10))
	check(t, d, want{cpus: "1-5,13-17", mems: "0-1", exclusive: true, numa: "0", preferred: true})
	// kep's stored {0} has no free CPU: node 1's lowest core.
	_, d = add(t, e, st, app2)
	check(t, d, want{cpus: "6,18", mems: "0-1", exclusive: true, numa: "0", preferred: true})
}

// TestAlignBySocketStartupValidation: the kubelet's order
// (NewStaticPolicyOptions, then ValidateStaticPolicyOptions):
// incompatible pairs, then align-by-socket with single-numa-node, then
// align-by-socket on hardware with more sockets than NUMA nodes. The other
// topology manager policies accept align-by-socket.
func TestAlignBySocketStartupValidation(t *testing.T) {
	// Two sockets, one NUMA node (NPS0-like): sockets outnumber nodes.
	var m topology.Machine
	m.MemoryBytes = map[int]uint64{0: 1 << 30}
	for cpu := 0; cpu < 4; cpu++ {
		m.CPUs = append(m.CPUs, topology.CPUInfo{CPU: cpu, Core: cpu, Socket: cpu / 2, NUMA: 0})
	}
	twoSocketsOneNode, err := topology.New(m)
	if err != nil {
		t.Fatal(err)
	}
	cfg := func(topoPolicy string, opts ...string) policy.Config {
		c := static(topoPolicy, "")
		c.CPUOptions = map[string]string{}
		for _, o := range opts {
			c.CPUOptions[o] = "true"
		}
		return c
	}
	cases := []struct {
		name    string
		topo    *topology.Topology
		cfg     policy.Config
		mention []string // nil: accepted
	}{
		{"pair first", twoSocketsOneNode, cfg("single-numa-node", "align-by-socket", "full-pcpus-only", "distribute-cpus-across-cores"), []string{"full-pcpus-only", "distribute-cpus-across-cores"}},
		{"single-numa-node before hardware", twoSocketsOneNode, cfg("single-numa-node", "align-by-socket"), []string{"align-by-socket", "single-numa-node"}},
		{"hardware", twoSocketsOneNode, cfg("restricted", "align-by-socket"), []string{"align-by-socket", "sockets (2)", "NUMA nodes (1)"}},
		{"single-numa-node on fitting hardware", nil, cfg("single-numa-node", "align-by-socket"), []string{"align-by-socket", "single-numa-node"}},
		{"none", nil, cfg("none", "align-by-socket", "full-pcpus-only"), nil},
		{"best-effort", nil, cfg("best-effort", "align-by-socket", "full-pcpus-only", "distribute-cpus-across-numa"), nil},
		{"restricted", nil, cfg("restricted", "align-by-socket", "full-pcpus-only", "prefer-align-cpus-by-uncorecache", "strict-cpu-reservation"), nil},
		{"single-numa-node without align-by-socket", nil, cfg("single-numa-node", "full-pcpus-only"), nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			topo := tc.topo
			if topo == nil {
				topo = sysfstest.Load(t, "ht-2s-4numa-80")
			}
			tc.cfg.ReservedCount = 2
			_, err := policy.New(topo, tc.cfg)
			if tc.mention == nil {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			var ce *policy.ConfigError
			if !errors.As(err, &ce) || ce.Key != "cpu_manager_policy_options" {
				t.Fatalf("err = %v, want a ConfigError on cpu_manager_policy_options", err)
			}
			for _, s := range tc.mention {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q does not mention %q", err, s)
				}
			}
		})
	}
}
