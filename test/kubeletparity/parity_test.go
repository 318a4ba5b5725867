package kubeletparity

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// The avoidances hit exactly the machines doc.go's deviations concern, by
// the fixtures' documented layouts (pkg/sysfs/sysfstest/fixtures.go).
func TestAvoidancesPickTheDocumentedMachines(t *testing.T) {
	nonUniform := map[string]bool{"i7-12850hx": true, "offline-cpu": true}
	spans := map[string]bool{"ht-2s-4numa-80": true, "xeon-8490h-2p-snc": true, "gen-16": true}
	for _, m := range Machines(t) {
		if got := !uniform(m.Topo); got != nonUniform[m.Name] {
			t.Errorf("%s: non-uniform %v, want %v", m.Name, got, nonUniform[m.Name])
		}
		if got := uncoreSpansNUMA(m.Topo); got != spans[m.Name] {
			t.Errorf("%s: uncore spans NUMA nodes %v, want %v", m.Name, got, spans[m.Name])
		}
		for _, o := range OptionSets() {
			if Excluded(m, o, kubever.V138) != nil && o[allocator.OptAlignBySocket] == "" {
				t.Errorf("%s/%s: excluded under the 1.38 rules", m.Name, o)
			}
		}
	}
	// ht-2s-4numa-80: one 40-CPU cache per socket over 2 nodes. A third of
	// the machine (26) is below it; capped turns the oversized requests
	// off under the 1.37 rules only.
	m := MachineNamed(t, "ht-2s-4numa-80")
	o := OptionSet{allocator.OptPreferAlignByUncoreCache: "true"}
	if n, capped := requestCap(m, o, kubever.V137); n != 26 || !capped {
		t.Errorf("1.37 cap %d (capped %v), want 26, capped", n, capped)
	}
	// gen-16: one 16-CPU cache over 2 nodes; a third is 5.
	if n, capped := requestCap(MachineNamed(t, "gen-16"), o, kubever.V137); n != 5 || !capped {
		t.Errorf("gen-16 1.37 cap %d (capped %v), want 5, capped", n, capped)
	}
	if n, capped := requestCap(m, o, kubever.V138); n != 26 || capped {
		t.Errorf("1.38 cap %d (capped %v), want 26 (a third), uncapped", n, capped)
	}
}
