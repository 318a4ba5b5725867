package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// simGPUs writes ht-2s-6c (NUMA 0 = 0-5,12-17, NUMA 1 = 6-11,18-23, core
// k = {k, k+12}) with two NVIDIA GPUs, /dev/nvidia0 = 0000:86:00.0 on
// node 1 and /dev/nvidia1 = 0000:19:00.0 on node 0, and returns the
// sysfs and procfs roots.
func simGPUs(t *testing.T) (sys, proc string) {
	t.Helper()
	sys = simFixture(t, "ht-2s-6c")
	proc = filepath.Join(t.TempDir(), "proc")
	if err := sysfstest.WriteNVIDIA(sys, proc,
		sysfstest.GPU{PCI: "0000:86:00.0", Minor: 0, UUID: "GPU-86", NUMA: "1", LocalCPUs: "6-11,18-23"},
		sysfstest.GPU{PCI: "0000:19:00.0", Minor: 1, UUID: "GPU-19", NUMA: "0", LocalCPUs: "0-5,12-17"},
	); err != nil {
		t.Fatal(err)
	}
	return sys, proc
}

// TestSimulateGPUs: simulate takes GPUs as a container carries them.
// Under single-numa-node without a reservation:
//   - /dev/nvidia0 with nvidiactl (CDI's way) lands on node 1's lowest
//     core, 6,18, and the answer names the GPU;
//   - NVIDIA_VISIBLE_DEVICES=GPU-19 on node 0's lowest, 0,12;
//   - both GPUs: TopologyAffinityError, naming both;
//   - NVIDIA_VISIBLE_DEVICES=all: no device provider in the hints;
//   - /dev/nvidia5, which no information file has: admitted without a
//     device hint (node 0's next core, 1,13), device_error says why;
//   - a device type that is neither c nor b, or devices next to
//     device_numa: InvalidRequest.
func TestSimulateGPUs(t *testing.T) {
	sys, proc := simGPUs(t)
	out, code := simulate(t, sys, "topology_manager_policy = \"single-numa-node\"\nprocfs_root = \""+proc+"\"\n",
		g("add", "p", "c", 2, `"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0},{"path":"/dev/nvidiactl","type":"c","major":195,"minor":255}]`),
		g("add", "q", "c", 2, `"env":["NVIDIA_VISIBLE_DEVICES=GPU-19"]`),
		g("add", "r", "c", 2, `"env":["NVIDIA_VISIBLE_DEVICES=GPU-19,GPU-86"]`),
		g("hints", "h", "c", 2, `"env":["NVIDIA_VISIBLE_DEVICES=all"]`),
		g("add", "u", "c", 2, `"devices":[{"path":"/dev/nvidia5","type":"c","major":195,"minor":5}]`),
		g("add", "x", "c", 2, `"devices":[{"path":"/dev/nvidia0","type":"p","major":195,"minor":0}]`),
		g("add", "y", "c", 2, `"device_numa":[1],"env":["NVIDIA_VISIBLE_DEVICES=GPU-19"]`),
	)
	if code != 0 {
		t.Fatalf("exit code %d", code)
	}
	if len(out) != 7 {
		t.Fatalf("got %d lines, want 7:\n%s", len(out), strings.Join(out, "\n"))
	}
	expectLines(t, out[:2],
		`{"pod":"p","container":"c","cpus":"6,18","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true},
		  "devices":[{"device":"/dev/nvidia0 0000:86:00.0","numa":[1]}]}`,
		`{"pod":"q","container":"c","cpus":"0,12","mems":"0-1","exclusive":true,"affinity":{"numa":[0],"preferred":true},
		  "devices":[{"device":"GPU-19 0000:19:00.0 via NVIDIA_VISIBLE_DEVICES","numa":[0]}]}`,
	)
	var refused containerError
	if err := json.Unmarshal([]byte(out[2]), &refused); err != nil {
		t.Fatal(err)
	}
	if refused.Reason != "TopologyAffinityError" || len(refused.Devices) != 2 {
		t.Errorf("two GPUs on two nodes: %s, want TopologyAffinityError naming both", out[2])
	}
	var h hintsResult
	if err := json.Unmarshal([]byte(out[3]), &h); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.Hints["devices"]; ok || len(h.Devices) != 0 {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=all: %s, want no device provider", out[3])
	}
	var unknown addResult
	if err := json.Unmarshal([]byte(out[4]), &unknown); err != nil {
		t.Fatal(err)
	}
	if unknown.CPUs != "1,13" || !strings.Contains(unknown.DeviceError, "no GPU with Device Minor 5") {
		t.Errorf("unknown minor: %s, want cpus 1,13 and a device_error", out[4])
	}
	for i, has := range []string{`type "p"`, "device_numa and devices/env/mounts"} {
		var e containerError
		if err := json.Unmarshal([]byte(out[5+i]), &e); err != nil {
			t.Fatal(err)
		}
		if e.Reason != "InvalidRequest" || !strings.Contains(e.Error, has) {
			t.Errorf("line %d = %s, want InvalidRequest with %q", 6+i, out[5+i], has)
		}
	}
}

// TestSimulateProcfsRootFlag: --procfs-root overrides the configuration.
func TestSimulateProcfsRootFlag(t *testing.T) {
	sys, proc := simGPUs(t)
	var stdout, stderr bytes.Buffer
	in := g("add", "p", "c", 2, `"devices":[{"path":"/dev/nvidia0","type":"c","major":195,"minor":0}]`) + "\n"
	cfg := filepath.Join(t.TempDir(), "c.toml")
	writeFile(t, cfg, "topology_manager_policy = \"single-numa-node\"\nprocfs_root = \"/nonexistent\"\n")
	if code := cmdSimulate([]string{"--sysfs-root", sys, "--procfs-root", proc, "--config", cfg}, strings.NewReader(in), &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	expectLines(t, strings.Split(strings.TrimSpace(stdout.String()), "\n"),
		`{"pod":"p","container":"c","cpus":"6,18","mems":"0-1","exclusive":true,"affinity":{"numa":[1],"preferred":true},
		  "devices":[{"device":"/dev/nvidia0 0000:86:00.0","numa":[1]}]}`)
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
