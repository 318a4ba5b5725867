package bench_test

import (
	"reflect"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/bench"
)

func TestFill(t *testing.T) {
	tests := []struct {
		name     string
		machine  string
		opts     map[string]string
		occ      int
		keepFree int
		want     int // exclusive CPUs taken
	}{
		// 24 CPUs - 2 reserved = 22 assignable; 50% is 11; containers are
		// whole SMT2 cores, so the fill stops at the largest even count, 10.
		{"half of ht-2s-6c", "ht-2s-6c", nil, 50, 4, 10},
		// 8 - 2 reserved = 6 assignable; 90% is 5, but 2 must stay free for
		// the request: 4.
		{"keep room on ht-1s-4c", "ht-1s-4c", nil, 90, 2, 4},
		{"empty", "epyc-7303-2p", nil, 0, 8, 0},
		// 64 - 2 = 62; 90% is 55 (integer), whole cores: 54.
		{"full-pcpus-only 90% of epyc-7303-2p", "epyc-7303-2p", map[string]string{"full-pcpus-only": "true"}, 90, 8, 54},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := policy.New(sysfstest.Load(t, tt.machine), bench.EngineConfig(tt.opts))
			if err != nil {
				t.Fatal(err)
			}
			st, used, err := bench.Fill(e, tt.occ, tt.keepFree, 7)
			if err != nil {
				t.Fatal(err)
			}
			if used != tt.want {
				t.Errorf("used = %d, want %d", used, tt.want)
			}
			taken := 0
			for _, byName := range st.Alloc.Assignments {
				for _, cpus := range byName {
					taken += cpus.Size()
				}
			}
			if taken != used {
				t.Errorf("state holds %d exclusive CPUs, Fill reports %d", taken, used)
			}
			again, _, _ := bench.Fill(e, tt.occ, tt.keepFree, 7)
			if !reflect.DeepEqual(e.Snapshot(st), e.Snapshot(again)) {
				t.Error("the same seed gave a different state")
			}
		})
	}
}

func TestSweepShapes(t *testing.T) {
	// The sweep's promise: 16..1024 CPUs, 2-8 NUMA nodes, 8 cores (16
	// CPUs) per L3.
	want := []struct{ cpus, numa, l3 int }{{16, 2, 1}, {64, 2, 4}, {256, 4, 16}, {512, 8, 32}, {1024, 8, 64}}
	got := bench.Sweep()
	if len(got) != len(want) {
		t.Fatalf("%d machines, want %d", len(got), len(want))
	}
	for i, m := range got {
		topo := sysfstest.LoadSpec(t, m.Spec)
		if topo.NumCPUs() != want[i].cpus || topo.NumNUMANodes() != want[i].numa || topo.NumL3() != want[i].l3 {
			t.Errorf("%s: %d CPUs, %d NUMA, %d L3; want %+v", m.Name, topo.NumCPUs(), topo.NumNUMANodes(), topo.NumL3(), want[i])
		}
	}
}
