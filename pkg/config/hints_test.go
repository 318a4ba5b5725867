package config

import (
	"errors"
	"strings"
	"testing"
)

// TestKubeletNamesAndTypos checks the whole message of each mistake, the
// hint written out by hand.
func TestKubeletNamesAndTypos(t *testing.T) {
	const allKeys = "cpu_manager_policy, cpu_manager_policy_options, reserved_system_cpus, reserved_cpu_count, " +
		"topology_manager_policy, topology_manager_scope, topology_manager_policy_options, memory_manager_policy, " +
		"disable_cpu_quota_with_exclusive_cpus, state_dir, sysfs_root, procfs_root, " +
		"cgroup_root, socket_path, metrics_address, reconcile_period, shared_pool_updates, " +
		"log_level, log_format, reserved_memory, node_resource_topology, kubeconfig, node_name, " +
		"pod_resources, pod_resources_socket, pod_resources_timeout"
	const cpuOpts = "align-by-socket, distribute-cpus-across-cores, distribute-cpus-across-numa, full-pcpus-only, " +
		"prefer-align-cpus-by-uncorecache, strict-align-cpus-by-uncorecache, strict-cpu-reservation"
	for _, tc := range []struct {
		name, doc, want string
	}{
		// The kubelet's KubeletConfiguration fields, as in its config.yaml.
		{"cpuManagerPolicy", "cpuManagerPolicy = \"static\"\n",
			`config line 1: key "cpuManagerPolicy": unknown key; did you mean "cpu_manager_policy"? (the kubelet's cpuManagerPolicy, flag --cpu-manager-policy)`},
		{"cpuManagerPolicyOptions table", "reserved_cpu_count = 1\n[cpuManagerPolicyOptions]\nfull-pcpus-only = \"true\"\n",
			`config line 2: key "cpuManagerPolicyOptions": unknown key; did you mean "cpu_manager_policy_options"? (the kubelet's cpuManagerPolicyOptions, flag --cpu-manager-policy-options)`},
		{"cpuManagerReconcilePeriod", "cpuManagerReconcilePeriod = \"10s\"\n",
			`config line 1: key "cpuManagerReconcilePeriod": unknown key; did you mean "reconcile_period"? (the kubelet's cpuManagerReconcilePeriod, flag --cpu-manager-reconcile-period)`},
		{"reservedSystemCPUs", "\nreservedSystemCPUs = \"0,4\"\n",
			`config line 2: key "reservedSystemCPUs": unknown key; did you mean "reserved_system_cpus"? (the kubelet's reservedSystemCPUs, flag --reserved-cpus)`},
		{"topologyManagerPolicy", "topologyManagerPolicy = \"restricted\"\n",
			`config line 1: key "topologyManagerPolicy": unknown key; did you mean "topology_manager_policy"? (the kubelet's topologyManagerPolicy, flag --topology-manager-policy)`},
		{"topologyManagerScope", "topologyManagerScope = \"pod\"\n",
			`config line 1: key "topologyManagerScope": unknown key; did you mean "topology_manager_scope"? (the kubelet's topologyManagerScope, flag --topology-manager-scope)`},
		{"topologyManagerPolicyOptions dotted", "topologyManagerPolicyOptions.prefer-closest-numa-nodes = \"true\"\n",
			`config line 1: key "topologyManagerPolicyOptions.prefer-closest-numa-nodes": unknown key; did you mean "topology_manager_policy_options"? (the kubelet's topologyManagerPolicyOptions, flag --topology-manager-policy-options)`},
		{"kubeReserved", "[kubeReserved]\ncpu = \"500m\"\n",
			`config line 1: key "kubeReserved": unknown key; the kubelet reserves the cpu of kubeReserved plus systemReserved, rounded up to whole CPUs: write that number as "reserved_cpu_count", or the CPUs themselves as "reserved_system_cpus"`},
		{"systemReserved", "systemReserved = { cpu = \"1\" }\n",
			`config line 1: key "systemReserved": unknown key; the kubelet reserves the cpu of kubeReserved plus systemReserved, rounded up to whole CPUs: write that number as "reserved_cpu_count", or the CPUs themselves as "reserved_system_cpus"`},
		{"featureGates", "[featureGates]\nCPUManagerPolicyAlphaOptions = true\n",
			`config line 1: key "featureGates": unknown key; nri-cpualign has no feature gates: every policy option it knows is available without one, ` +
				`and the gate DisableCPUQuotaWithExclusiveCPUs is the key "disable_cpu_quota_with_exclusive_cpus"`},
		{"memoryManagerPolicy", "memoryManagerPolicy = \"None\"\n",
			`config line 1: key "memoryManagerPolicy": unknown key; did you mean "memory_manager_policy"? (the kubelet's memoryManagerPolicy, flag --memory-manager-policy)`},
		{"the gate as a key", "DisableCPUQuotaWithExclusiveCPUs = false\n",
			`config line 1: key "DisableCPUQuotaWithExclusiveCPUs": unknown key; did you mean "disable_cpu_quota_with_exclusive_cpus"? (the kubelet's feature gate DisableCPUQuotaWithExclusiveCPUs)`},
		{"logging", "[logging]\nformat = \"json\"\n",
			`config line 1: key "logging": unknown key; did you mean "log_format" and "log_level"? (the kubelet's logging.format and logging.verbosity)`},
		// The kubelet's flags, as someone might copy them.
		{"reserved-cpus flag", "reserved-cpus = \"0\"\n",
			`config line 1: key "reserved-cpus": unknown key; did you mean "reserved_system_cpus"? (the kubelet's reservedSystemCPUs, flag --reserved-cpus)`},
		{"topology-manager-scope flag", "topology-manager-scope = \"pod\"\n",
			`config line 1: key "topology-manager-scope": unknown key; did you mean "topology_manager_scope"? (the kubelet's topologyManagerScope, flag --topology-manager-scope)`},
		// Typos of the keys.
		{"one letter missing", "cpu_manager_polcy = \"static\"\n", `config line 1: key "cpu_manager_polcy": unknown key; did you mean "cpu_manager_policy"?`},
		{"two letters swapped", "reserved_cpu_cuont = 2\n", `config line 1: key "reserved_cpu_cuont": unknown key; did you mean "reserved_cpu_count"?`},
		{"dashes for underscores", "log-level = \"debug\"\n", `config line 1: key "log-level": unknown key; did you mean "log_level"?`},
		{"table typo", "[topology_manager_policy_option]\nprefer-closest-numa-nodes = \"true\"\n",
			`config line 1: key "topology_manager_policy_option": unknown key; did you mean "topology_manager_policy_options"?`},
		{"nothing near", "cpuCFSQuota = false\n", `config line 1: key "cpuCFSQuota": unknown key; the keys are ` + allKeys},
		{"the kubelet's reservedMemory", "reservedMemory = []\n", `config line 1: key "reservedMemory": unknown key; did you mean "reserved_memory"?`},
		{"short key, nothing near", "ab = 1\n", `config line 1: key "ab": unknown key; the keys are ` + allKeys},
		// Option names.
		{"option typo", "reserved_cpu_count = 2\n[cpu_manager_policy_options]\nfull-pcpus-onyl = \"true\"\n",
			`config line 3: key "cpu_manager_policy_options.full-pcpus-onyl": unknown CPU manager policy option; did you mean "full-pcpus-only"?`},
		{"option with underscores", "[cpu_manager_policy_options]\nfull_pcpus_only = true\n",
			`config line 2: key "cpu_manager_policy_options.full_pcpus_only": unknown CPU manager policy option; did you mean "full-pcpus-only"?`},
		{"topology option typo", "[topology_manager_policy_options]\nprefer-closest-numa-node = \"true\"\n",
			`config line 2: key "topology_manager_policy_options.prefer-closest-numa-node": unknown topology manager policy option; did you mean "prefer-closest-numa-nodes"?`},
		{"unknown option", "[cpu_manager_policy_options]\nturbo = \"true\"\n",
			`config line 2: key "cpu_manager_policy_options.turbo": unknown CPU manager policy option; the options are ` + cpuOpts},
		{"unknown topology option", "[topology_manager_policy_options]\nnuma-aware = \"true\"\n",
			`config line 2: key "topology_manager_policy_options.numa-aware": unknown topology manager policy option; the options are max-allowable-numa-nodes, prefer-closest-numa-nodes`},
		{"option in the wrong table", "[cpu_manager_policy_options]\nprefer-closest-numa-nodes = \"true\"\n",
			`config line 2: key "cpu_manager_policy_options.prefer-closest-numa-nodes": prefer-closest-numa-nodes is not a CPU manager policy option; it belongs in [topology_manager_policy_options]`},
		{"cpu option in the topology table", "[topology_manager_policy_options]\nfull-pcpus-only = \"true\"\n",
			`config line 2: key "topology_manager_policy_options.full-pcpus-only": full-pcpus-only is not a topology manager policy option; it belongs in [cpu_manager_policy_options]`},
		// Enumerated values.
		{"policy value typo", "cpu_manager_policy = \"statc\"\n", `config line 1: key "cpu_manager_policy": bad value "statc": want one of none, static; did you mean "static"?`},
		{"policy value in another case", "topology_manager_policy = \"Single-NUMA-Node\"\n",
			`config line 1: key "topology_manager_policy": bad value "Single-NUMA-Node": want one of none, best-effort, restricted, single-numa-node; did you mean "single-numa-node"?`},
		{"policy value with underscores", "topology_manager_policy = \"best_effort\"\n",
			`config line 1: key "topology_manager_policy": bad value "best_effort": want one of none, best-effort, restricted, single-numa-node; did you mean "best-effort"?`},
		{"value far from any", "topology_manager_scope = \"node\"\n", `config line 1: key "topology_manager_scope": bad value "node": want one of container, pod`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.doc))
			if err == nil {
				t.Fatal("Load succeeded")
			}
			if err.Error() != tc.want {
				t.Errorf("Load error\n%s\nwant\n%s", err, tc.want)
			}
			var ce *Error
			if !errors.As(err, &ce) {
				t.Errorf("%T is not a *config.Error", err)
			}
		})
	}
}

