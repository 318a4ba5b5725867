package kubelet

import (
	"os"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/test/kubeletparity"
)

func TestMain(m *testing.M) {
	if err := EnableOptions(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// TestParity: the engine under the release's rules makes the kubelet's
// decisions on every machine and option set.
func TestParity(t *testing.T) {
	kubeletparity.Run(t, Release, New)
}

// TestParityFailsOnOtherRules is the negative check (issue 41): the engine
// under the other release's rules against this kubelet with
// distribute-cpus-across-cores on a machine whose thread siblings have
// adjacent ids must disagree (1.37 takes both threads of a core before the
// next core, 1.38 one thread per core first), or the check could not fail.
func TestParityFailsOnOtherRules(t *testing.T) {
	m := kubeletparity.MachineNamed(t, "ht-1s-4c-adjacent")
	o := kubeletparity.OptionSet{allocator.OptDistributeCPUsAcrossCores: "true"}
	mm := kubeletparity.FirstMismatch(t, m, o, Other, New, 5, 20)
	if mm == nil {
		t.Fatalf("the %v rules agreed with %s on distribute-cpus-across-cores: the check cannot tell the rule sets apart", Other, Name)
	}
	t.Logf("as expected: %v", mm)
}
