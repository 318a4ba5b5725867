package adapter

import (
	"maps"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

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
