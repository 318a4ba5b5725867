//go:build !kubelet138

package kubelet

import (
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"

	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
	"github.com/nri-cpualign/nri-cpualign/test/kubeletparity"
)

// The release go.mod pins; Other is the rule set the negative check runs
// against it.
const (
	Release = kubever.V137
	Other   = kubever.V138
	Name    = "kubelet v1.37.2"
)

// hintOf is a kubelet hint as the check compares it: 1.37's hints carry
// no Score.
func hintOf(h topologymanager.TopologyHint, m hints.Mask) kubeletparity.Hint {
	return kubeletparity.Hint{Affinity: m, Preferred: h.Preferred}
}
