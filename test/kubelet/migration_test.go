//go:build e2e

package kubelet

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// The README's "Migrating a node from the kubelet's static policy", step by
// step, with the state files a real kubelet wrote: the suite's kubelet
// (v1.37: cpu_manager_state V4, memory_manager_state V3, the state in
// "data" with "dataChecksum") and, when the run has one, the previous
// minor (v1.36: V3 and V2, no "data"), as the import must read both. Keep
// the steps and docs/migration.md in step.
var _ = Describe("migrating a node from the kubelet's static policy", Ordered, Serial, func() {
	It("keeps a running Guaranteed container on its CPUs and memory when the plugin imports the state files of the suite's kubelet", func(ctx SpecContext) {
		RequireEnv()
		migrate(ctx, "migration", Env.Kubelet)
	}, NodeTimeout(6*time.Minute))

	It("does the same with the state files of the previous kubelet (E2E_KUBE_BIN_PREV)", func(ctx SpecContext) {
		RequireEnv()
		if Env.PrevKubelet == "" {
			Skip("no previous kubelet in this run: E2E_KUBE_BIN_PREV is not set (scripts/e2e-kubelet.sh sets it unless E2E_KUBE_VERSION_PREV is empty)")
		}
		migrate(ctx, "migration-prev", Env.PrevKubelet)
	}, NodeTimeout(6*time.Minute))
})

// migrate runs steps 2-6 of the migration from the kubelet bin (its
// version decides which layout its files must have) with its CPU manager
// and memory manager at static, under WorkDir/name.
func migrate(ctx SpecContext, name, bin string) {
	GinkgoHelper()
	version := kubeletVersion(ctx, bin)
	dataLayout := kubeletWritesData(version)
	By("kubelet " + version + " (" + bin + "), state files with \"data\": " + map[bool]string{true: "yes", false: "no"}[dataLayout])
	// Before: the kubelet's static policies own the CPUs and the memory,
	// no plugin.
	static := KubeletConfig{CPUManagerPolicy: "static", MemoryManagerPolicy: "Static"}
	kubelet := NewKubelet(name, static)
	kubelet.Bin = bin
	cpuState := filepath.Join(kubelet.RootDir, "cpu_manager_state")
	memState := filepath.Join(kubelet.RootDir, "memory_manager_state")
	// One run may pass here more than once with the same work dir
	// (e2e-kubelet.sh's two containerd passes): the files an earlier pass
	// left, written under none, would stop the static kubelet from
	// starting, and the plugin's own checkpoint would make it skip the
	// import. Each pass starts as a node that never ran either.
	for _, f := range []string{cpuState, memState} {
		Expect(os.Remove(f)).To(Or(Succeed(), MatchError(os.ErrNotExist)))
	}
	Expect(os.RemoveAll(filepath.Join(WorkDir, name, "state"))).To(Succeed())
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
	Eventually(func(g Gomega) {
		s := readKubeletState(g, cpuState)
		g.Expect(s.Entries).To(HaveKeyWithValue(uid, HaveKeyWithValue("app", pinned.String())))
		g.Expect(s.Data != nil && s.DataChecksum != nil).To(Equal(dataLayout), "cpu_manager_state of kubelet %s: \"data\" and \"dataChecksum\" present", version)
		m := readKubeletMemoryState(g, memState)
		g.Expect(m.PolicyName).To(Equal("Static"))
		g.Expect(m.Entries).To(HaveKeyWithValue(uid, HaveKeyWithValue("app", ContainElement(kubeletMemoryBlock{NUMAAffinity: []int{0}, Type: "memory", Size: 32 << 20}))))
		g.Expect(m.Data != nil && m.DataChecksum != nil).To(Equal(dataLayout), "memory_manager_state of kubelet %s: \"data\" and \"dataChecksum\" present", version)
	}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250*time.Millisecond).Should(Succeed(), "kubelet log:\n%s", kubelet.LogTail())
	ids := map[string]map[string]ctrIdentity{}
	for _, p := range []string{g1, be} {
		ids[p] = ContainerIDs(kubelet.Pod(Default, ctx, p))
	}

	// Step 1, cordon, has no meaning without an API server. Step 2: the
	// plugin's reserved_system_cpus is the kubelet's reservedSystemCPUs
	// (PluginConfig reserves the same CPU), its reserved_memory the
	// kubelet's reservedMemory.
	// (reserved_memory inline: NewPlugin appends keys after these lines,
	// which a [[reserved_memory]] table header would capture.)
	plugin := NewPlugin(name, `topology_manager_policy = "best-effort"`, `memory_manager_policy = "Static"`,
		`reserved_memory = [{ numa_node = 0, limits = { memory = "`+itoa(MemoryReservedMiB)+`Mi" } }]`)
	// Step 3: stop the kubelet (its containers keep running) and copy its
	// final state files where the plugin can read them.
	kubelet.Stop()
	imported := filepath.Join(plugin.Dir, "kubelet-cpu_manager_state")
	for src, dst := range map[string]string{cpuState: imported, memState: filepath.Join(plugin.Dir, "kubelet-memory_manager_state")} {
		b, err := os.ReadFile(src)
		Expect(err).NotTo(HaveOccurred())
		Expect(os.WriteFile(dst, b, 0o600)).To(Succeed())
	}
	// Step 4: switch the kubelet to none, remove its checkpoints (it
	// refuses to start with one of another policy; the copies are what the
	// plugin imports) and start it. It leaves the running containers'
	// cpusets alone.
	kubelet.Configure(KubeletConfig{CPUManagerPolicy: "none"})
	Expect(os.Remove(cpuState)).To(Succeed())
	Expect(os.Remove(memState)).To(Succeed())
	kubelet.Start(ctx)
	for p, want := range ids {
		Eventually(func(g Gomega) map[string]ctrIdentity {
			return ContainerIDs(kubelet.Pod(g, ctx, p))
		}).WithContext(ctx).WithTimeout(podTimeout).WithPolling(250 * time.Millisecond).Should(Equal(want))
	}
	Expect(CPUsOf(ctx, kubelet, g1, "app")).To(Equal(pinned))
	Expect(CPUsOf(ctx, kubelet, be, "app")).To(Equal(pool))

	// Step 5: the plugin with --import-kubelet-state on its first start.
	// (Its log is appended to by every pass with this work dir.)
	imports := plugin.LogCount("imported the kubelet's memory manager state")
	plugin.Start(ctx, "--import-kubelet-state="+imported)

	// Step 6: /state lists the adopted container as exclusive on the
	// kubelet's CPUs, its 32Mi held on node 0, and nothing moved.
	v := plugin.State(Default, ctx)
	Expect(Exclusive(v)).To(Equal(map[string]string{"default/" + StaticName(g1) + "/app": pinned.String()}), "plugin log:\n%s", logTail(plugin.LogPath, 40))
	Expect(v.Shared).To(Equal(pool.String()))
	Expect(v.Memory).To(ContainElement(MemoryView{NUMANode: 0, Resource: "memory", Allocated: 32 << 20}), "the imported memory assignment; plugin log:\n%s", logTail(plugin.LogPath, 40))
	Expect(plugin.LogCount("imported the kubelet's memory manager state")).To(Equal(imports + 1))
	Expect(CPUsOf(ctx, kubelet, g1, "app")).To(Equal(pinned))
	Expect(CPUsOf(ctx, kubelet, be, "app")).To(Equal(pool))
	for p, want := range ids {
		Expect(ContainerIDs(kubelet.Pod(Default, ctx, p))).To(Equal(want))
	}
	// A new pod sees the adoption: a shared one stays off the pinned CPU,
	// and a second 1-CPU Guaranteed pod finds no free CPU.
	be2, g2 := PodName("besteffort"), PodName("g1")
	kubelet.Apply(NewPod(be2, Container("app", BestEffort())))
	ExpectCPUs(ctx, kubelet, be2, "app", pool)
	if Host.CPUs.Size() == 2 {
		kubelet.Apply(NewPod(g2, Container("app", Guaranteed("1"))))
		Expect(WaitWaiting(ctx, kubelet, g2, "app", "CreateContainerError")).To(ContainSubstring("InsufficientCPUs"))
		kubelet.Delete(ctx, g2)
	}
	// The state files the kubelet writes under none hold no assignment:
	// nothing but the plugin owns the CPUs and the memory now.
	Expect(readKubeletState(Default, cpuState).PolicyName).To(Equal("none"))
	Expect(readKubeletMemoryState(Default, memState).PolicyName).To(Equal("None"))
}

