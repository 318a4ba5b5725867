package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// oddLines are request lines off the fast parser's path, or at its edges:
// each must be answered exactly as encoding/json decodes it.
var oddLines = []string{
	`{"OP":"add","pod":"u1","container":"c","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000}`,
	`{"op":"add","pod":"\u0070od-esc","container":"c","qos":"guaranteed","cpu_request_milli":2000,"cpu_limit_milli":2000}`,
	`{"op":"add","pod":null,"container":"c"}`,
	`{"op":"add","pod":"n1","container":"c","qos":"guaranteed","cpu_request_milli":1e3,"cpu_limit_milli":1000}`,
	`{"op":"add","pod":"n2","container":"c","qos":"guaranteed","cpu_request_milli":01,"cpu_limit_milli":1000}`,
	`{"op":"add","pod":"n3","container":"c","qos":"burstable","cpu_request_milli":-0,"cpu_limit_milli":0}`,
	`{"op":"add","pod":"n4","container":"c","qos":"guaranteed","cpu_request_milli":99999999999999999999,"cpu_limit_milli":1}`,
	`{"op":"add","pod":"dup","pod":"dup2","container":"c","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000}`,
	`{"op":"add","pod":"x","container":"c","cpu_limit":1}`,
	`{"op":"add","pod":"h","container":"c","qos":"guaranteed","cpu_request_milli":4000,"cpu_limit_milli":4000,"hints":{"gpu":[{"numa":[1],"preferred":true}]}}`,
	`{"op":"add","pod":"o","container":"c","qos":"guaranteed","cpu_request_milli":2000,"cpu_limit_milli":2000,"affinity_override":{"numa":[0],"preferred":true}}`,
	`{"op":"hints","pod":"h2","container":"c","qos":"guaranteed","cpu_request_milli":4000,"cpu_limit_milli":4000}`,
	`{"op":"assign","pod":"a","container":"c","cpus":"100-101"}`,
	`{"op":"add","pod":"pöd","container":"c<&>","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000}`,
	`{"op":"add","pod":"q\"uote","container":"c","qos":"besteffort"}`,
	`{"op":"add","pod":"lt","container":"a<b","qos":"besteffort"}`,
	`{"op":"add","pod":"gt","container":"a>b","qos":"besteffort"}`,
	`{"op":"add","pod":"amp","container":"a&b","qos":"besteffort"}`,
	"\t{ \"op\" : \"remove\" , \"pod\" : \"u1\" , \"container\" : \"c\" }  ",
	`{"op":"remove","pod":"x","container":"c"}}`,
	`{"op":"remove","pod":"x","container":"c"} {"op":"state"}`,
	`{"op":"remove","pod":"x","container":"c",}`,
	`{"op":"remove","pod":"x","container":"c"`,
	`{"op":"remove","pod":"x","container":"c","container_type":"init"}`,
	`{"op":"add","pod":"t","container":"c","container_type":"sidecar","qos":"burstable","cpu_request_milli":100}`,
	`{"op":"add","pod":"t","container":"c","container_type":"job"}`,
	`{}`, `[]`, `"op"`, `{"op":true}`, `{"op":"state"}`, ``, `   `,
}

