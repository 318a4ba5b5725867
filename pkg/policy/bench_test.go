package policy_test

import (
	"fmt"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// BenchmarkAdd is one admission decision (CPU hints, merge with a NIC's
// hints, admission, allocation, mems) on the 8-NUMA xeon-8490h-2p-snc under
// each merging policy, on an empty machine.
func BenchmarkAdd(b *testing.B) {
	for _, topoPolicy := range []string{"best-effort", "restricted", "single-numa-node"} {
		for _, cpus := range []int64{4, 40} {
			b.Run(fmt.Sprintf("%s/%dcpus", topoPolicy, cpus), func(b *testing.B) {
				e := newEngine(b, "xeon-8490h-2p-snc", static(topoPolicy, "0,120"))
				st := e.NewState()
				req := guaranteed("p", "c", cpus)
				req.Hints = map[string][]hints.Hint{"nic": e.DeviceHints([]int{5})}
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					_, _, _ = e.Add(st, req)
				}
			})
		}
	}
}

// BenchmarkAddMemory is the same decision with the memory manager's share
// (memory hints in the merge, the allocation, mems from it) under
// memory_manager_policy Static, against None, on the 4-NUMA ht-2s-4numa-80
// (16 GiB and 512 MiB of 2 MiB pages per node, 1 GiB reserved per node):
// 4 CPUs, 4 GiB and 256 MiB of 2 MiB pages under single-numa-node.
func BenchmarkAddMemory(b *testing.B) {
	mem := map[memorymanager.Resource]uint64{"memory": 4 * gi, "hugepages-2Mi": 256 * mi}
	for _, name := range []string{policy.MemoryPolicyNone, policy.MemoryPolicyStatic} {
		b.Run(name, func(b *testing.B) {
			var e *policy.Engine
			if name == policy.MemoryPolicyStatic {
				var res []memorymanager.Reservation
				for n := 0; n < 4; n++ {
					res = append(res, reserve(n, map[memorymanager.Resource]uint64{"memory": gi}))
				}
				e = memStatic(b, "ht-2s-4numa-80", hints.PolicySingleNUMANode, "0,40", res...)
			} else {
				e = newEngine(b, "ht-2s-4numa-80", static(hints.PolicySingleNUMANode, "0,40"))
			}
			st := e.NewState()
			req := withMemory(guaranteed("p", "c", 4), mem)
			if _, _, err := e.Add(st, req); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				_, _, _ = e.Add(st, req)
			}
		})
	}
}
