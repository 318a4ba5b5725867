package allocator

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// The hand-worked examples use Go-literal machines; this proves each is
// the same machine as the fixture of that name (read through sysfs), so the
// examples hold on the fixtures too.
func TestLiteralTwinsMatchFixtures(t *testing.T) {
	tests := []struct {
		fixture string
		s       spec
	}{
		{"ht-1s-4c", specHT1S4C},
		{"ht-1s-4c-adjacent", spec{sockets: 1, coresPerSocket: 4, threads: 2, adjacent: true}},
		{"ht-2s-6c", specHT2S6C},
		{"ht-2s-4numa-80", specHT2S4NUMA},
		{"epyc-7702p-smt", specEPYC7702P},
	}
	for _, tc := range tests {
		t.Run(tc.fixture, func(t *testing.T) {
			got := sysfstest.Load(t, tc.fixture).Details()
			want := build(t, tc.s).Details()
			if len(got) != len(want) {
				t.Fatalf("%d CPUs, literal has %d", len(got), len(want))
			}
			for i := range got {
				g, w := key(got[i]), key(want[i])
				if g != w {
					t.Errorf("cpu %d: fixture %+v, literal %+v", got[i].CPU, g, w)
				}
			}
		})
	}
}

func key(c topology.CPUInfo) [5]int { return [5]int{c.CPU, c.Core, c.Socket, c.NUMA, c.L3} }

// BenchmarkTakeByTopology times the placement algorithm alone (bitsets in
// and out, no cpuset.CPUSet conversion, no state copy) for 8 CPUs on an
// idle EPYC 9754.
func BenchmarkTakeByTopology(b *testing.B) {
	topo := sysfstest.Load(b, "epyc-9754")
	m := newMachine(topo)
	for _, mode := range []struct {
		name string
		o    Options
	}{
		{"packed", Options{}},
		{"uncore+full-pcpus-only", Options{PreferAlignByUncoreCache: true, FullPCPUsOnly: true}},
		{"across-numa", Options{DistributeCPUsAcrossNUMA: true}},
	} {
		b.Run(mode.name, func(b *testing.B) {
			avail := m.all()
			b.ReportAllocs()
			for b.Loop() {
				if takeByTopology(m, mode.o, avail, 8) == nil {
					b.Fatal("no result")
				}
			}
		})
	}
}
