package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

func TestList(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"-list"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 16 {
		t.Errorf("%d lines, want the 16 fixtures of CONTRACTS.md", len(lines))
	}
	for _, want := range []string{"ht-1s-4c ", "xeon-8490h-2p-snc ", "i7-12850hx ", "isolated "} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-list lacks %q", want)
		}
	}
}

func TestWriteOne(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"-name", "ht-2s-6c", "-out", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	topo, err := sysfs.Read(dir)
	if err != nil {
		t.Fatal(err)
	}
	if topo.NumCPUs() != 24 || topo.NumSockets() != 2 {
		t.Errorf("%d CPUs on %d sockets, want 24 on 2", topo.NumCPUs(), topo.NumSockets())
	}
}

func TestWriteAll(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"-all", "-out", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, name := range sysfstest.Names() {
		if _, err := os.Stat(filepath.Join(dir, name, "devices/system/cpu/online")); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Spot-read one: offline-cpu has 7 online CPUs.
	topo, err := sysfs.Read(filepath.Join(dir, "offline-cpu"))
	if err != nil || topo.NumCPUs() != 7 {
		t.Errorf("offline-cpu: %v, err %v; want 7 CPUs", topo, err)
	}
}

func TestUsageErrors(t *testing.T) {
	tests := []struct {
		name string
		args []string
		code int
		want string
	}{
		{"nothing", nil, 2, "-out DIR is required"},
		{"no out", []string{"-name", "ht-1s-4c"}, 2, "-out DIR is required"},
		{"no name", []string{"-out", "x"}, 2, "want -list"},
		{"unknown fixture", []string{"-name", "pdp-11", "-out", "x"}, 1, `unknown fixture "pdp-11"`},
		{"stray argument", []string{"-list", "extra"}, 2, `"extra"`},
		{"bad flag", []string{"-bogus"}, 2, "bogus"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := run(tc.args, &out, &errb); code != tc.code || !strings.Contains(errb.String(), tc.want) {
				t.Errorf("exit %d, stderr %q; want %d and %q", code, errb.String(), tc.code, tc.want)
			}
		})
	}
}
