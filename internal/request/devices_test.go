package request

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestPCIFromEnv(t *testing.T) {
	env := []string{
		"PATH=/usr/bin",
		"PCIDEVICE_A=0000:3B:02.0, 0000:af:02.1,",
		"PCIDEVICE_A_INFO={}",
		"PCIDEVICE_=0000:00:00.0", // no resource name
		"PCI_RESOURCE_KUBEVIRT_IO_NIC=0000:af:00.0",
		"PCIDEVICE_B=nope",
		"NVIDIA_VISIBLE_DEVICES=GPU-0a1b",
		"NOEQUALS",
	}
	var c collected
	pciFromEnv(env, &c)
	devs, names, skipped := c.devs, c.names, c.skipped
	want := []string{"PCIDEVICE_A 0000:3b:02.0", "PCIDEVICE_A 0000:af:02.1", "PCI_RESOURCE_KUBEVIRT_IO_NIC 0000:af:00.0"}
	if fmt.Sprint(names) != fmt.Sprint(want) || len(devs) != 3 || devs[0].PCI != "0000:3b:02.0" || devs[2].Kind != "pci" {
		t.Fatalf("pciFromEnv names = %q, devs = %+v; want %q", names, devs, want)
	}
	if fmt.Sprint(skipped) != "[PCIDEVICE_B=nope]" {
		t.Fatalf("skipped = %q, want [PCIDEVICE_B=nope]", skipped)
	}

	// A pod spec can carry any number of addresses: 64 are read, the
	// rest reported (at most 8 of them).
	var many []string
	for i := 0; i < 100; i++ {
		many = append(many, fmt.Sprintf("0000:%02x:00.0", i))
	}
	c = collected{}
	pciFromEnv([]string{"PCIDEVICE_MANY=" + strings.Join(many, ",")}, &c)
	devs, skipped = c.devs, c.skipped
	if len(devs) != 64 || len(skipped) != 8 || skipped[0] != "PCIDEVICE_MANY=0000:40:00.0" {
		t.Fatalf("100 addresses: %d read, skipped %q; want 64 and 8 starting at 0000:40:00.0", len(devs), skipped)
	}
}

// TestDRAFiles: a mounted directory is searched for metadata files
// (<claim>/<request>/<file>), within bounds; a large tree is an error.
func TestDRAFiles(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"claim/req/a.com-metadata.json", "claim/req/b.com-metadata.json", "claim/req/notes.txt", "x/y/z/w/deep-metadata.json"} {
		full := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := draFiles(dir, maxDRAFiles)
	want := []string{filepath.Join(dir, "claim/req/a.com-metadata.json"), filepath.Join(dir, "claim/req/b.com-metadata.json")}
	if err != nil || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("draFiles = %v, %v; want %v (the one four levels down left out)", got, err, want)
	}
	if _, err := draFiles(dir, 1); err == nil || !strings.Contains(err.Error(), "more than 16 files") {
		t.Fatalf("limit 1: err = %v", err)
	}
	big := t.TempDir()
	for i := 0; i <= maxDRAEntries; i++ {
		if err := os.WriteFile(filepath.Join(big, fmt.Sprint(i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := draFiles(big, maxDRAFiles); err == nil || !strings.Contains(err.Error(), "more than 256 entries") {
		t.Fatalf("large directory: err = %v", err)
	}
	if _, err := draFiles(filepath.Join(dir, "nope"), maxDRAFiles); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing source: err = %v", err)
	}
}
