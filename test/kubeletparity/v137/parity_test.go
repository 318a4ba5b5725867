package v137

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

// TestParity: the engine under the 1.37 rules makes kubelet v1.37.2's
// decisions on every machine and option set.
func TestParity(t *testing.T) {
	kubeletparity.Run(t, kubever.V137, New)
}

// TestParityFailsOnOtherRules is the negative check: the engine under the
// 1.38 rules against kubelet v1.37.2 with distribute-cpus-across-cores on
// a machine whose thread siblings have adjacent ids must disagree (1.38
// takes one thread per core first), or the check could not fail.
func TestParityFailsOnOtherRules(t *testing.T) {
	m := kubeletparity.MachineNamed(t, "ht-1s-4c-adjacent")
	o := kubeletparity.OptionSet{allocator.OptDistributeCPUsAcrossCores: "true"}
	mm := kubeletparity.FirstMismatch(t, m, o, kubever.V138, New, 5, 20)
	if mm == nil {
		t.Fatal("1.38 rules agreed with kubelet v1.37.2 on distribute-cpus-across-cores: the check cannot tell the rule sets apart")
	}
	t.Logf("as expected: %v", mm)
}
