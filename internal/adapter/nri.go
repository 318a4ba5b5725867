package adapter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// plugin is the NRI adapter (docs/architecture.md): what the NRI stub
// sees. It holds no state of its own: each event becomes a plan on the
// ledger's values and a ledger commit, and the result an NRI answer; the
// applier is told when the shared pool changed. Requests and device NUMA
// nodes are read before the ledger's lock is taken.
type plugin struct {
	d *Deps
	// driverSettled: the daemon's driver check said the mode cannot
	// change before the next Configure, so events stop asking it.
	driverSettled atomic.Bool
}

// The NRI events the plugin handles (the stub subscribes to exactly these).
var (
	_ stub.ConfigureInterface           = (*plugin)(nil)
	_ stub.SynchronizeInterface         = (*plugin)(nil)
	_ stub.ShutdownInterface            = (*plugin)(nil)
	_ stub.CreateContainerInterface     = (*plugin)(nil)
	_ stub.StartContainerInterface      = (*plugin)(nil)
	_ stub.UpdateContainerInterface     = (*plugin)(nil)
	_ stub.PostUpdateContainerInterface = (*plugin)(nil)
	_ stub.StopContainerInterface       = (*plugin)(nil)
	_ stub.RemoveContainerInterface     = (*plugin)(nil)
	_ stub.StopPodInterface             = (*plugin)(nil)
	_ stub.RemovePodInterface           = (*plugin)(nil)
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
	d.Log.WithFields(logrus.Fields{"runtime": runtime, "version": version, "has_config": strings.TrimSpace(cfg) != ""}).
		Info("configured by the runtime")
	if err := d.Configure(cfg); err != nil {
		d.Log.WithError(err).Error("refusing the runtime's configuration")
		return 0, err
	}
	// What this runtime can take decides, before Synchronize and before
	// any update, whether the plugin may update containers on its own.
	nriVersion := ""
	if s := d.Conn.Get(); s != nil {
		nriVersion = s.RuntimeNRIVersion() // the stub has it before it calls Configure
	}
	rs := applier.SupportOf(runtime, version, nriVersion)
	d.Conn.SetRuntime(rs)
	rs.LogSupport(d.Log, d.Applier.Load().Mode())
	p.driverSettled.Store(false) // the configuration may have changed the mode's key
	return 0, nil                // 0: every event the plugin implements
}

// seeDriver hands an event's cgroups paths to the daemon's driver check
// until the check says the mode is settled (the first container's path
// decides it, once). Inside the event's Update.
func (p *plugin) seeDriver(l *ledger.Tx, paths ...string) {
	if p.driverSettled.Load() {
		return
	}
	if p.d.SeeDriver(l, paths...) {
		p.driverSettled.Store(true)
	}
}

// Shutdown is the runtime going down; the state is already on disk.
func (p *plugin) Shutdown(context.Context) {
	p.d.Log.Info("runtime is shutting down")
}

// Synchronize rebuilds the state against the runtime: containers that are
// gone are released, containers created while the plugin was away are
// placed now (a rejection cannot fail a running container: it stays in the
// shared pool and the rejection is logged), and the answer carries the
// updates that bring every container to its right cpuset. planSync makes
// the decision; this commits it.
func (p *plugin) Synchronize(_ context.Context, pods []*api.PodSandbox, ctrs []*api.Container) ([]*api.ContainerUpdate, error) {
	defer p.d.Metrics.timeEvent("Synchronize")()
	in := p.syncInput(pods, ctrs)
	return ledger.Within(p.d.Ledger, func(l *ledger.Tx) ([]*api.ContainerUpdate, error) { return p.synchronize(l, pods, ctrs, in) })
}

