package daemon

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// plugin is the NRI adapter (docs/architecture.md): what the NRI stub
// sees. It holds no state of its own: each event becomes a plan on the
// ledger's values and a ledger commit, and the result an NRI answer; the
// applier is told when the shared pool changed. Requests and device NUMA
// nodes are read before the ledger's lock is taken.
type plugin struct{ d *Daemon }

// The NRI events the plugin handles (the stub subscribes to exactly these).
var (
	_ stub.ConfigureInterface       = (*plugin)(nil)
	_ stub.SynchronizeInterface     = (*plugin)(nil)
	_ stub.ShutdownInterface        = (*plugin)(nil)
	_ stub.CreateContainerInterface = (*plugin)(nil)
	_ stub.StartContainerInterface  = (*plugin)(nil)
	_ stub.UpdateContainerInterface = (*plugin)(nil)
	_ stub.StopContainerInterface   = (*plugin)(nil)
	_ stub.RemoveContainerInterface = (*plugin)(nil)
	_ stub.RemovePodInterface       = (*plugin)(nil)

	_ stub.PostUpdateContainerInterface = (*plugin)(nil)
)

// reasoner is implemented by the engine's admission errors.
type reasoner interface{ Reason() string }

// reasonOf is the reason word of an engine error ("" when it has none).
func reasonOf(err error) string {
	var r reasoner
	if errors.As(err, &r) {
		return r.Reason()
	}
	return ""
}

// admissionError makes the text of a rejected CreateContainer start with
// the reason word, which is what `kubectl describe pod` shows first.
func admissionError(err error) error {
	reason := reasonOf(err)
	if reason == "" {
		reason = "AdmissionError"
	}
	if strings.HasPrefix(err.Error(), reason) {
		return err
	}
	return fmt.Errorf("%s: %w", reason, err)
}

// Configure applies the runtime's plugin configuration, if any, and
// subscribes to every event the plugin implements.
func (p *plugin) Configure(_ context.Context, cfg, runtime, version string) (api.EventMask, error) {
	d := p.d
	d.log.WithFields(logrus.Fields{"runtime": runtime, "version": version, "has_config": strings.TrimSpace(cfg) != ""}).
		Info("configured by the runtime")
	if err := d.configure(cfg); err != nil {
		d.log.WithError(err).Error("refusing the runtime's configuration")
		return 0, err
	}
	return 0, nil // 0: every event the plugin implements
}

// Shutdown is the runtime going down; the state is already on disk.
func (p *plugin) Shutdown(context.Context) {
	p.d.log.Info("runtime is shutting down")
}

// Synchronize rebuilds the state against the runtime: containers that are
// gone are released, containers created while the plugin was away are
// placed now (a rejection cannot fail a running container: it stays in the
// shared pool and the rejection is logged), and the answer carries the
// updates that bring every container to its right cpuset. planSync makes
// the decision; this commits it.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.d.obs.timeEvent("Synchronize")()
	d := p.d
	l, a := d.led, d.applier()
	in := p.syncInput(pods, ctrs)
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.engine == nil {
		return nil, fmt.Errorf("InvalidConfig: not configured: %w", l.pendingErr)
	}
	in.State, in.Records, in.Static = l.st, l.ctrs, l.static()
	plan := planSync(l.engine, in)
	p.logSyncEvents(plan.Events)
	for _, adm := range plan.Admissions {
		d.obs.observeAdmission(adm.Request, adm.Err, 0, l.static(), l.cfg.TopologyManagerScope)
	}
	if _, err := l.commit(plan.State, indexChange{all: plan.Records}); err != nil {
		d.log.WithError(err).Error("synchronize: cannot write the checkpoint")
		return nil, err
	}
	l.syncs++
	// The runtime's view decides which containers still wait for their
	// start: timers of containers gone or running are dropped, and a
	// container created but not started (while the plugin was away, or
	// before a restart) gets a full timeout from now.
	for id := range l.starting {
		l.disarmStartTimer(id)
	}
	clear(l.gaveUp)
	for _, id := range plan.AwaitStart {
		l.armStartTimer(id)
	}
	updates := a.synchronized(plan.Updates)
	d.log.WithFields(logrus.Fields{
		"pods": len(pods), "containers": len(plan.Live), "released": len(plan.Released), "placed": plan.Placed,
		"updates": len(updates), "shared": l.engine.SharedMask(l.st).String(),
	}).Info("synchronized with the runtime")
	if l.syncs == 1 {
		close(d.syncedC)
	}
	if l.syncs > 1 {
		d.obs.reconnects.Inc()
	}
	d.connected.Store(true)
	return updates, nil
}

