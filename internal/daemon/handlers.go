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

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// plugin is what the NRI stub sees; it forwards every event to the daemon.
// Keeping it separate keeps the handler methods off Daemon's API.
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
// the decision; this applies it.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.d.metrics.timeEvent("Synchronize")()
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.engine == nil {
		return nil, fmt.Errorf("InvalidConfig: not configured: %w", d.pendingErr)
	}
	plan := planSync(d.engine, d.syncInput(pods, ctrs))
	d.logSyncEvents(plan.Events)
	for _, a := range plan.Admissions {
		d.metrics.observeAdmission(a.Request, a.Err, 0)
	}
	if err := d.persist(plan.State, plan.Records); err != nil {
		d.log.WithError(err).Error("synchronize: cannot write the checkpoint")
		return nil, err
	}
	d.st, d.ctrs = plan.State, plan.Records
	d.gen++
	d.syncs++
	d.metrics.updateGauges()
	// The runtime's view decides which containers still wait for their
	// start: timers of containers gone or running are dropped, and a
	// container created but not started (while the plugin was away, or
	// before a restart) gets a full timeout from now.
	for id := range d.starting {
		d.started(id)
	}
	clear(d.gaveUp)
	for _, id := range plan.AwaitStart {
		d.awaitStart(id)
	}
	planned := plan.Updates
	if d.direct() {
		// Shared-pool containers are written by a pass, and not sent to
		// the runtime, whose record of them is stale by design (direct.go).
		planned = exclusiveUpdates(planned, d.ctrs)
		clear(d.cgw.written)
		d.kick()
	}
	updates := nriUpdates(planned)
	d.log.WithFields(logrus.Fields{
		"pods": len(pods), "containers": len(plan.Live), "released": len(plan.Released), "placed": plan.Placed,
		"updates": len(updates), "shared": d.engine.SharedMask(d.st).String(),
	}).Info("synchronized with the runtime")
	if d.syncs == 1 {
		close(d.syncedC)
	}
	d.connected.Store(true)
	return updates, nil
}

// syncInput is what Synchronize decides from, as plain data: the state,
// the index, and the runtime's pods and containers. Device NUMA nodes are
// read for every live container (planSync uses them for those it admits).
func (d *Daemon) syncInput(pods []*api.PodSandbox, ctrs []*api.Container) syncInput {
	in := syncInput{State: d.st, Records: d.ctrs, Static: d.cfg.CPUManagerPolicy == policy.CPUPolicyStatic,
		Pods: make([]syncPod, 0, len(pods)), Ctrs: make([]syncCtr, 0, len(ctrs))}
	podByID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		podByID[pod.GetId()] = pod
		in.Pods = append(in.Pods, syncPod{ID: pod.GetId(), Key: podKey(pod), Name: podName(pod)})
	}
	direct, cg := d.direct(), d.cgroups() // one cgroup version detection for all
	for _, c := range ctrs {
		cpu := c.GetLinux().GetResources().GetCpu()
		sc := syncCtr{ID: c.GetId(), SandboxID: c.GetPodSandboxId(), Name: c.GetName(), Phase: phaseOf(c),
			CreatedAt: c.GetCreatedAt(), CPUs: cpu.GetCpus(), Mems: cpu.GetMems(), CgroupsPath: c.GetLinux().GetCgroupsPath()}
		if direct && sc.Phase != phaseStopped {
			// The runtime's record of a shared-pool container is the
			// cpuset it was created with (direct.go): what it runs on is
			// in its cgroup.
			if cpus, _, err := cg.read(sc.CgroupsPath); err == nil {
				sc.CPUs = cpus.String()
			}
		}
		if pod := podByID[sc.SandboxID]; pod != nil && sc.Phase != phaseStopped {
			sc.Request = requestFor(pod, c)
			sc.DeviceNodes, sc.DeviceErr = d.deviceNodes(c)
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
func (d *Daemon) logSyncEvents(events []syncEvent) {
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
			d.logDecision(entry, ev.Decision, "placed at synchronize")
		}
	}
}