// synchronize is Synchronize inside its Update.
func (p *plugin) synchronize(l *ledger.Tx, pods []*api.PodSandbox, ctrs []*api.Container, in syncInput) ([]*api.ContainerUpdate, error) {
	d := p.d
	if l.Engine() == nil {
		return nil, fmt.Errorf("InvalidConfig: not configured: %w", l.PendingErr())
	}
	paths := make([]string, 0, len(in.Ctrs))
	for _, c := range in.Ctrs {
		paths = append(paths, c.CgroupsPath)
	}
	p.seeDriver(l, paths...)
	a := d.Applier.Load() // after seeDriver, which may replace it
	in.State, in.Records, in.Static, in.Now, in.Shrinking = l.State(), l.Index(), l.Static(), l.Stamp(), l.Shrinks()
	in.Records = memsAtSync(l.Engine(), in.State, in.Records)
	plan := planSync(l.Engine(), in)
	p.logSyncEvents(l, plan.Events)
	p.logMoved(in, plan)
	scope := l.Settings().TopologyManagerScope
	for _, adm := range plan.Admissions {
		d.Metrics.observeAdmission(adm.Request, adm.Err, 0, in.Static, scope)
	}
	// The runtime's view decides which containers still await their
	// start, which are stopped, each pod's sandbox and the devices.
	sync := &ledger.Sync{AwaitStart: plan.AwaitStart, Stopped: stoppedOf(in), Sandboxes: sandboxesOf(in), Devices: devicesOf(in, plan.Records)}
	if _, err := l.Commit(ledger.Change{Next: &plan.State, Index: ledger.IndexChange{All: plan.Records}, Sync: sync}); err != nil {
		d.Log.WithError(err).Error("synchronize: cannot write the checkpoint")
		return nil, err
	}
	updates := p.quotaAtSync(l, ctrs, a.Synchronized(l, plan.Updates))
	d.Log.WithFields(logrus.Fields{
		"pods": len(pods), "containers": len(plan.Live), "released": len(plan.Released), "placed": plan.Placed,
		"updates": len(updates), "shared": l.Engine().SharedMask(l.State()).String(),
	}).Info("synchronized with the runtime")
	if l.Syncs() == 1 {
		close(d.Synced)
	}
	if l.Syncs() > 1 {
		d.Metrics.reconnects.Inc()
	}
	d.Connected.Store(true)
	return updates, nil
}

