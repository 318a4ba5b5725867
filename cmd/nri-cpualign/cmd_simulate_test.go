package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// simFixture writes a fixture machine once per test and returns the dir
// that plays /sys.
func simFixture(t testing.TB, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := sysfstest.WriteNamed(dir, name); err != nil {
		t.Fatal(err)
	}
	return dir
}

// simulate runs cmdSimulate in-process on a fixture with an optional TOML
// config and returns the output lines and the exit code.
func simulate(t testing.TB, root, toml string, lines ...string) ([]string, int) {
	t.Helper()
	args := []string{"--sysfs-root", root}
	if toml != "" {
		p := filepath.Join(t.TempDir(), "config.toml")
		if err := os.WriteFile(p, []byte(toml), 0o644); err != nil {
			t.Fatal(err)
		}
		args = append(args, "--config", p)
	}
	var stdout, stderr bytes.Buffer
	in := strings.Join(lines, "\n")
	if len(lines) > 0 {
		in += "\n"
	}
	code := cmdSimulate(args, strings.NewReader(in), &stdout, &stderr)
	out := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if stdout.Len() == 0 {
		out = nil
	}
	return out, code
}

// expectLines compares output lines with expected JSON lines semantically
// (key order and spacing of the expectation do not matter).
func expectLines(t *testing.T, got []string, want ...string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d lines, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if !sameJSON(t, got[i], want[i]) {
			t.Errorf("line %d:\n got  %s\n want %s", i+1, got[i], want[i])
		}
	}
}

func sameJSON(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("output %q is not JSON: %v", a, err)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("expectation %q is not JSON: %v", b, err)
	}
	ja, _ := json.Marshal(va)
	jb, _ := json.Marshal(vb)
	return bytes.Equal(ja, jb)
}

func g(op, pod, ctr string, cpus int, extra string) string {
	s := fmt.Sprintf(`{"op":%q,"pod":%q,"container":%q,"qos":"guaranteed","cpu_request_milli":%d,"cpu_limit_milli":%d`, op, pod, ctr, cpus*1000, cpus*1000)
	if extra != "" {
		s += "," + extra
	}
	return s + "}"
}

