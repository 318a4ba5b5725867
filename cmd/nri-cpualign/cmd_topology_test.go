package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

func fixtureRoot(t *testing.T, name string) string {
	t.Helper()
	dir := t.TempDir()
	if err := sysfstest.WriteNamed(dir, name); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runTopology(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = dispatch(append([]string{"topology"}, args...), strings.NewReader(""), &out, &errb)
	return code, out.String(), errb.String()
}

// TestTopologyJSON checks the JSON counts and a few CPU records against the
// fixtures' documented shapes (worked out by hand).
func TestTopologyJSON(t *testing.T) {
	type cpuRec struct {
		CPU, Core, Socket, Die, NUMA, L3 int
	}
	tests := []struct {
		fixture                                           string
		cpus, cores, sockets, numa, l3, threads, maxThrds int
		spot                                              map[int]cpuRec // cpu_details entries
		isolated                                          []int
		dist                                              map[string]map[string]int // subset
		memOnly                                           []int
	}{
		{fixture: "ht-1s-4c", cpus: 8, cores: 4, sockets: 1, numa: 1, l3: 1, threads: 2, maxThrds: 2,
			spot:     map[int]cpuRec{5: {5, 1, 0, 0, 0, 0}},
			isolated: []int{}, dist: map[string]map[string]int{"0": {"0": 10}}},
		{fixture: "ht-2s-6c", cpus: 24, cores: 12, sockets: 2, numa: 2, l3: 2, threads: 2, maxThrds: 2,
			// cpu 18: second thread of socket 1's first core (core 6).
			spot:     map[int]cpuRec{18: {18, 6, 1, 0, 1, 1}, 17: {17, 5, 0, 0, 0, 0}},
			isolated: []int{}, dist: map[string]map[string]int{"0": {"1": 21}, "1": {"0": 21, "1": 10}}},
		{fixture: "i7-12850hx", cpus: 24, cores: 16, sockets: 1, numa: 1, l3: 1, threads: 1, maxThrds: 2,
			spot:     map[int]cpuRec{3: {3, 2, 0, 0, 0, 0}, 20: {20, 20, 0, 0, 0, 0}},
			isolated: []int{}},
		{fixture: "epyc-7303-2p", cpus: 64, cores: 32, sockets: 2, numa: 2, l3: 8, threads: 2, maxThrds: 2,
			// cpu 49 = second thread of core 17 (socket 1, its 2nd core, L3 4).
			spot:     map[int]cpuRec{49: {49, 17, 1, 0, 1, 4}},
			isolated: []int{}, dist: map[string]map[string]int{"0": {"1": 32}}},
		{fixture: "isolated", cpus: 8, cores: 4, sockets: 1, numa: 1, l3: 1, threads: 2, maxThrds: 2,
			isolated: []int{2, 3, 6, 7}},
		{fixture: "memory-only-node", cpus: 16, cores: 8, sockets: 2, numa: 2, l3: 2, threads: 2, maxThrds: 2,
			isolated: []int{}, memOnly: []int{2}, dist: map[string]map[string]int{"2": {"0": 14, "1": 24}}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			code, out, errOut := runTopology(t, "--sysfs-root", fixtureRoot(t, tc.fixture), "--output", "json")
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			var doc struct {
				CPUs, Cores, Sockets int
				NUMANodes            int                       `json:"numa_nodes"`
				L3Groups             int                       `json:"l3_groups"`
				ThreadsPerCore       int                       `json:"threads_per_core"`
				MaxThreadsPerCore    int                       `json:"max_threads_per_core"`
				CPUDetails           []cpuRec                  `json:"cpu_details"`
				NUMADistances        map[string]map[string]int `json:"numa_distances"`
				Isolated             []int                     `json:"isolated"`
				MemoryOnlyNodes      []int                     `json:"memory_only_nodes"`
			}
			if err := json.Unmarshal([]byte(out), &doc); err != nil {
				t.Fatalf("bad JSON: %v\n%s", err, out)
			}
			got := []int{doc.CPUs, doc.Cores, doc.Sockets, doc.NUMANodes, doc.L3Groups, doc.ThreadsPerCore, doc.MaxThreadsPerCore}
			want := []int{tc.cpus, tc.cores, tc.sockets, tc.numa, tc.l3, tc.threads, tc.maxThrds}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("cpus/cores/sockets/numa/l3/threads/max = %v, want %v", got, want)
			}
			if len(doc.CPUDetails) != tc.cpus {
				t.Errorf("%d cpu_details, want %d", len(doc.CPUDetails), tc.cpus)
			}
			cores := map[int]bool{}
			for _, c := range doc.CPUDetails {
				cores[c.Core] = true
				if w, ok := tc.spot[c.CPU]; ok && c != w {
					t.Errorf("cpu_details[%d] = %+v, want %+v", c.CPU, c, w)
				}
			}
			if len(cores) != tc.cores {
				t.Errorf("%d distinct core ids in cpu_details, want %d (core must be unique machine-wide)", len(cores), tc.cores)
			}
			if !reflect.DeepEqual(doc.Isolated, tc.isolated) {
				t.Errorf("isolated = %v, want %v", doc.Isolated, tc.isolated)
			}
			for a, row := range tc.dist {
				for b, d := range row {
					if doc.NUMADistances[a][b] != d {
						t.Errorf("numa_distances[%s][%s] = %d, want %d", a, b, doc.NUMADistances[a][b], d)
					}
				}
			}
			if tc.memOnly == nil {
				tc.memOnly = []int{}
			}
			if !reflect.DeepEqual(doc.MemoryOnlyNodes, tc.memOnly) {
				t.Errorf("memory_only_nodes = %v, want %v", doc.MemoryOnlyNodes, tc.memOnly)
			}
		})
	}
}