// syncInput is what Synchronize decides from, read from the runtime's
// pods and containers without the ledger's lock: their requests, the
// NUMA nodes of their devices (planSync uses them for those it admits),
// and, when the applier says so, the cpuset.cpus and cpuset.mems in a
// running container's cgroup.
func (p *plugin) syncInput(pods []*api.PodSandbox, ctrs []*api.Container) syncInput {
	d := p.d
	in := syncInput{Pods: make([]syncPod, 0, len(pods)), Ctrs: make([]syncCtr, 0, len(ctrs))}
	podByID := make(map[string]*api.PodSandbox, len(pods))
	for _, pod := range pods {
		podByID[pod.GetId()] = pod
		in.Pods = append(in.Pods, syncPod{ID: pod.GetId(), Key: request.PodKey(pod), Name: request.PodName(pod)})
	}
	devs := request.DeviceReaderOf(d.Ledger.Config())
	a := d.Applier.Load()
	readCgroups, cg := a.SyncReadsCgroups(), a.CgroupRoot()
	for _, c := range ctrs {
		cpu := c.GetLinux().GetResources().GetCpu()
		sc := syncCtr{ID: c.GetId(), SandboxID: c.GetPodSandboxId(), Name: c.GetName(), Phase: phaseOf(c),
			CreatedAt: c.GetCreatedAt(), CPUs: cpu.GetCpus(), Mems: cpu.GetMems(), CgroupsPath: c.GetLinux().GetCgroupsPath()}
		if readCgroups && sc.Phase != phaseStopped {
			if cpus, mems, err := cg.Read(sc.CgroupsPath); err == nil {
				sc.CPUs = cpus.String()
				if !mems.IsEmpty() { // cgroup v2's empty file: the parent's
					sc.Mems = mems.String()
				}
			}
		}
		if pod := podByID[sc.SandboxID]; pod != nil && sc.Phase != phaseStopped {
			sc.Request = request.For(pod, c)
			sc.Devices, sc.DeviceErr = devs.Nodes(pod, c)
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
func (p *plugin) logSyncEvents(l *ledger.Tx, events []syncEvent) {
	d := p.d
	for _, ev := range events {
		entry := d.Log.WithFields(logrus.Fields{"pod": ev.Pod, "container": ev.Container, "id": ev.ID})
		switch ev.Kind {
		case evKept:
			entry.WithField("cpus", ev.CPUs.String()).
				Warn("state had no assignment for a running exclusive container; kept the CPUs it runs on")
		case evKeptMemory:
			entry.WithField("mems", ev.CPUs.String()).
				Warn("state had no memory assignment for a running exclusive container; kept the memory nodes it runs on")
		case evNoDeviceHint:
			entry.WithError(ev.Err).Warn(request.NoDeviceHintMsg)
		case evRefused:
			ev.Devices.Log(entry)
			entry = ev.Devices.WithDevices(entry)
			entry.WithError(ev.Err).WithField("reason", reasonOf(ev.Err)).
				Warn("container created while the plugin was away cannot be admitted now; it stays in the shared pool")
		case evPlaced:
			ev.Devices.Log(entry)
			entry = ev.Devices.WithDevices(entry)
			p.logDecision(l, entry, ev.Decision, "placed at synchronize")
		}
	}
}

// logMoved logs each container the plugin knew that Synchronize finds
// off its placement: one whose answer the runtime never applied (it gave
// up waiting, ran the container with the kubelet's cpuset, and dropped the
// plugin), or one changed behind the plugin's back while it was away.
func (p *plugin) logMoved(in syncInput, plan syncPlan) {
	found := make(map[string]syncCtr, len(plan.Live))
	for _, c := range plan.Live {
		found[c.ID] = c
	}
	for _, u := range plan.Updates {
		r, known := in.Records[u.ID]
		c, live := found[u.ID]
		if !known || !live || c.Phase != phaseRunning {
			continue
		}
		p.d.Log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": r.ID, "exclusive": plan.Records[u.ID].Exclusive,
			"found_cpus": c.CPUs, "cpus": u.CPUs}).
			Info("synchronize: container running off its placement (an answer the runtime never applied, or a change while the plugin was away); moving it")
	}
}

// CreateContainer admits the container: the engine's decision becomes the
// adjustment (cpuset.cpus and, for exclusive CPUs, cpuset.mems), and when
// the shared pool changed the applier brings the other shared-pool
// containers along. A rejection fails the creation with the reason word
// first.
func (p *plugin) CreateContainer(ctx context.Context, pod *api.PodSandbox, ctr *api.Container) (*api.ContainerAdjustment, []*api.ContainerUpdate, error) {
	defer p.d.Metrics.timeEvent("CreateContainer")()
	d := p.d
	req := request.For(pod, ctr)
	entry := d.Log.WithFields(logrus.Fields{"pod": request.PodName(pod), "container": ctr.GetName(), "id": ctr.GetId()})
	cfg := d.Ledger.Config()
	devInfo, devErr := request.DeviceReaderOf(cfg).Nodes(pod, ctr)
	devInfo, entry = d.PodResources.Add(ctx, cfg, pod, ctr, devInfo, entry)
	nodes := deviceNodes(devInfo, devErr, entry)
	entry = devInfo.WithDevices(entry)
	var adj *api.ContainerAdjustment
	updates, err := ledger.Within(d.Ledger, func(l *ledger.Tx) (updates []*api.ContainerUpdate, err error) {
		adj, updates, err = p.create(l, pod, ctr, req, nodes, devInfo, entry)
		return updates, err
	})
	return adj, updates, err
}

// logDecision writes the one info line per decision.
func (p *plugin) logDecision(l *ledger.Tx, entry *logrus.Entry, dec policy.Decision, msg string) {
	topo := l.Topology()
	entry.WithFields(logrus.Fields{
		"cpus":      dec.CPUs.String(),
		"mems":      dec.Mems.String(),
		"numa":      fmt.Sprint(topo.NUMANodesOf(dec.CPUs)),
		"l3":        fmt.Sprint(topo.L3GroupsOf(dec.CPUs)),
		"exclusive": dec.Exclusive,
	}).Info(msg)
}

// StartContainer is the sign that the container came to life: both
// runtimes send it only after the OCI runtime created the container. It
// no longer awaits its start, and the applier holds the start until the
// container's CPUs are its own (direct's start barrier).
func (p *plugin) StartContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container) error {
	defer p.d.Metrics.timeEvent("StartContainer")()
	var a applier.Applier
	_ = p.d.Ledger.Update(func(l *ledger.Tx) error {
		a = p.start(l, pod, ctr)
		return nil // logged: the start goes on
	})
	a.StartBarrier(ctr.GetId())
	return nil
}

