package adapter

// CreateContainer's admission and answer, in the order one runs: the
// container's request with its device hints, the CPUs and memory its pod
// holds for stopped containers (withReuse, withMemoryReuse), the engine's
// decision and the stranding check (admit, also Synchronize's), the
// record and the commit (create), the answer (adjustmentOf,
// exclusiveQuota), and the admission's metrics.

import (
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// admitInput is what one admission decides from, whichever event brings
// it (CreateContainer, or Synchronize for a container created while the
// plugin was away).
type admitInput struct {
	// Req is the container's request (request.For), without the device
	// hint provider, which Nodes gives: the NUMA nodes of its devices
	// (none: no preference).
	Req   policy.Request
	Nodes []int
	// Static is cpu_manager_policy = static (policy.ExclusiveCPUs).
	Static bool
	// Tracked tells whether a container of Req's pod by that name runs:
	// its CPUs and memory are not the pod's to reuse.
	Tracked func(name string) bool
	// SharedOthers counts the shared-pool containers beside it
	// (stranding asks only when the pool would be empty).
	SharedOthers func() int
}

// admission is the outcome of admit: Err is the refusal (reasonOf gives
// its reason word), else Decision is what it got and Next the state it
// leads to.
type admission struct {
	ID       string         // the container's, set by the planner
	Request  policy.Request // with the device hints it was decided with
	Decision policy.Decision
	Next     policy.State
	Err      error
}

// admit is the one admission of a container in st: the device hint
// provider, the pod's memory and CPUs its stopped containers leave for
// reuse (withReuse, withMemoryReuse), the engine's decision, and the refusal of
// an exclusive decision that strands the shared-pool containers. It is
// pure: the callers log, count and commit.
func admit(e *policy.Engine, st policy.State, in admitInput) admission {
	req := withNodeHints(e, in.Req, in.Nodes)
	req = withMemoryReuse(e, st, req, in.Tracked)
	next, dec, err := e.Add(withReuse(st, req, in.Static, in.Tracked), req)
	if err == nil {
		err = stranding(e, req, next, dec, in.SharedOthers)
	}
	return admission{Request: req, Decision: dec, Next: next, Err: err}
}

// record is base with what the admission decided: exclusive or not, and
// the cpuset.mems the plugin set (exclusive CPUs, or memory the memory
// manager pinned).
func (a admission) record(base ledger.Record) ledger.Record {
	dec := a.Decision
	base.Exclusive = dec.Exclusive
	if (dec.Exclusive || dec.MemPinned) && !dec.Mems.IsEmpty() {
		base.Mems = dec.Mems.String()
	}
	return base
}

// deviceNodes is the NUMA nodes the device hint provider found
// (request.DeviceReader.Nodes), with its debug line. A sysfs error is logged and
// counts as no preference: device locality steers placement, it is never
// a reason to fail a container.
func deviceNodes(info request.DeviceInfo, err error, entry *logrus.Entry) []int {
	if err != nil {
		entry.WithError(err).Warn(request.NoDeviceHintMsg)
		return nil
	}
	info.Log(entry)
	return info.Nodes
}

// withNodeHints adds the device hint provider to req: the NUMA nodes of
// the container's devices (none: no preference).
func withNodeHints(e *policy.Engine, req policy.Request, nodes []int) policy.Request {
	if len(nodes) == 0 {
		return req
	}
	h := make(map[string][]hints.Hint, len(req.Hints)+1)
	maps.Copy(h, req.Hints)
	h[request.DeviceResource] = e.DeviceHints(nodes)
	req.Hints = h
	return req
}

// stranding refuses dec, an admission computed as next, when it is
// exclusive and leaves shared-pool containers nowhere to run while
// sharedOthers of them run.
func stranding(e *policy.Engine, req policy.Request, next policy.State, dec policy.Decision, sharedOthers func() int) error {
	if !dec.Exclusive || dec.Existing || !e.SharedMask(next).IsEmpty() {
		return nil
	}
	n := sharedOthers()
	if n == 0 {
		return nil
	}
	return &strandedError{Pod: req.Pod, Container: req.Container, CPUs: dec.CPUs.Size(), Shared: n}
}

// create is CreateContainer inside its Update.
func (p *plugin) create(l *ledger.Tx, pod *api.PodSandbox, ctr *api.Container, req policy.Request, nodes []int, devInfo request.DeviceInfo,
	entry *logrus.Entry) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	d := p.d
	e := l.Engine()
	if e == nil {
		return nil, nil, fmt.Errorf("InvalidConfig: nri-cpualign is not configured: %w", l.PendingErr())
	}
	p.seeDriver(l, ctr.GetLinux().GetCgroupsPath())
	a := d.Applier.Load() // after seeDriver, which may replace it
	scope := l.Settings().TopologyManagerScope
	start := time.Now()
	ad := admit(e, l.State(), admitInput{Req: req, Nodes: nodes, Static: l.Static(),
		Tracked: func(name string) bool { return l.Tracks(req.Pod, name) }, SharedOthers: func() int { return l.SharedOthers(ctr.GetId()) }})
	d.Metrics.observeAdmission(ad.Request, ad.Err, time.Since(start), l.Static(), scope)
	if ad.Err != nil {
		err := admissionError(ad.Err)
		entry.WithError(err).WithField("reason", reasonOf(err)).Warn("container rejected")
		return nil, nil, err
	}
	dec := ad.Decision
	rec := ad.record(ledger.Record{ID: ctr.GetId(), Pod: req.Pod, PodName: request.PodName(pod), Name: ctr.GetName(),
		CgroupsPath: ctr.GetLinux().GetCgroupsPath(), Since: l.Stamp()})
	edit, superseded := withRecord(l, rec)
	// Logged once the commit succeeded, with the state before it.
	var supersededCPUs []string
	for _, r := range superseded {
		supersededCPUs = append(supersededCPUs, l.RightCPUs(r).String())
	}
	life := ledger.Life{AwaitStart: rec.ID}
	if pod.GetId() != "" {
		life.Sandbox = &ledger.PodSandbox{Pod: req.Pod, ID: pod.GetId()}
	}
	if len(devInfo.Devices) > 0 {
		life.Devices = map[string][]ledger.DeviceView{rec.ID: deviceViews(devInfo.Devices)}
	}
	// The containers it replaces may still exist, exited (their stop
	// never reached the plugin): their removal is no pod's end.
	if len(edit.Del) > 0 {
		life.Stopped = make(map[string]ledger.PodContainer, len(edit.Del))
		for _, id := range edit.Del {
			life.Stopped[id] = ledger.PodContainer{Pod: rec.Pod, Name: rec.Name}
		}
	}
	poolChanged, err := l.Commit(ledger.Change{Next: &ad.Next, Index: ledger.IndexChange{Edit: edit}, Life: life})
	if err != nil {
		entry.WithError(err).Error("cannot write the checkpoint; failing the container rather than losing the decision")
		d.Metrics.refusals.WithLabelValues("PersistError").Inc()
		return nil, nil, err
	}
	for i, r := range superseded {
		p.logAbandoned(r, supersededCPUs[i], "created again as "+rec.ID+" before it started",
			"container never started: its pod created it again, the new attempt takes its place and its CPUs")
	}
	d.Metrics.observeDecision(dec, l.Topology(), e, scope)

	adj := adjustmentOf(dec)
	p.exclusiveQuota(l, adj, rec)
	if !dec.Exclusive {
		a.Created(rec.ID, dec.CPUs.String())
	}
	var updates []*api.ContainerUpdate
	if poolChanged {
		updates = a.PoolChanged(l, rec.ID)
	}
	updates = append(updates, a.Owed(l, rec.ID, updates)...)
	p.logDecision(l, entry.WithField("updates", len(updates)), dec, "container admitted")
	return adj, updates, nil
}

