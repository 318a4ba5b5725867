//go:build e2e

package kubelet

import (
	"context"
	"strings"

	. "github.com/onsi/gomega"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Attempt is one incarnation of a pod's container as the runtime lists it.
type Attempt struct {
	ID      string
	Attempt uint32
	State   cri.ContainerState
}

// LatestAttempt asks the runtime (CRI ListContainers, not the kubelet's
// status, which the standalone kubelet regenerates only on its next pod
// sync) for the newest incarnation of container in the pod with podUID.
// ok is false while the runtime has none. The kubelet labels every
// container with its pod's UID and its name, in both runtimes.
func LatestAttempt(g Gomega, ctx context.Context, podUID, container string) (a Attempt, ok bool) {
	c, err := framework.Dial(ctx, strings.TrimPrefix(Env.Endpoint, "unix://"), Env.TestImage)
	g.Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	r, err := c.RT.ListContainers(ctx, &cri.ListContainersRequest{Filter: &cri.ContainerFilter{LabelSelector: map[string]string{
		"io.kubernetes.pod.uid":        podUID,
		"io.kubernetes.container.name": container,
	}}})
	g.Expect(err).NotTo(HaveOccurred())
	for _, ct := range r.Containers {
		n := ct.GetMetadata().GetAttempt()
		if !ok || n > a.Attempt {
			a, ok = Attempt{ID: ct.Id, Attempt: n, State: ct.State}, true
		}
	}
	return a, ok
}
