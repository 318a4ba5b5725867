package adapter

import (
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// CPUs held for stopped containers. The kubelet keys exclusive CPUs by pod
// and container name and drops them only when the pair no longer belongs
// to an active pod (removeStaleState): a container that exits, crashes or
// never starts keeps its CPUs while its pod lives, out of the shared pool
// and out of other pods' reach, and its restart gets exactly them. The
// engine's assignments are that table here: a container that stops
// leaves the index, its assignment stays, and the engine's Add returns it
// to the next container of the same pod and name. An assignment whose pod
// and name no container in the index holds is "held".
//
// The kubelet lets a pod's later containers reuse the CPUs of its init
// containers. NRI does not say which containers are init containers; the
// order of events does: an init container has stopped before the pod's
// next container is created. So a new exclusive container may take the
// CPUs held for its pod's stopped containers, as the kubelet's
// allocatable set counts the pod's reusable CPUs; what it does not take
// stays held for the pod.

// withReuse is st with the allocator's reuse set made the CPUs held for
// req's pod by its stopped containers, less those its tracked containers
// run on (tracked tells, by name, which of the pod's containers run: the
// index's at CreateContainer, the runtime's live ones at Synchronize),
// when req asks for exclusive CPUs it does not hold yet. The allocator
// keeps one pod's reuse set (the kubelet's most recently allocated pod);
// here it is derived again at every admission, so another pod's admission
// in between loses nothing.
func withReuse(st policy.State, req policy.Request, static bool, tracked func(name string) bool) policy.State {
	assigned := st.Alloc.Assignments[req.Pod]
	if len(assigned) == 0 || policy.ExclusiveCPUs(static, req) == 0 {
		return st
	}
	if _, ok := assigned[req.Container]; ok {
		return st
	}
	if _, ok := assigned[policy.PodPoolEntry]; ok {
		// Inside a pod-level pod's block a slice may reuse an init
		// container's slice only (podlevel.go); a stopped container here
		// may as well be an app container in back-off, whose restart gets
		// its slice back while the new one runs on it. Nothing is reused.
		return st
	}
	held, running := cpuset.New(), cpuset.New()
	for name, cpus := range assigned {
		if tracked(name) {
			running = running.Union(cpus)
		} else {
			held = held.Union(cpus)
		}
	}
	reuse := held.Difference(running)
	if reuse.IsEmpty() && st.Alloc.ReusablePod != req.Pod {
		return st
	}
	st.Alloc.ReusablePod, st.Alloc.Reusable = req.Pod, reuse
	return st
}

// podKeys is the pod key of each sandbox Synchronize reports, by ID.
func podKeys(in syncInput) map[string]string {
	keys := make(map[string]string, len(in.Pods))
	for _, pod := range in.Pods {
		keys[pod.ID] = pod.Key
	}
	return keys
}

// sandboxesOf is ledger.sandboxes as the runtime reports it: each pod's
// sandbox of its newest container.
func sandboxesOf(in syncInput) map[string]string {
	keys := podKeys(in)
	out := map[string]string{}
	newest := map[string]int64{}
	for _, c := range in.Ctrs {
		key, ok := keys[c.SandboxID]
		if !ok {
			continue
		}
		if at, seen := newest[key]; !seen || c.CreatedAt >= at {
			out[key], newest[key] = c.SandboxID, c.CreatedAt
		}
	}
	return out
}

// stoppedOf is the stopped containers of live pods that Synchronize
// reports, by ID: those whose RemoveContainer may end their pod.
func stoppedOf(in syncInput) map[string]ledger.PodContainer {
	keys := podKeys(in)
	out := map[string]ledger.PodContainer{}
	for _, c := range in.Ctrs {
		if key, ok := keys[c.SandboxID]; ok && c.Phase == phaseStopped {
			out[c.ID] = ledger.PodContainer{Pod: key, Name: c.Name}
		}
	}
	return out
}