// syncInput is what Synchronize decides from, read from the runtime's
// pods and containers without the ledger's lock: their requests, the
// NUMA nodes of their devices (planSync uses them for those it admits),
// and, when the applier says so, the cpuset in a running container's
// cgroup.
func (p *plugin) syncInput(pods []*api.PodSandbox, ctrs []*api.Container) syncInput {
	d := p.d
	in := syncInput{Pods: make([]syncPod, 0, len(pods)), Ctrs: make([]syncCtr, 0, len(ctrs))}
	podByID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		podByID[pod.GetId()] = pod
		in.Pods = append(in.Pods, syncPod{ID: pod.GetId(), Key: podKey(pod), Name: podName(pod)})
	}
	devs := p.deviceReader()
	readCgroups := d.applier().syncReadsCgroups()
	cg := d.applier().cgroupRoot()
	for _, c := range ctrs {
		cpu := c.GetLinux().GetResources().GetCpu()
		sc := syncCtr{ID: c.GetId(), SandboxID: c.GetPodSandboxId(), Name: c.GetName(), Phase: phaseOf(c),
			CreatedAt: c.GetCreatedAt(), CPUs: cpu.GetCpus(), Mems: cpu.GetMems(), CgroupsPath: c.GetLinux().GetCgroupsPath()}
		if readCgroups && sc.Phase != phaseStopped {
			if cpus, _, err := cg.Read(sc.CgroupsPath); err == nil {
				sc.CPUs = cpus.String()
			}
		}
		if pod := podByID[sc.SandboxID]; pod != nil && sc.Phase != phaseStopped {
			sc.Request = requestFor(pod, c)
			sc.DeviceNodes, sc.DeviceErr = devs.nodes(c)
		}
		in.Ctrs = append(in.Ctrs, sc)
	}
	return in
}

// phaseOf is the container's phase as planSync knows it.
func phaseOf(c *api.Container) ctrPhase {
	switch c.GetState() {
	case api.ContainerState_CONTAINER_STOPPED:
		return phaseStopped
	case api.ContainerState_CONTAINER_CREATED:
		return phaseCreated
	}
	return phaseRunning
}

// logSyncEvents writes the log lines a sync plan asks for, in order.
func (p *plugin) logSyncEvents(events []syncEvent) {
	d := p.d
	for _, ev := range events {
		entry := d.log.WithFields(logrus.Fields{"pod": ev.Pod, "container": ev.Container, "id": ev.ID})
		switch ev.Kind {
		case evKept:
			entry.WithField("cpus", ev.CPUs.String()).
				Warn("state had no assignment for a running exclusive container; kept the CPUs it runs on")
		case evNoDeviceHint:
			entry.WithError(ev.Err).Warn(noDeviceHintMsg)
		case evRefused:
			entry.WithError(ev.Err).WithField("reason", reasonOf(ev.Err)).
				Warn("container created while the plugin was away cannot be admitted now; it stays in the shared pool")
		case evPlaced:
			p.logDecision(entry, ev.Decision, "placed at synchronize")
		}
	}
}

// nriUpdates are a plan's updates as the runtime takes them.
func nriUpdates(planned []cpuUpdate) []*api.ContainerUpdate {
	var updates []*api.ContainerUpdate
	for _, pu := range planned {
		u := &api.ContainerUpdate{}
		u.SetContainerId(pu.ID)
		u.SetLinuxCPUSetCPUs(pu.CPUs)
		if pu.Mems != "" {
			u.SetLinuxCPUSetMems(pu.Mems)
		}
		u.SetIgnoreFailure()
		updates = append(updates, u)
	}
	return updates
}

func sameList(a, b string) bool {
	x, err1 := cpuset.Parse(a)
	y, err2 := cpuset.Parse(b)
	return err1 == nil && err2 == nil && x.Equals(y)
}