// start is StartContainer inside its Update; it returns the applier of
// the start barrier.
func (p *plugin) start(l *ledger.Tx, pod *api.PodSandbox, ctr *api.Container) applier.Applier {
	d := p.d
	c := ledger.Change{Life: ledger.Life{Started: ctr.GetId()}}
	rec, entry, unplaced := p.unplaced(l, pod, ctr)
	if unplaced {
		c.Index.Edit.Put = []ledger.Record{rec}
	}
	switch _, err := l.Commit(c); {
	case err != nil && unplaced:
		entry.WithError(err).Error("cannot write the checkpoint; a container the plugin never placed stays where the runtime put it until the reconcile loop")
	case err != nil:
		entry.WithError(err).Error("cannot note the container's start")
	case unplaced:
		entry.Warn("container starting that the plugin never placed (its CreateContainer answer did not reach the runtime): put on the shared pool")
		p.seeDriver(l, rec.CgroupsPath)
		d.Applier.Load().Kick()
	}
	return d.Applier.Load() // after seeDriver, which may replace it
}

// unplaced takes in a container that starts although the plugin never
// placed it: the runtime gave up waiting for the CreateContainer answer
// (its NRI request timeout; it then drops the plugin, and the container
// was created after the reconnection's Synchronize listed the runtime's
// containers) and created it with the cpuset the kubelet asked for,
// every CPU, exclusive ones included. It joins the shared pool, where a
// running container the plugin cannot admit goes at Synchronize too: the
// applier puts it there now (direct: the start check writes its cgroup;
// in-answer: the worker pushes the pool). unplaced is the record
// StartContainer's change puts in the index, and whether there is one;
// entry is the event's log entry either way.
func (p *plugin) unplaced(l *ledger.Tx, pod *api.PodSandbox, ctr *api.Container) (ledger.Record, *logrus.Entry, bool) {
	d := p.d
	id := ctr.GetId()
	entry := d.Log.WithFields(logrus.Fields{"pod": request.PodName(pod), "container": ctr.GetName(), "id": id})
	e := l.Engine()
	if _, ok := l.Record(id); ok || e == nil || l.Syncs() == 0 {
		return ledger.Record{}, entry, false
	}
	rec := ledger.Record{ID: id, Pod: request.PodKey(pod), PodName: request.PodName(pod), Name: ctr.GetName(),
		CgroupsPath: ctr.GetLinux().GetCgroupsPath(), Since: l.Stamp()}
	entry = entry.WithFields(logrus.Fields{"found_cpus": ctr.GetLinux().GetResources().GetCpu().GetCpus(), "cpus": e.SharedMask(l.State()).String()})
	return rec, entry, true
}

// StopContainer forgets the container but not its CPUs: as under the
// kubelet, whose assignments are keyed by pod and container name and
// outlive a container of a live pod, an exclusive container's CPUs stay
// held for its pod and name until the pod goes (RemovePodSandbox,
// StopPodSandbox, or Synchronize not finding it). Its restart gets
// exactly them, and the pod's later containers of another name may reuse
// them (withReuse). The shared pool does not change: no updates.
func (p *plugin) StopContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	defer p.d.Metrics.timeEvent("StopContainer")()
	return ledger.Within(p.d.Ledger, func(l *ledger.Tx) ([]*api.ContainerUpdate, error) { return p.stop(l, ctr) })
}

