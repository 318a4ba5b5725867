//go:build e2e

package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
)

// podLevelNS holds this container's pod (labelled like testNS, so that
// scripts/lib-cluster.sh deletes it when a run ends early).
const podLevelNS = "cpualign-e2e-podlevel"

// seenCPU is what an NRI plugin is told of a CPU and memory budget: the
// CRI LinuxContainerResources the runtime turned into NRI's
// LinuxResources (shares from the request, quota/period from the limit).
type seenCPU struct {
	Shares, Period uint64
	Quota          int64
	MemLimit       int64
	Present        bool
}

func seenOf(r *api.LinuxResources) seenCPU {
	if r == nil {
		return seenCPU{}
	}
	return seenCPU{
		Shares: r.GetCpu().GetShares().GetValue(), Quota: r.GetCpu().GetQuota().GetValue(),
		Period: r.GetCpu().GetPeriod().GetValue(), MemLimit: r.GetMemory().GetLimit().GetValue(), Present: true,
	}
}

// podResourcesObserver is a test-only NRI plugin that changes nothing and
// records, for each container created in podLevelNS, what the runtime
// passes a plugin: the pod sandbox's PodResources and the container's own
// resources.
type podResourcesObserver struct {
	mu  sync.Mutex
	pod map[string]seenCPU // container name -> PodSandbox.Linux.PodResources
	ctr map[string]seenCPU // container name -> Container.Linux.Resources
}

func (o *podResourcesObserver) CreateContainer(_ context.Context, p *api.PodSandbox, c *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	if p.GetNamespace() == podLevelNS {
		o.mu.Lock()
		o.pod[c.GetName()] = seenOf(p.GetLinux().GetPodResources())
		o.ctr[c.GetName()] = seenOf(c.GetLinux().GetResources())
		o.mu.Unlock()
	}
	return nil, nil, nil
}

func (o *podResourcesObserver) seen(name string) (pod, ctr seenCPU, ok bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	pod, ok = o.pod[name]
	return pod, o.ctr[name], ok
}