// CreateContainer admits the container: the engine's decision becomes the
// adjustment (cpuset.cpus and, for exclusive CPUs, cpuset.mems), and when
// the shared pool changed the applier brings the other shared-pool
// containers along. A rejection fails the creation with the reason word
// first.
func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	defer p.d.obs.timeEvent("CreateContainer")()
	d := p.d
	l, a := d.led, d.applier()
	req := requestFor(pod, ctr)
	entry := d.log.WithFields(logrus.Fields{"pod": podName(pod), "container": ctr.GetName(), "id": ctr.GetId()})
	nodes, devErr := p.deviceReader().nodes(ctr)

	l.mu.Lock()
	defer l.mu.Unlock()
	if l.engine == nil {
		return nil, nil, fmt.Errorf("InvalidConfig: nri-cpualign is not configured: %w", l.pendingErr)
	}
	req = withDeviceHints(l.engine, req, nodes, devErr, entry)
	start := time.Now()
	next, dec, err := l.engine.Add(l.st, req)
	if err == nil {
		err = stranding(l.engine, req, next, dec, l.sharedOthers(ctr.GetId()))
	}
	d.obs.observeAdmission(req, err, time.Since(start), l.static(), l.cfg.TopologyManagerScope)
	if err != nil {
		err = admissionError(err)
		entry.WithError(err).WithField("reason", reasonOf(err)).Warn("container rejected")
		return nil, nil, err
	}
	rec := ctrRecord{ID: ctr.GetId(), Pod: req.Pod, PodName: podName(pod), Name: ctr.GetName(),
		CgroupsPath: ctr.GetLinux().GetCgroupsPath(), Exclusive: dec.Exclusive}
	if dec.Exclusive && !dec.Mems.IsEmpty() {
		rec.Mems = dec.Mems.String()
	}
	edit, superseded := withRecord(l, rec)
	// Logged once the commit succeeded, with the state before it.
	var supersededCPUs []string
	var prevShared string
	for _, r := range superseded {
		supersededCPUs = append(supersededCPUs, l.rightCPUs(r).String())
		prevShared = l.engine.SharedMask(l.st).String()
	}
	poolChanged, err := l.commit(next, indexChange{edit: edit})
	if err != nil {
		entry.WithError(err).Error("cannot write the checkpoint; failing the container rather than losing the decision")
		d.obs.refusals.WithLabelValues("PersistError").Inc()
		return nil, nil, err
	}
	for i, r := range superseded {
		p.logAbandoned(r, supersededCPUs[i], prevShared, "created again as "+rec.ID+" before it started",
			"container never started: its pod created it again, the new attempt takes its place")
	}
	l.armStartTimer(rec.ID)
	d.obs.observeDecision(dec, l.topo, l.engine, l.cfg.TopologyManagerScope)

	adj := adjustmentOf(dec)
	if !dec.Exclusive {
		a.created(rec.ID, dec.CPUs.String())
	}
	var updates []*api.ContainerUpdate
	if poolChanged {
		updates = a.poolChanged(rec.ID)
	}
	p.logDecision(entry.WithField("updates", len(updates)), dec, "container admitted")
	return adj, updates, nil
}

// withRecord is the edit putting rec in the index. A container
// re-created under the same pod and name (a restart) replaces the old
// record; the engine already gave it the old CPUs. An old one that never
// started is a dead attempt (the kubelet retries a failed creation with a
// new ID): it is returned as superseded. l.mu is held.
func withRecord(l *ledger, rec ctrRecord) (edit ctrEdit, superseded []ctrRecord) {
	for id, r := range l.ctrs {
		if id != rec.ID && r.Pod == rec.Pod && r.Name == rec.Name {
			if l.awaitingStart(id) {
				superseded = append(superseded, r)
			}
			edit.del = append(edit.del, id)
		}
	}
	edit.put = []ctrRecord{rec}
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

// logDecision writes the one info line per decision.
func (p *plugin) logDecision(entry *logrus.Entry, dec policy.Decision, msg string) {
	d := p.d
	topo := d.led.topo
	entry.WithFields(logrus.Fields{
		"cpus":      dec.CPUs.String(),
		"mems":      dec.Mems.String(),
		"numa":      fmt.Sprint(topo.NUMANodesOf(dec.CPUs)),
		"l3":        fmt.Sprint(topo.L3GroupsOf(dec.CPUs)),
		"exclusive": dec.Exclusive,
	}).Info(msg)
}

// StartContainer is the sign that the container came to life: both
// runtimes send it only after the OCI runtime created the container. Its
// start timer is disarmed, a container given up by its timer is placed
// again, and the applier holds the start until the container's CPUs are
// its own (direct's start barrier).
func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	defer p.d.obs.timeEvent("StartContainer")()
	d := p.d
	l, a := d.led, d.applier()
	l.mu.Lock()
	l.disarmStartTimer(ctr.GetId())
	_, givenUp := l.gaveUp[ctr.GetId()]
	l.mu.Unlock()
	changed := false
	if givenUp {
		late := p.lateRequest(pod, ctr)
		l.mu.Lock()
		changed = p.startedLate(late)
		l.mu.Unlock()
	}
	if changed {
		a.kick()
	}
	a.starting(ctr.GetId())
	return nil
}

