package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestSimulateDeviceNUMA: device_numa turns the NUMA nodes of a
// container's devices into the "devices" provider's hints as the daemon
// does. On ht-2s-6c (NUMA 0 = 0-5,12-17, NUMA 1 = 6-11,18-23, core k =
// {k, k+12}) under single-numa-node:
//   - hints for 4 CPUs with a device on node 1: CPU hints {0}, {1}
//     preferred and {0,1} not; device hints every set holding node 1,
//     {1} preferred and {0,1} not;
//   - add of the same lands on node 1's lowest cores 6 and 7;
//   - devices on both nodes leave no preferred single node:
//     TopologyAffinityError;
//   - a node out of range, or device_numa next to hints.devices, is an
//     InvalidRequest naming the field.
func TestSimulateDeviceNUMA(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	out, code := simulate(t, root, "topology_manager_policy = \"single-numa-node\"\n",
		g("hints", "p", "c", 4, `"device_numa":[1]`),
		g("add", "p", "c", 4, `"device_numa":[1]`),
		g("add", "q", "c", 2, `"device_numa":[0,1]`),
		g("add", "r", "c", 2, `"device_numa":[64]`),
		g("add", "r", "c", 2, `"device_numa":[1],"hints":{"devices":null}`),
		g("add", "s", "c", 2, `"device_numa":[]`),
	)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if len(out) != 6 {
		t.Fatalf("got %d lines, want 6:\n%s", len(out), strings.Join(out, "\n"))
	}
	expectLines(t, out[:2],
		`{"pod":"p","container":"c","hints":{"cpu":[{"numa":[0],"preferred":true},{"numa":[1],"preferred":true},{"numa":[0,1],"preferred":false}],"devices":[{"numa":[1],"preferred":true},{"numa":[0,1],"preferred":false}]}}`,
		`{"pod":"p","container":"c","cpus":"6-7,18-19","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
	)
	for i, want := range []struct{ reason, has string }{
		{"TopologyAffinityError", ""},
		{"InvalidRequest", "device_numa[0]: NUMA node 64 out of range"},
		{"InvalidRequest", "device_numa and hints.devices"},
	} {
		var got containerError
		if err := json.Unmarshal([]byte(out[2+i]), &got); err != nil {
			t.Fatal(err)
		}
		if got.Reason != want.reason || !strings.Contains(got.Error, want.has) {
			t.Errorf("line %d = %s, want reason %s and an error containing %q", 3+i, out[2+i], want.reason, want.has)
		}
	}
	// No devices with locality: no device provider, node 0's lowest core.
	expectLines(t, out[5:],
		`{"pod":"s","container":"c","cpus":"0,12","mems":"0-1","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`)
}
