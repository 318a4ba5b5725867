package v138

import (
	"os"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/test/kubeletparity"
)

func TestMain(m *testing.M) {
	if err := EnableOptions(); err != nil {
		panic(err)
	}
	os.Exit(m.Run())
}

// TestParity: the engine under the 1.38 rules (the default) makes kubelet
// v1.38.0-beta.0's decisions on every machine and option set.
func TestParity(t *testing.T) {
	kubeletparity.Run(t, kubever.V138, New)
}

// TestParityFailsOnOtherRules is the negative check of issue 41: the
// engine under the 1.37 rules against kubelet v1.38.0-beta.0 with
// distribute-cpus-across-cores must disagree (on ht-1s-4c-adjacent, 1.37
// takes both threads of a core before the next core, 1.38 one thread per
// core first), or the check could not fail.
func TestParityFailsOnOtherRules(t *testing.T) {
	m := kubeletparity.MachineNamed(t, "ht-1s-4c-adjacent")
	o := kubeletparity.OptionSet{allocator.OptDistributeCPUsAcrossCores: "true"}
	mm := kubeletparity.FirstMismatch(t, m, o, kubever.V137, New, 5, 20)
	if mm == nil {
		t.Fatal("1.37 rules agreed with kubelet v1.38.0-beta.0 on distribute-cpus-across-cores: the check cannot tell the rule sets apart")
	}
	t.Logf("as expected: %v", mm)
}
