package daemon

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// memoryOf is the memory manager's request from what NRI reports of a
// cgroup: the memory limit and the hugepage limits (in a Guaranteed pod
// requests equal limits). The kubelet writes a hugetlb limit for every
// page size of the machine, 0 for the sizes not requested: those are
// left out. A page size that does not parse (the runtimes write the
// kernel's hugetlb names only) is left out too.
func memoryOf(r *api.LinuxResources) memorymanager.Request {
	out := memorymanager.Request{}
	if r == nil {
		return out
	}
	if lim := r.GetMemory().GetLimit().GetValue(); lim > 0 {
		out[memorymanager.Memory] = uint64(lim)
	}
	for _, h := range r.GetHugepageLimits() {
		if h.GetLimit() == 0 {
			continue
		}
		size, err := pageSize(h.GetPageSize())
		if err != nil {
			continue
		}
		out[memorymanager.HugepagesResource(size)] += h.GetLimit()
	}
	return out
}

// pageSize reads a hugetlb page size as the runtimes spell it ("2MB",
// "1GB", "64KB": the kernel's hugetlb cgroup names, binary units).
func pageSize(s string) (uint64, error) {
	units := []struct {
		suffix string
		shift  uint
	}{{"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40}}
	for _, u := range units {
		digits, ok := strings.CutSuffix(s, u.suffix)
		if !ok {
			continue
		}
		n, err := strconv.ParseUint(digits, 10, 32)
		if err != nil || n == 0 || n > 1<<(63-u.shift) {
			break
		}
		return n << u.shift, nil
	}
	return 0, fmt.Errorf("hugepage size %q: want <n>KB, <n>MB or <n>GB", s)
}

// MemoryView is one NUMA node's memory resource in StateView, as the
// memory manager accounts it (memory_manager_policy Static), in bytes.
type MemoryView struct {
	NUMANode int    `json:"numa_node"`
	Resource string `json:"resource"` // memory, hugepages-2Mi, ...
	Total    uint64 `json:"total"`
	// SystemReserved is the node's reserved_memory entry; Allocatable
	// is what containers may take (regular memory also leaves out the
	// hugepage pools), Allocated what they hold, Free the rest.
	SystemReserved uint64 `json:"system_reserved"`
	Allocatable    uint64 `json:"allocatable"`
	Allocated      uint64 `json:"allocated"`
	Free           uint64 `json:"free"`
	// Group is the node's group: itself, or every node of the
	// multi-node assignment its memory is shared in.
	Group []int `json:"group"`
}

// memoryView lists the memory manager's tables by node and resource;
// nil under memory_manager_policy None.
func memoryView(e *policy.Engine, st policy.State) []MemoryView {
	if !e.MemoryStatic() {
		return nil
	}
	var out []MemoryView
	for _, id := range st.Memory.NodeIDs() {
		n := st.Memory.Nodes[id]
		names := make([]string, 0, len(n.MemoryMap))
		for r := range n.MemoryMap {
			names = append(names, string(r))
		}
		slices.Sort(names)
		for _, name := range names {
			t := n.MemoryMap[memorymanager.Resource(name)]
			out = append(out, MemoryView{NUMANode: id, Resource: name, Total: t.TotalMemSize, SystemReserved: t.SystemReserved,
				Allocatable: t.Allocatable, Allocated: t.Reserved, Free: t.Free, Group: slices.Clone(n.Cells)})
		}
	}
	return out
}

// memoryCollector exports the memory manager's tables per node and
// resource, read from the ledger at every scrape (nothing under None).
type memoryCollector struct {
	view                     func() ledger.View
	free, alloc, allocatable *prometheus.Desc
}

func newMemoryCollector(view func() ledger.View) *memoryCollector {
	labels := []string{"numa_node", "resource"}
	return &memoryCollector{view: view,
		free: prometheus.NewDesc("nri_cpualign_memory_free_bytes",
			"Memory manager (memory_manager_policy Static): bytes of a resource (memory, hugepages-<size>) a NUMA node has left for Guaranteed containers.", labels, nil),
		alloc: prometheus.NewDesc("nri_cpualign_memory_allocated_bytes",
			"Memory manager: bytes of a resource Guaranteed containers hold on a NUMA node.", labels, nil),
		allocatable: prometheus.NewDesc("nri_cpualign_memory_allocatable_bytes",
			"Memory manager: bytes of a resource containers may take on a NUMA node (total less reserved_memory; memory also less the hugepage pools).", labels, nil),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.free
	ch <- c.alloc
	ch <- c.allocatable
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	v := c.view()
	if v.Engine == nil {
		return
	}
	for _, m := range memoryView(v.Engine, v.St) {
		node := strconv.Itoa(m.NUMANode)
		ch <- prometheus.MustNewConstMetric(c.free, prometheus.GaugeValue, float64(m.Free), node, m.Resource)
		ch <- prometheus.MustNewConstMetric(c.alloc, prometheus.GaugeValue, float64(m.Allocated), node, m.Resource)
		ch <- prometheus.MustNewConstMetric(c.allocatable, prometheus.GaugeValue, float64(m.Allocatable), node, m.Resource)
	}
}

// withMemoryReuse lets req's container take over the memory its pod holds
// for exited containers (held.go: an init container has exited before its
// pod's next container is created), as the kubelet's memory manager lets
// a pod's containers take over its init containers' memory: the names of
// the pod's containers with memory blocks and no tracked container, for a
// container that has none yet. tracked says which names of the pod run.
func withMemoryReuse(e *policy.Engine, st policy.State, req policy.Request, tracked func(name string) bool) policy.Request {
	if !e.MemoryStatic() {
		return req
	}
	held := st.Memory.Assignments[req.Pod]
	if _, ok := held[req.Container]; ok || len(held) == 0 {
		return req
	}
	var names []string
	for name := range held {
		if !tracked(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	req.MemoryReuse = names
	return req
}