// exclusiveUpdates are the updates of planned that are for exclusive
// containers of recs.
func exclusiveUpdates(planned []cpuUpdate, recs map[string]ctrRecord) []cpuUpdate {
	var out []cpuUpdate
	for _, u := range planned {
		if recs[u.ID].Exclusive {
			out = append(out, u)
		}
	}
	return out
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
// the shared pool changed every other shared-pool container gets an
// update. A rejection fails the creation with the reason word first.
func (p *plugin) CreateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	defer p.d.metrics.timeEvent("CreateContainer")()
	d := p.d
	req := requestFor(pod, ctr)
	entry := d.log.WithFields(logrus.Fields{"pod": podName(pod), "container": ctr.GetName(), "id": ctr.GetId()})

	d.mu.Lock()
	defer d.mu.Unlock()
	if d.engine == nil {
		return nil, nil, fmt.Errorf("InvalidConfig: nri-cpualign is not configured: %w", d.pendingErr)
	}
	req = d.withDeviceHints(req, ctr, entry)
	start := time.Now()
	next, dec, err := d.engine.Add(d.st, req)
	if err == nil {
		err = d.strands(req, next, dec, sharedRecords(d.ctrs, ctr.GetId()))
	}
	d.metrics.observeAdmission(req, err, time.Since(start))
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
	edit, superseded := d.withRecord(rec)
	if err := d.persistEdit(next, edit); err != nil {
		entry.WithError(err).Error("cannot write the checkpoint; failing the container rather than losing the decision")
		return nil, nil, err
	}
	prevShared := d.engine.SharedMask(d.st)
	for _, r := range superseded {
		d.started(r.ID)
		d.logAbandoned(r, d.rightCPUs(r).String(), "created again as "+rec.ID+" before it started",
			"container never started: its pod created it again, the new attempt takes its place")
	}
	d.st = next
	d.commitEdit(edit)
	d.gen++
	d.awaitStart(rec.ID)
	d.metrics.observeDecision(dec, d.topo)
	d.metrics.updateGauges()

	adj := adjustmentOf(dec)
	if d.direct() && !dec.Exclusive {
		d.noteAnswered(rec.ID, dec.CPUs.String())
	}
	var updates []*api.ContainerUpdate
	if !prevShared.Equals(d.engine.SharedMask(d.st)) {
		updates = d.sharedPoolShrunk(rec.ID)
	}
	d.logDecision(entry.WithField("updates", len(updates)), dec, "container admitted")
	return adj, updates, nil
}

// withRecord is the edit putting rec in the index. A container
// re-created under the same pod and name (a restart) replaces the old
// record; the engine already gave it the old CPUs. An old one that never
// started is a dead attempt (the kubelet retries a failed creation with a
// new ID): it is returned as superseded. d.mu is held.
func (d *Daemon) withRecord(rec ctrRecord) (edit ctrEdit, superseded []ctrRecord) {
	for id, r := range d.ctrs {
		if id != rec.ID && r.Pod == rec.Pod && r.Name == rec.Name {
			if d.awaitingStart(id) {
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
func (d *Daemon) logDecision(entry *logrus.Entry, dec policy.Decision, msg string) {
	entry.WithFields(logrus.Fields{
		"cpus":      dec.CPUs.String(),
		"mems":      dec.Mems.String(),
		"numa":      fmt.Sprint(d.topo.NUMANodesOf(dec.CPUs)),
		"l3":        fmt.Sprint(d.topo.L3GroupsOf(dec.CPUs)),
		"exclusive": dec.Exclusive,
	}).Info(msg)
}

// StartContainer is the sign that the container came to life: both
// runtimes send it only after the OCI runtime created the container.
func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	defer p.d.metrics.timeEvent("StartContainer")()
	d := p.d
	d.mu.Lock()
	d.started(ctr.GetId())
	changed := d.startedLate(pod, ctr)
	d.mu.Unlock()
	if changed {
		d.kick()
	}
	d.directStart(ctr.GetId())
	return nil
}

// StopContainer releases the container's exclusive CPUs and returns the
// updates that grow the shared pool of the others.
func (p *plugin) StopContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	defer p.d.metrics.timeEvent("StopContainer")()
	d := p.d
	d.mu.Lock()
	defer d.mu.Unlock()
	changed, err := d.forget(ctr.GetId(), "stopped")
	if err != nil || !changed {
		return nil, err
	}
	return d.sharedPoolChanged(ctr.GetId()), nil
}

// sharedPoolChanged is what an answer carries after the shared pool
// changed: under shared_pool_updates = "in-answer" the updates of every
// shared-pool container but skip; otherwise nothing, with the update
// worker woken to push them (after-answer) or write them (direct) once the
// answer is out (d.mu is held until then).
func (d *Daemon) sharedPoolChanged(skip string) []*api.ContainerUpdate {
	if d.cfg.SharedPoolUpdates == config.SharedUpdatesInAnswer {
		return d.sharedUpdates(skip)
	}
	// Waking the worker for nothing costs the answer a goroutine handoff
	// (0.1 ms here): only when some shared-pool container must follow.
	for id, r := range d.ctrs {
		if id != skip && !r.Exclusive {
			d.kick()
			break
		}
	}
	return nil
}

// forget releases and drops one container; it reports whether the shared
// pool changed. Unknown containers are no-ops (idempotent).
func (d *Daemon) forget(id, why string) (bool, error) {
	d.forgetGaveUp(id, "")
	r, ok := d.ctrs[id]
	if !ok {
		return false, nil
	}
	changed, err := d.drop(id)
	if err == nil && r.Exclusive {
		d.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": id, "shared": d.engine.SharedMask(d.st).String()}).
			Info("container " + why + ": exclusive CPUs released")
	}
	return changed, err
}

// drop releases and drops one known container without logging the
// release; it reports whether the shared pool changed.
func (d *Daemon) drop(id string) (bool, error) {
	r := d.ctrs[id]
	next := d.engine.Remove(d.st, r.Pod, r.Name)
	edit := ctrEdit{del: []string{id}}
	if err := d.persistEdit(next, edit); err != nil {
		d.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name}).Error("cannot write the checkpoint; the container's CPUs stay assigned")
		return false, err
	}
	d.started(id)
	d.dropPushAfterStart(id)
	prevShared := d.engine.SharedMask(d.st)
	d.st = next
	d.commitEdit(edit)
	d.gen++
	d.metrics.updateGauges()
	return !prevShared.Equals(d.engine.SharedMask(d.st)), nil
}