// withRecord is the edit putting rec in the index. A container
// re-created under the same pod and name (a restart) replaces the old
// record; the engine already gave it the old CPUs (held since the old one
// stopped, or never released when it did not start). An old one that never
// started is a dead attempt (the kubelet retries a failed creation with a
// new ID): it is returned as superseded.
func withRecord(l *ledger.Tx, rec ledger.Record) (edit ledger.Edit, superseded []ledger.Record) {
	for id, r := range l.PodRecords(rec.Pod) {
		if id != rec.ID && r.Name == rec.Name {
			if l.AwaitingStart(id) {
				superseded = append(superseded, r)
			}
			// A restart keeps its pod's CPUs, and so their date.
			if r.Exclusive && rec.Exclusive && r.Since != "" {
				rec.Since = r.Since
			}
			edit.Del = append(edit.Del, id)
		}
	}
	edit.Put = []ledger.Record{rec}
	return edit, superseded
}

// adjustmentOf is the CreateContainer answer of a decision: cpuset.cpus
// and, when it names them, cpuset.mems.
func adjustmentOf(dec policy.Decision) *api.ContainerAdjustment {
	adj := &api.ContainerAdjustment{}
	adj.SetLinuxCPUSetCPUs(dec.CPUs.String())
	if !dec.Mems.IsEmpty() {
		adj.SetLinuxCPUSetMems(dec.Mems.String())
	}
	return adj
}