// Several unknown options are each reported, in name order.
func TestEveryUnknownOptionReported(t *testing.T) {
	_, err := Load([]byte("[cpu_manager_policy_options]\nzz = \"true\"\nfull-pcpu-only = \"true\"\n"))
	want := `config line 3: key "cpu_manager_policy_options.full-pcpu-only": unknown CPU manager policy option; did you mean "full-pcpus-only"?` + "\n" +
		`config line 2: key "cpu_manager_policy_options.zz": unknown CPU manager policy option; the options are ` +
		"align-by-socket, distribute-cpus-across-cores, distribute-cpus-across-numa, full-pcpus-only, " +
		"prefer-align-cpus-by-uncorecache, strict-align-cpus-by-uncorecache, strict-cpu-reservation"
	if err == nil || err.Error() != want {
		t.Errorf("Load error\n%v\nwant\n%s", err, want)
	}
	// Validate of a Config built in code reports them too, without a line.
	c := Default()
	c.TopologyManagerPolicyOptions = map[string]string{"max-allowable-numa-node": "8"}
	want = `config: key "topology_manager_policy_options.max-allowable-numa-node": unknown topology manager policy option; did you mean "max-allowable-numa-nodes"?`
	if err := c.Validate(); err == nil || err.Error() != want {
		t.Errorf("Validate = %v, want %s", err, want)
	}
}

func TestEditDistance(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "", 3}, {"", "ab", 2}, {"only", "only", 0},
		{"onyl", "only", 1},      // swap
		{"polcy", "policy", 1},   // deletion
		{"static", "statics", 1}, // insertion
		{"kitten", "sitting", 3}, // k->s, e->i, +g
		{"ca", "abc", 3},         // OSA: no edit of a swapped pair
		{"best_effort", "best-effort", 1},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
		if got := editDistance(tc.b, tc.a); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d (symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
	long := strings.Repeat("x", 65)
	if editDistance(long, "x") < 4 || editDistance(long, long) != 0 {
		t.Error("a long name is near a short one, or not equal to itself")
	}
}