// RemoveContainer forgets the container (idempotent). It cannot return
// updates, so a grown shared pool is pushed by the update worker.
func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.d.metrics.timeEvent("RemoveContainer")()
	d := p.d
	d.mu.Lock()
	changed, err := d.forget(ctr.GetId(), "removed")
	d.mu.Unlock()
	if changed {
		d.kick()
	}
	return err
}

// RemovePodSandbox forgets every container of the pod and its pod-scope
// affinity (idempotent).
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.d.metrics.timeEvent("RemovePodSandbox")()
	d := p.d
	d.mu.Lock()
	key := podKey(pod)
	d.forgetGaveUp("", key)
	next := d.engine.RemovePod(d.st, key)
	var edit ctrEdit
	for id, r := range d.ctrs {
		if r.Pod == key {
			next = d.engine.Remove(next, r.Pod, r.Name)
			edit.del = append(edit.del, id)
		}
	}
	if len(edit.del) == 0 && podUnknown(d.st, key) {
		d.mu.Unlock()
		return nil
	}
	if err := d.persistEdit(next, edit); err != nil {
		d.mu.Unlock()
		return err
	}
	prevShared := d.engine.SharedMask(d.st)
	for _, id := range edit.del {
		d.started(id)
	}
	d.st = next
	d.commitEdit(edit)
	d.gen++
	d.metrics.updateGauges()
	changed := !prevShared.Equals(d.engine.SharedMask(d.st))
	d.mu.Unlock()
	if changed {
		d.kick()
	}
	return nil
}

// podUnknown reports whether st holds nothing for pod.
func podUnknown(st policy.State, pod string) bool {
	_, a := st.Alloc.Assignments[pod]
	_, b := st.PodAffinity[pod]
	return !a && !b
}

// UpdateContainer handles an in-place resize. The exclusive CPU count of
// a container is fixed for its life, as under the kubelet's static
// policy: a resize that would change it (including into or out of
// exclusive CPUs) is refused with an error starting with
// "InPlaceResizeRejected"; any other resize goes through unchanged, and
// the container keeps its cpuset (the runtime leaves an empty cpuset
// alone).
func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) ([]*api.ContainerUpdate, error) {
	defer p.d.metrics.timeEvent("UpdateContainer")()
	d := p.d
	cpu := cpuOf(res)
	if cpu == nil || (cpu.GetShares() == nil && cpu.GetQuota() == nil) {
		return nil, nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	r, ok := d.ctrs[ctr.GetId()]
	if !ok {
		return nil, nil
	}
	have := 0
	if r.Exclusive {
		if cpus, ok := d.engine.Assignment(d.st, r.Pod, r.Name); ok {
			have = cpus.Size()
		}
	}
	want := d.exclusiveCount(requestWithCPU(pod, ctr, cpu))
	if want != have {
		err := fmt.Errorf("InPlaceResizeRejected: container %s of pod %s holds %d exclusive CPUs and the resize asks for %d; "+
			"the exclusive CPU count cannot change in place, recreate the pod", r.Name, r.PodName, have, want)
		d.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "reason": "InPlaceResizeRejected", "have": have, "want": want}).
			Warn("resize refused")
		return nil, err
	}
	return nil, nil
}

// exclusiveCount is how many exclusive CPUs the static policy gives req:
// a Guaranteed container with request equal to limit in whole CPUs.
func (d *Daemon) exclusiveCount(req policy.Request) int {
	return exclusiveCountFor(d.cfg.CPUManagerPolicy == policy.CPUPolicyStatic, req)
}
