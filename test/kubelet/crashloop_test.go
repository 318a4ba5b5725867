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
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"
)

// A crash-looping Guaranteed pod (restartPolicy Always, its container
// exits after about 2 s) beside a BestEffort pod. As under the kubelet's
// CPU manager, the exited container's CPU stays with its pod through the
// back-off: every incarnation runs on the same CPU and the BestEffort pod
// never spreads onto it.
var _ = Describe("a crash-looping Guaranteed pod under a real kubelet", Ordered, Serial, func() {
	var (
		plugin  *Plugin
		kubelet *Kubelet
	)

	BeforeAll(func(ctx SpecContext) {
		RequireEnv()
		plugin = NewPlugin("crashloop", `topology_manager_policy = "best-effort"`)
		plugin.Start(ctx)
		kubelet = NewKubelet("crashloop", KubeletConfig{})
		kubelet.Start(ctx)
	}, NodeTimeout(3*time.Minute))

	// lines reads a file the containers append their Cpus_allowed_list to.
	lines := func(path string) []cpuset.CPUSet {
		GinkgoHelper()
		b, err := os.ReadFile(path)
		if os.IsNotExist(err) {
			return nil
		}
		Expect(err).NotTo(HaveOccurred())
		var out []cpuset.CPUSet
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			v, ok := strings.CutPrefix(strings.TrimSpace(l), "Cpus_allowed_list:")
			if !ok {
				continue
			}
			s, err := cpuset.Parse(strings.TrimSpace(v))
			Expect(err).NotTo(HaveOccurred(), "line %q of %s", l, path)
			out = append(out, s)
		}
		return out
	}
	withOut := func(p *corev1.Pod, dir string) *corev1.Pod {
		dirType := corev1.HostPathDirectory
		p.Spec.Volumes = []corev1.Volume{{Name: "out", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: dir, Type: &dirType}}}}
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].VolumeMounts = []corev1.VolumeMount{{Name: "out", MountPath: "/out"}}
		}
		return p
	}

	It("runs every incarnation on the same exclusive CPU and never lets the BestEffort pod onto it", func(ctx SpecContext) {
		out := filepath.Join(WorkDir, "crashloop-out", PodName("run"))
		Expect(os.MkdirAll(out, 0o755)).To(Succeed())
		gCPUsFile, beCPUsFile := filepath.Join(out, "g-cpus"), filepath.Join(out, "be-cpus")

		// Each incarnation records the CPUs it runs on, then exits 1
		// after about 2 s; the kubelet restarts it after its back-off
		// (10 s, then 20 s).
		gp := PodName("crashloop")
		kubelet.Apply(withOut(NewPod(gp, Container("app", Guaranteed("1"),
			ShellScript("grep Cpus_allowed_list /proc/self/status >> /out/g-cpus", "sleep 2", "exit 1")...)), out))
		var gCPUs cpuset.CPUSet
		Eventually(func(g Gomega) {
			l := lines(gCPUsFile)
			g.Expect(l).NotTo(BeEmpty(), "the first incarnation has not written its CPUs yet")
			gCPUs = l[0]
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", kubelet.LogTail())
		Expect(gCPUs.Size()).To(Equal(1), "the Guaranteed container ran on %s", gCPUs)
		Expect(gCPUs.Intersection(Reserved()).IsEmpty()).To(BeTrue())
		uid := string(kubelet.Pod(Default, ctx, gp).UID)

		// The BestEffort pod writes its CPUs whenever they change; it
		// samples itself every 100 ms as its workload, so a spread onto
		// the crash-looping pod's CPU during a 10 s back-off is seen.
		be := PodName("besteffort")
		kubelet.Apply(withOut(NewPod(be, Container("app", BestEffort(), ShellScript(
			`last=""`,
			`while true; do c=$(grep Cpus_allowed_list /proc/self/status); if [ "$c" != "$last" ]; then echo "$c" >> /out/be-cpus; last="$c"; fi; sleep 0.1; done`)...)), out))
		WaitRunning(ctx, kubelet, be, "app")

		By("during the back-off, /state keeps the exited container's CPU for its pod, out of the shared pool")
		// The back-off is read from the runtime: its newest incarnation of
		// the container has exited and no next one exists. /state is taken
		// between two such reads that agree, so it shows the back-off and
		// nothing later. (The kubelet's served status is no guide: after a
		// failed sync the standalone kubelet keeps serving "Terminated" for
		// tens of seconds instead of CrashLoopBackOff.)
		var v StateView
		Eventually(func(g Gomega) {
			before, ok := LatestAttempt(g, ctx, uid, "app")
			g.Expect(ok).To(BeTrue(), "the runtime lists no incarnation yet")
			g.Expect(before.State).To(Equal(cri.ContainerState_CONTAINER_EXITED), "incarnation %d is %s", before.Attempt, before.State)
			v = plugin.State(g, ctx)
			after, _ := LatestAttempt(g, ctx, uid, "app")
			g.Expect(after).To(Equal(before), "the kubelet restarted the container while /state was read")
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", kubelet.LogTail())
		Expect(v.Shared).To(Equal(Host.CPUs.Difference(gCPUs).String()), "plugin log:\n%s", logTail(plugin.LogPath, 40))
		// Held when the runtime told the plugin of the exit (StopContainer),
		// else still listed as the pod's container: the pod's either way.
		var mine []string
		for _, h := range v.Held {
			if h.PodUID == uid && h.Container == "app" {
				mine = append(mine, "held "+h.CPUs)
			}
		}
		for _, c := range v.Containers {
			if c.PodUID == uid && c.Container == "app" && c.Exclusive {
				mine = append(mine, "listed "+c.CPUs)
			}
		}
		Expect(mine).To(HaveLen(1), "/state: %+v", v)
		Expect(strings.Fields(mine[0])[1]).To(Equal(gCPUs.String()))
		GinkgoWriter.Printf("in the back-off, /state shows the CPU %s\n", mine[0])

		By("waiting until the kubelet restarted the container twice (three incarnations), after its back-offs")
		// The runtime's attempt number counts the kubelet's restarts; the
		// file counts the incarnations that actually ran.
		Eventually(func(g Gomega) {
			a, ok := LatestAttempt(g, ctx, uid, "app")
			g.Expect(ok).To(BeTrue(), "the runtime lists no incarnation")
			g.Expect(a.Attempt).To(BeNumerically(">=", 2))
			g.Expect(len(lines(gCPUsFile))).To(BeNumerically(">=", 3))
		}).WithContext(ctx).WithTimeout(2*time.Minute).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", kubelet.LogTail())
		for i, c := range lines(gCPUsFile) {
			Expect(c.Equals(gCPUs)).To(BeTrue(), "incarnation %d ran on %s, the first on %s", i, c, gCPUs)
		}
		beLines := lines(beCPUsFile)
		Expect(beLines).NotTo(BeEmpty())
		for i, c := range beLines {
			Expect(c.Intersection(gCPUs).IsEmpty()).To(BeTrue(), "the BestEffort pod ran on %s (change %d), which holds the crash-looping pod's CPU %s", c, i, gCPUs)
		}
		GinkgoWriter.Printf("crash-looping pod on %s in every incarnation; the BestEffort pod on %v\n", gCPUs, beLines)

		By("the pod's deletion gives the CPU back to the BestEffort pod")
		kubelet.Delete(ctx, gp)
		ExpectCPUs(ctx, kubelet, be, "app", Host.CPUs)
		v = plugin.State(Default, ctx)
		Expect(v.Held).To(BeEmpty())
		Expect(Exclusive(v)).To(BeEmpty())
		kubelet.Delete(ctx, be)
	}, NodeTimeout(4*time.Minute))
})
