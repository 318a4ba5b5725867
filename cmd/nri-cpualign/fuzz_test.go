package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

const fuzzSimConfig = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n"

// FuzzSimulate feeds arbitrary input to `simulate` on the fixture
// ht-2s-6c. It must never panic or exit non-zero on bad lines; it answers
// every input line with one JSON object; an error names its input (the
// line number, or the pod and container of a request that parsed); and
// the state it ends with satisfies the pool invariants.
func FuzzSimulate(f *testing.F) {
	root := f.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-2s-6c"); err != nil {
		f.Fatal(err)
	}
	cfgPath := filepath.Join(f.TempDir(), "config.toml")
	if err := os.WriteFile(cfgPath, []byte(fuzzSimConfig), 0o644); err != nil {
		f.Fatal(err)
	}
	cfg, err := config.Load([]byte(fuzzSimConfig))
	if err != nil {
		f.Fatal(err)
	}
	pc, _ := cfg.Policy()
	topo, err := sysfs.Read(root)
	if err != nil {
		f.Fatal(err)
	}
	engine, err := policy.New(topo, pc)
	if err != nil {
		f.Fatal(err)
	}
	f.Add("{\"op\":\"add\",\"pod\":\"p\",\"container\":\"c\",\"qos\":\"guaranteed\",\"cpu_request_milli\":4000,\"cpu_limit_milli\":4000}\n{\"op\":\"state\"}\n")
	f.Add("{\"op\":\"assign\",\"pod\":\"p\",\"container\":\"c\",\"cpus\":\"1-2\"}\n{\"op\":\"remove\",\"pod\":\"p\",\"container\":\"c\"}")
	f.Add("{\"op\":\"hints\",\"pod\":\"p\",\"container\":\"c\",\"qos\":\"guaranteed\",\"cpu_request_milli\":2000,\"cpu_limit_milli\":2000,\"hints\":{\"gpu\":[{\"numa\":[1],\"preferred\":true}]}}\n")
	f.Add("{\"op\":\"add\",\"pod\":\"p\",\"container\":\"i\",\"container_type\":\"init\",\"qos\":\"guaranteed\",\"cpu_request_milli\":2000,\"cpu_limit_milli\":2000,\"affinity_override\":{\"numa\":[0]}}\n")
	f.Add("\n\nnot json\n{\"op\":\"x\"}\n{}{}\n{\"op\":\"assign\",\"cpus\":\"0-4000000000\",\"pod\":\"p\",\"container\":\"c\"}\n")
	f.Fuzz(func(t *testing.T, in string) {
		var stdout, stderr bytes.Buffer
		full := in
		if full != "" && !strings.HasSuffix(full, "\n") {
			full += "\n"
		}
		full += "{\"op\":\"state\"}\n"
		code := cmdSimulate([]string{"--sysfs-root", root, "--config", cfgPath}, strings.NewReader(full), &stdout, &stderr)
		if code != 0 {
			t.Fatalf("exit %d on %q; stderr %s", code, in, stderr.String())
		}
		inLines := strings.Split(strings.TrimSuffix(full, "\n"), "\n")
		outLines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		if len(outLines) != len(inLines) {
			t.Fatalf("%d input lines, %d output lines:\n%s", len(inLines), len(outLines), stdout.String())
		}
		for i, l := range outLines {
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("output line %d is not a JSON object: %q", i+1, l)
			}
			if _, isErr := m["error"]; !isErr {
				continue
			}
			if n, ok := m["line"].(float64); ok {
				if int(n) != i+1 {
					t.Fatalf("error for input line %d names line %v: %s", i+1, n, l)
				}
				continue
			}
			var req struct{ Pod, Container string }
			_ = json.Unmarshal([]byte(inLines[i]), &req)
			if m["pod"] != req.Pod || m["container"] != req.Container {
				t.Fatalf("error for input line %d (%q) names neither the line nor its pod and container: %s", i+1, inLines[i], l)
			}
		}
		var final struct {
			Shared      string                       `json:"shared"`
			Assignments map[string]map[string]string `json:"assignments"`
		}
		if err := json.Unmarshal([]byte(outLines[len(outLines)-1]), &final); err != nil {
			t.Fatal(err)
		}
		st := policy.State{Alloc: allocator.State{Assignments: map[string]map[string]cpuset.CPUSet{}}}
		shared, err := cpuset.Parse(final.Shared)
		if err != nil {
			t.Fatal(err)
		}
		if st.Alloc.Default, err = cpumask.FromCPUSet(shared); err != nil {
			t.Fatal(err)
		}
		for pod, byName := range final.Assignments {
			st.Alloc.Assignments[pod] = map[string]cpuset.CPUSet{}
			for name, s := range byName {
				if st.Alloc.Assignments[pod][name], err = cpuset.Parse(s); err != nil {
					t.Fatal(err)
				}
			}
		}
		// Init containers may share CPUs with their pod's app containers.
		if err := invariant.Check(engine, st, nil); err != nil {
			t.Fatalf("after %q: %v", in, err)
		}
	})
}
