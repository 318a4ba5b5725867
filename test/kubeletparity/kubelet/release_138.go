//go:build kubelet138

package kubelet

import (
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/test/kubeletparity"
)

// The release v138.mod pins (go -modfile=v138.mod -tags kubelet138); Other
// is the rule set the negative check runs against it.
const (
	Release = kubever.V138
	Other   = kubever.V137
	Name    = "kubelet v1.38.0-beta.0"
)

// hintOf is a kubelet hint as the check compares it, its Score included
// (kubernetes#141796).
func hintOf(h topologymanager.TopologyHint, m hints.Mask) kubeletparity.Hint {
	return kubeletparity.Hint{Affinity: m, Preferred: h.Preferred, Score: h.Score}
}
