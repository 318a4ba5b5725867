//go:build e2e

package e2e

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// hugepages2M is the machine-wide pool of 2 MiB pages.
const hugepages2M = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"

// readUint reads a sysfs number.
func readUint(path string) uint64 {
	GinkgoHelper()
	b, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred())
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	Expect(err).NotTo(HaveOccurred(), "%s: %q", path, b)
	return n
}

// nodeMemTotal is a node's MemTotal in bytes, read here rather than
// through pkg/sysfs so that the check does not share the plugin's reading.
func nodeMemTotal(node int) uint64 {
	GinkgoHelper()
	p := filepath.Join("/sys/devices/system/node", "node"+strconv.Itoa(node), "meminfo")
	b, err := os.ReadFile(p)
	Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 4 && f[2] == "MemTotal:" {
			kb, err := strconv.ParseUint(f[3], 10, 64)
			Expect(err).NotTo(HaveOccurred())
			return kb << 10
		}
	}
	Fail("no MemTotal in " + p)
	return 0
}

// memory_manager_policy = "Static" on the real runtime, with a pool of 2 MiB
// hugepages reserved for the run (the kernel must allow it; the spec says
// so and skips otherwise): the plugin reads each node's memory and pool,
// accounts the memory limit the runtime reports for a Guaranteed
// container, pins its cpuset.mems to the node it allocated, refuses with
// the kubelet's memory manager reason what no node holds, and frees the
// memory with the pod. Hugepage limits themselves are not sent: runc sets
// them in the hugetlb cgroup, which this machine does not mount.
var _ = Describe("the memory manager (Static) with 2Mi hugepages on a real "+RuntimeName, Ordered, Serial, func() {
	const (
		pages    = 8
		reserved = uint64(256) << 20
	)
	var (
		plugin *Plugin
		pods   = &Pods{}
		base   string
	)
	state := func(g Gomega, ctx context.Context) observe.StateView {
		_, b, err := framework.HTTPGet(ctx, base+"/state")
		g.Expect(err).NotTo(HaveOccurred())
		var st observe.StateView
		g.Expect(json.Unmarshal(b, &st)).To(Succeed())
		return st
	}
	table := func(st observe.StateView, node int, resource string) (observe.MemoryView, bool) {
		for _, m := range st.Memory {
			if m.NUMANode == node && m.Resource == resource {
				return m, true
			}
		}
		return observe.MemoryView{}, false
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		if _, err := os.Stat(hugepages2M); err != nil {
			Skip("no 2 MiB hugepage pool on this kernel: " + err.Error())
		}
		before := readUint(hugepages2M)
		DeferCleanup(func() { Expect(os.WriteFile(hugepages2M, []byte(strconv.FormatUint(before, 10)), 0o644)).To(Succeed()) })
		Expect(os.WriteFile(hugepages2M, []byte(strconv.Itoa(pages)), 0o644)).To(Succeed())
		if got := readUint(hugepages2M); got != pages {
			Skip("the kernel reserved " + strconv.FormatUint(got, 10) + " of " + strconv.Itoa(pages) + " 2 MiB pages")
		}
		GinkgoWriter.Printf("the kernel reserved %d pages of 2 MiB\n", pages)
		plugin = NewPlugin("memory-manager", `metrics_address = "127.0.0.1:0"`, `memory_manager_policy = "Static"`,
			"[[reserved_memory]]", "numa_node = 0", `limits = { memory = "256Mi" }`)
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin.Start(ctx)
		addr, err := framework.MetricsAddress(plugin.LogPath, 0)
		Expect(err).NotTo(HaveOccurred(), "its log:\n%s", plugin.LogTail())
		base = "http://" + addr
	}, NodeTimeout(3*time.Minute))

	It("reads each node's memory and 2Mi pool as the kubelet's memory manager tables", func(ctx SpecContext) {
		st := state(Default, ctx)
		var poolPages uint64
		for _, n := range Host.MemoryNodes.List() {
			nodePages := readUint(filepath.Join("/sys/devices/system/node", "node"+strconv.Itoa(n), "hugepages/hugepages-2048kB/nr_hugepages"))
			poolPages += nodePages
			huge, ok := table(st, n, "hugepages-2Mi")
			Expect(ok).To(BeTrue(), "/state memory: %+v", st.Memory)
			Expect(huge.Total).To(Equal(nodePages<<21), "node %d pool", n)
			Expect(huge.Free).To(Equal(huge.Total))
			mem, ok := table(st, n, "memory")
			Expect(ok).To(BeTrue())
			var sys uint64
			if n == 0 {
				sys = reserved
			}
			Expect(mem.Total).To(Equal(nodeMemTotal(n)))
			Expect(mem.SystemReserved).To(Equal(sys))
			Expect(mem.Allocatable).To(Equal(mem.Total-sys-huge.Total), "memory less reserved_memory less the pool")
		}
		Expect(poolPages).To(BeEquivalentTo(pages))
	})

	var pinned *framework.Pod
	It("pins a Guaranteed container's memory to the node it allocated, and its cpuset.mems with it", func(ctx SpecContext) {
		r := framework.GuaranteedCPUs(1) // 64 MiB of memory
		ct := pods.RunWith(ctx, "mem", r)
		pinned = pods.list[len(pods.list)-1]
		st := state(Default, ctx)
		var mems string
		for _, c := range st.Containers {
			if c.Pod == "e2e/mem" {
				mems = c.Mems
			}
		}
		node, err := strconv.Atoi(mems)
		Expect(err).NotTo(HaveOccurred(), "mems %q is not one node; /state: %+v", mems, st.Containers)
		mem, _ := table(st, node, "memory")
		Expect(mem.Allocated).To(BeEquivalentTo(r.MemLimit))
		Expect(mem.Free).To(Equal(mem.Allocatable - uint64(r.MemLimit)))
		cg, err := framework.ReadCpuset(ct.CgroupsPath())
		Expect(err).NotTo(HaveOccurred())
		Expect(cg.Mems.String()).To(Equal(mems), "the container's cgroup")
	})

	It("refuses memory no node holds with the kubelet's memory manager reason", func(ctx SpecContext) {
		st := state(Default, ctx)
		var all uint64
		for _, m := range st.Memory {
			if m.Resource == "memory" {
				all += m.Allocatable
			}
		}
		// Half a CPU: the shared pool (the exclusive CPU is taken), whose
		// Guaranteed containers the memory manager accounts too.
		r := framework.GuaranteedMilli(500)
		r.MemRequest, r.MemLimit = int64(all)+1<<30, int64(all)+1<<30
		p := pods.Run(ctx, "too-big", r)
		_, err := CRI.CreateContainer(ctx, p, "too-big", r)
		Expect(err).To(MatchError(ContainSubstring("UnexpectedAdmissionError")))
		Expect(err).To(MatchError(ContainSubstring("[memorymanager]")))
	})

	It("frees the memory with the pod", func(ctx SpecContext) {
		pods.Remove(ctx, pinned)
		st := state(Default, ctx)
		for _, m := range st.Memory {
			Expect(m.Allocated).To(BeZero(), "%+v", m)
		}
	})
})
