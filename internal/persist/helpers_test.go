package persist

import (
	"io"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// The configuration the store's tests share with the daemon's fuzzers.
const fuzzConfig = policytest.Reserved2BestEffort

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
