// Package observe is what reads the ledger for others: the /state
// document, the gauges computed at scrape, and the NodeResourceTopology
// object. It reads a ledger.View, a copy, and imports no NRI, cgroup or
// applier code.
package observe

import (
	"maps"
	"slices"
	"sort"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// StateView is the /state document: the podresources-style view of the
// current assignments.
type StateView struct {
	Connected    bool   `json:"connected"`
	Synchronized bool   `json:"synchronized"`
	Policy       string `json:"cpu_manager_policy"`
	Topology     string `json:"topology_manager_policy"`
	Scope        string `json:"topology_manager_scope"`
	Reserved     string `json:"reserved"`
	Shared       string `json:"shared"`
	// StrictUncore is strict-align-cpus-by-uncorecache ("true" or
	// "exclusive"), absent when off; each container's caches are its l3.
	StrictUncore string          `json:"strict_align_cpus_by_uncorecache,omitempty"`
	Containers   []ContainerView `json:"containers"`
	// Held are the exclusive CPUs held for stopped containers of live
	// pods, by pod and container name, for their restart (held.go).
	Held []HeldView `json:"held"`
	// Memory is the memory manager's view per NUMA node and resource,
	// absent under memory_manager_policy None.
	Memory []MemoryView `json:"memory,omitempty"`
	// PodPools are the pod-level pods' blocks and private pools
	// (pod_level_resource_managers), absent when there are none.
	PodPools []PodPoolView `json:"pod_pools,omitempty"`
}

// PodPoolView is one pod-level pod's block in StateView: all its CPUs,
// and the pool its shared containers run on (the block less the slices).
type PodPoolView struct {
	PodUID string `json:"pod_uid"`
	Block  string `json:"block"`
	Pool   string `json:"pool"`
	NUMA   []int  `json:"numa"`
}

// HeldView is one assignment held for a stopped container in StateView.
type HeldView struct {
	Pod       string `json:"pod,omitempty"` // namespace/name, when a tracked container of the pod says it
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	NUMA      []int  `json:"numa"`
	L3        []int  `json:"l3"`
}

// ContainerView is one container in StateView.
type ContainerView struct {
	ID        string `json:"id"`
	Pod       string `json:"pod"`
	PodUID    string `json:"pod_uid"`
	Container string `json:"container"`
	CPUs      string `json:"cpus"`
	// Baseline is an exclusive container's CPUs at admission, which a
	// downsize keeps (equal to CPUs until an in-place resize).
	Baseline  string `json:"baseline,omitempty"`
	Mems      string `json:"mems,omitempty"`
	Exclusive bool   `json:"exclusive"`
	NUMA      []int  `json:"numa"`
	L3        []int  `json:"l3"`
	// Since is when the container got its CPUs (RFC 3339), absent for
	// containers recorded by a release that did not keep it.
	Since string `json:"since,omitempty"`
	// Devices are its devices that gave the device hint provider NUMA
	// nodes (docs/devices.md), absent when none did.
	Devices []ledger.DeviceView `json:"devices,omitempty"`
}

// State is the /state document of a ledger view.
func State(lv ledger.View, connected bool) StateView {
	if lv.Engine == nil {
		return StateView{Policy: lv.Cfg.CPUManagerPolicy, Containers: []ContainerView{}, Held: []HeldView{}}
	}
	e, st, topo := lv.Engine, lv.St, lv.Topo
	v := StateView{
		Connected:    connected,
		Synchronized: lv.Syncs > 0,
		Policy:       lv.Cfg.CPUManagerPolicy,
		Topology:     lv.Cfg.TopologyManagerPolicy,
		Scope:        lv.Cfg.TopologyManagerScope,
		Reserved:     e.Reserved().String(),
		Shared:       e.SharedMask(st).String(),
		Containers:   make([]ContainerView, 0, len(lv.Ctrs)),
		Held:         []HeldView{},
	}
	for _, h := range heldAssignments(st, lv.Ctrs) {
		v.Held = append(v.Held, HeldView{Pod: h.PodName, PodUID: h.Pod, Container: h.Name, CPUs: h.CPUs.String(),
			NUMA: topo.NUMANodesOf(h.CPUs), L3: topo.L3GroupsOf(h.CPUs)})
	}
	if u := e.StrictUncore(); u != allocator.UncoreStrictOff {
		v.StrictUncore = u.String()
	}
	for _, r := range lv.Ctrs {
		cpus := lv.RightCPUs(r)
		var base string
		if b, ok := e.Baseline(st, r.Pod, r.Name); ok && r.Exclusive {
			base = b.String()
		}
		v.Containers = append(v.Containers, ContainerView{
			ID: r.ID, Pod: r.PodName, PodUID: r.Pod, Container: r.Name, CPUs: cpus.String(), Baseline: base, Mems: r.Mems,
			Exclusive: r.Exclusive, NUMA: topo.NUMANodesOf(cpus), L3: topo.L3GroupsOf(cpus), Since: r.Since,
			Devices: lv.Devices[r.ID],
		})
	}
	v.Memory = memoryView(e, st)
	for _, pod := range slices.Sorted(maps.Keys(st.Alloc.Assignments)) {
		if block, ok := st.Alloc.Assignments[pod][policy.PodPoolEntry]; ok {
			pool, _ := e.PodPoolCPUs(st, pod)
			v.PodPools = append(v.PodPools, PodPoolView{PodUID: pod, Block: block.String(), Pool: pool.String(), NUMA: topo.NUMANodesOf(block)})
		}
	}
	sort.Slice(v.Containers, func(i, j int) bool {
		a, b := v.Containers[i], v.Containers[j]
		if a.Pod != b.Pod {
			return a.Pod < b.Pod
		}
		if a.Container != b.Container {
			return a.Container < b.Container
		}
		return a.ID < b.ID
	})
	return v
}