// stop is StopContainer inside its Update.
func (p *plugin) stop(l *ledger.Tx, ctr *api.Container) ([]*api.ContainerUpdate, error) {
	d := p.d
	r, ok := l.Record(ctr.GetId())
	if ok {
		entry := ctrEntry(d.Log, r)
		held := heldFor(l, r)
		if _, err := l.Commit(forgetting(r, ledger.Life{Stopped: map[string]ledger.PodContainer{r.ID: {Pod: r.Pod, Name: r.Name}}})); err != nil {
			// What the applier holds for an answer stays held for the next.
			entry.WithError(err).Error("cannot write the checkpoint; the container stays in the index")
			return nil, err
		}
		logHeld(entry, r, held, "stopped")
	}
	// The answer also carries what was held back for one (owed): on a
	// runtime that takes no unsolicited update a stop is one of the few
	// events whose answer can.
	return d.Applier.Load().Owed(l, ctr.GetId(), nil), nil
}

// forgetting is the change dropping a known container from the index,
// with the lifecycle facts of its event; its exclusive CPUs stay assigned
// to its pod and name.
func forgetting(r ledger.Record, life ledger.Life) ledger.Change {
	return ledger.Change{Index: ledger.IndexChange{Edit: ledger.Edit{Del: []string{r.ID}}}, Life: life}
}

func ctrEntry(log *logrus.Logger, r ledger.Record) *logrus.Entry {
	return log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": r.ID})
}

// heldFor is the CPUs that stay held for r's pod and name once r leaves
// the index (none for a shared-pool container), read before the commit
// that forgets it (which does not change them).
func heldFor(l *ledger.Tx, r ledger.Record) cpuset.CPUSet {
	if cpus, held := l.Engine().Assignment(l.State(), r.Pod, r.Name); held && r.Exclusive {
		return cpus
	}
	return cpuset.New()
}

// logHeld says, once the commit forgot r, that its exclusive CPUs stay
// held for its pod.
func logHeld(entry *logrus.Entry, r ledger.Record, held cpuset.CPUSet, why string) {
	if held.IsEmpty() {
		return
	}
	entry.WithFields(logrus.Fields{"cpus": held.String(), "mems": r.Mems}).
		Info("container " + why + ": its exclusive CPUs stay held for its pod until the pod is removed")
}

// RemoveContainer forgets the container (idempotent); as at
// StopContainer, its exclusive CPUs stay with its pod, unless it was the
// last container the plugin knows of its pod: then the pod is ending (the
// kubelet keeps the newest exited container of every name while the pod
// lives) and what it holds is released. That is the only sign of a pod's
// end after a containerd restart, which forgets its pods' NRI state and
// sends no StopPodSandbox or RemovePodSandbox for them. The removal, the
// pod's end or the slice given back are one change: one commit.
func (p *plugin) RemoveContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.d.Metrics.timeEvent("RemoveContainer")()
	return p.d.Ledger.Update(func(l *ledger.Tx) error {
		changed, err := p.remove(l, ctr)
		if changed {
			p.d.Applier.Load().Freed(l)
		}
		return err
	})
}

