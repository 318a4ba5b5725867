//go:build e2e

package kubelet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The README's "Migrating a node from the kubelet's static policy", step by
// step, with the state file a real kubelet wrote. Keep the two in step.
var _ = Describe("migrating a node from the kubelet's static policy", Ordered, Serial, func() {
	It("keeps a running Guaranteed container on its CPUs when the plugin imports the kubelet's cpu_manager_state", func(ctx SpecContext) {
		RequireEnv()
		// Before: the kubelet's static policy owns the CPUs, no plugin.
		kubelet := NewKubelet("migration", KubeletConfig{CPUManagerPolicy: "static"})
		kubelet.Start(ctx)
		g1, be := PodName("g1"), PodName("besteffort")
		kubelet.Apply(NewPod(g1, Container("app", Guaranteed("1"))))
		kubelet.Apply(NewPod(be, Container("app", BestEffort())))
		pinned := CPUsOf(ctx, kubelet, g1, "app")
		Expect(pinned.Size()).To(Equal(1))
		Expect(pinned.Intersection(Reserved()).IsEmpty()).To(BeTrue())
		pool := Host.CPUs.Difference(pinned)
		ExpectCPUs(ctx, kubelet, be, "app", pool)
		uid := string(kubelet.Pod(Default, ctx, g1).UID)
		kubeletState := filepath.Join(kubelet.RootDir, "cpu_manager_state")
		Eventually(func(g Gomega) {
			g.Expect(readKubeletState(g, kubeletState).Entries).To(HaveKeyWithValue(uid, HaveKeyWithValue("app", pinned.String())))
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Succeed())
		ids := map[string]map[string]ctrIdentity{}
		for _, p := range []string{g1, be} {
			ids[p] = ContainerIDs(kubelet.Pod(Default, ctx, p))
		}

		// Step 1, cordon, has no meaning without an API server. Step 2: the
		// plugin's reserved_system_cpus is the kubelet's reservedSystemCPUs
		// (PluginConfig reserves the same CPU).
		plugin := NewPlugin("migration", `topology_manager_policy = "best-effort"`)
		// Step 3: stop the kubelet (its containers keep running) and copy
		// its final state where the plugin can read it.
		kubelet.Stop()
		imported := filepath.Join(plugin.Dir, "kubelet-cpu_manager_state")
		b, err := os.ReadFile(kubeletState)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(imported, b, 0o600)).To(Succeed())
		// Step 4: switch the kubelet to none, remove its checkpoint (it
		// refuses to start with one of another policy; the copy is what the
		// plugin imports) and start it. It leaves the running containers'
		// cpusets alone.
		kubelet.Configure(KubeletConfig{CPUManagerPolicy: "none"})
		Expect(os.Remove(kubeletState)).To(Succeed())
		kubelet.Start(ctx)
		for p, want := range ids {
			Eventually(func(g Gomega) map[string]ctrIdentity {
				return ContainerIDs(kubelet.Pod(g, ctx, p))
			}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Equal(want))
		}
		Expect(CPUsOf(ctx, kubelet, g1, "app")).To(Equal(pinned))
		Expect(CPUsOf(ctx, kubelet, be, "app")).To(Equal(pool))

		// Step 5: the plugin with --import-kubelet-state on its first start.
		plugin.Start(ctx, "--import-kubelet-state="+imported)

		// Step 6: /state lists the adopted container as exclusive on the
		// kubelet's CPUs, and nothing moved.
		v := plugin.State(Default, ctx)
		Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(g1) + "/app": pinned.String()}))
		Expect(v.Shared).To(Equal(pool.String()))
		Expect(CPUsOf(ctx, kubelet, g1, "app")).To(Equal(pinned))
		Expect(CPUsOf(ctx, kubelet, be, "app")).To(Equal(pool))
		for p, want := range ids {
			Expect(ContainerIDs(kubelet.Pod(Default, ctx, p))).To(Equal(want))
		}
		// A new pod sees the adoption: a shared one stays off the pinned
		// CPU, and a second 1-CPU Guaranteed pod finds no free CPU.
		be2, g2 := PodName("besteffort"), PodName("g1")
		kubelet.Apply(NewPod(be2, Container("app", BestEffort())))
		ExpectCPUs(ctx, kubelet, be2, "app", pool)
		if Host.CPUs.Size() == 2 {
			kubelet.Apply(NewPod(g2, Container("app", Guaranteed("1"))))
			Expect(WaitWaiting(ctx, kubelet, g2, "app", "CreateContainerError")).To(ContainSubstring("InsufficientCPUs"))
			kubelet.Delete(ctx, g2)
		}
		// The cpu_manager_state the kubelet writes under none holds no
		// assignment: nothing but the plugin owns the CPUs now.
		Expect(readKubeletState(Default, kubeletState).PolicyName).To(Equal("none"))
	}, NodeTimeout(6*time.Minute))
})

// kubeletCPUState is the kubelet's cpu_manager_state checkpoint.
type kubeletCPUState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func readKubeletState(g Gomega, path string) kubeletCPUState {
	GinkgoHelper()
	b, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	var s kubeletCPUState
	g.Expect(json.Unmarshal(b, &s)).To(Succeed(), "%s: %s", path, b)
	return s
}
