package persist

// The import of the kubelet's state files on a first start
// (--import-kubelet-state).

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/kubeletstate"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// importKubeletState adopts the exclusive assignments of the kubelet's
// static policy: entries (pod UID -> container name -> cpuset) become
// engine assignments, matched to running containers by pod UID and name in
// Synchronize. The file is read by kubeletstate.ParseCPU (V2/V3 of kubelet
// 1.36, V4 of 1.37; checksums verified as the kubelet verifies them); every
// entry is checked by the engine, and an entry the
// engine refuses (reserved, offline or overlapping CPUs) is skipped with a
// warning. A policyName other than "static" has nothing to adopt.
func importKubeletState(engine *policy.Engine, st policy.State, path string, log *logrus.Logger) (policy.State, int, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A node that never ran the kubelet's static policy has no file;
		// the flag can then stay in a DaemonSet shared by all nodes.
		log.WithField("file", path).Warn("no kubelet CPU manager state to import")
		return st, 0, nil
	}
	if err != nil {
		return st, 0, fmt.Errorf("import kubelet state: %w", err)
	}
	ks, err := kubeletstate.ParseCPU(raw)
	if err != nil {
		return st, 0, fmt.Errorf("import kubelet state %s: %w", path, err)
	}
	if len(ks.PodLevelPods) > 0 {
		log.WithFields(logrus.Fields{"file": path, "pods": ks.PodLevelPods}).Warn("kubelet state has pod-level CPU sets (podEntries); only their containers' entries are imported")
	}
	if ks.PolicyName != "static" {
		log.WithFields(logrus.Fields{"file": path, "policyName": ks.PolicyName}).Info("kubelet state has no static assignments to import")
		return st, 0, nil
	}
	if ks.DefaultCPUSet != "" {
		if _, err := sysfs.ParseList(ks.DefaultCPUSet); err != nil { // bounded: a huge range must not hang
			return st, 0, fmt.Errorf("import kubelet state %s: defaultCpuSet %q: %w", path, ks.DefaultCPUSet, err)
		}
	}
	pods := slices.Sorted(maps.Keys(ks.Entries))
	n := 0
	for _, pod := range pods {
		names := slices.Sorted(maps.Keys(ks.Entries[pod]))
		for _, name := range names {
			s := ks.Entries[pod][name]
			cpus, err := sysfs.ParseList(s)
			if err != nil || cpus.IsEmpty() {
				log.WithFields(logrus.Fields{"file": path, "pod": pod, "container": name, "cpus": s}).Warn("kubelet state entry is not a CPU list; skipped")
				continue
			}
			next, err := engine.Assign(st, pod, name, cpus)
			if err != nil {
				log.WithError(err).WithFields(logrus.Fields{"file": path, "pod": pod, "container": name, "cpus": s}).Warn("kubelet state entry refused; skipped")
				continue
			}
			st = next
			n++
		}
	}
	return st, n, nil
}

// KubeletMemoryState is the kubelet's memory manager state file, next to
// its cpu_manager_state.
const KubeletMemoryState = "memory_manager_state"

// kubeletMemoryPath is the memory manager state beside the CPU manager
// state file cpuFile: its name with cpu_manager_state replaced (the
// migration's copy kubelet-cpu_manager_state goes with
// kubelet-memory_manager_state), else memory_manager_state.
func kubeletMemoryPath(cpuFile string) string {
	dir, base := filepath.Split(cpuFile)
	if strings.Contains(base, "cpu_manager_state") {
		return filepath.Join(dir, strings.Replace(base, "cpu_manager_state", KubeletMemoryState, 1))
	}
	return filepath.Join(dir, KubeletMemoryState)
}

// importKubeletMemory adopts the kubelet's memory manager state under
// memory_manager_policy Static. A missing file is a warning (a node that
// never ran the kubelet's Static policy); one that does not parse is an
// error, as for the CPU manager's; one that does not match this machine
// and reserved_memory is set aside with a warning: the state starts
// empty, as the kubelet would refuse to start on it.
func importKubeletMemory(engine *policy.Engine, st policy.State, path string, log *logrus.Logger) (policy.State, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		log.WithField("file", path).Warn("no kubelet memory manager state to import")
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("import kubelet memory state: %w", err)
	}
	next, n, err := engine.ImportMemory(st, raw)
	var mismatch *policy.MemoryMismatchError
	if errors.As(err, &mismatch) {
		log.WithError(err).WithField("file", path).Warn("kubelet memory manager state does not match this machine and reserved_memory; not imported")
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("import %s: %w", path, err)
	}
	log.WithFields(logrus.Fields{"file": path, "assignments": n}).Info("imported the kubelet's memory manager state")
	return next, nil
}
