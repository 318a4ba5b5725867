package adapter

// What Synchronize rebuilds of the ledger's lifecycle facts from the
// runtime's report: pod keys, sandboxes, stopped containers, devices, and
// the mems of records an earlier release left without them.

import (
	"maps"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

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

// devicesOf is ledger.devices after a Synchronize: the located devices
// of the live containers the index keeps.
func devicesOf(in syncInput, records map[string]ledger.Record) map[string][]ledger.DeviceView {
	out := map[string][]ledger.DeviceView{}
	for _, c := range in.Ctrs {
		if _, ok := records[c.ID]; ok && len(c.Devices.Devices) > 0 {
			out[c.ID] = deviceViews(c.Devices.Devices)
		}
	}
	return out
}

// memsAtSync gives every record the cpuset.mems the engine gives it now:
// under memory_manager_policy Static the nodes of the memory manager's
// assignment for a container it pinned; otherwise every memory node for
// an exclusive record that holds narrower ones, where a checkpoint from
// an earlier release holds the NUMA nodes of the container's CPUs (or
// the memory manager's state was dropped). Synchronize's plan then
// updates the running container and the reconcile loop keeps the new
// value. A record with no mems (left to the runtime) and no memory
// assignment stays so. records is not modified; it is returned as is
// when nothing changes.
func memsAtSync(e *policy.Engine, st policy.State, records map[string]ledger.Record) map[string]ledger.Record {
	all := e.Mems().String()
	var out map[string]ledger.Record
	for id, r := range records {
		want := all
		if e.MemoryPinned(st, r.Pod, r.Name) {
			want = e.MemsOf(st, r.Pod, r.Name).String()
		} else if r.Mems == "" || (!r.Exclusive && !e.MemoryStatic()) {
			continue
		}
		if cpumask.SameList(r.Mems, want) {
			continue
		}
		if out == nil {
			out = maps.Clone(records)
		}
		r.Mems = want
		out[id] = r
	}
	if out == nil {
		return records
	}
	return out
}