// CPUs held for stopped containers. The kubelet keys exclusive CPUs by pod
// and container name and drops them only when the pair no longer belongs
// to an active pod (removeStaleState): a container that exits, crashes or
// never starts keeps its CPUs while its pod lives, out of the shared pool
// and out of other pods' reach, and its restart gets exactly them. The
// engine's assignments are that table here: a container that stops
// leaves the index, its assignment stays, and the engine's Add returns it
// to the next container of the same pod and name. An assignment whose pod
// and name no container in the index holds is "held".
//
// The kubelet lets a pod's later containers reuse the CPUs of its init
// containers. NRI does not say which containers are init containers; the
// order of events does: an init container has stopped before the pod's
// next container is created. So a new exclusive container may take the
// CPUs held for its pod's stopped containers, as the kubelet's
// allocatable set counts the pod's reusable CPUs; what it does not take
// stays held for the pod.

// withReuse is st with the allocator's reuse set made the CPUs held for
// req's pod by its stopped containers, less those its tracked containers
// run on (tracked tells, by name, which of the pod's containers run: the
// index's at CreateContainer, the runtime's live ones at Synchronize),
// when req asks for exclusive CPUs it does not hold yet. The allocator
// keeps one pod's reuse set (the kubelet's most recently allocated pod);
// here it is derived again at every admission, so another pod's admission
// in between loses nothing.
func withReuse(st policy.State, req policy.Request, static bool, tracked func(name string) bool) policy.State {
	assigned := st.Alloc.Assignments[req.Pod]
	if len(assigned) == 0 || policy.ExclusiveCPUs(static, req) == 0 {
		return st
	}
	if _, ok := assigned[req.Container]; ok {
		return st
	}
	if _, ok := assigned[policy.PodPoolEntry]; ok {
		// Inside a pod-level pod's block a slice may reuse an init
		// container's slice only (podlevel.go); a stopped container here
		// may as well be an app container in back-off, whose restart gets
		// its slice back while the new one runs on it. Nothing is reused.
		return st
	}
	held, running := cpuset.New(), cpuset.New()
	for name, cpus := range assigned {
		if tracked(name) {
			running = running.Union(cpus)
		} else {
			held = held.Union(cpus)
		}
	}
	reuse := held.Difference(running)
	if reuse.IsEmpty() && st.Alloc.ReusablePod != req.Pod {
		return st
	}
	st.Alloc.ReusablePod, st.Alloc.Reusable = req.Pod, reuse
	return st
}

// withMemoryReuse lets req's container take over the memory its pod holds
// for exited containers (withReuse: an init container has exited before its
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

// The shared pool may become empty, as in the kubelet: under
// strict-cpu-reservation (the reserved CPUs are not in it) or with no
// reserved CPUs, exclusive containers may take its last CPU. The runtime
// must never get an empty cpuset and exclusive CPUs stay exclusive, so
// while the pool is empty its containers run on the reserved CPUs
// (policy.Engine.SharedCPUs), and move back when CPUs return (the usual
// shared-pool updates: the cpuset they run on changed). With no reserved
// CPUs there is nowhere for them: new shared-pool containers are refused
// by the engine, and an exclusive container whose CPUs would empty the
// pool while shared-pool containers run is refused here.

// strandedError refuses an exclusive container whose CPUs would leave the
// running shared-pool containers no CPU (pool empty, nothing reserved).
type strandedError struct {
	Pod, Container string
	CPUs           int
	Shared         int
}