// TestTopologyText checks the tree on two fixtures: lines written by hand
// from the documented numbering must appear, in tree order.
func TestTopologyText(t *testing.T) {
	tests := []struct {
		fixture string
		lines   []string // must appear in this order
	}{
		{"ht-2s-6c", []string{
			"machine: 2 sockets, 2 NUMA nodes with CPUs, 2 L3 groups, 12 cores, 24 CPUs (0-23)",
			"socket 0: 1 NUMA node, 6 cores, 12 CPUs (0-5,12-17)",
			"  numa 0: 6 cores, 12 CPUs (0-5,12-17), memory 16.0 GiB",
			"    l3 0: 6 cores, 12 CPUs (0-5,12-17)",
			"      core 0 (core_id 0): cpus 0,12",
			"      core 5 (core_id 5): cpus 5,17",
			"socket 1: 1 NUMA node, 6 cores, 12 CPUs (6-11,18-23)",
			"      core 6 (core_id 0): cpus 6,18",
			"numa distances:",
			"     1   21   10",
		}},
		{"i7-12850hx", []string{
			"threads per core: 1 (cpus/cores, as the kubelet computes it), widest core: 2",
			"    l3 0: 16 cores, 24 CPUs (0-23)",
			"      core 0 (core_id 0): cpus 0-1",
			"      core 14 (core_id 7): cpus 14-15",
			"      core 16 (core_id 8): cpus 16",
			"      core 23 (core_id 15): cpus 23",
		}},
		{"isolated", []string{"isolated: 2-3,6-7"}},
		{"memory-only-node", []string{"socket 1:", "numa 2: no CPUs, memory 16.0 GiB", "     2   14   24   10"}},
		{"epyc-7303-2p", []string{
			"socket 1: 1 NUMA node, 16 cores, 32 CPUs (16-31,48-63)",
			"    l3 4: 4 cores, 8 CPUs (16-19,48-51)",
			"      core 16 (core_id 0): cpus 16,48",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			code, out, errOut := runTopology(t, "--sysfs-root", fixtureRoot(t, tc.fixture))
			if code != 0 {
				t.Fatalf("exit %d, stderr %q", code, errOut)
			}
			rest := out
			for _, l := range tc.lines {
				i := strings.Index(rest, l)
				if i < 0 {
					t.Fatalf("line %q missing (or out of order) in:\n%s", l, out)
				}
				rest = rest[i+len(l):]
			}
		})
	}
}

func TestTopologyErrors(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nothing")
	garbled := fixtureRoot(t, "ht-1s-4c")
	coreID := filepath.Join(garbled, "devices/system/cpu/cpu2/topology/core_id")
	if err := os.WriteFile(coreID, []byte("two\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		args   []string
		code   int
		stderr []string
	}{
		{"missing root", []string{"--sysfs-root", missing}, 1, []string{filepath.Join(missing, "devices/system/cpu/online")}},
		{"garbage core_id", []string{"--sysfs-root", garbled, "--output", "json"}, 1, []string{coreID, `"two\n"`}},
		{"bad output", []string{"--output", "yaml"}, 2, []string{`"yaml"`}},
		{"extra argument", []string{"extra"}, 2, []string{`"extra"`}},
		{"unknown flag", []string{"--nope"}, 2, []string{"nope"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runTopology(t, tc.args...)
			if code != tc.code {
				t.Errorf("exit %d, want %d", code, tc.code)
			}
			if out != "" {
				t.Errorf("stdout %q, want nothing", out)
			}
			for _, s := range tc.stderr {
				if !strings.Contains(errOut, s) {
					t.Errorf("stderr %q does not contain %q", errOut, s)
				}
			}
		})
	}
}
