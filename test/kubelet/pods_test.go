//go:build e2e

package kubelet

import (
	"fmt"
	"strings"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var podSeq atomic.Int64

// PodName is a manifest name unique in this run (the kubelet derives the
// pod's UID from the manifest, so a reused name could meet an old pod).
func PodName(prefix string) string { return fmt.Sprintf("%s-%d", prefix, podSeq.Add(1)) }

// Guaranteed is cpu (requests = limits) with 32Mi of memory.
func Guaranteed(cpu string) corev1.ResourceRequirements {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("32Mi")}
	return corev1.ResourceRequirements{Requests: l, Limits: l}
}

// Burstable requests req CPU with a limit of lim.
func Burstable(req, lim string) corev1.ResourceRequirements {
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(req)},
		Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(lim)},
	}
}

// BestEffort asks for nothing.
func BestEffort() corev1.ResourceRequirements { return corev1.ResourceRequirements{} }

// Container is a busybox container with r; without a command it runs the
// image's default (sleeps, exits 0 on SIGTERM).
func Container(name string, r corev1.ResourceRequirements, command ...string) corev1.Container {
	return corev1.Container{
		Name:            name,
		Image:           Env.TestImage,
		ImagePullPolicy: corev1.PullNever,
		Command:         command,
		Resources:       r,
	}
}

// NewPod is a host-network static pod with the given app containers.
func NewPod(name string, ctrs ...corev1.Container) *corev1.Pod {
	grace := int64(2)
	off := false
	return &corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: corev1.PodSpec{
			// No CNI here: host network, as the shared setup's README says.
			HostNetwork:                   true,
			EnableServiceLinks:            &off,
			TerminationGracePeriodSeconds: &grace,
			Containers:                    ctrs,
		},
	}
}

// OnePod is a pod with one app container named "app".
func OnePod(prefix string, r corev1.ResourceRequirements) *corev1.Pod {
	return NewPod(PodName(prefix), Container("app", r))
}

// ShellScript is a command line for sh -c.
func ShellScript(lines ...string) []string {
	return []string{"sh", "-c", strings.Join(lines, "; ")}
}
