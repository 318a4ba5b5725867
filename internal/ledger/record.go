package ledger

import (
	"maps"
	"slices"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// Record is what the daemon remembers about a container it has placed.
// The engine knows containers by pod UID and name; the runtime by ID. Its
// JSON is the checkpoint's index entry.
type Record struct {
	ID          string `json:"id"`
	Pod         string `json:"pod"`      // engine pod key (pod UID)
	PodName     string `json:"pod_name"` // namespace/name, for logs and /state
	Name        string `json:"name"`
	CgroupsPath string `json:"cgroups_path,omitempty"`
	Exclusive   bool   `json:"exclusive"`
	// Mems is the cpuset.mems the daemon set, "" when it leaves mems to
	// the runtime (shared-pool containers, adopted assignments).
	Mems string `json:"mems,omitempty"`
	// Since is when the container got its CPUs (RFC 3339, UTC, seconds):
	// its admission, or the Synchronize that placed or adopted it. Records
	// of earlier releases have none.
	Since string `json:"since,omitempty"`
}

// PodContainer names an engine assignment.
type PodContainer struct{ Pod, Name string }

// DeviceView is one device of a container and the NUMA nodes it gave:
// the runtime's path with the numbers sysfs was asked about
// ("/dev/vfio/90 (char 242:1)"), or the device plugin's variable and the
// address ("PCIDEVICE_INTEL_COM_SRIOV 0000:af:02.1"). /state serves it.
type DeviceView struct {
	Device string `json:"device"`
	NUMA   []int  `json:"numa"`
}

// Shrink is a downsize answered and not committed yet (the adapter's
// resize.go).
type Shrink struct {
	From cpuset.CPUSet  // the container's CPUs when it was answered
	Req  policy.Request // the resized request, decided again at commit
	To   cpuset.CPUSet  // the CPUs it was answered with
}

// Edit is what an event changes in the container index: records put
// (new or replaced) and IDs removed. Events commit an edit rather than a
// new index, so that an event's cost does not grow with the number of
// containers (no copy of the index, and the journal compares only the
// records edited).
type Edit struct {
	Put []Record
	Del []string
}

// ApplyTo applies e to m in place: the removals, then the records put.
func (e Edit) ApplyTo(m map[string]Record) {
	for _, id := range e.Del {
		delete(m, id)
	}
	for _, r := range e.Put {
		m[r.ID] = r
	}
}

// IndexChange is the index a change leads to: a whole new one (All), or
// the committed one with an Edit. The zero value changes nothing.
type IndexChange struct {
	All  map[string]Record
	Edit Edit
}

// empty reports whether c changes nothing.
func (c IndexChange) empty() bool {
	return c.All == nil && len(c.Edit.Put) == 0 && len(c.Edit.Del) == 0
}

// Index is the whole index c leads to from committed (a copy when it is
// an edit: committed stays as it is until the commit).
func (c IndexChange) Index(committed map[string]Record) map[string]Record {
	if c.All != nil {
		return c.All
	}
	m := CloneRecords(committed)
	c.Edit.ApplyTo(m)
	return m
}

// CloneRecords copies a container index.
func CloneRecords(m map[string]Record) map[string]Record {
	// maps.Clone copies the table wholesale: several times faster than
	// re-inserting 500 records on every event.
	if out := maps.Clone(m); out != nil {
		return out
	}
	return map[string]Record{}
}

// RightCPUs is the cpuset a known container should have in st, the one
// place the rule is stated: its exclusive assignment, or the CPUs a
// downsize answered and not committed yet gave it (shrinking, by
// container ID; only while the assignment is still the one the downsize
// started from); else, for a shared container of a pod-level pod
// (pod_level_resource_managers), its pod's private pool; else the node's
// shared pool. shrinking may be nil (no downsize pending).
func RightCPUs(e *policy.Engine, st policy.State, r Record, shrinking map[string]Shrink) cpuset.CPUSet {
	if r.Exclusive {
		if cpus, ok := e.Assignment(st, r.Pod, r.Name); ok {
			if s, ok := shrinking[r.ID]; ok && cpus.Equals(s.From) {
				return s.To
			}
			return cpus
		}
	}
	return poolOf(st.PodShared, r, func(pod string) (cpuset.CPUSet, bool) { return e.PodPoolCPUs(st, pod) },
		func() cpuset.CPUSet { return e.SharedCPUs(st) })
}

// poolOf is the rule's half for a container without CPUs of its own: a
// shared container of a pod-level pod (listed in podShared,
// policy.State.PodShared) runs on its pod's private pool, any other on
// the node's shared pool. RightCPUs asks it for a cpuset, Pools.Of for
// the text.
func poolOf[T any](podShared map[string][]string, r Record, podPool func(pod string) (T, bool), node func() T) T {
	if slices.Contains(podShared[r.Pod], r.Name) {
		if cpus, ok := podPool(r.Pod); ok {
			return cpus
		}
	}
	return node()
}

// Pools is what the non-exclusive containers run on in one state, as
// texts, for the appliers that bring many of them along at once: the
// node's shared pool (Node), and each pod-level pod's private pool for
// its shared containers. "" is no CPU, which is never applied (the
// adapter's emptypool.go). Of gives RightCPUs' answer for a non-exclusive
// record (poolOf) without a cpuset per container.
type Pools struct {
	Node    string
	pods    map[string]string   // pod -> its private pool
	members map[string][]string // policy.State.PodShared
}

// PoolsOf is the pools of st.
func PoolsOf(e *policy.Engine, st policy.State) Pools {
	p := Pools{}
	if m := e.SharedMask(st); !m.IsEmpty() {
		p.Node = m.String()
	}
	if len(st.PodShared) == 0 {
		return p
	}
	p.pods, p.members = make(map[string]string, len(st.PodShared)), st.PodShared
	for pod := range st.PodShared {
		if cpus, ok := e.PodPoolCPUs(st, pod); ok {
			p.pods[pod] = cpus.String()
		}
	}
	return p
}

// Of is the pool text of a non-exclusive container r.
func (p Pools) Of(r Record) string {
	return poolOf(p.members, r, func(pod string) (string, bool) {
		cpus, ok := p.pods[pod]
		return cpus, ok
	}, func() string { return p.Node })
}

// poolsChanged reports whether a non-exclusive container's cpuset may
// differ between a and b: the node's shared pool changed, or a pod-level
// pod's private pool (a slice taken or freed, the block taken or given
// back).
func poolsChanged(ea *policy.Engine, a policy.State, eb *policy.Engine, b policy.State) bool {
	if !ea.SharedMask(a).Equals(eb.SharedMask(b)) {
		return true
	}
	if len(a.PodShared) == 0 && len(b.PodShared) == 0 {
		return false
	}
	for _, m := range []map[string][]string{a.PodShared, b.PodShared} {
		for pod := range m {
			pa, _ := ea.PodPoolCPUs(a, pod)
			pb, _ := eb.PodPoolCPUs(b, pod)
			if !pa.Equals(pb) || !slices.Equal(a.PodShared[pod], b.PodShared[pod]) {
				return true
			}
		}
	}
	return false
}

// StampOf formats t as Record.Since.
func StampOf(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }
