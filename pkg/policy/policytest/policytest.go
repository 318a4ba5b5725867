// Package policytest builds policy engines for tests: a configuration
// document run on one of the sysfs fixtures (pkg/sysfs/sysfstest), as the
// daemon builds its engine at start-up.
package policytest

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// Engine loads doc (TOML) and builds its engine on fixture. Under the
// Static memory manager the machine's memory comes from the fixture's
// node meminfo, as the daemon reads it from /sys.
func Engine(t testing.TB, fixture, doc string) (config.Config, *policy.Engine) {
	t.Helper()
	cfg, err := config.Load([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	pc, err := cfg.Policy()
	if err != nil {
		t.Fatal(err)
	}
	if pc.MemoryPolicy == policy.MemoryPolicyStatic {
		pc.MachineMemory = MachineMemory(t, fixture)
	}
	e, err := policy.New(sysfstest.Load(t, fixture), pc)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, e
}

// MachineMemory reads a fixture's per-node memory as the daemon reads the
// host's.
func MachineMemory(t testing.TB, fixture string) []memorymanager.NodeCapacity {
	t.Helper()
	spec, ok := sysfstest.Get(fixture)
	if !ok {
		t.Fatalf("no sysfs fixture %q", fixture)
	}
	fsys, err := sysfstest.FS(spec)
	if err != nil {
		t.Fatal(err)
	}
	nodes, err := sysfs.ReadMemoryFS(fsys)
	if err != nil {
		t.Fatal(err)
	}
	return sysfs.Capacities(nodes)
}

// Reserved2BestEffort is the configuration the fuzzers and the store's
// tests share: the static policy with two CPUs reserved under the
// best-effort topology manager.
const Reserved2BestEffort = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n"

// EngineOf is Engine for a test that needs only the engine.
func EngineOf(t testing.TB, fixture, doc string) *policy.Engine {
	t.Helper()
	_, e := Engine(t, fixture, doc)
	return e
}