// The pod's spec.resources (KEP-2837, PodLevelResources, on by default in
// v1.37) through the API server, the kubelet and the runtime to NRI, with
// the plugin at its defaults (pod_level_resource_managers = false): what
// a plugin is told, and what the plugin does with it. The observer runs
// at index 10, before nri-cpualign (90): a runtime stops at the first
// plugin that fails a container.
var _ = Describe("a pod with pod-level resources (spec.resources) through the API server, the plugin on the host at its defaults", Ordered, Serial, func() {
	var obs *podResourcesObserver

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		if HostCPUs.Size() < 2 {
			Skip(fmt.Sprintf("needs 2 CPUs (one reserved, one exclusive); this machine has %s", HostCPUs))
		}
		waitNodeReady(ctx)
		waitNodeEmpty(ctx)
		startHostPlugin(ctx, filepath.Join(Env.Dir, "host-plugin-podlevel"), map[string]string{},
			func(g Gomega, st observe.StateView) { g.Expect(st.Reserved).NotTo(BeEmpty()) })

		obs = &podResourcesObserver{pod: map[string]seenCPU{}, ctr: map[string]seenCPU{}}
		startStub(ctx, obs, "e2e-pod-resources", "10")

		createNamespace(ctx, podLevelNS)
	}, NodeTimeout(5*time.Minute))

	It("passes spec.resources (2 CPUs, 128Mi) to NRI as the sandbox's PodResources, not the containers' sum; a container without resources gets the pod's 2 CPUs as its own; at its defaults the plugin pins the 1-CPU container and refuses the other (InsufficientCPUs)", func(ctx SpecContext) {
		spec := podSpec(resources("1", "1", "64Mi"))
		spec.Resources = &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("2"), corev1.ResourceMemory: resource.MustParse("128Mi")},
		}
		side := spec.Containers[0]
		side.Name, side.Resources = "side", corev1.ResourceRequirements{}
		spec.Containers = append(spec.Containers, side)
		apply(ctx, &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: "budget", Namespace: podLevelNS},
			Spec:       spec,
		})
		// The kubelet creates app, then side; side is refused (below) and
		// retried, so the pod never turns Ready.
		p := waitCreateError(ctx, podLevelNS, "budget", "side", "InsufficientCPUs: not enough cpus available to satisfy request: requested=2")
		// The API server kept spec.resources (it drops the field with
		// PodLevelResources off) and the pod is Guaranteed by it.
		Expect(p.Spec.Resources).NotTo(BeNil(), "the API server dropped spec.resources: PodLevelResources is off")
		Expect(p.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))

		// What NRI tells a plugin (the observer runs before nri-cpualign,
		// so it sees side's creation too). The kubelet's
		// calculateSandboxResources sends spec.resources (the containers'
		// sum would be 1 CPU and 64Mi); containerd and CRI-O pass the CRI
		// values on as PodSandbox.Linux.PodResources.
		for _, name := range []string{"app", "side"} {
			pod, ctr, ok := obs.seen(name)
			Expect(ok).To(BeTrue(), "the observer saw no CreateContainer of %s", name)
			GinkgoWriter.Printf("%s: %s: PodResources %+v, container resources %+v\n", Env.Runtime, name, pod, ctr)
			Expect(pod.Present).To(BeTrue(), "%s: no PodResources for %s", Env.Runtime, name)
			Expect(pod.Shares).To(Equal(uint64(2048)), "PodResources cpu shares: 2 CPUs")
			Expect(pod.Period).To(Equal(uint64(100000)))
			Expect(pod.Quota).To(Equal(int64(200000)), "PodResources CFS quota: a 2-CPU limit")
			Expect(pod.MemLimit).To(Equal(int64(128<<20)), "PodResources memory limit: 128Mi")
		}
		_, app, _ := obs.seen("app")
		Expect(app.Shares).To(Equal(uint64(1024)))
		Expect(app.Quota).To(Equal(int64(100000)))
		// side asks nothing, yet its own cpu.shares are the pod's 2 CPUs:
		// a plugin cannot tell it from a container asking for 2 CPUs.
		_, sideSeen, _ := obs.seen("side")
		Expect(sideSeen.Shares).To(Equal(uint64(2048)), "side's own cpu shares")

		// The plugin at its defaults: app on one exclusive CPU, side not
		// placed (its 2 CPUs do not fit).
		st := hostState(Default, ctx)
		var pinned cpuset.CPUSet
		for _, c := range st.Containers {
			if c.PodUID != string(p.UID) {
				continue
			}
			Expect(c.Container).To(Equal("app"), "only app is placed: %+v", c)
			Expect(c.Exclusive).To(BeTrue(), "app: %+v", c)
			cpus, err := cpuset.Parse(c.CPUs)
			Expect(err).NotTo(HaveOccurred())
			pinned = cpus
		}
		Expect(pinned.Size()).To(Equal(1), "no exclusive container of the pod in /state: %+v", st.Containers)
		mustKubectl(ctx, "-n", podLevelNS, "delete", "pod", "budget", "--wait=true", "--timeout=60s")
	}, SpecTimeout(3*time.Minute))
})

// podLevelOnNS holds the pods of the spec with the option on.
const podLevelOnNS = "cpualign-e2e-podlevel-on"

