package persist

import (
	"io"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// The configurations and helpers the store's tests share with the
// daemon's (internal/daemon/fuzz_test.go).

const fuzzConfig = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n"

func fuzzEngine(f *testing.F) *policy.Engine { return engineFor(f, "ht-2s-6c", fuzzConfig) }

// engineFor builds the engine of a configuration document on a fixture.
func engineFor(t testing.TB, fixture, doc string) *policy.Engine {
	t.Helper()
	_, e := policytest.Engine(t, fixture, doc)
	return e
}

// memoryStaticConfig runs the memory manager on ht-2s-6c (16 GiB per
// node, 2 GiB of it in hugepage pools; 1 GiB reserved on node 0).
const memoryStaticConfig = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\n" +
	"memory_manager_policy = \"Static\"\n[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gi\" }\n"

func quietLogger() *logrus.Logger {
	l := logrus.New()
	l.SetOutput(io.Discard)
	return l
}

// podLevelTOML is pod_level_resource_managers on ht-2s-6c (as
// internal/daemon's pod-level tests run it).
const podLevelTOML = "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,12\"\n" +
	"topology_manager_policy = \"single-numa-node\"\ntopology_manager_scope = \"pod\"\npod_level_resource_managers = true\n"