// simReference answers lines as simulate did before the fast paths: each
// line decoded by encoding/json, each answer written by json.Marshal.
func simReference(t *testing.T, root, cfgPath string, in []byte) []byte {
	t.Helper()
	cfg, err := config.LoadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	pcfg, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	topo, _, err := sysfs.ReadWithWarnings(root)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policy.New(topo, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	log := quietLog()
	sim := &simulator{engine: engine, state: engine.NewState(), log: log, slow: true}
	var out bytes.Buffer
	r := bufio.NewReader(bytes.NewReader(in))
	for n := 1; ; n++ {
		line, err := r.ReadBytes('\n')
		if len(line) == 0 && err != nil {
			return out.Bytes()
		}
		b, merr := json.Marshal(sim.handle(n, bytes.TrimSpace(line)))
		if merr != nil {
			t.Fatal(merr)
		}
		out.Write(append(b, '\n'))
	}
}

// The output is byte for byte what encoding/json would have written, on
// add/remove traces with the odd lines mixed in at random.
func TestSimulateOutputUnchanged(t *testing.T) {
	root := simFixture(t, "epyc-9754")
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(simBenchConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	for seed := int64(1); seed <= 4; seed++ {
		lines := addRemoveTrace(seed, 1500)
		rng := rand.New(rand.NewSource(seed))
		for _, odd := range oddLines {
			i := rng.Intn(len(lines))
			lines = append(lines[:i], append([]string{odd}, lines[i:]...)...)
		}
		in := []byte(strings.Join(lines, "\n") + "\n")
		var got, stderr bytes.Buffer
		if code := cmdSimulate([]string{"--sysfs-root", root, "--config", cfgPath}, bytes.NewReader(in), &got, &stderr); code != 0 {
			t.Fatalf("exit %d: %s", code, stderr.String())
		}
		want := simReference(t, root, cfgPath, in)
		if !bytes.Equal(got.Bytes(), want) {
			g, w := strings.Split(got.String(), "\n"), strings.Split(string(want), "\n")
			for i := range min(len(g), len(w)) {
				if g[i] != w[i] {
					t.Fatalf("seed %d, line %d (%s):\n got %s\nwant %s", seed, i+1, lines[i], g[i], w[i])
				}
			}
			t.Fatalf("seed %d: %d lines, want %d", seed, len(g), len(w))
		}
		// The trace exercised both paths and real decisions.
		if !strings.Contains(got.String(), `"exclusive":true`) || !strings.Contains(got.String(), `"removed":true`) || !strings.Contains(got.String(), `"reason":`) {
			t.Fatalf("seed %d: the trace has no exclusive add, removal or refusal:\n%.2000s", seed, got.String())
		}
	}
}

func quietLog() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// cpuList writes what CPUSet.String writes.
func TestCPUList(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	sets := []cpuset.CPUSet{cpuset.New(), cpuset.New(0), cpuset.New(1, 2), cpuset.New(0, 2, 4), cpuset.New(63, 64, 65, 127, 128), cpuset.New(1023, 1024, 5000)}
	for i := 0; i < 300; i++ {
		var ids []int
		for c := 0; c < 1100; c++ {
			if rng.Intn(1+i%7) == 0 {
				ids = append(ids, c)
			}
		}
		sets = append(sets, cpuset.New(ids...))
	}
	for _, s := range sets {
		if got, want := cpuList(s), s.String(); got != want {
			t.Fatalf("cpuList = %q, String = %q", got, want)
		}
	}
}

// FuzzFastRequest: what the fast parser accepts, encoding/json accepts as
// the same request (DisallowUnknownFields, nothing after the object).
func FuzzFastRequest(f *testing.F) {
	for _, l := range oddLines {
		f.Add([]byte(l))
	}
	for _, l := range addRemoveTrace(3, 20) {
		f.Add([]byte(l))
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		line = bytes.TrimSpace(line)
		var fast requestLine
		if !parseFast(line, &fast) {
			return
		}
		var slow requestLine
		dec := json.NewDecoder(bytes.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&slow); err != nil {
			t.Fatalf("fast parser accepted %q, encoding/json: %v", line, err)
		}
		if rest := bytes.TrimSpace(line[dec.InputOffset():]); len(rest) > 0 {
			t.Fatalf("fast parser accepted %q with %q after the object", line, rest)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Fatalf("%q: fast %+v, encoding/json %+v", line, fast, slow)
		}
	})
}

// FuzzAppendAnswer: the hand-written encoder writes what json.Marshal
// writes, for any strings and numbers in the answers it writes itself.
func FuzzAppendAnswer(f *testing.F) {
	f.Add("pod", "c<&>\u2028", "0-3", "0", "err\x01\xff", 3, true)
	f.Add("", "", "", "", "", 0, false)
	f.Add("a<b", "a>b", "a&b", "\x7f", "\\", 1, false)
	f.Fuzz(func(t *testing.T, pod, ctr, cpus, mems, msg string, n int, flag bool) {
		nodes := []int{n, -n, n % 8}
		aff := &affinityJSON{NUMA: nodes, Preferred: flag}
		if flag {
			aff.NUMA = nil
		}
		for _, v := range []any{
			addResult{Pod: pod, Container: ctr, CPUs: cpus, Mems: mems, Exclusive: flag, Affinity: *aff, L3: nodes[:n&3%4%len(nodes)], PodPool: !flag},
			addResult{Pod: pod, Affinity: affinityJSON{NUMA: []int{}}},
			removeResult{Pod: pod, Container: ctr, Removed: flag},
			containerError{Pod: pod, Container: ctr, Error: msg, Reason: mems},
			containerError{Pod: pod, Container: ctr, Error: msg, Reason: mems, Affinity: aff},
			errorLine{Error: msg, Reason: cpus, Line: n},
			errorLine{Error: msg},
			stateResult{Shared: cpus, Assignments: map[string]map[string]string{pod: {ctr: cpus}}},
		} {
			want, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			if got := appendAnswer(nil, v); !bytes.Equal(got, want) {
				t.Fatalf("%T %+v:\n got %s\nwant %s", v, v, got, want)
			}
		}
	})
}

// Lines longer than simulate's 64 KiB input buffer (read in pieces and
// gathered), one of them last and without a newline, are answered as the
// reference reads them whole.
func TestSimulateLongLines(t *testing.T) {
	root := simFixture(t, "ht-2s-6c")
	cfgPath := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(simBenchConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("p", 150<<10)
	in := []byte(strings.Join([]string{
		`{"op":"add","pod":"` + long + `","container":"c","qos":"guaranteed","cpu_request_milli":2000,"cpu_limit_milli":2000}`,
		`{"op":"add","pod":"short","container":"c","qos":"burstable","cpu_request_milli":100}`,
		strings.Repeat(" ", 70<<10) + `{"op":"remove","pod":"` + long + `","container":"c"}`,
		`{"op":"frobnicate","pod":"` + long + `"}`,
		`{"op":"add","pod":"` + long[:100<<10] + `","container":"c","qos":"guaranteed","cpu_request_milli":1000,"cpu_limit_milli":1000}`,
	}, "\n"))
	var got, stderr bytes.Buffer
	if code := cmdSimulate([]string{"--sysfs-root", root, "--config", cfgPath}, bytes.NewReader(in), &got, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	want := simReference(t, root, cfgPath, in)
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("got %d bytes in %d lines, want %d bytes in %d lines",
			got.Len(), bytes.Count(got.Bytes(), []byte("\n")), len(want), bytes.Count(want, []byte("\n")))
	}
	if n := bytes.Count(want, []byte("\n")); n != 5 || !bytes.Contains(want, []byte(`"exclusive":true`)) {
		t.Fatalf("reference: %d answers, want 5 with an exclusive add", n)
	}
}
