package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// simulateArgs is simulate with extra flags.
func simulateArgs(t *testing.T, root, toml string, flags []string, lines ...string) ([]string, int, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(p, []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"--sysfs-root", root, "--config", p}, flags...)
	var stdout, stderr bytes.Buffer
	code := cmdSimulate(args, strings.NewReader(strings.Join(lines, "\n")+"\n"), &stdout, &stderr)
	out := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
	if stdout.Len() == 0 {
		out = nil
	}
	return out, code, stderr.String()
}

// TestSimulateKubeletVersionMovesSpread: --kubelet-version shows what the
// 1.38 upgrade moves under distribute-cpus-across-cores (kubernetes#140766).
// ht-1s-4c-adjacent is the "contiguous sibling CPU IDs" row of the 1.38
// beta's TestCPUAccumulatorFreeCPUsSpreadRoundRobin (../shared/
// kubelet-1.38.md 2.1): one socket, cores {0,1} {2,3} {4,5} {6,7}, no
// reservation, topology manager none. Worked out by hand from that note:
//
//   - 4 CPUs from 0-7: no whole socket or NUMA node fits (8 CPUs) and the
//     spread skips whole cores, so the single-CPU step takes the first 4
//     of the spread order. 1.37 lists the socket's free CPUs by id, 0..7:
//     0-3 (two whole cores). 1.38 lists one thread per core first,
//     [0 2 4 6 1 3 5 7]: 0,2,4,6 (four cores).
//   - Then 2 CPUs. 1.37: free 4-7 by id: 4-5. 1.38: free 1,3,5,7, every
//     core with 1 free CPU (a tie, broken by core id 0,2,4,6): 1,3.
func TestSimulateKubeletVersionMovesSpread(t *testing.T) {
	root := simFixture(t, "ht-1s-4c-adjacent")
	const toml = "[cpu_manager_policy_options]\ndistribute-cpus-across-cores = \"true\"\n"
	lines := []string{g("add", "a", "c", 4, ""), g("add", "b", "c", 2, "")}
	for _, tc := range []struct {
		version string
		want    []string
	}{
		{"1.37", []string{
			`{"pod":"a","container":"c","cpus":"0-3","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
			`{"pod":"b","container":"c","cpus":"4-5","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
		}},
		{"1.38", []string{
			`{"pod":"a","container":"c","cpus":"0,2,4,6","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
			`{"pod":"b","container":"c","cpus":"1,3","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
		}},
	} {
		t.Run(tc.version, func(t *testing.T) {
			out, code, stderr := simulateArgs(t, root, toml, []string{"--kubelet-version", tc.version}, lines...)
			if code != 0 {
				t.Fatalf("exit code %d: %s", code, stderr)
			}
			expectLines(t, out, tc.want...)
		})
	}
	// Without the flag the configuration's kubelet_version decides.
	out, code, stderr := simulateArgs(t, root, toml, nil, lines...)
	if code != 0 {
		t.Fatalf("exit code %d: %s", code, stderr)
	}
	out37, _, _ := simulateArgs(t, root, "kubelet_version = \"1.37\"\n"+toml, nil, lines...)
	expectLines(t, out37, `{"pod":"a","container":"c","cpus":"0-3","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
		`{"pod":"b","container":"c","cpus":"4-5","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`)
	expectLines(t, out, `{"pod":"a","container":"c","cpus":"0,2,4,6","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`,
		`{"pod":"b","container":"c","cpus":"1,3","mems":"0","exclusive":true,"affinity":{"numa":null,"preferred":false}}`)
}

// TestSimulateKubeletVersionFlagErrors: a bad --kubelet-version is a usage
// error naming the flag and the accepted values; the flag overrides the
// configuration's key.
func TestSimulateKubeletVersionFlagErrors(t *testing.T) {
	root := simFixture(t, "ht-1s-4c")
	out, code, stderr := simulateArgs(t, root, "", []string{"--kubelet-version", "1.36"}, `{"op":"state"}`)
	if code != 2 || out != nil {
		t.Fatalf("exit %d, output %q: want 2 and no output", code, out)
	}
	for _, m := range []string{"--kubelet-version", `"1.36"`, "1.38, 1.37"} {
		if !strings.Contains(stderr, m) {
			t.Errorf("stderr %q does not mention %q", stderr, m)
		}
	}
	_, code, stderr = simulateArgs(t, root, "kubelet_version = \"1.37\"\n", []string{"--kubelet-version", "v1.38.0", "--log-level", "info"}, `{"op":"state"}`)
	if code != 0 || !strings.Contains(stderr, "kubelet_version=1.38") {
		t.Fatalf("exit %d, stderr %q: want the flag's 1.38 in the ready line", code, stderr)
	}
}
