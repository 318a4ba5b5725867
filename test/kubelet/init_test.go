//go:build e2e

package kubelet

import (
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/cpuset"
)

// What the kubelet tells the runtime (and so NRI) about a container is its
// name, its pod's labels and annotations, its cgroup values and the pod's
// summed resources: nothing says "init container" or "sidecar" (README,
// "Init containers and sidecars"). The plugin places each as an app
// container and keeps an exited container's CPUs for its pod, which its
// later containers may reuse, as the kubelet's app containers reuse their
// init containers' CPUs; these specs check that the placement is right
// either way.
var _ = Describe("init containers and sidecars under a real kubelet", Ordered, Serial, func() {
	var (
		plugin  *Plugin
		kubelet *Kubelet
	)

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		plugin = NewPlugin("init", `topology_manager_policy = "best-effort"`)
		plugin.Start(ctx)
		kubelet = NewKubelet("init", KubeletConfig{})
		kubelet.Start(ctx)
	}, NodeTimeout(3*time.Minute))

	// initPod is a Guaranteed pod whose init container records its CPUs in
	// a host directory and exits, then the given containers.
	initPod := func(name, out string, sidecars []corev1.Container, apps ...corev1.Container) *corev1.Pod {
		p := NewPod(name, apps...)
		init := Container("init", Guaranteed("1"), ShellScript("grep Cpus_allowed_list /proc/self/status > /out/init-cpus")...)
		init.VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
		p.Spec.InitContainers = append([]corev1.Container{init}, sidecars...)
		dirType := corev1.HostPathDirectory
		p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: out, Type: &dirType}}}}
		return p
	}
	outDir := func(name string) string {
		GinkgoHelper()
		d := filepath.Join(WorkDir, "init-out", name)
		Expect(os.MkdirAll(d, 0o755)).To(Succeed())
		return d
	}
	// initCPUs is what the finished init container saw.
	initCPUs := func(out string) cpuset.CPUSet {
		GinkgoHelper()
		b, err := os.ReadFile(filepath.Join(out, "init-cpus"))
		Expect(err).NotTo(HaveOccurred())
		v, ok := strings.CutPrefix(strings.TrimSpace(string(b)), "Cpus_allowed_list:")
		Expect(ok).To(BeTrue(), "init-cpus: %q", b)
		s, err := cpuset.Parse(strings.TrimSpace(v))
		Expect(err).NotTo(HaveOccurred())
		return s
	}
	expectInitFinished := func(ctx SpecContext, name string) {
		GinkgoHelper()
		st, ok := ContainerStatus(kubelet.Pod(Default, ctx, name), "init")
		Expect(ok).To(BeTrue())
		Expect(st.State.Terminated).NotTo(BeNil(), "init: %+v", st.State)
		Expect(st.State.Terminated.ExitCode).To(BeZero())
	}

	It("gives the app container the exclusive CPU its finished init container had", func(ctx SpecContext) {
		name := PodName("init-app")
		out := outDir(name)
		kubelet.Apply(initPod(name, out, nil, Container("app", Guaranteed("1"))))
		app := CPUsOf(ctx, kubelet, name, "app")
		Expect(app.Size()).To(Equal(1))
		Expect(app.Intersection(Reserved()).IsEmpty()).To(BeTrue())
		ic := initCPUs(out)
		Expect(ic.Size()).To(Equal(1), "the init container ran on %s, not on one exclusive CPU", ic)
		Expect(ic.Intersection(Reserved()).IsEmpty()).To(BeTrue())
		if Host.CPUs.Size() == 2 {
			// Only one CPU can be exclusive here: the app got it back.
			Expect(app).To(Equal(ic))
		}
		expectInitFinished(ctx, name)
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(name) + "/app": app.String()}))
		// The init container's CPU stays with the pod (held), reused by
		// the app container or not.
		Expect(v.Held).To(ConsistOf(HaveField("CPUs", ic.String())))
		Expect(v.Shared).To(Equal(Host.CPUs.Difference(app).Difference(ic).String()))
		Expect(plugin.LogCount("stay held for its pod", StaticName(name), `container=init`)).To(Equal(1))
		kubelet.Delete(ctx, name)
		v = plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(BeEmpty())
		Expect(v.Held).To(BeEmpty())
	}, NodeTimeout(4*time.Minute))

	It("keeps a sidecar (restartable init container) on the shared pool beside an exclusive app container, after an exclusive init container", func(ctx SpecContext) {
		name := PodName("sidecar")
		out := outDir(name)
		always := corev1.ContainerRestartPolicyAlways
		sidecar := Container("sidecar", Guaranteed("200m"))
		sidecar.RestartPolicy = &always
		kubelet.Apply(initPod(name, out, []corev1.Container{sidecar}, Container("app", Guaranteed("1"))))
		app := CPUsOf(ctx, kubelet, name, "app")
		Expect(app.Size()).To(Equal(1))
		ic := initCPUs(out)
		Expect(ic.Size()).To(Equal(1))
		pool := Host.CPUs.Difference(app).Difference(ic)
		ExpectCPUs(ctx, kubelet, name, "sidecar", pool)
		expectInitFinished(ctx, name)
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(name) + "/app": app.String()}))
		Expect(v.Shared).To(Equal(pool.String()))
		kubelet.Delete(ctx, name)
	}, NodeTimeout(4*time.Minute))

	It("keeps a sidecar with an integer request on its own exclusive CPU beside the app container", func(ctx SpecContext) {
		if Host.CPUs.Size() < 3 {
			Skip("needs 3 CPUs (one reserved, one for the sidecar, one for the app); this machine has " + Host.CPUs.String())
		}
		name := PodName("sidecar-excl")
		always := corev1.ContainerRestartPolicyAlways
		sidecar := Container("sidecar", Guaranteed("1"))
		sidecar.RestartPolicy = &always
		p := NewPod(name, Container("app", Guaranteed("1")))
		p.Spec.InitContainers = []corev1.Container{sidecar}
		kubelet.Apply(p)
		app := CPUsOf(ctx, kubelet, name, "app")
		sc := CPUsOf(ctx, kubelet, name, "sidecar")
		Expect(app.Size()).To(Equal(1))
		Expect(sc.Size()).To(Equal(1))
		Expect(app.Intersection(sc).IsEmpty()).To(BeTrue())
		Expect(Exclusive(plugin.State(Default, ctx))).To(HaveLen(2))
		kubelet.Delete(ctx, name)
	}, NodeTimeout(4*time.Minute))
})
