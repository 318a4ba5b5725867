//go:build e2e

package cluster

import (
	"context"
	"os/exec"

	"github.com/containerd/nri/pkg/api"
	. "github.com/onsi/ginkgo/v2"
)

// canLowerOOMScore reports whether root here may lower a process'
// oom_score_adj (tried in a child shell); this VM withholds
// CAP_SYS_RESOURCE even from root.
func canLowerOOMScore() bool {
	return exec.Command("sh", "-c", "echo -1 > /proc/self/oom_score_adj").Run() == nil
}

// zeroNegativeOOM is a test-only NRI plugin for CRI-O where root cannot
// lower oom_score_adj: runc then fails every container the kubelet gives a
// negative score (Guaranteed pods: -997, the DaemonSet's included) with
// "failed to update /proc/self/oom_score_adj: Permission denied".
// containerd clamps such scores itself (restrict_oom_score_adj, which the
// shared setup turns on); CRI-O has no such option, so this plugin makes a
// negative score 0 and changes nothing else. Index 95 runs it after
// nri-cpualign (90).
type zeroNegativeOOM struct{}

func (zeroNegativeOOM) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	if s := c.GetLinux().GetOomScoreAdj(); s != nil && s.GetValue() < 0 {
		zero := 0
		adj.SetLinuxOomScoreAdj(&zero)
	}
	return adj, nil, nil
}

// startZeroNegativeOOM connects the plugin to the runtime's NRI socket for
// the rest of the calling node; it returns once the runtime calls it.
func startZeroNegativeOOM(ctx context.Context) {
	GinkgoHelper()
	startStub(ctx, zeroNegativeOOM{}, "e2e-zero-negative-oom", "95")
}
