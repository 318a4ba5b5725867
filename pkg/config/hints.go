package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// Hints for mistakes people make moving a kubelet configuration over: the
// kubelet's own names for a setting, and typos of keys, option names and
// enumerated values. They only extend an *Error's message.

// keys are the file's keys, in the order an error lists them.
func keys() []string {
	return []string{
		KeyCPUManagerPolicy, KeyCPUManagerPolicyOptions, KeyReservedSystemCPUs, KeyReservedCPUCount,
		KeyTopologyManagerPolicy, KeyTopologyManagerScope, KeyTopologyManagerPolicyOptions,
		KeyMemoryManagerPolicy, KeyDisableCPUQuota, KeyStateDir, KeySysfsRoot, KeyProcfsRoot, KeyCgroupRoot, KeySocketPath, KeyMetricsAddress, KeyReconcilePeriod,
		KeySharedPoolUpdates, KeyLogLevel, KeyLogFormat, KeyReservedMemory, KeyNodeResourceTopology, KeyKubeconfig, KeyNodeName,
		KeyPodResources, KeyPodResourcesSocket, KeyPodResourcesTimeout,
	}
}

// cpuOptions and topologyOptions are the option names each table takes
// (the engine's; it checks their values).
func cpuOptions() []string {
	return []string{
		allocator.OptAlignBySocket, allocator.OptDistributeCPUsAcrossCores, allocator.OptDistributeCPUsAcrossNUMA,
		allocator.OptFullPCPUsOnly, allocator.OptPreferAlignByUncoreCache, allocator.OptStrictAlignByUncoreCache,
		allocator.OptStrictCPUReservation,
	}
}

func topologyOptions() []string {
	return []string{hints.OptMaxAllowableNUMANodes, hints.OptPreferClosestNUMANodes}
}

// squash folds the spellings of one name together: the kubelet's
// configuration file writes cpuManagerPolicy, its flags cpu-manager-policy,
// this file cpu_manager_policy.
func squash(s string) string {
	return strings.NewReplacer("_", "", "-", "").Replace(strings.ToLower(s))
}

// kubeletHint is the message for an unknown key that is the kubelet's name
// (a KubeletConfiguration field or a kubelet flag) for something this file
// configures, and false for any other key.
func kubeletHint(key string) (string, bool) {
	same := func(k, field, flag string) string {
		return fmt.Sprintf("unknown key; did you mean %q? (the kubelet's %s, flag --%s)", k, field, flag)
	}
	switch squash(key) {
	case "cpumanagerpolicy":
		return same(KeyCPUManagerPolicy, "cpuManagerPolicy", "cpu-manager-policy"), true
	case "cpumanagerpolicyoptions":
		return same(KeyCPUManagerPolicyOptions, "cpuManagerPolicyOptions", "cpu-manager-policy-options"), true
	case "cpumanagerreconcileperiod":
		return same(KeyReconcilePeriod, "cpuManagerReconcilePeriod", "cpu-manager-reconcile-period"), true
	case "reservedsystemcpus", "reservedcpus":
		return same(KeyReservedSystemCPUs, "reservedSystemCPUs", "reserved-cpus"), true
	case "topologymanagerpolicy":
		return same(KeyTopologyManagerPolicy, "topologyManagerPolicy", "topology-manager-policy"), true
	case "topologymanagerscope":
		return same(KeyTopologyManagerScope, "topologyManagerScope", "topology-manager-scope"), true
	case "topologymanagerpolicyoptions":
		return same(KeyTopologyManagerPolicyOptions, "topologyManagerPolicyOptions", "topology-manager-policy-options"), true
	case "memorymanagerpolicy":
		return same(KeyMemoryManagerPolicy, "memoryManagerPolicy", "memory-manager-policy"), true
	case "disablecpuquotawithexclusivecpus":
		return fmt.Sprintf("unknown key; did you mean %q? (the kubelet's feature gate DisableCPUQuotaWithExclusiveCPUs)", KeyDisableCPUQuota), true
	case "kubereserved", "systemreserved":
		return fmt.Sprintf("unknown key; the kubelet reserves the cpu of kubeReserved plus systemReserved, rounded up to whole CPUs: "+
			"write that number as %q, or the CPUs themselves as %q", KeyReservedCPUCount, KeyReservedSystemCPUs), true
	case "logging":
		return fmt.Sprintf("unknown key; did you mean %q and %q? (the kubelet's logging.format and logging.verbosity)", KeyLogFormat, KeyLogLevel), true
	case "featuregates":
		return fmt.Sprintf("unknown key; nri-cpualign has no feature gates: every policy option it knows is available without one, "+
			"and the gate DisableCPUQuotaWithExclusiveCPUs is the key %q", KeyDisableCPUQuota), true
	}
	return "", false
}

// unknownKeyMsg is the message of an unknown key: the kubelet's name for
// a key, a near miss, or where the keys are listed.
func unknownKeyMsg(key string) string {
	// An unknown table or dotted key is judged by its first part.
	first, _, _ := strings.Cut(key, ".")
	if msg, ok := kubeletHint(first); ok {
		return msg
	}
	if near := nearest(first, keys(), normKey); near != "" {
		return fmt.Sprintf("unknown key; did you mean %q?", near)
	}
	return "unknown key; the keys are " + strings.Join(keys(), ", ")
}

// optionProblems checks the option names of one policy-options table.
func optionProblems(table string, opts map[string]string, bad func(key, value, format string, args ...any)) {
	valid, other, otherTable, what := cpuOptions(), topologyOptions(), KeyTopologyManagerPolicyOptions, "CPU manager"
	if table == KeyTopologyManagerPolicyOptions {
		valid, other, otherTable, what = topologyOptions(), cpuOptions(), KeyCPUManagerPolicyOptions, "topology manager"
	}
	for _, name := range slices.Sorted(maps.Keys(opts)) {
		if strings.TrimSpace(name) == "" || contains(valid, name) {
			continue
		}
		key := table + "." + name
		switch {
		case contains(other, name):
			bad(key, "", "%s is not a %s policy option; it belongs in [%s]", name, what, otherTable)
		case nearest(name, valid, normOption) != "":
			bad(key, "", "unknown %s policy option; did you mean %q?", what, nearest(name, valid, normOption))
		default:
			bad(key, "", "unknown %s policy option; the options are %s", what, strings.Join(valid, ", "))
		}
	}
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

// normKey and normOption put a name in the spelling of the keys
// (snake_case) or of the options (kebab-case) before it is compared.
func normKey(s string) string    { return strings.ReplaceAll(strings.ToLower(s), "-", "_") }
func normOption(s string) string { return strings.ReplaceAll(strings.ToLower(s), "_", "-") }

// nearest returns the candidate closest to name by edit distance, or ""
// when none is close enough to be the name meant: one edit for names up
// to 5 characters, two up to 11, three beyond. Ties go to the earlier
// candidate.
func nearest(name string, candidates []string, norm func(string) string) string {
	n := norm(name)
	limit := 1
	switch {
	case len(n) > 11:
		limit = 3
	case len(n) > 5:
		limit = 2
	}
	best, bestDist := "", limit+1
	for _, c := range candidates {
		if d := editDistance(n, norm(c)); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best
}

// editDistance is the optimal string alignment distance between a and b:
// insertions, deletions, substitutions and swaps of two neighbouring
// bytes ("onyl" for "only") each count one.
func editDistance(a, b string) int {
	// Names are short; a long value (fuzzing, a pasted blob) is no typo
	// of one and need not cost len(a)×len(b).
	if len(a) > 64 || len(b) > 64 {
		if a == b {
			return 0
		}
		return 1 << 20
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
