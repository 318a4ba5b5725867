package adapter

import (
	"maps"
	"slices"
	"sort"
	"time"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// Reconciling with the runtime (Synchronize) is one decision: given the
// state, the container index and what the runtime reports, which
// assignments to release, which containers to adopt or admit, and which
// updates to send. planSync makes it without the daemon's lock, logging,
// metrics or NRI types, so that the cases a restart, a corrupt checkpoint
// or an imported kubelet state lead to can be tested as plain tables; the
// handler translates NRI into syncInput and applies the plan.

// ctrPhase is what the runtime says of a container's life.
type ctrPhase int

const (
	// phaseRunning is a container that holds CPUs and has started
	// (running, paused, or a state the runtime does not name).
	phaseRunning ctrPhase = iota
	// phaseCreated is a container created and not started yet.
	phaseCreated
	// phaseStopped is a container that holds no CPUs any more.
	phaseStopped
)

// syncPod is a pod sandbox as the runtime reports it.
type syncPod struct {
	ID   string // sandbox ID, what containers name
	Key  string // engine pod key (request.PodKey)
	Name string // namespace/name, for logs
}

// syncCtr is a container as the runtime reports it.
type syncCtr struct {
	ID, SandboxID, Name string
	Phase               ctrPhase
	CreatedAt           int64
	CPUs, Mems          string // cpuset.cpus and cpuset.mems the runtime reports
	CgroupsPath         string
	// Request is what the container asks for (request.For), without the
	// device hint provider, which Devices and DeviceErr give: the
	// NUMA nodes of its devices, or why they could not be read.
	Request   policy.Request
	Devices   request.DeviceInfo
	DeviceErr error
}

// syncInput is everything planSync decides from.
type syncInput struct {
	State   policy.State
	Records map[string]ledger.Record // the container index before the sync
	Pods    []syncPod
	Ctrs    []syncCtr
	// Static is cpu_manager_policy = static (policy.ExclusiveCPUs).
	Static bool
	// Now is the Since of the records the sync makes (ledger.stamp).
	Now string
	// Shrinking are the downsizes answered and not committed
	// (ledger.RightCPUs): a container the runtime has narrowed stays so.
	Shrinking map[string]ledger.Shrink
}

// keptCPUs is a running exclusive container whose lost assignment is
// rebuilt from the CPUs it runs on.
type keptCPUs struct {
	ID   string
	CPUs cpuset.CPUSet
}

// syncEventKind is a log line the plan asks for.
type syncEventKind int

const (
	evKept         syncEventKind = iota // warn: kept the CPUs a container runs on
	evKeptMemory                        // warn: kept the memory nodes it runs on
	evNoDeviceHint                      // warn: device NUMA nodes unreadable
	evRefused                           // warn: cannot be admitted, stays shared
	evPlaced                            // info: the decision of an admission
)

// syncEvent is one log line as data, in the order the plan made them.
type syncEvent struct {
	Kind               syncEventKind
	Pod, Container, ID string // Pod is the pod's namespace/name
	CPUs               cpuset.CPUSet
	Decision           policy.Decision
	Err                error
	// Devices are what the device hint provider found for an admission.
	Devices request.DeviceInfo
}

// syncPlan is planSync's answer. State and Records replace the daemon's
// once persisted; Live are the live containers, oldest first.
type syncPlan struct {
	State       policy.State
	Records     map[string]ledger.Record
	Live        []syncCtr
	Released    []ledger.PodContainer // every release, in order (one may repeat)
	RemovedPods []string              // pods whose affinity or memory is forgotten
	Kept        []keptCPUs
	Adopted     []string // IDs of containers given an assignment they hold
	Admissions  []admission
	Placed      int      // adopted and admitted
	AwaitStart  []string // created, not started yet
	Updates     []applier.CPUUpdate
	Events      []syncEvent
}

// planner carries planSync's work in progress.
type planner struct {
	e       *policy.Engine
	in      syncInput
	pods    map[string]syncPod // by sandbox ID
	plan    syncPlan
	liveKey map[ledger.PodContainer]bool
	// memKept is by ID the nodes keepLostMemory kept a container's
	// memory on.
	memKept map[string]cpuset.CPUSet
}

// planSync reconciles in with the engine e. It is pure: e is only
// consulted, in is not modified.
func planSync(e *policy.Engine, in syncInput) syncPlan {
	p := &planner{e: e, in: in, pods: make(map[string]syncPod, len(in.Pods)), liveKey: map[ledger.PodContainer]bool{}, memKept: map[string]cpuset.CPUSet{}}
	p.plan.State = in.State
	p.plan.Records = map[string]ledger.Record{}
	for _, pod := range in.Pods {
		p.pods[pod.ID] = pod
	}
	for _, c := range in.Ctrs {
		if pod, ok := p.pods[c.SandboxID]; ok && c.Phase != phaseStopped {
			p.plan.Live = append(p.plan.Live, c)
			p.liveKey[ledger.PodContainer{Pod: pod.Key, Name: c.Name}] = true
		}
	}
	p.releaseGone()
	// Oldest first: those holding an assignment are adopted, the others
	// admitted in the order they were created.
	sort.SliceStable(p.plan.Live, func(i, j int) bool { return p.plan.Live[i].CreatedAt < p.plan.Live[j].CreatedAt })
	p.keepLostCPUs()
	p.keepLostMemory()
	p.placeUnknown()
	// A kept container's record (known, or adopted just now) holds the
	// mems its memory was kept on.
	for id, mems := range p.memKept {
		if r, ok := p.plan.Records[id]; ok {
			r.Mems = mems.String()
			p.plan.Records[id] = r
		}
	}
	p.finish()
	return p.plan
}

// releaseGone forgets the containers that are gone or stopped. Their
// CPUs stay assigned while their pod lives, as under the kubelet (withReuse),
// and so do assignments without a container (imported from the kubelet,
// or from a checkpoint whose index was lost): the pod's next container of
// that name gets them. Everything a pod that is gone holds is released,
// and its affinity forgotten.
func (p *planner) releaseGone() {
	live := make(map[string]bool, len(p.plan.Live))
	for _, c := range p.plan.Live {
		live[c.ID] = true
	}
	for _, id := range slices.Sorted(maps.Keys(p.in.Records)) {
		if live[id] {
			p.plan.Records[id] = p.in.Records[id]
		}
	}
	livePods := make(map[string]bool, len(p.in.Pods))
	for _, pod := range p.in.Pods {
		livePods[pod.Key] = true
	}
	assigned := p.plan.State.Alloc.Assignments
	for _, pod := range slices.Sorted(maps.Keys(assigned)) {
		if livePods[pod] {
			continue
		}
		for _, name := range slices.Sorted(maps.Keys(assigned[pod])) {
			p.release(pod, name)
		}
	}
	for _, pod := range slices.Sorted(maps.Keys(p.plan.State.PodAffinity)) {
		if !livePods[pod] {
			p.plan.State = p.e.RemovePod(p.plan.State, pod)
			p.plan.RemovedPods = append(p.plan.RemovedPods, pod)
		}
	}
	// The pod-level pods' pool containers (their blocks went above).
	for _, pod := range slices.Sorted(maps.Keys(p.plan.State.PodShared)) {
		if !livePods[pod] {
			p.plan.State = p.e.RemovePod(p.plan.State, pod)
			p.plan.RemovedPods = append(p.plan.RemovedPods, pod)
		}
	}
	// The memory manager's pods without exclusive CPUs (a Guaranteed
	// container on the shared pool holds memory only).
	for _, pod := range slices.Sorted(maps.Keys(p.plan.State.Memory.Assignments)) {
		if !livePods[pod] {
			p.plan.State = p.e.RemovePod(p.plan.State, pod)
			p.plan.RemovedPods = append(p.plan.RemovedPods, pod)
		}
	}
}

func (p *planner) release(pod, name string) {
	p.plan.State = p.e.Remove(p.plan.State, pod, name)
	p.plan.Released = append(p.plan.Released, ledger.PodContainer{Pod: pod, Name: name})
}

// keepLostCPUs runs before any admission: a running container whose
// exclusive assignment the state lost (corrupt checkpoint set aside,
// entry dropped while reconciling) keeps the CPUs the runtime says it
// runs on, when they are exactly its exclusive count and still free;
// admitting it afresh would move a running latency-critical container.
// CPUs another live container also runs on are not exclusive (e.g. a
// shared-pool container whose pool happens to have that size); a
// container on every CPU (created unpinned while the plugin was away,
// as its cgroup says under direct) shares them with everyone and says
// nothing about them, so it is left out of that comparison.
func (p *planner) keepLostCPUs() {
	all := p.e.Topology().CPUs()
	sets := make([]cpuset.CPUSet, len(p.plan.Live))
	for i, c := range p.plan.Live {
		if set, err := cpuset.Parse(c.CPUs); err == nil && !all.IsSubsetOf(set) {
			sets[i] = set
		}
	}
	for i, c := range p.plan.Live {
		pod := p.pods[c.SandboxID]
		if _, ok := p.e.Assignment(p.plan.State, pod.Key, c.Name); ok {
			continue
		}
		if r, known := p.plan.Records[c.ID]; known && !r.Exclusive {
			continue
		}
		n := policy.ExclusiveCPUs(p.in.Static, c.Request)
		have, err := cpuset.Parse(c.CPUs)
		if n == 0 || err != nil || have.Size() != n || !alone(sets, i, have) {
			continue
		}
		if next, err := p.e.Assign(p.plan.State, pod.Key, c.Name, have); err == nil {
			p.plan.State = next
			p.plan.Kept = append(p.plan.Kept, keptCPUs{ID: c.ID, CPUs: have})
			p.event(syncEvent{Kind: evKept, CPUs: have}, pod, c)
		}
	}
}

// keepLostMemory is keepLostCPUs' memory half, under the static memory
// manager: a running container that holds exclusive CPUs but whose memory
// assignment the state lost keeps the NUMA nodes it runs on (its
// cpuset.mems) when their free memory holds its request
// (policy.Engine.KeepMemory). Left unaccounted, that memory would be given
// to the next admission on those nodes while the container uses it, and
// its own next start would take memory afresh, perhaps on another node
// than its CPUs. Oldest first, before any admission, like the CPUs.
func (p *planner) keepLostMemory() {
	if !p.e.MemoryStatic() {
		return
	}
	for _, c := range p.plan.Live {
		pod := p.pods[c.SandboxID]
		if _, ok := p.e.Assignment(p.plan.State, pod.Key, c.Name); !ok {
			continue
		}
		if r, known := p.plan.Records[c.ID]; known && !r.Exclusive {
			continue
		}
		mems, err := cpuset.Parse(c.Mems)
		if err != nil {
			continue
		}
		next, ok := p.e.KeepMemory(p.plan.State, c.Request, mems)
		if !ok {
			continue
		}
		p.plan.State = next
		p.memKept[c.ID] = mems
		p.event(syncEvent{Kind: evKeptMemory, CPUs: mems}, pod, c)
	}
}

// alone reports whether no set of sets but the i-th meets have.
func alone(sets []cpuset.CPUSet, i int, have cpuset.CPUSet) bool {
	for j, other := range sets {
		if j != i && other.Intersection(have).Size() > 0 {
			return false
		}
	}
	return true
}

// placeUnknown places the live containers the index does not know (or
// knows as exclusive without an assignment any more): adopted when the
// state holds an assignment for their pod and name, else admitted now. A
// refusal cannot fail a running container: it stays in the shared pool.
func (p *planner) placeUnknown() {
	// The live shared-pool containers, by their request: an exclusive
	// admission must not leave them without a CPU (stranding), though
	// those after it in this loop are not placed yet.
	shared := 0
	for _, c := range p.plan.Live {
		if policy.ExclusiveCPUs(p.in.Static, c.Request) == 0 {
			shared++
		}
	}
	for _, c := range p.plan.Live {
		if r, known := p.plan.Records[c.ID]; known {
			// A known container keeps its record, unless the reconciled
			// state dropped its exclusive assignment: admitted again.
			if _, ok := p.e.Assignment(p.plan.State, r.Pod, r.Name); !r.Exclusive || ok {
				continue
			}
		}
		pod := p.pods[c.SandboxID]
		r := ledger.Record{ID: c.ID, Pod: pod.Key, PodName: pod.Name, Name: c.Name, CgroupsPath: c.CgroupsPath, Since: p.in.Now}
		if _, ok := p.e.Assignment(p.plan.State, r.Pod, r.Name); ok {
			// Adopted (a kubelet import): it has run on these CPUs since
			// it was created.
			if c.CreatedAt > 0 {
				r.Since = ledger.StampOf(time.Unix(0, c.CreatedAt))
			}
			r.Exclusive = true
			// The kubelet's memory manager state came with it: the
			// container runs on its memory's nodes, as the kubelet ran it.
			if p.e.MemoryPinned(p.plan.State, r.Pod, r.Name) {
				r.Mems = p.e.MemsOf(p.plan.State, r.Pod, r.Name).String()
			}
			p.plan.Records[r.ID] = r
			p.plan.Adopted = append(p.plan.Adopted, r.ID)
			p.plan.Placed++
			continue
		}
		p.admit(pod, c, r, shared)
	}
}

// admit runs the admission (admit) for c, which sharedOthers
// shared-pool containers run beside, and records the result.
func (p *planner) admit(pod syncPod, c syncCtr, r ledger.Record, sharedOthers int) {
	var nodes []int
	if c.DeviceErr != nil {
		p.event(syncEvent{Kind: evNoDeviceHint, Err: c.DeviceErr}, pod, c)
	} else {
		nodes = c.Devices.Nodes
	}
	ad := admit(p.e, p.plan.State, admitInput{Req: c.Request, Nodes: nodes, Static: p.in.Static,
		Tracked: func(name string) bool { return p.liveKey[ledger.PodContainer{Pod: pod.Key, Name: name}] }, SharedOthers: func() int { return sharedOthers }})
	ad.ID = c.ID
	p.plan.Admissions = append(p.plan.Admissions, ad)
	if ad.Err != nil {
		p.event(syncEvent{Kind: evRefused, Err: ad.Err, Devices: c.Devices}, pod, c)
		p.plan.Records[r.ID] = r
		return
	}
	p.plan.State = ad.Next
	p.plan.Records[r.ID] = ad.record(r)
	p.plan.Placed++
	p.event(syncEvent{Kind: evPlaced, Decision: ad.Decision, Devices: c.Devices}, pod, c)
}

func (p *planner) event(ev syncEvent, pod syncPod, c syncCtr) {
	ev.Pod, ev.Container, ev.ID = pod.Name, c.Name, c.ID
	p.plan.Events = append(p.plan.Events, ev)
}

// finish lists the containers still waiting for their start and the
// updates that bring every live container to its right cpuset (never an
// empty one: see strandedError).
func (p *planner) finish() {
	for _, c := range p.plan.Live {
		if _, ok := p.plan.Records[c.ID]; ok && c.Phase == phaseCreated {
			p.plan.AwaitStart = append(p.plan.AwaitStart, c.ID)
		}
	}
	for _, c := range p.plan.Live {
		r := p.plan.Records[c.ID]
		want := ledger.RightCPUs(p.e, p.plan.State, r, p.in.Shrinking)
		if want.IsEmpty() {
			continue
		}
		have, err := cpuset.Parse(c.CPUs)
		if err == nil && have.Equals(want) && (r.Mems == "" || cpumask.SameList(r.Mems, c.Mems)) {
			continue
		}
		p.plan.Updates = append(p.plan.Updates, applier.CPUUpdate{ID: c.ID, CPUs: want.String(), Mems: r.Mems})
	}
}