// The plugin with pod_level_resource_managers = true and the pod scope,
// on the cluster's node: 2 CPUs, one reserved (reserved_cpu_count = 1:
// the lowest, CPU 0), so a pod-level pod's block can hold one CPU. The
// brief's pod, a Guaranteed 1-CPU container beside a fractional one,
// needs a budget of 2 CPUs (the API server refuses container requests
// above spec.resources): its block does not fit, and its first container
// is refused for the pod's budget, not its own CPU. A pod of one CPU
// with two fractional containers shows the pod-private pool: both run on
// the block, the node's shared pool loses it until the pod goes.
var _ = Describe("pod-level resource managers on (pod_level_resource_managers = true, pod scope), the plugin on the host", Ordered, Serial, func() {
	var reserved, free cpuset.CPUSet

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		if HostCPUs.Size() != 2 {
			Skip(fmt.Sprintf("worked out for 2 CPUs (one reserved, one for the block); this machine has %s", HostCPUs))
		}
		waitNodeReady(ctx)
		waitNodeEmpty(ctx)
		startHostPlugin(ctx, filepath.Join(Env.Dir, "host-plugin-podlevel-on"),
			map[string]string{"pod_level_resource_managers": "true", "topology_manager_scope": `"pod"`},
			func(g Gomega, st observe.StateView) { g.Expect(st.Reserved).NotTo(BeEmpty()) })
		st := hostState(Default, ctx)
		var err error
		reserved, err = cpuset.Parse(st.Reserved)
		Expect(err).NotTo(HaveOccurred())
		Expect(reserved.Size()).To(Equal(1), "reserved_cpu_count = 1")
		free = HostCPUs.Difference(reserved)

		createNamespace(ctx, podLevelOnNS)
	}, NodeTimeout(5*time.Minute))

	// pod is a pod with spec.resources of cpu CPUs and 128Mi whose
	// containers ask what ctrs give (name -> request/limit).
	pod := func(name, cpu string, ctrs [][3]string) *corev1.Pod {
		spec := podSpec(corev1.ResourceRequirements{})
		spec.Resources = &corev1.ResourceRequirements{
			Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Mi")},
			Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse("128Mi")},
		}
		tmpl := spec.Containers[0]
		spec.Containers = nil
		for _, c := range ctrs {
			ctr := tmpl
			ctr.Name, ctr.Resources = c[0], resources(c[1], c[2], "32Mi")
			spec.Containers = append(spec.Containers, ctr)
		}
		return &corev1.Pod{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: podLevelOnNS},
			Spec:       spec,
		}
	}

	It("refuses a pod whose budget (2 CPUs: a Guaranteed 1-CPU container and a 500m one) does not fit the one free CPU, for the budget: InsufficientCPUs requested=2", func(ctx SpecContext) {
		apply(ctx, pod("mixed", "2", [][3]string{{"app", "1", "1"}, {"side", "500m", "500m"}}))
		waitCreateError(ctx, podLevelOnNS, "mixed", "app", fmt.Sprintf("InsufficientCPUs: not enough cpus available to satisfy request: requested=2, available=%d", free.Size()))
		st := hostState(Default, ctx)
		Expect(st.Shared).To(Equal(HostCPUs.String()), "a refused pod takes no block")
		mustKubectl(ctx, "-n", podLevelOnNS, "delete", "pod", "mixed", "--wait=true", "--timeout=60s")
	}, SpecTimeout(3*time.Minute))

	It("runs a 1-CPU pod's fractional containers on its block (the free CPU), which the node's shared pool loses until the pod goes", func(ctx SpecContext) {
		apply(ctx, pod("pool", "1", [][3]string{{"app", "500m", "500m"}, {"side", "250m", "500m"}}))
		var p corev1.Pod
		Eventually(func(g Gomega) {
			g.Expect(getJSON(ctx, &p, "-n", podLevelOnNS, "get", "pod", "pool")).To(Succeed())
			g.Expect(p.Status.Phase).To(Equal(corev1.PodRunning), podSummary(p))
			for _, name := range []string{"app", "side"} {
				id := containerID(p, name)
				g.Expect(id).NotTo(BeEmpty(), podSummary(p))
				checkHost(g, p, id, free)
			}
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
		Expect(p.Status.QOSClass).To(Equal(corev1.PodQOSGuaranteed))
		st := hostState(Default, ctx)
		Expect(st.Shared).To(Equal(reserved.String()), "the node's shared pool without the block")
		n := 0
		for _, c := range st.Containers {
			if c.PodUID == string(p.UID) {
				Expect(c.Exclusive).To(BeFalse(), "%+v", c)
				Expect(c.CPUs).To(Equal(free.String()), "%+v", c)
				n++
			}
		}
		Expect(n).To(Equal(2), "/state: %+v", st.Containers)

		mustKubectl(ctx, "-n", podLevelOnNS, "delete", "pod", "pool", "--wait=true", "--timeout=60s")
		Eventually(func(g Gomega) {
			g.Expect(hostState(g, ctx).Shared).To(Equal(HostCPUs.String()), "the block back in the node's pool")
		}).WithContext(ctx).WithTimeout(60 * time.Second).Should(Succeed())
	}, SpecTimeout(3*time.Minute))
})

// waitCreateError waits until the kubelet reports container name of pod
// waiting in CreateContainerError with msg in its message (the plugin's
// refusal as the runtime passes it on), and returns the pod.
func waitCreateError(ctx SpecContext, ns, pod, name, msg string) corev1.Pod {
	var p corev1.Pod
	Eventually(func(g Gomega) {
		g.Expect(getJSON(ctx, &p, "-n", ns, "get", "pod", pod)).To(Succeed())
		var waiting *corev1.ContainerStateWaiting
		for _, cs := range p.Status.ContainerStatuses {
			if cs.Name == name {
				waiting = cs.State.Waiting
			}
		}
		g.Expect(waiting).NotTo(BeNil(), podSummary(p))
		g.Expect(waiting.Reason).To(Equal("CreateContainerError"), podSummary(p))
		g.Expect(waiting.Message).To(ContainSubstring(msg))
	}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
	return p
}
