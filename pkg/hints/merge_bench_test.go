package hints_test

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// BenchmarkMerge merges three providers on the 8-NUMA xeon-8490h-2p-snc:
// the CPU provider's hints for a container, a NIC on node 5 (every mask
// holding 5: 128 hints) and a third provider: memory with no preference
// (the usual case) or a GPU on node 4 (128 hints, the worst case the
// 8-node limit allows for three device-like providers).
func BenchmarkMerge(b *testing.B) {
	topo := sysfstest.Load(b, "xeon-8490h-2p-snc")
	static, err := allocator.NewStatic(topo, allocator.Options{}, topo.CPUsInCores(0))
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name  string
		cpus  int
		third func(hints.NUMAInfo) map[string][]hints.Hint
	}{
		{"cpu8+nic+memory-nil", 8, func(hints.NUMAInfo) map[string][]hints.Hint { return map[string][]hints.Hint{"memory": nil} }},
		{"cpu40+nic+memory-nil", 40, func(hints.NUMAInfo) map[string][]hints.Hint { return map[string][]hints.Hint{"memory": nil} }},
		{"cpu8+nic+gpu", 8, func(n hints.NUMAInfo) map[string][]hints.Hint {
			return map[string][]hints.Hint{"gpu": hints.DeviceHints(n, []int{4})}
		}},
	} {
		for _, policy := range []string{hints.PolicyBestEffort, hints.PolicySingleNUMANode} {
			b.Run(bc.name+"/"+policy, func(b *testing.B) {
				opts := hints.DefaultOptions()
				numa, err := hints.NewNUMAInfo(topo.NUMANodes(), topo.Distances(), opts)
				if err != nil {
					b.Fatal(err)
				}
				m, err := hints.NewMerger(policy, numa, opts)
				if err != nil {
					b.Fatal(err)
				}
				cpu := map[string][]hints.Hint{"cpu": static.CPUHints(static.NewState(), allocator.Request{Pod: "p", Container: "c", CPUs: bc.cpus})}
				nic := map[string][]hints.Hint{"nic": hints.DeviceHints(numa, []int{5})}
				third := bc.third(numa)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					m.Merge(cpu, nic, third)
				}
			})
		}
	}
}
