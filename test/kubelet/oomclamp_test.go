//go:build e2e

package kubelet

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
)

// oomClamp is a test-only NRI plugin for CRI-O on this VM: root lacks
// CAP_SYS_RESOURCE here, so runc cannot lower a process' oom_score_adj and
// every container the kubelet gives a negative score (Guaranteed: -997)
// fails with "failed to update /proc/self/oom_score_adj: Permission
// denied". containerd has restrict_oom_score_adj for this (the shared setup
// turns it on); CRI-O has no such option, so this plugin does the same:
// a negative score becomes 0. It touches nothing else, and runs after
// nri-cpualign (index 95 > 90).
type oomClamp struct{}

func (oomClamp) CreateContainer(_ context.Context, _ *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	adj := &api.ContainerAdjustment{}
	if s := c.GetLinux().GetOomScoreAdj(); s != nil && s.GetValue() < 0 {
		zero := 0
		adj.SetLinuxOomScoreAdj(&zero)
	}
	return adj, nil, nil
}

// startOOMClamp connects the clamp to socket; the returned function stops it.
func startOOMClamp(ctx context.Context, socket string) (func(), error) {
	s, err := stub.New(oomClamp{}, stub.WithSocketPath(socket), stub.WithPluginName("e2e-oomclamp"), stub.WithPluginIdx("95"))
	if err != nil {
		return nil, fmt.Errorf("oom clamp plugin: %w", err)
	}
	if err := s.Start(ctx); err != nil {
		return nil, fmt.Errorf("oom clamp plugin: %w", err)
	}
	return s.Stop, nil
}