// TestSimulateContract walks every op once on ht-2s-6c (NUMA 0 =
// 0-5,12-17, NUMA 1 = 6-11,18-23, core k = {k, k+12}) with the default
// configuration: static, topology manager none, no reservation.
func TestSimulateContract(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	out, code := simulate(t, root, "",
		// Two whole cores, the lowest: 0 and 1. Topology none: any
		// affinity, mems = the CPUs' node.
		g("add", "p", "c", 4, ""),
		// Node 0 has 8 free CPUs, node 1 12: both single nodes preferred.
		g("hints", "p", "d", 4, ""),
		`{"op":"state"}`,
		// A burstable container gets no CPU hints: null, no preference.
		`{"op":"hints","pod":"p","container":"b","qos":"burstable","cpu_request_milli":4000}`,
		`garbage`,
		``,
		`{"op":"fly"}`,
		`{"op":"add","pod":"p","container":"e","qos":"burstable","cpu_request_milli":100,"hints":{"x":null,"y":[]}}`,
		`{"op":"remove","pod":"p","container":"c"}`,
		`{"op":"remove","pod":"p","container":"c"}`,
		`{"op":"assign","pod":"q","container":"c","cpus":"0-1"}`,
		`{"op":"assign","pod":"r","container":"c","cpus":"1"}`,
		`{"op":"assign","pod":"r","container":"c","cpus":"40"}`,
		// 22 shared CPUs, none reserved: all 22 available.
		g("add", "p", "big", 40, ""),
		`{"op":"add","pod":"p","container":"c","qos":"burstable","cpu_request_milli":1,"cpu_reqest_milli":2}`,
		`{"op":"add","pod":"p","container":"c","qos":"gold"}`,
		g("add", "p", "c", 2, `"container_type":"daemon"`),
		g("add", "p", "c", 2, `"hints":{"nic":[{"numa":[5],"preferred":true}]}`),
		`{"op":"state"}`,
	)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	expectLines(t, out,
		`{"pod":"p","container":"c","cpus":"0-1,12-13","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
		`{"pod":"p","container":"d","hints":{"cpu":[{"numa":[0],"preferred":true},{"numa":[1],"preferred":true},{"numa":[0,1],"preferred":false}]}}`,
		`{"shared":"2-11,14-23","reserved":"","assignments":{"p":{"c":"0-1,12-13"}}}`,
		`{"pod":"p","container":"b","hints":{"cpu":null}}`,
		`{"error":"not a valid request: invalid character 'g' looking for beginning of value","line":5}`,
		`{"error":"empty line: want a JSON object","line":6}`,
		`{"error":"unknown op \"fly\" (want assign, add, hints, resize, remove, remove_pod or state)","line":7}`,
		`{"pod":"p","container":"e","cpus":"2-11,14-23","mems":"0-1","exclusive":false,"affinity":{"numa":null,"preferred":false}}`,
		`{"pod":"p","container":"c","removed":true}`,
		`{"pod":"p","container":"c","removed":true}`,
		`{"pod":"q","container":"c","cpus":"0-1","exclusive":true}`,
		`{"pod":"r","container":"c","error":"InvalidState: pod \"r\" container \"c\": CPUs 1 are held by pod \"q\" container \"c\"","reason":"InvalidState"}`,
		`{"pod":"r","container":"c","error":"InvalidState: pod \"r\" container \"c\": CPUs 40 are not online","reason":"InvalidState"}`,
		`{"pod":"p","container":"big","error":"InsufficientCPUs: not enough cpus available to satisfy request: requested=40, available=22","reason":"InsufficientCPUs"}`,
		`{"error":"not a valid request: json: unknown field \"cpu_reqest_milli\"","line":15}`,
		`{"pod":"p","container":"c","error":"InvalidRequest: pod \"p\" container \"c\": qos: \"gold\" is not one of guaranteed, burstable, besteffort","reason":"InvalidRequest"}`,
		`{"pod":"p","container":"c","error":"InvalidRequest: pod \"p\" container \"c\": container_type: \"daemon\" is not one of app, init, sidecar","reason":"InvalidRequest"}`,
		`{"pod":"p","container":"c","error":"InvalidRequest: pod \"p\" container \"c\": hints.nic: hint names NUMA nodes 5; the machine's NUMA nodes with CPUs are 0-1","reason":"InvalidRequest"}`,
		`{"shared":"2-23","reserved":"","assignments":{"q":{"c":"0-1"}}}`,
	)
}

func TestSimulateInvalidConfig(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	cases := []struct {
		name, toml string
		mention    []string
	}{
		{"unknown key", "cpu_manager_polcy = \"static\"\n", []string{"cpu_manager_polcy", "line 1"}},
		{"bad policy value", "cpu_manager_policy = \"dynamic\"\n", []string{"cpu_manager_policy", "dynamic"}},
		{"unknown option", "cpu_manager_policy = \"static\"\n[cpu_manager_policy_options]\nturbo = \"true\"\n", []string{"cpu_manager_policy_options", "turbo"}},
		{"option value does not parse", "[cpu_manager_policy_options]\nfull-pcpus-only = \"yes!\"\n", []string{"full-pcpus-only"}},
		{"incompatible options", "[cpu_manager_policy_options]\nfull-pcpus-only = \"true\"\ndistribute-cpus-across-cores = \"true\"\n", []string{"full-pcpus-only", "distribute-cpus-across-cores"}},
		{"reserved CPU offline", "reserved_system_cpus = \"0,99\"\n", []string{"reserved_system_cpus", "99", "line 1"}},
		{"align-by-socket with single-numa-node", "topology_manager_policy = \"single-numa-node\"\n[cpu_manager_policy_options]\nalign-by-socket = \"true\"\n", []string{"align-by-socket", "single-numa-node"}},
		{"topology option value", "topology_manager_policy = \"restricted\"\n[topology_manager_policy_options]\nmax-allowable-numa-nodes = \"four\"\n", []string{"max-allowable-numa-nodes", "four"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := simulate(t, root, tc.toml, `{"op":"state"}`)
			if code == 0 {
				t.Fatal("exit code 0 on an invalid config")
			}
			if len(out) != 1 {
				t.Fatalf("want exactly one line, got %q", out)
			}
			var line struct{ Error, Reason string }
			if err := json.Unmarshal([]byte(out[0]), &line); err != nil || line.Reason != "InvalidConfig" {
				t.Fatalf("line %q: want {\"error\":...,\"reason\":\"InvalidConfig\"}", out[0])
			}
			for _, m := range tc.mention {
				if !strings.Contains(line.Error, m) {
					t.Errorf("error %q does not mention %q", line.Error, m)
				}
			}
		})
	}
}

// TestSimulateSingleNUMANode: xeon-8490h-2p-snc (NUMA n = CPUs 15n..15n+14
// and 120+15n..+14) and epyc-9654-2p-nps2 (NUMA n = 48n..48n+47, no SMT).
func TestSimulateSingleNUMANode(t *testing.T) {
	t.Run("xeon", func(t *testing.T) {
		out, code := simulate(t, simFixture(t, "xeon-8490h-2p-snc"),
			"reserved_system_cpus = \"0,120\"\ntopology_manager_policy = \"single-numa-node\"\n",
			// Fits node 0 (28 assignable): four whole cores from core 1.
			g("add", "p1", "c", 8, ""),
			// Node 0 has 20 left, so the whole of node 1.
			g("add", "p2", "c", 30, ""),
			// Two nodes needed: rejected, the default hint reported as any.
			g("add", "p3", "c", 31, ""),
			`{"op":"state"}`,
		)
		if code != 0 {
			t.Fatalf("exit code %d", code)
		}
		expectLines(t, out,
			`{"pod":"p1","container":"c","cpus":"1-4,121-124","mems":"0-7","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
			`{"pod":"p2","container":"c","cpus":"15-29,135-149","mems":"0-7","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
			`{"pod":"p3","container":"c","error":"TopologyAffinityError: resources cannot be allocated with topology locality: pod p3 container c: 31 exclusive CPUs: policy single-numa-node needs a preferred single-NUMA-node affinity, best merged hint is any (preferred=false)","reason":"TopologyAffinityError","affinity":{"numa":null,"preferred":false}}`,
			`{"shared":"0,5-14,30-120,125-134,150-239","reserved":"0,120","assignments":{"p1":{"c":"1-4,121-124"},"p2":{"c":"15-29,135-149"}}}`,
		)
	})
	t.Run("epyc", func(t *testing.T) {
		out, _ := simulate(t, simFixture(t, "epyc-9654-2p-nps2"),
			"reserved_system_cpus = \"0\"\ntopology_manager_policy = \"single-numa-node\"\n",
			g("add", "p1", "c", 48, ""),
			g("add", "p2", "c", 49, ""),
		)
		if len(out) != 2 {
			t.Fatalf("out = %q", out)
		}
		expectLines(t, out[:1], `{"pod":"p1","container":"c","cpus":"48-95","mems":"0-3","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`)
		if !strings.Contains(out[1], `"reason":"TopologyAffinityError"`) || !strings.Contains(out[1], `"affinity":{"numa":null,"preferred":false}`) {
			t.Fatalf("49 CPUs: %s", out[1])
		}
	})
}

// nicHints is the hint list of a device on node (on a machine with the
// given NUMA nodes): every mask holding node, {node} alone preferred, as
// the device provider offers it.
func nicHints(nodes, node int) string {
	var hs []string
	for m := 1; m < 1<<nodes; m++ {
		if m&(1<<node) == 0 {
			continue
		}
		var ids []string
		for i := 0; i < nodes; i++ {
			if m&(1<<i) != 0 {
				ids = append(ids, fmt.Sprint(i))
			}
		}
		hs = append(hs, fmt.Sprintf(`{"numa":[%s],"preferred":%t}`, strings.Join(ids, ","), m == 1<<node))
	}
	return `"hints":{"example.com/nic":[` + strings.Join(hs, ",") + `]}`
}

// TestSimulateHintsLines reproduces the engine tests' decisions through the
// hints field of add lines.
func TestSimulateHintsLines(t *testing.T) {
	xeon := simFixture(t, "xeon-8490h-2p-snc")
	ht := simFixture(t, "ht-2s-6c")
	cases := []struct {
		name, root, toml string
		lines            []string
		want             []string
	}{
		{
			// A NIC on node 1 pulls 4 CPUs from node 0 to node 1.
			name: "device on node 1", root: ht, toml: "topology_manager_policy = \"restricted\"\n",
			lines: []string{g("add", "p", "a", 4, ""), g("add", "q", "a", 4, nicHints(2, 1))},
			want: []string{
				`{"pod":"p","container":"a","cpus":"0-1,12-13","mems":"0-1","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
				`{"pod":"q","container":"a","cpus":"6-7,18-19","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
			},
		},
		{
			// 40 CPUs with a NIC on node 5: merged {0,1} not preferred
			// (CPU {0,1} x NIC {0,1,5}); best-effort admits on node 1 whole
			// plus cores 1-5 of node 0.
			name: "best-effort admits non-preferred", root: xeon,
			toml:  "reserved_system_cpus = \"0,120\"\ntopology_manager_policy = \"best-effort\"\n",
			lines: []string{g("add", "p", "a", 40, nicHints(8, 5))},
			want:  []string{`{"pod":"p","container":"a","cpus":"1-5,15-29,121-125,135-149","mems":"0-7","exclusive":true,"affinity":{"numa":[0,1],"preferred":false}}`},
		},
		{
			name: "restricted rejects non-preferred", root: xeon,
			toml:  "reserved_system_cpus = \"0,120\"\ntopology_manager_policy = \"restricted\"\n",
			lines: []string{g("add", "p", "a", 40, nicHints(8, 5)), g("add", "p", "b", 8, nicHints(8, 5))},
			want: []string{
				`{"pod":"p","container":"a","error":"TopologyAffinityError: resources cannot be allocated with topology locality: pod p container a: 40 exclusive CPUs: policy restricted needs a preferred affinity, best merged hint is NUMA 0-1 (preferred=false)","reason":"TopologyAffinityError","affinity":{"numa":[0,1],"preferred":false}}`,
				// 8 CPUs fit node 5 with the NIC.
				`{"pod":"p","container":"b","cpus":"75-78,195-198","mems":"0-7","exclusive":true,"affinity":{"numa":[5],"preferred":true}}`,
			},
		},
		{
			// [] = cannot be placed: single-numa-node rejects even a
			// shared container; null = no preference.
			name: "null versus empty", root: ht, toml: "topology_manager_policy = \"single-numa-node\"\n",
			lines: []string{
				`{"op":"add","pod":"p","container":"a","qos":"besteffort","hints":{"x":[]}}`,
				`{"op":"add","pod":"p","container":"b","qos":"besteffort","hints":{"x":null}}`,
			},
			want: []string{
				`{"pod":"p","container":"a","error":"TopologyAffinityError: resources cannot be allocated with topology locality: pod p container a: shared CPUs: policy single-numa-node needs a preferred single-NUMA-node affinity, best merged hint is any (preferred=false)","reason":"TopologyAffinityError","affinity":{"numa":null,"preferred":false}}`,
				`{"pod":"p","container":"b","cpus":"0-23","mems":"0-1","exclusive":false,"affinity":{"numa":null,"preferred":true}}`,
			},
		},
		{
			// affinity_override skips the merge: node 1 although node 0 is
			// free.
			name: "affinity override", root: ht, toml: "topology_manager_policy = \"restricted\"\n",
			lines: []string{g("add", "p", "a", 4, `"affinity_override":{"numa":[1],"preferred":true}`)},
			want:  []string{`{"pod":"p","container":"a","cpus":"6-7,18-19","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`},
		},
		{
			// The KEP-693 pod (effective request 3) after a 10-CPU pod left
			// node 0 two CPUs: pod scope puts both app containers on node 1.
			name: "pod scope", root: ht,
			toml: "topology_manager_policy = \"restricted\"\ntopology_manager_scope = \"pod\"\n",
			lines: []string{
				g("add", "filler", "c", 10, ""),
				g("add", "kep", "app1", 2, `"pod_cpu_request_milli":3000`),
				g("add", "kep", "app2", 1, `"pod_cpu_request_milli":3000`),
			},
			want: []string{
				`{"pod":"filler","container":"c","cpus":"0-4,12-16","mems":"0-1","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
				`{"pod":"kep","container":"app1","cpus":"6,18","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
				`{"pod":"kep","container":"app2","cpus":"7","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
			},
		},
		{
			// Init CPUs are reused by the app container; a sidecar's are
			// not. Reserved 0,12 (core 0).
			name: "init and sidecar", root: ht, toml: "reserved_system_cpus = \"0,12\"\n",
			lines: []string{
				g("add", "p", "init", 4, `"container_type":"init"`),
				g("add", "p", "app", 4, `"container_type":"app"`),
				`{"op":"state"}`,
				`{"op":"remove","pod":"p","container":"init"}`,
				`{"op":"state"}`,
				`{"op":"remove","pod":"p","container":"app"}`,
				g("add", "q", "side", 2, `"container_type":"sidecar"`),
				g("add", "q", "app", 2, ""),
				`{"op":"state"}`,
			},
			want: []string{
				`{"pod":"p","container":"init","cpus":"1-2,13-14","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
				`{"pod":"p","container":"app","cpus":"1-2,13-14","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
				`{"shared":"0,3-12,15-23","reserved":"0,12","assignments":{"p":{"app":"1-2,13-14","init":"1-2,13-14"}}}`,
				`{"pod":"p","container":"init","removed":true}`,
				`{"shared":"0,3-12,15-23","reserved":"0,12","assignments":{"p":{"app":"1-2,13-14"}}}`,
				`{"pod":"p","container":"app","removed":true}`,
				`{"pod":"q","container":"side","cpus":"1,13","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
				`{"pod":"q","container":"app","cpus":"2,14","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
				`{"shared":"0,3-12,15-23","reserved":"0,12","assignments":{"q":{"app":"2,14","side":"1,13"}}}`,
			},
		},
		{
			// pod_level_resource_managers (pod scope): pod p's spec.resources
			// budget is 4 CPUs. Reserved 0,12 leave node 0 cores 1-5; the
			// pod's one hint is node 0 and its block two whole cores,
			// 1-2,13-14. a (2 CPUs) gets core 1 = 1,13; b (500m of a 1-CPU
			// limit) runs on the rest of the block, 2,14; c (2 CPUs) would
			// take b's last CPUs: the kubelet's EmptyPodSharedPoolError. The
			// pod's end gives the whole block back.
			name: "pod-level resources", root: ht,
			toml: "reserved_system_cpus = \"0,12\"\ntopology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\npod_level_resource_managers = true\n",
			lines: []string{
				g("add", "p", "a", 2, `"pod_cpu_request_milli":4000,"pod_cpu_limit_milli":4000`),
				`{"op":"add","pod":"p","container":"b","qos":"guaranteed","cpu_request_milli":500,"cpu_limit_milli":1000,"pod_cpu_request_milli":4000,"pod_cpu_limit_milli":4000}`,
				g("add", "p", "c", 2, `"pod_cpu_request_milli":4000,"pod_cpu_limit_milli":4000`),
				`{"op":"state"}`,
				`{"op":"remove_pod","pod":"p"}`,
				`{"op":"state"}`,
			},
			want: []string{
				`{"pod":"p","container":"a","cpus":"1,13","mems":"0-1","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
				`{"pod":"p","container":"b","cpus":"2,14","mems":"0-1","exclusive":false,"affinity":{"numa":[0],"preferred":true},"pod_pool":true}`,
				`{"pod":"p","container":"c","error":"EmptyPodSharedPoolError: pod rejected, sum of exclusive container cpu requests equals pod budget, leaving no cpus for shared containers (pod \"p\" container \"c\": budget 4 CPUs, exclusive 4 CPUs)","reason":"EmptyPodSharedPoolError"}`,
				`{"shared":"0,3-12,15-23","reserved":"0,12","assignments":{"p":{"@pod":"1-2,13-14","a":"1,13"}},"pod_shared":{"p":["b"]}}`,
				`{"pod":"p","container":"","removed":true}`,
				`{"shared":"0-23","reserved":"0,12","assignments":{}}`,
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, code := simulate(t, tc.root, tc.toml, tc.lines...)
			if code != 0 {
				t.Fatalf("exit code %d", code)
			}
			expectLines(t, out, tc.want...)
		})
	}
}

// TestSimulateHintsRoundTrip: what a hints line reports, fed back as
// another provider's hints on an add line, leaves the decision unchanged
// (the CPU provider's list crossed with itself merges to the same best
// hint), on several fixtures and policies.
func TestSimulateHintsRoundTrip(t *testing.T) {
	cases := []struct {
		fixture, toml string
		cpus          int
	}{
		{"ht-2s-6c", "topology_manager_policy = \"best-effort\"\nreserved_system_cpus = \"0,12\"\n", 4},
		{"ht-2s-6c", "topology_manager_policy = \"restricted\"\nreserved_system_cpus = \"0,12\"\n", 14},
		{"ht-2s-4numa-80", "topology_manager_policy = \"restricted\"\nreserved_cpu_count = 2\n", 24},
		{"epyc-9654-2p-nps2", "topology_manager_policy = \"single-numa-node\"\nreserved_system_cpus = \"0\"\n", 30},
		{"xeon-8490h-2p-snc", "topology_manager_policy = \"best-effort\"\nreserved_system_cpus = \"0,120\"\n[topology_manager_policy_options]\nprefer-closest-numa-nodes = \"true\"\n", 64},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/%d", tc.fixture, tc.cpus), func(t *testing.T) {
			root := simFixture(t, tc.fixture)
			out, _ := simulate(t, root, tc.toml, g("hints", "p", "a", tc.cpus, ""), g("add", "p", "a", tc.cpus, ""))
			var h struct {
				Hints map[string]json.RawMessage `json:"hints"`
			}
			if err := json.Unmarshal([]byte(out[0]), &h); err != nil || h.Hints["cpu"] == nil {
				t.Fatalf("hints line %q", out[0])
			}
			again, _ := simulate(t, root, tc.toml, g("add", "p", "a", tc.cpus, `"hints":{"copy":`+string(h.Hints["cpu"])+`}`))
			if !strings.Contains(out[1], `"exclusive":true`) {
				t.Fatalf("plain add not exclusive: %s", out[1])
			}
			expectLines(t, again, out[1])
		})
	}
}

// TestSimulateFlushesEachLine: the answer to a line is readable before the
// next line is written (an interactive driver would deadlock otherwise).
func TestSimulateFlushesEachLine(t *testing.T) {
	root := simFixture(t, "ht-1s-4c")
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int, 1)
	go func() {
		done <- cmdSimulate([]string{"--sysfs-root", root}, inR, outW, io.Discard)
		outW.Close()
	}()
	lines := bufio.NewReader(outR)
	for i, req := range []string{`{"op":"state"}`, g("add", "p", "c", 2, ""), `{"op":"state"}`} {
		if _, err := io.WriteString(inW, req+"\n"); err != nil {
			t.Fatal(err)
		}
		got := make(chan string, 1)
		go func() { l, _ := lines.ReadString('\n'); got <- l }()
		select {
		case l := <-got:
			if !strings.HasPrefix(l, "{") {
				t.Fatalf("line %d: %q", i+1, l)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("no answer to line %d before the next was written", i+1)
		}
	}
	inW.Close()
	if code := <-done; code != 0 {
		t.Fatalf("exit code %d", code)
	}
}

// TestSimulateBinary builds the binary and pipes stdin through it, as an
// operator would.
func TestSimulateBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := filepath.Join(t.TempDir(), "nri-cpualign")
	build := exec.Command("go", "build", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	root := simFixture(t, "ht-2s-4numa-80")
	cfg := filepath.Join(t.TempDir(), "c.toml")
	if err := os.WriteFile(cfg, []byte("reserved_system_cpus = \"0,40\"\ntopology_manager_policy = \"single-numa-node\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "simulate", "--sysfs-root", root, "--config", cfg)
	// ht-2s-4numa-80: NUMA n = CPUs 10n..10n+9 and 40+10n..+9, core k =
	// {k, k+40}. 20 CPUs: node 0 has 18 assignable, node 1 is taken whole.
	// 6 CPUs: node 0, three whole cores from core 1. 21: no single node.
	cmd.Stdin = strings.NewReader(strings.Join([]string{
		g("add", "p", "a", 20, ""),
		g("add", "p", "b", 6, ""),
		g("add", "p", "c", 21, ""),
		`{"op":"state"}`,
	}, "\n") + "\n")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("simulate: %v\n%s", err, stderr.String())
	}
	out := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if len(out) != 4 {
		t.Fatalf("out = %q", out)
	}
	expectLines(t, []string{out[0], out[1], out[3]},
		`{"pod":"p","container":"a","cpus":"10-19,50-59","mems":"0-3","exclusive":true,"affinity":{"numa":[1],"preferred":true}}`,
		`{"pod":"p","container":"b","cpus":"1-3,41-43","mems":"0-3","exclusive":true,"affinity":{"numa":[0],"preferred":true}}`,
		`{"shared":"0,4-9,20-40,44-49,60-79","reserved":"0,40","assignments":{"p":{"a":"10-19,50-59","b":"1-3,41-43"}}}`,
	)
	if !strings.Contains(out[2], `"reason":"TopologyAffinityError"`) {
		t.Fatalf("21 CPUs: %s", out[2])
	}

	// An invalid config: one InvalidConfig line, non-zero exit.
	if err := os.WriteFile(cfg, []byte("topology_manager_policy = \"strict\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd = exec.Command(bin, "simulate", "--sysfs-root", root, "--config", cfg)
	cmd.Stdin = strings.NewReader(`{"op":"state"}` + "\n")
	outb, err := cmd.Output()
	if err == nil {
		t.Fatal("exit code 0 on an invalid config")
	}
	if !strings.Contains(string(outb), `"reason":"InvalidConfig"`) || strings.Count(string(outb), "\n") != 1 {
		t.Fatalf("invalid config output %q", outb)
	}
}

// TestSimulateResize: resize lines on ht-2s-6c (core k = {k, k+12}, NUMA
// 0 = 0-5,12-17), static, topology manager none, nothing reserved; mems are
// every memory node (memory_manager_policy None).
func TestSimulateResize(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	out, code := simulate(t, root, "",
		// The lowest whole core: 0.
		g("add", "p", "c", 2, ""),
		// +2 from its NUMA node: the next whole core, 1.
		g("resize", "p", "c", 4, ""),
		g("resize", "p", "c", 1, ""),
		// Down to 3: the baseline 0,12 and, of core 1, its first thread.
		g("resize", "p", "c", 3, ""),
		`{"op":"state"}`,
		`{"op":"add","pod":"p","container":"s","qos":"burstable","cpu_request_milli":500}`,
		g("resize", "p", "s", 2, ""),
		`{"op":"resize","pod":"p","container":"c","qos":"guaranteed","cpu_request_milli":2500,"cpu_limit_milli":2500}`,
	)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	expectLines(t, out,
		`{"pod":"p","container":"c","cpus":"0,12","mems":"0-1","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
		`{"pod":"p","container":"c","kind":"upsize","cpus":"0-1,12-13","mems":"0-1","exclusive":true,"baseline":"0,12","added":"1,13","affinity":{"numa":[0],"preferred":true}}`,
		`{"pod":"p","container":"c","error":"InPlaceResizeRejected: pod \"p\" container \"c\": below-baseline: the resize asks for 1 exclusive CPUs, fewer than the 2 (0,12) it was admitted with; a downsize keeps the admitted CPUs, recreate the pod to go below them","reason":"InPlaceResizeRejected"}`,
		`{"pod":"p","container":"c","kind":"downsize","cpus":"0-1,12","mems":"0-1","exclusive":true,"baseline":"0,12","released":"13","affinity":{"numa":[0],"preferred":true}}`,
		`{"shared":"2-11,13-23","reserved":"","assignments":{"p":{"c":"0-1,12"}},"baseline":{"p":{"c":"0,12"}}}`,
		`{"pod":"p","container":"s","cpus":"2-11,13-23","mems":"0-1","exclusive":false,"affinity":{"numa":null,"preferred":false}}`,
		`{"pod":"p","container":"s","error":"InPlaceResizeRejected: pod \"p\" container \"s\": shared-to-exclusive: the container runs on the shared pool and the resize asks for 2 exclusive CPUs; exclusive CPUs are given at admission only, recreate the pod","reason":"InPlaceResizeRejected"}`,
		`{"pod":"p","container":"c","error":"InPlaceResizeRejected: pod \"p\" container \"c\": exclusive-to-shared: the container holds exclusive CPUs 0-1,12 and the resize asks for request 2500m limit 2500m (not a whole number of CPUs of a Guaranteed pod); it cannot move to the shared pool in place, recreate the pod","reason":"InPlaceResizeRejected"}`,
	)
}