// remove is RemoveContainer inside its Update; it reports whether the
// shared pool changed.
func (p *plugin) remove(l *ledger.Tx, ctr *api.Container) (bool, error) {
	d := p.d
	id := ctr.GetId()
	c := ledger.Change{Life: ledger.Life{Removed: id}}
	entry := d.Log.WithFields(logrus.Fields{"container": ctr.GetName(), "id": id})
	pc, known := l.StoppedAs(id)
	r, tracked := l.Record(id)
	held := cpuset.New()
	if tracked {
		pc, known = ledger.PodContainer{Pod: r.Pod, Name: r.Name}, true
		entry = ctrEntry(d.Log, r)
		held = heldFor(l, r)
		c.Index.Edit.Del = []string{id}
	}
	var kept []string // what a failed commit keeps, for its log line
	if tracked {
		kept = append(kept, "the container stays in the index")
	}
	var done func() // logs what the commit did
	switch {
	case !known || l.Engine() == nil:
	case !l.PodHasContainers(pc.Pod, id) && !podUnknown(l.State(), pc.Pod):
		freed := podEnd(l, &c, pc.Pod)
		kept = append(kept, "the pod's CPUs stay assigned")
		done = func() { p.logPodEnd(l, ctr.GetName(), pc.Pod, freed, "its last container removed") }
		entry = entry.WithField("pod_uid", pc.Pod)
	default:
		if cpus, ok := sliceEnd(l, &c, pc, id); ok {
			kept = append(kept, "the removed container's slice stays assigned")
			done = func() { p.logSliceEnd(l, pc, cpus) }
			entry = entry.WithField("pod_uid", pc.Pod)
		}
	}
	changed, err := l.Commit(c)
	if err != nil {
		entry.WithError(err).Error("cannot write the checkpoint; " + strings.Join(kept, ", "))
		return false, err
	}
	if tracked {
		logHeld(entry, r, held, "removed")
	}
	if done != nil {
		done()
	}
	return changed, nil
}

// sliceEnd adds to c the release of a removed container of a pod-level
// pod (pod_level_resource_managers, pod scope) from its pod's state: its
// exclusive slice, or its place on the pod's private pool, once no
// instance of that name is left besides but, the container removed
// (removing a restart's older instance leaves the slice to the new one).
// The pod keeps its block until it ends; the pool's containers follow the
// grown pool (the caller kicks the applier). Under the kubelet a
// container's CPUs stay with its pod and name while the pod lives; here a
// container removed for good gives its slice to its pod's shared
// containers. It returns the slice and whether c releases anything.
func sliceEnd(l *ledger.Tx, c *ledger.Change, pc ledger.PodContainer, but string) (cpuset.CPUSet, bool) {
	e, st := l.Engine(), l.State()
	if _, block := e.Assignment(st, pc.Pod, policy.PodPoolEntry); !block || l.NameInUse(pc.Pod, pc.Name, but) {
		return cpuset.New(), false
	}
	cpus, ok := e.Assignment(st, pc.Pod, pc.Name)
	if _, pooled := e.PodPoolOf(st, pc.Pod, pc.Name); !ok && !pooled {
		return cpuset.New(), false
	}
	// A pool container removed for good no longer keeps the pool from
	// being emptied by a slice (EmptyPodSharedPoolError).
	next := e.Remove(st, pc.Pod, pc.Name)
	c.Next = &next
	return cpus, true
}

// logSliceEnd says, once committed, that pc's slice is back in its pod's
// pool.
func (p *plugin) logSliceEnd(l *ledger.Tx, pc ledger.PodContainer, cpus cpuset.CPUSet) {
	pool, _ := l.Engine().PodPoolCPUs(l.State(), pc.Pod)
	p.d.Log.WithFields(logrus.Fields{"pod_uid": pc.Pod, "container": pc.Name, "cpus": cpus.String(), "pod_pool": pool.String()}).
		Info("container of a pod-level pod removed: its exclusive slice, if any, is back in its pod's private pool")
}

// StopPodSandbox ends the pod: the kubelet stops a sandbox once every
// container of the pod is done for good (the pod finished or was
// deleted), or to replace the sandbox, whose new containers are then
// admitted afresh. Everything the pod holds is released.
func (p *plugin) StopPodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.d.Metrics.timeEvent("StopPodSandbox")()
	return p.releasePod(pod, "stopped")
}

// RemovePodSandbox forgets every container of the pod, releases every
// CPU the pod holds (its stopped containers' included) and forgets its
// pod-scope affinity (idempotent).
func (p *plugin) RemovePodSandbox(_ context.Context, pod *api.PodSandbox) error {
	defer p.d.Metrics.timeEvent("RemovePodSandbox")()
	return p.releasePod(pod, "removed")
}

