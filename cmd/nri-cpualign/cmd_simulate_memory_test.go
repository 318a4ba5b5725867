package main

import (
	"strings"
	"testing"
)

// memoryTOML is memory_manager_policy Static on ht-2s-6c (16 GiB per node,
// 1 GiB of 2 MiB pages and one 1 GiB page each): 1 GiB of memory reserved
// per node leaves 13 GiB of memory allocatable per node.
const memoryTOML = `reserved_system_cpus = "0,12"
topology_manager_policy = "single-numa-node"
memory_manager_policy = "Static"
[[reserved_memory]]
numa_node = 0
limits = { memory = "1Gi" }
[[reserved_memory]]
numa_node = 1
limits = { memory = "1Gi" }
`

// Worked by hand as in pkg/policy's memory tests: 4 GiB with 512 MiB of
// 2 MiB pages on node 0 with its CPUs; 10 GiB then only fits node 1;
// another 10 GiB fits neither (the memory manager's refusal); a removal
// gives node 0 back.
func TestSimulateMemoryManager(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	out, code := simulate(t, root, memoryTOML,
		`{"op":"hints","pod":"a","container":"c","qos":"guaranteed","cpu_request_milli":2000,"cpu_limit_milli":2000,"memory":{"memory":"4Gi","hugepages-2Mi":"512Mi"}}`,
		`{"op":"add","pod":"a","container":"c","qos":"guaranteed","cpu_request_milli":2000,"cpu_limit_milli":2000,"memory":{"memory":"4Gi","hugepages-2Mi":"512Mi"}}`,
		`{"op":"add","pod":"b","container":"c","qos":"guaranteed","cpu_request_milli":2000,"cpu_limit_milli":2000,"memory":{"memory":"10Gi"}}`,
		`{"op":"add","pod":"c","container":"c","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000,"memory":{"memory":"10Gi"}}`,
		`{"op":"add","pod":"d","container":"c","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000,"memory":{"cpu":"1"}}`,
		`{"op":"remove","pod":"a","container":"c"}`,
		`{"op":"add","pod":"e","container":"c","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000,"memory":{"memory":"9Gi"}}`,
	)
	if code != 0 {
		t.Fatalf("exit %d: %v", code, out)
	}
	if len(out) != 7 {
		t.Fatalf("got %d lines: %v", len(out), out)
	}
	// Single nodes are preferred for both memory resources (each fits
	// either node); the pair too, not preferred. CPU hints: the same.
	wantPair := `[{"numa":[0],"preferred":true},{"numa":[1],"preferred":true},{"numa":[0,1],"preferred":false}]`
	expectLines(t, out[:3],
		`{"pod":"a","container":"c","hints":{"cpu":`+wantPair+`,"memory":`+wantPair+`,"hugepages-2Mi":`+wantPair+`}}`,
		`{"pod":"a","container":"c","cpus":"1,13","mems":"0","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
		`{"pod":"b","container":"c","cpus":"6,18","mems":"1","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
	)
	if !strings.Contains(out[3], `"reason":"UnexpectedAdmissionError"`) || !strings.Contains(out[3], "failed to find NUMA nodes to extend the current topology hint") {
		t.Errorf("10 GiB more: %s", out[3])
	}
	if !strings.Contains(out[4], `"reason":"InvalidRequest"`) || !strings.Contains(out[4], `resource \"cpu\" is neither memory nor hugepages`) {
		t.Errorf("bad resource: %s", out[4])
	}
	// After a's removal node 0 has 13 GiB free again: 9 GiB fits there.
	expectLines(t, out[6:], `{"pod":"e","container":"c","cpus":"1","mems":"0","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`)
}