func (e *strandedError) Error() string {
	return fmt.Sprintf("%s: pod %q container %q: its %d exclusive CPUs would take the shared pool's last CPU and no CPUs are reserved: "+
		"the %d running shared-pool containers would have no CPU", e.Reason(), e.Pod, e.Container, e.CPUs, e.Shared)
}

// Reason is "InsufficientCPUs", the kubelet's word for a node out of CPUs.
func (e *strandedError) Reason() string { return allocator.ReasonInsufficientCPUs }

// exclusiveQuota takes the quota off a new exclusive container, in its
// adjustment, and off its pod's cgroup. Inside CreateContainer's Update.
func (p *plugin) exclusiveQuota(l *ledger.Tx, adj *api.ContainerAdjustment, rec ledger.Record) {
	if !rec.Exclusive || !l.QuotaOff() {
		return
	}
	adj.SetLinuxCPUQuota(noQuota)
	p.d.Applier.Load().LiftPodQuota(rec, "container created")
}

// Alignment boundaries, the kubelet's label values.
const (
	boundaryPhysicalCPU  = "physical_cpu"
	boundaryNUMANode     = "numa_node"
	boundaryUncoreCache  = "uncore_cache"
	reasonSMT            = "SMTAlignmentError"
	reasonTopologyAffine = "TopologyAffinityError"
)

// scopeLabel is the label value for the topology manager scope.
func scopeLabel(scope string) string {
	if scope == "pod" {
		return "pod"
	}
	return "container"
}

// observeAdmission counts one admission under the static policy (static)
// and the topology manager scope. dur 0 (admissions during Synchronize)
// is not put in the histogram.
func (m *Metrics) observeAdmission(req policy.Request, err error, dur time.Duration, static bool, scope string) {
	m.admissionRequests.Inc()
	if dur > 0 {
		m.admissionDuration.Observe(dur.Seconds())
	}
	pinning := policy.ExclusiveCPUs(static, req) > 0
	if pinning {
		m.pinningRequests.Inc()
	}
	if err == nil {
		return
	}
	m.admissionErrors.Inc()
	m.refused(err)
	switch reasonOf(err) {
	case reasonSMT:
		m.alignedFailures.WithLabelValues(scopeLabel(scope), boundaryPhysicalCPU).Inc()
	case reasonTopologyAffine:
		m.alignedFailures.WithLabelValues(scopeLabel(scope), boundaryNUMANode).Inc()
	case allocator.ReasonUncoreCacheAlignment:
		m.alignedFailures.WithLabelValues(scopeLabel(scope), boundaryUncoreCache).Inc()
	}
	if pinning {
		m.pinningErrors.Inc()
	}
}

// observeDecision counts the boundaries an exclusive allocation is
// aligned on.
func (m *Metrics) observeDecision(dec policy.Decision, topo *topology.Topology, engine *policy.Engine, scope string) {
	if !dec.Exclusive || dec.CPUs.IsEmpty() {
		return
	}
	if topo.CPUsInCores(topo.CoresOf(dec.CPUs)...).Equals(dec.CPUs) {
		m.aligned.WithLabelValues(scopeLabel(scope), boundaryPhysicalCPU).Inc()
	}
	if len(topo.NUMANodesOf(dec.CPUs)) == 1 {
		m.aligned.WithLabelValues(scopeLabel(scope), boundaryNUMANode).Inc()
	}
	// Under strict-align-cpus-by-uncorecache every admitted exclusive
	// container is aligned by its rules (a larger one on whole caches).
	if len(topo.L3GroupsOf(dec.CPUs)) == 1 || (!dec.Existing && engine.StrictUncore() != allocator.UncoreStrictOff) {
		m.aligned.WithLabelValues(scopeLabel(scope), boundaryUncoreCache).Inc()
	}
}

// deviceViews is the ledger's copy of located devices (for /state):
// internal/request knows nothing of the ledger.
func deviceViews(devs []request.Device) []ledger.DeviceView {
	out := make([]ledger.DeviceView, len(devs))
	for i, d := range devs {
		out[i] = ledger.DeviceView(d)
	}
	return out
}