// releasePod releases everything pod holds, its sandbox forgotten, in one
// commit; neither event can answer with updates, so the applier's worker
// brings the shared-pool containers to the grown pool.
func (p *plugin) releasePod(pod *api.PodSandbox, why string) error {
	return p.d.Ledger.Update(func(l *ledger.Tx) error {
		changed, err := p.endPod(l, pod, why)
		if changed {
			p.d.Applier.Load().Freed(l)
		}
		return err
	})
}

// endPod is releasePod inside its Update; it reports whether the shared
// pool changed.
func (p *plugin) endPod(l *ledger.Tx, pod *api.PodSandbox, why string) (bool, error) {
	d := p.d
	key := request.PodKey(pod)
	if l.Engine() == nil {
		return false, nil
	}
	if sb, ok := l.Sandbox(key); ok && pod.GetId() != "" && sb != pod.GetId() {
		d.Log.WithFields(logrus.Fields{"pod": request.PodName(pod), "sandbox": pod.GetId(), "current": sb}).
			Info("an earlier sandbox of the pod " + why + ": its containers in the current sandbox keep their CPUs")
		return false, nil
	}
	c := ledger.Change{Life: ledger.Life{SandboxGone: key}}
	freed := podEnd(l, &c, key)
	changed, err := l.Commit(c)
	if err != nil {
		d.Log.WithError(err).WithFields(logrus.Fields{"pod": request.PodName(pod), "pod_uid": key}).
			Error("cannot write the checkpoint; the pod's CPUs stay assigned")
		return false, err
	}
	p.logPodEnd(l, request.PodName(pod), key, freed, "pod "+why)
	return changed, nil
}

// podEnd adds to c the end of pod (key): its stopped containers
// forgotten, its containers in the index (besides those c already
// removes) out of it, and everything it holds released, its pod-scope
// affinity included. A pod the ledger knows nothing of adds nothing
// durable. It returns the exclusive CPUs the pod held.
func podEnd(l *ledger.Tx, c *ledger.Change, key string) cpuset.CPUSet {
	e, st := l.Engine(), l.State()
	c.Life.PodStopped = key
	next := e.RemovePod(st, key)
	var del []string
	for id, r := range l.Records() {
		if r.Pod == key && !slices.Contains(c.Index.Edit.Del, id) {
			next = e.Remove(next, r.Pod, r.Name)
			del = append(del, id)
		}
	}
	if len(del) == 0 && podUnknown(st, key) {
		return cpuset.New()
	}
	freed := cpuset.New()
	for _, cpus := range st.Alloc.Assignments[key] {
		freed = freed.Union(cpus)
	}
	c.Next = &next
	c.Index.Edit.Del = append(c.Index.Edit.Del, del...)
	return freed
}

// logPodEnd says, once committed, which exclusive CPUs a pod's end
// released; name is for the log.
func (p *plugin) logPodEnd(l *ledger.Tx, name, key string, freed cpuset.CPUSet, why string) {
	if freed.IsEmpty() {
		return
	}
	p.d.Log.WithFields(logrus.Fields{"pod": name, "pod_uid": key, "cpus": freed.String(), "shared": l.Engine().SharedMask(l.State()).String()}).
		Info(why + ": the pod's exclusive CPUs released")
}

// podUnknown reports whether st holds nothing for pod.
func podUnknown(st policy.State, pod string) bool {
	_, a := st.Alloc.Assignments[pod]
	_, b := st.PodAffinity[pod]
	_, c := st.Memory.Assignments[pod]
	return !a && !b && !c
}

