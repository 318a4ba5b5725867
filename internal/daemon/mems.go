package daemon

import (
	"maps"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// memsAtSync gives every exclusive record the cpuset.mems the engine
// gives containers now (every memory node under memory_manager_policy
// None), where a checkpoint from an earlier release holds the NUMA nodes of
// the container's CPUs: Synchronize's plan then updates the running
// container and the reconcile loop keeps the new value. records is not
// modified; it is returned as is when nothing changes.
func memsAtSync(e *policy.Engine, records map[string]ctrRecord) map[string]ctrRecord {
	want := e.Mems().String()
	var out map[string]ctrRecord
	for id, r := range records {
		if !r.Exclusive || r.Mems == "" || sameList(r.Mems, want) {
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
