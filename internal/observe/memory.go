package observe

import (
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

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

// NewMemoryCollector is the memory manager gauges' collector.
func NewMemoryCollector(view func() ledger.View) prometheus.Collector {
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