// UpdateContainer handles an in-place resize (or any other CRI update of
// a container's resources). An exclusive container's CPUs grow and shrink
// in place under KEP-5554's rules, and a resize the rules forbid (below
// the admitted CPUs, or between the shared pool and exclusive CPUs) is
// refused with an error starting with "InPlaceResizeRejected" and changes
// nothing (resize.go). Every other answer carries the cpuset.cpus, and for
// exclusive CPUs the cpuset.mems, that a known container must have now:
// the kubelet's request carries no cpuset, and containerd fills one in
// from its stored spec, which for a shared-pool container under "direct"
// is the pool of its creation. NRI applies the answer in the same OCI
// runtime call and records it in the runtime's spec; PostUpdateContainer
// checks the cgroup afterwards.
func (p *plugin) UpdateContainer(_ context.Context, pod *api.PodSandbox, ctr *api.Container, res *api.LinuxResources) (updates []*api.ContainerUpdate, err error) {
	defer p.d.Metrics.timeEvent("UpdateContainer")()
	cpu := request.CPUOf(res)
	resized := cpu != nil && (cpu.GetShares() != nil || cpu.GetQuota() != nil)
	if resized {
		// An exclusive resize answers the container's new cpuset (and,
		// growing under in-answer, the shared-pool containers' first).
		// Its Update is its own: under direct an upsize waits for the
		// applier's pass outside it.
		ups, err := p.resize(ctr.GetId(), request.WithCPU(pod, ctr, cpu))
		if err != nil || len(ups) > 0 {
			return p.answerUpdate(ctr, ups, err, false), err
		}
	}
	return p.answerUpdate(ctr, nil, nil, resized), nil
}

// answerUpdate completes UpdateContainer's answer in one Read (the event
// takes the ledger's lock once, twice with a resize): the container's
// cpuset when no resize answered it (resized is for the log line), what
// the quota lift needs (quotaAtUpdate; the lift itself after the Read), and,
// unless the update failed (err), the updates the applier deferred to an
// answer (owed), first: NRI's adaptation puts the container's own update
// last itself.
func (p *plugin) answerUpdate(ctr *api.Container, updates []*api.ContainerUpdate, err error, resized bool) []*api.ContainerUpdate {
	d := p.d
	id := ctr.GetId()
	ask := updates == nil && err == nil
	var (
		r          ledger.Record
		known, off bool
		owed       []*api.ContainerUpdate
	)
	d.Ledger.Read(func(l *ledger.Tx) {
		r, known = l.Record(id)
		off = l.QuotaOff()
		if l.Engine() == nil {
			known = false
			return
		}
		if ask && known {
			d.Log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "id": r.ID, "cpus": l.RightCPUs(r).String(), "mems": r.Mems,
				"exclusive": r.Exclusive, "resize": resized}).Info("update of the container's resources: answered with its cpuset")
			updates = currentCPUSet(l, r)
		}
		if err == nil {
			owed = d.Applier.Load().Owed(l, id, updates)
		}
	})
	updates = p.quotaAtUpdate(r, known && off, updates)
	if len(owed) > 0 {
		updates = append(owed, updates...)
	}
	return updates
}

// currentCPUSet is the update giving a known container the cpuset.cpus
// (and, when its record names them, the cpuset.mems) it must have now;
// none while that cpuset is empty (see strandedError). A shared-pool
// container's mems are never set by the plugin, so the runtime's record
// of them cannot be stale.
func currentCPUSet(l *ledger.Tx, r ledger.Record) []*api.ContainerUpdate {
	cpus := l.RightCPUs(r)
	if cpus.IsEmpty() {
		return nil
	}
	return []*api.ContainerUpdate{applier.CPUSetUpdate(r.ID, cpus.String(), r.Mems)}
}

// PostUpdateContainer follows an update the runtime applied: a downsize
// gives its CPUs back to the shared pool now (resize.go); then the
// container's cgroup is checked: a pool that changed between the answer
// and the OCI runtime's write, or another plugin's cpuset, is put right
// by the applier (written under direct, pushed through the runtime by the
// worker under in-answer).
func (p *plugin) PostUpdateContainer(_ context.Context, _ *api.PodSandbox, ctr *api.Container) error {
	defer p.d.Metrics.timeEvent("PostUpdateContainer")()
	p.resized(ctr.GetId())
	p.d.Applier.Load().Updated(ctr.GetId())
	return nil
}

// timeEvent observes, when the returned function is called (deferred at a
// handler's start), the time since the handler began.
func (m *Metrics) timeEvent(event string) func() {
	t0 := time.Now()
	return func() { m.eventDuration.WithLabelValues(event).Observe(time.Since(t0).Seconds()) }
}