// StopContainer releases the container's exclusive CPUs; the applier
// brings the shared-pool containers to the grown pool.
func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	defer p.d.obs.timeEvent("StopContainer")()
	d := p.d
	d.led.mu.Lock()
	defer d.led.mu.Unlock()
	changed, err := p.forget(ctr.GetId(), "stopped")
	if err != nil || !changed {
		return nil, err
	}
	return d.applier().poolChanged(ctr.GetId()), nil
}

// forget releases and drops one container; it reports whether the shared
// pool changed. Unknown containers are no-ops (idempotent). l.mu is held.
func (p *plugin) forget(id, why string) (bool, error) {
	d := p.d
	l := d.led
	l.forgetGaveUp(id, "")
	r, ok := l.ctrs[id]
	if !ok {
		return false, nil
	}
	changed, err := p.release(r)
	if err == nil && r.Exclusive {
		d.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id, "shared": l.engine.SharedMask(l.st).String()}).
			Info("container " + why + ": exclusive CPUs released")
	}
	return changed, err
}

// release gives a known container's CPUs back and drops it from the
// index; it reports whether the shared pool changed. l.mu is held.
func (p *plugin) release(r ctrRecord) (bool, error) {
	d := p.d
	l := d.led
	changed, err := l.commit(l.engine.Remove(l.st, r.Pod, r.Name), indexChange{edit: ctrEdit{del: []string{r.ID}}})
	if err != nil {
		d.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name}).Error("cannot write the checkpoint; the container's CPUs stay assigned")
	}
	return changed, err
}

// RemoveContainer forgets the container (idempotent). It cannot return
// updates: the applier's worker brings the shared-pool containers along.
func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.d.obs.timeEvent("RemoveContainer")()
	d := p.d
	d.led.mu.Lock()
	changed, err := p.forget(ctr.GetId(), "removed")
	d.led.mu.Unlock()
	if changed {
		d.applier().kick()
	}
	return err
}

// RemovePodSandbox forgets every container of the pod and its pod-scope
// affinity (idempotent).
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.d.obs.timeEvent("RemovePodSandbox")()
	d := p.d
	l := d.led
	key := podKey(pod)
	l.mu.Lock()
	if l.engine == nil {
		l.mu.Unlock()
		return nil
	}
	l.forgetGaveUp("", key)
	next := l.engine.RemovePod(l.st, key)
	var edit ctrEdit
	for id, r := range l.ctrs {
		if r.Pod == key {
			next = l.engine.Remove(next, r.Pod, r.Name)
			edit.del = append(edit.del, id)
		}
	}
	if len(edit.del) == 0 && podUnknown(l.st, key) {
		l.mu.Unlock()
		return nil
	}
	changed, err := l.commit(next, indexChange{edit: edit})
	l.mu.Unlock()
	if changed {
		d.applier().kick()
	}
	return err
}

// podUnknown reports whether st holds nothing for pod.
func podUnknown(st policy.State, pod string) bool {
	_, a := st.Alloc.Assignments[pod]
	_, b := st.PodAffinity[pod]
	return !a && !b
}

// UpdateContainer handles an in-place resize: an exclusive container's
// CPUs grow and shrink in place under KEP-5554's rules, and a resize the
// rules forbid (below the admitted CPUs, or between the shared pool and
// exclusive CPUs) is refused with an error starting with
// "InPlaceResizeRejected" (resize.go). A shared-pool container that stays
// shared keeps its cpuset (the runtime leaves an empty cpuset alone).
func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	defer p.d.obs.timeEvent("UpdateContainer")()
	cpu := cpuOf(res)
	if cpu == nil || (cpu.GetShares() == nil && cpu.GetQuota() == nil) {
		return nil, nil
	}
	return p.resize(ctr.GetId(), requestWithCPU(pod, ctr, cpu))
}

// PostUpdateContainer follows an update the runtime applied: a downsize
// gives its CPUs back to the shared pool now (resize.go).
func (p *plugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.d.obs.timeEvent("PostUpdateContainer")()
	p.resized(ctr.GetId())
	return nil
}
