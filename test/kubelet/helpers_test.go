//go:build e2e

package kubelet

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"
)

// podTimeout bounds how long the kubelet may take to bring a pod to a
// state (static pod pickup, sandbox, image, containers: about 2 s here;
// a refusal's retry comes after the kubelet's 10 s back-off).
const podTimeout = 90 * time.Second

// WaitRunning waits until every named container of pod name runs and
// returns the kubelet's view of the pod then.
func WaitRunning(ctx context.Context, k *Kubelet, name string, containers ...string) corev1.Pod {
	GinkgoHelper()
	var pod corev1.Pod
	Eventually(func(g Gomega) {
		pod = k.Pod(g, ctx, name)
		for _, c := range containers {
			st, ok := ContainerStatus(pod, c)
			g.Expect(ok).To(BeTrue(), "no status for container %s yet", c)
			g.Expect(st.State.Running).NotTo(BeNil(), "container %s: %+v", c, st.State)
		}
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", k.LogTail())
	return pod
}

// WaitWaiting waits until container of pod name is waiting with reason
// (e.g. CreateContainerError) and returns the kubelet's message.
func WaitWaiting(ctx context.Context, k *Kubelet, name, container, reason string) string {
	GinkgoHelper()
	var msg string
	Eventually(func(g Gomega) {
		pod := k.Pod(g, ctx, name)
		st, ok := ContainerStatus(pod, container)
		g.Expect(ok).To(BeTrue(), "no status for container %s yet", container)
		g.Expect(st.State.Waiting).NotTo(BeNil(), "container %s: %+v", container, st.State)
		g.Expect(st.State.Waiting.Reason).To(Equal(reason), "container %s: %+v", container, st.State.Waiting)
		msg = st.State.Waiting.Message
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", k.LogTail())
	return msg
}

// CPUsOf is the CPUs of a running container of pod name, both views checked
// (ContainerCPUs), polled until the kubelet reports it running.
func CPUsOf(ctx context.Context, k *Kubelet, name, container string) cpuset.CPUSet {
	GinkgoHelper()
	var cpus cpuset.CPUSet
	Eventually(func(g Gomega) {
		cpus = ContainerCPUs(g, k.Pod(g, ctx, name), container)
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())
	return cpus
}

// ExpectCPUs waits until container of pod name runs on want (both views).
// A shared-pool container follows the pool through NRI updates, which may
// reach it a moment after the event that changed the pool.
func ExpectCPUs(ctx context.Context, k *Kubelet, name, container string, want cpuset.CPUSet) {
	GinkgoHelper()
	Eventually(func(g Gomega) {
		got := ContainerCPUs(g, k.Pod(g, ctx, name), container)
		g.Expect(got.Equals(want)).To(BeTrue(), "pod %s container %s runs on %s, want %s", name, container, got, want)
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())
}

// ContainerIDs maps container name to the runtime's container ID and
// restart count for every container of pod (app, init and sidecar).
type ctrIdentity struct {
	ID       string
	Restarts int32
}

func ContainerIDs(pod corev1.Pod) map[string]ctrIdentity {
	out := map[string]ctrIdentity{}
	for _, list := range [][]corev1.ContainerStatus{pod.Status.ContainerStatuses, pod.Status.InitContainerStatuses} {
		for _, st := range list {
			out[st.Name] = ctrIdentity{ID: st.ContainerID, Restarts: st.RestartCount}
		}
	}
	return out
}
