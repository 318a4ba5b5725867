package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// TestSimulateHugeRangeIsAnError: an assign line with an absurd range must
// answer with an error line at once (cpuset.Parse would try to build a set
// of four billion CPUs), and the run goes on.
func TestSimulateHugeRangeIsAnError(t *testing.T) {
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-1s-4c"); err != nil {
		t.Fatal(err)
	}
	in := strings.NewReader(`{"op":"assign","pod":"p","container":"c","cpus":"0-4000000000"}` + "\n" + `{"op":"state"}` + "\n")
	var out, errb bytes.Buffer
	done := make(chan int, 1)
	go func() { done <- cmdSimulate([]string{"--sysfs-root", root}, in, &out, &errb) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("simulate did not answer a huge range")
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], `"error"`) || !strings.Contains(lines[0], "4000000000") || !strings.Contains(lines[1], `"shared"`) {
		t.Fatalf("output = %q (stderr %q), want an error line naming the range, then the state", out.String(), errb.String())
	}
}
