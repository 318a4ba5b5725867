package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSimulateAlignBySocketRestricted drives `simulate` with align-by-socket
// and full-pcpus-only under restricted on the two 2-socket multi-NUMA
// fixtures. The expectations are the kubelet's, worked out by hand:
//
//   - CPU hints: a NUMA mask whose free CPUs hold the request; preferred
//     when it has the minimum number of nodes whose total CPUs hold it, or
//     (align-by-socket) when it spans exactly ceil(minimum / NUMA nodes per
//     socket) sockets. The merge picks the narrowest preferred hint (fewer
//     nodes, then the smaller bitmask); restricted admits a preferred one
//     and checks nothing after the allocation.
//   - allocateCPUs: the hint is widened to its whole sockets; as many CPUs
//     as fit are taken from there, the rest from everything else.
//   - takeByTopology, sockets first (2 sockets < NUMA nodes): whole free
//     sockets and NUMA nodes only when the need is at least their size;
//     then whole free cores, nodes and cores by ascending free CPUs, ties
//     by lowest id, so the socket's most-used NUMA node is drained first.
func TestSimulateAlignBySocketRestricted(t *testing.T) {
	const opts = "topology_manager_policy = \"restricted\"\n" +
		"[cpu_manager_policy_options]\nalign-by-socket = \"true\"\nfull-pcpus-only = \"true\"\n"
	cases := []struct {
		name, fixture, toml string
		lines, want         []string
	}{
		{
			// xeon-8490h-2p-snc, SNC4: NUMA n<4 = CPUs 15n..15n+14 and
			// 120+15n.. (socket 0), nodes 4-7 from 60 and 180 (socket 1);
			// core k = {k, k+120}. Reserved core 0 = CPUs 0,120.
			name: "xeon", fixture: "xeon-8490h-2p-snc", toml: "reserved_system_cpus = \"0,120\"\n" + opts,
			lines: []string{
				// 28 fit any node: {0}. Socket 0: node 0 has the fewest
				// free CPUs (28): its cores 1-14.
				g("add", "f1", "c", 28, ""),
				// {1}: nodes 1-3 tie at 30 free, node 1's cores 15-28;
				// core 29 = {29,149} is left.
				g("add", "f2", "c", 28, ""),
				// {2} (node 1 holds 2 < 4): socket 0's most-used node is
				// node 1: core 29, then node 2's core 30. Admitted with
				// half the CPUs in NUMA 1.
				g("add", "t", "c", 4, ""),
				// full-pcpus-only: 3 is not a multiple of 2.
				g("add", "u", "c", 3, ""),
				`{"op":"state"}`,
			},
			want: []string{
				`{"pod":"f1","container":"c","cpus":"1-14,121-134","mems":"0-7","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
				`{"pod":"f2","container":"c","cpus":"15-28,135-148","mems":"0-7","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
				`{"pod":"t","container":"c","cpus":"29-30,149-150","mems":"0-7","exclusive":true,"affinity":{"numa":[2],"preferred":true}}`,
				`{"pod":"u","container":"c","error":"SMTAlignmentError: requested 3 cpus not multiple cpus per core = 2","reason":"SMTAlignmentError"}`,
				`{"shared":"0,31-120,151-239","reserved":"0,120","assignments":{"f1":{"c":"1-14,121-134"},"f2":{"c":"15-28,135-148"},"t":{"c":"29-30,149-150"}}}`,
			},
		},
		{
			// epyc-9654-2p-nps2, NPS2, no SMT: NUMA n = 48n..48n+47,
			// socket 0 = nodes 0-1, socket 1 = nodes 2-3. Reserved CPU 0.
			name: "epyc", fixture: "epyc-9654-2p-nps2", toml: "reserved_system_cpus = \"0\"\n" + opts,
			lines: []string{
				// {0}; socket 0: node 0 (47 free) before node 1 (48).
				g("add", "a1", "c", 20, ""),
				g("add", "a2", "c", 20, ""),
				// Node 0 has 7 left: {1}. Socket 0: node 0's 41-47 first,
				// then 48-64. 7 of 24 outside NUMA 1, admitted.
				g("add", "b", "c", 24, ""),
				`{"op":"remove","pod":"a1","container":"c"}`,
				// Only nodes 2 and 3 hold 48: {2}, node 2 taken whole.
				g("add", "c", "c", 48, ""),
				// Only node 3 holds 40: 144-183, 8 left.
				g("add", "d", "c", 40, ""),
				// Free: node 0 20 (1-20), node 1 31 (65-95), node 2 0,
				// node 3 8. 40 fit one node's total (minimum 1 node, 1
				// socket), but no node has them free: {0,1} spans one
				// socket (preferred), the wider masks two; {1,3} holds 39.
				g("hints", "g", "c", 40, ""),
				// restricted admits {0,1}: node 0 (20 free) then node 1.
				g("add", "g", "c", 40, ""),
				// Node 1 85-95 (11) and node 3 184-191 (8) are left: 12
				// CPUs only fit masks across both sockets, none preferred;
				// the narrowest, {1,3}, is reported.
				g("add", "r", "c", 12, ""),
			},
			want: []string{
				`{"pod":"a1","container":"c","cpus":"1-20","mems":"0-3","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
				`{"pod":"a2","container":"c","cpus":"21-40","mems":"0-3","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
				`{"pod":"b","container":"c","cpus":"41-64","mems":"0-3","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
				`{"pod":"a1","container":"c","removed":true}`,
				`{"pod":"c","container":"c","cpus":"96-143","mems":"0-3","exclusive":true,"affinity":{"numa":[2],"preferred":true}}`,
				`{"pod":"d","container":"c","cpus":"144-183","mems":"0-3","exclusive":true,"affinity":{"numa":[3],"preferred":true}}`,
				`{"pod":"g","container":"c","hints":{"cpu":[{"numa":[0,1],"preferred":true},{"numa":[0,1,2],"preferred":false},{"numa":[0,1,3],"preferred":false},{"numa":[0,1,2,3],"preferred":false}]}}`,
				`{"pod":"g","container":"c","cpus":"1-20,65-84","mems":"0-3","exclusive":true,"affinity":{"numa":[0,1],"preferred":true}}`,
				`{"pod":"r","container":"c","error":"TopologyAffinityError: resources cannot be allocated with topology locality: pod r container c: 12 exclusive CPUs: policy restricted needs a preferred affinity, best merged hint is NUMA 1,3 (preferred=false)","reason":"TopologyAffinityError","affinity":{"numa":[1,3],"preferred":false}}`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := simulate(t, simFixture(t, tc.fixture), tc.toml, tc.lines...)
			if code != 0 {
				t.Fatalf("exit code %d", code)
			}
			expectLines(t, out, tc.want...)
		})
	}
}

// TestSimulateAlignBySocketStartup: the kubelet refuses align-by-socket
// with single-numa-node (ValidateStaticPolicyOptions), on any machine;
// best-effort and restricted accept it with the other options.
func TestSimulateAlignBySocketStartup(t *testing.T) {
	root := simFixture(t, "epyc-9654-2p-nps2")
	out, code := simulate(t, root, "reserved_system_cpus = \"0\"\ntopology_manager_policy = \"single-numa-node\"\n"+
		"[cpu_manager_policy_options]\nalign-by-socket = \"true\"\nfull-pcpus-only = \"true\"\n", `{"op":"state"}`)
	if code == 0 || len(out) != 1 {
		t.Fatalf("single-numa-node + align-by-socket: exit %d, %q", code, out)
	}
	var line struct{ Error, Reason string }
	if err := json.Unmarshal([]byte(out[0]), &line); err != nil || line.Reason != "InvalidConfig" {
		t.Fatalf("line %q: want {\"error\":...,\"reason\":\"InvalidConfig\"}", out[0])
	}
	for _, m := range []string{"cpu_manager_policy_options", "align-by-socket is incompatible with topology_manager_policy single-numa-node"} {
		if !strings.Contains(line.Error, m) {
			t.Errorf("error %q does not mention %q", line.Error, m)
		}
	}
	for _, policy := range []string{"best-effort", "restricted"} {
		out, code := simulate(t, root, "reserved_system_cpus = \"0\"\ntopology_manager_policy = \""+policy+"\"\n"+
			"[cpu_manager_policy_options]\nalign-by-socket = \"true\"\nfull-pcpus-only = \"true\"\ndistribute-cpus-across-numa = \"true\"\n", `{"op":"state"}`)
		if code != 0 {
			t.Fatalf("%s: exit %d, %q", policy, code, out)
		}
		expectLines(t, out, `{"shared":"0-191","reserved":"0","assignments":{}}`)
	}
}
