package policy_test

import (
	"fmt"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
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
