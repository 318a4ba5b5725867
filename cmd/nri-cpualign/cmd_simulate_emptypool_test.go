package main

import "testing"

// The shared pool empties as in the kubelet. ht-2s-6c: NUMA 0 = 0-5,12-17,
// NUMA 1 = 6-11,18-23, core k = {k, k+12}.
func TestSimulateSharedPoolEmpty(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	t.Run("strict reservation fills every non-reserved CPU", func(t *testing.T) {
		out, code := simulate(t, root,
			"reserved_system_cpus = \"0,12\"\n[cpu_manager_policy_options]\nstrict-cpu-reservation = \"true\"\n",
			// 22 CPUs outside the reservation. 12: node 1 is entirely
			// free and the need covers it: the whole node.
			g("add", "p", "a", 12, ""),
			// The 10 left (node 0 minus core 0): whole cores 1-5. The
			// pool is now empty.
			g("add", "p", "b", 10, ""),
			`{"op":"state"}`,
			// A shared-pool container runs on the reserved CPUs.
			`{"op":"add","pod":"q","container":"x","qos":"besteffort"}`,
			g("add", "q", "y", 1, ""),
			`{"op":"remove","pod":"p","container":"a"}`,
			`{"op":"add","pod":"q","container":"z","qos":"besteffort"}`,
			`{"op":"state"}`,
		)
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
		expectLines(t, out,
			`{"pod":"p","container":"a","cpus":"6-11,18-23","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
			`{"pod":"p","container":"b","cpus":"1-5,13-17","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
			`{"shared":"","reserved":"0,12","assignments":{"p":{"a":"6-11,18-23","b":"1-5,13-17"}}}`,
			`{"pod":"q","container":"x","cpus":"0,12","mems":"0-1","exclusive":false,"affinity":{"numa":null,"preferred":false}}`,
			`{"pod":"q","container":"y","error":"InsufficientCPUs: not enough cpus available to satisfy request: requested=1, available=0","reason":"InsufficientCPUs"}`,
			`{"pod":"p","container":"a","removed":true}`,
			`{"pod":"q","container":"z","cpus":"6-11,18-23","mems":"0-1","exclusive":false,"affinity":{"numa":null,"preferred":false}}`,
			`{"shared":"6-11,18-23","reserved":"0,12","assignments":{"p":{"b":"1-5,13-17"}}}`,
		)
	})
	t.Run("no reservation", func(t *testing.T) {
		out, code := simulate(t, root, "reserved_cpu_count = 0\n",
			// Both NUMA nodes are entirely free and needed: all 24.
			g("add", "p", "a", 24, ""),
			`{"op":"add","pod":"q","container":"x","qos":"besteffort"}`,
		)
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
		expectLines(t, out,
			`{"pod":"p","container":"a","cpus":"0-23","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
			`{"pod":"q","container":"x","error":"InsufficientCPUs: pod \"q\" container \"x\": no CPU for a shared-pool container: the shared pool is empty (every CPU is exclusive) and no CPUs are reserved","reason":"InsufficientCPUs"}`,
		)
	})
}
