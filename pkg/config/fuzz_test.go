package config

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

// FuzzLoad feeds arbitrary documents to the one TOML loader. It must never
// panic; every problem must be an *Error that names where it is (a key or
// a line) and says what is wrong; a document it accepts must validate and
// survive Encode/Load unchanged. Seeds: testdata/fuzz/FuzzLoad and the
// example configuration in deploy/.
func FuzzLoad(f *testing.F) {
	if b, err := os.ReadFile("../../deploy/nri-cpualign.toml"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n[cpu_manager_policy_options]\nfull-pcpus-only = true\n"))
	f.Add([]byte("reconcile_period = 10\n"))
	f.Add([]byte("reserved_cpu_count = -1\nmetrics_address = \"x\"\n"))
	f.Add([]byte("[topology_manager_policy_options]\nprefer-closest-numa-nodes = [1]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := Load(data)
		if err != nil {
			checkErrors(t, data, err)
			return
		}
		if err := c.Validate(); err != nil {
			t.Fatalf("Load accepted %q but Validate says %v", data, err)
		}
		enc, err := c.Encode()
		if err != nil {
			t.Fatalf("Encode of a loaded config: %v", err)
		}
		again, err := Load(enc)
		if err != nil {
			t.Fatalf("Load(Encode(Load(%q))) = %v\nencoded:\n%s", data, err, enc)
		}
		if again.Summary() != c.Summary() {
			t.Fatalf("round trip changed the config:\n%s\n%s", c.Summary(), again.Summary())
		}
	})
}

// checkErrors checks every joined problem of a Load error.
func checkErrors(t *testing.T, data []byte, err error) {
	t.Helper()
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	lines := bytes.Count(data, []byte("\n")) + 1
	for _, e := range errs {
		var ce *Error
		if !errors.As(e, &ce) {
			t.Fatalf("Load(%q): %T %v is not a *config.Error", data, e, e)
		}
		if ce.Key == "" && ce.Line == 0 {
			// Only a document the TOML parser cannot read has neither;
			// its message then carries the parser's position.
			if !strings.Contains(ce.Msg, "line") && !strings.Contains(ce.Msg, ":") {
				t.Fatalf("Load(%q): error %q names neither a key nor a line", data, ce)
			}
		}
		if ce.Line < 0 || ce.Line > lines {
			t.Fatalf("Load(%q): error %q names line %d of a %d-line document", data, ce, ce.Line, lines)
		}
		if ce.Msg == "" || !strings.HasPrefix(ce.Error(), "config") {
			t.Fatalf("Load(%q): error %q says nothing", data, ce)
		}
	}
}

// A CPU list with a huge range is refused with the key, not expanded:
// cpuset.Parse would build a set of four billion CPUs (minutes and
// gigabytes) before anything could say the value is wrong. Found while
// fuzzing.
func TestHugeCPURangeRefused(t *testing.T) {
	_, err := Load([]byte("reserved_system_cpus = \"0-4000000000\"\n"))
	var ce *Error
	if !errors.As(err, &ce) || ce.Key != KeyReservedSystemCPUs || ce.Line != 1 {
		t.Fatalf("Load = %v, want an error on line 1 naming %s", err, KeyReservedSystemCPUs)
	}
}