// kubeletVersion is what the kubelet binary says it is ("v1.37.2";
// setup-kube.sh stamps it).
func kubeletVersion(ctx SpecContext, bin string) string {
	GinkgoHelper()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "%s --version: %s", bin, out)
	v, ok := strings.CutPrefix(strings.TrimSpace(string(out)), "Kubernetes ")
	Expect(ok).To(BeTrue(), "%s --version: %q", bin, out)
	return v
}

// kubeletWritesData reports whether a kubelet of version ("v1.37.2")
// writes its state files with "data" and "dataChecksum": from 1.37 on.
func kubeletWritesData(version string) bool {
	GinkgoHelper()
	var major, minor int
	_, err := fmt.Sscanf(version, "v%d.%d.", &major, &minor)
	Expect(err).NotTo(HaveOccurred(), "kubelet version %q", version)
	return major > 1 || minor >= 37
}

// kubeletCPUState is the kubelet's cpu_manager_state checkpoint: the
// fields every version writes at the top, and 1.37's "data" (the state as
// a JSON string) and "dataChecksum".
type kubeletCPUState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	Data          *string                      `json:"data"`
	DataChecksum  *uint64                      `json:"dataChecksum"`
}

func readKubeletState(g Gomega, path string) kubeletCPUState {
	GinkgoHelper()
	var s kubeletCPUState
	readJSON(g, path, &s)
	return s
}

// kubeletMemoryState is the kubelet's memory_manager_state checkpoint,
// likewise.
type kubeletMemoryState struct {
	PolicyName   string                                     `json:"policyName"`
	Entries      map[string]map[string][]kubeletMemoryBlock `json:"entries"`
	Data         *string                                    `json:"data"`
	DataChecksum *uint64                                    `json:"dataChecksum"`
}

// kubeletMemoryBlock is one memory block of a container in it.
type kubeletMemoryBlock struct {
	NUMAAffinity []int  `json:"numaAffinity"`
	Type         string `json:"type"`
	Size         uint64 `json:"size"`
}

func readKubeletMemoryState(g Gomega, path string) kubeletMemoryState {
	GinkgoHelper()
	var s kubeletMemoryState
	readJSON(g, path, &s)
	return s
}

func readJSON(g Gomega, path string, v any) {
	GinkgoHelper()
	b, err := os.ReadFile(path)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(json.Unmarshal(b, v)).To(Succeed(), "%s: %s", path, b)
}

func itoa(n int) string { return strconv.Itoa(n) }
