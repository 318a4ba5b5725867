package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// applier is how the shared pool reaches the shared-pool containers'
// cgroups (docs/architecture.md), of the mode chooseMode decides (at
// start-up, and once more from the first container's cgroups path,
// seeDriver): through the
// runtime (inAnswer) or written by the plugin (direct, direct.go). It
// owns the update worker, its kicks and the reconcile loop.
type applier interface {
	// mode is the shared_pool_updates value it implements.
	mode() string
	// poolChanged is what the answer to skip's event (CreateContainer,
	// StopContainer) carries after a commit that changed the shared pool.
	// the ledger is locked.
	poolChanged(skip string) []*api.ContainerUpdate
	// created notes the cpuset a shared-pool container was answered with.
	// the ledger is locked.
	created(id, cpus string)
	// synchronized turns the Synchronize plan's updates into its answer.
	// the ledger is locked.
	synchronized(planned []cpuUpdate) []*api.ContainerUpdate
	// syncReadsCgroups tells Synchronize to take a running container's
	// cpuset from its cgroup rather than from the runtime's record.
	syncReadsCgroups() bool
	// startBarrier is StartContainer's part, after the ledger's: it returns
	// when the container may start. the ledger is not locked.
	startBarrier(id string)
	// updated is PostUpdateContainer's check of the container's cgroup
	// after a runtime update: what is wrong is put right (written, or
	// pushed by the worker). the ledger is not locked.
	updated(id string)
	// owed is what the answer to skip's event (CreateContainer,
	// StopContainer, UpdateContainer) must carry besides answer, its own
	// updates: what the worker and the reconcile loop held back because
	// the runtime takes no unsolicited update (inAnswer). the ledger is
	// locked.
	owed(skip string, answer []*api.ContainerUpdate) []*api.ContainerUpdate
	// kick wakes the worker after a change no answer carries.
	kick()
	// run is the worker; it returns when ctx ends.
	run(ctx context.Context)
	// reconcile restores every cgroup that drifted from its assignment
	// and returns how many it found.
	reconcile() int
	kickCount() *kickCounter
	// cgroupRoot is the cgroup root it reads and writes.
	cgroupRoot() cgroups.Root
	// liftPodQuota removes the CFS quota of the pod holding the
	// container at ctrPath, through the cpusetWriter (systemd.go).
	liftPodQuota(ctrPath string) podQuotaResult
	// base is the updater it runs on (seeDriver's swap keeps it).
	base() *updater
}

// chooseMode decides how the shared pool is applied, the one place the
// mode is decided; cfg.SharedPoolUpdates is set to the mode chosen, and
// the decision is logged with its reason. It decides at start-up from
// the cgroup root (ctrPath ""), and once more from the first container's
// cgroups path, the sure sign of the runtime's cgroup driver, where that
// path says otherwise than the root did (seeDriver).
//
//   - "in-answer" asked for is kept.
//   - A cgroup_root whose cpuset hierarchy cannot be written (a read-only
//     mount): under the default "direct", "in-answer" with a warning, so
//     that a deployment mounting the cgroups read-only keeps working;
//     "direct" in so many words is refused.
//   - systemd manages the container cgroups (cgroup v2 with systemd under
//     the root, cgroups.SystemdManaged, or a container cgroups path in the
//     systemd driver's form "slice:prefix:name"): systemd keeps each
//     scope's AllowedCPUs and writes them back when it re-applies the
//     unit (daemon-reload). "direct" goes through systemd's D-Bus API
//     first (cpusetWriter, systemd.go) when systemd answers; when it does
//     not (no bus socket mounted), the default falls back to "in-answer",
//     whose OCI runtime goes through systemd, and "direct" in so many
//     words is kept with a warning.
//   - Otherwise "direct"; where the root showed systemd but the first
//     container's path is a cgroupfs one, with an info line saying so.
func chooseMode(cfg *config.Config, root cgroups.Root, sd *sysLink, ctrPath string, log *logrus.Logger) error {
	if cfg.SharedPoolUpdates != config.SharedUpdatesDirect {
		return nil
	}
	fields := logrus.Fields{"key": config.KeySharedPoolUpdates, "cgroup_root": cfg.CgroupRoot}
	asked := cfg.Line(config.KeySharedPoolUpdates) > 0
	err := root.Writable()
	if err != nil {
		if asked {
			return cfg.KeyError(config.KeySharedPoolUpdates, cfg.SharedPoolUpdates,
				fmt.Sprintf("the plugin writes the shared-pool containers' cgroups itself and cannot write %s (%v): "+
					"mount the host's cgroups read-write at cgroup_root, or set shared_pool_updates = %q",
					root.CpusetRoot(), err, config.SharedUpdatesInAnswer))
		}
		fields["error"], fields["using"] = err.Error(), config.SharedUpdatesInAnswer
		log.WithFields(fields).
			Warn("cannot write the cgroups for the default shared_pool_updates = \"direct\"; the runtime applies the shared pool instead " +
				"(each exclusive admission then waits for one OCI runtime update per shared-pool container); mount cgroup_root read-write")
		cfg.SharedPoolUpdates = config.SharedUpdatesInAnswer
		return nil
	}
	onSystemd, evidence := root.SystemdManaged(), "systemd runs the cgroup hierarchy"
	if ctrPath != "" && root.Unified() {
		scope, isScope := systemd.ScopeUnit(ctrPath)
		if !isScope && onSystemd {
			fields["cgroups_path"], fields["using"] = ctrPath, config.SharedUpdatesDirect
			log.WithFields(fields).Info("the runtime uses the cgroupfs driver (container cgroups are no systemd scopes): " +
				"the plugin writes the shared pool into the cgroups itself")
		}
		onSystemd, evidence = isScope, "container cgroup "+scope
	}
	if !onSystemd {
		return nil
	}
	fields["evidence"] = evidence
	m, err := sd.get()
	if err == nil {
		fields["using"], fields["systemd_version"] = config.SharedUpdatesDirect, m.Version()
		log.WithFields(fields).Info("systemd manages the container cgroups (cgroup v2, systemd cgroup driver): the plugin changes cpusets " +
			"and pod quotas through systemd's D-Bus API (a scope's AllowedCPUs, a pod slice's CPUQuota), then in the cgroup files, " +
			"as runc's systemd driver does, so that systemd's re-apply (daemon-reload) keeps them")
		return nil
	}
	fields["error"] = err.Error()
	if asked {
		fields["using"] = config.SharedUpdatesDirect
		log.WithFields(fields).Warn("systemd manages the container cgroups (cgroup v2, systemd cgroup driver) but cannot be reached on D-Bus: " +
			"the plugin writes cpusets into the cgroup files only, and systemd writes a scope's AllowedCPUs back when it re-applies " +
			"the unit (daemon-reload) until the reconcile loop restores them; mount the host's /run/dbus/system_bus_socket " +
			"read-write, or leave shared_pool_updates unset to have the runtime apply the pool through systemd")
		return nil
	}
	fields["using"] = config.SharedUpdatesInAnswer
	log.WithFields(fields).Warn("systemd manages the container cgroups (cgroup v2, systemd cgroup driver) but cannot be reached on D-Bus: " +
		"the runtime applies the shared pool instead, through systemd (each exclusive admission then waits for one OCI runtime update " +
		"per shared-pool container); mount the host's /run/dbus/system_bus_socket read-write for the faster \"direct\"")
	cfg.SharedPoolUpdates = config.SharedUpdatesInAnswer
	return nil
}

// newApplier is the applier of a mode chooseMode chose. Its cgroup reads
// go through root (cgroups.Root), its writes through the updater's
// cpusetWriter (systemd first on a systemd scope, then root): the one
// seam between the appliers and the cgroups they write.
func newApplier(mode string, l *ledger.Ledger, obs *metrics, conn *connection, root cgroups.Root, sd *sysLink, log *logrus.Logger) applier {
	u := newUpdater(l, obs, conn, root, log)
	u.sd = sd
	return applierFor(mode, u)
}

// applierFor is the applier of mode over u: seeDriver's swap keeps the
// updater, its worker's kicks and its way to systemd.
func applierFor(mode string, u *updater) applier {
	if mode == config.SharedUpdatesDirect {
		return newDirect(u)
	}
	return newInAnswer(u)
}

// updater is what both appliers share: the worker's wake-ups, the kick
// ledger, and finding drift.
type updater struct {
	l            *ledger.Ledger
	obs          *metrics
	conn         *connection
	cpusetWriter // cg: the cgroup root read; sd: nil when systemd is never asked (tests)
	log          *logrus.Logger
	kickC        chan struct{}
	kicks        kickCounter
	quotaRetry   retryRun // pod quota lifts that failed in systemd (quota.go)
}

// newUpdater is an updater reading and writing cg; its writes tell
// systemd first once u.sd is set (newApplier).
func newUpdater(l *ledger.Ledger, obs *metrics, conn *connection, cg cgroups.Root, log *logrus.Logger) *updater {
	return &updater{l: l, obs: obs, conn: conn, cpusetWriter: cpusetWriter{cg: cg}, log: log, kickC: make(chan struct{}, 1)}
}

func (u *updater) kickCount() *kickCounter { return &u.kicks }

func (u *updater) cgroupRoot() cgroups.Root { return u.cg }

func (u *updater) base() *updater { return u }

// kick wakes the worker to bring every shared-pool container to the
// current pool.
func (u *updater) kick() {
	u.kicks.ask() // before the wake-up, which the worker serves with it
	select {
	case u.kickC <- struct{}{}:
	default:
	}
}

// kickIfShared kicks when some shared-pool container but skip must
// follow the pool: a kick for nothing costs the answer a goroutine
// handoff. the ledger is locked.
func (u *updater) kickIfShared(skip string) {
	for id, r := range u.l.Records() {
		if id != skip && !r.Exclusive {
			u.kick()
			return
		}
	}
}

// loop is the worker: on a kick, pass; every reconcile_period,
// reconcile. The runtime's Configure may change the period; it kicks the
// worker, which picks the new one up.
func (u *updater) loop(ctx context.Context, pass func(), reconcile func() int) {
	var (
		ticker *time.Ticker
		tick   <-chan time.Time
		period time.Duration
	)
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		if p := time.Duration(u.l.Config().ReconcilePeriod); p != period {
			if ticker != nil {
				ticker.Stop()
				ticker, tick = nil, nil
			}
			if period = p; p > 0 {
				ticker = time.NewTicker(p)
				tick = ticker.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-u.kickC:
			// A wake-up whose kicks an earlier pass already served (a
			// kick that came between that pass's wake-up and its upTo)
			// asks for nothing: a pass for it would run with no kick to
			// account for it, so a caller that waited for the ledger
			// could see its updates land after an event it made next.
			upTo := u.kicks.upTo()
			if u.kicks.servedUpTo(upTo) {
				continue
			}
			pass()
			u.kicks.serve(upTo)
		case <-tick:
			reconcile()
			u.reconcileQuota()
		}
	}
}

// drifted is one container whose cgroup differs from its assignment.
type drifted struct {
	rec                ledger.Record
	wantCPUs, haveCPUs cpuset.CPUSet
	wantMems, haveMems string
	updateMems         bool
}

// wantedCPUs is a known container and the cpuset it should have.
type wantedCPUs struct {
	rec  ledger.Record
	cpus cpuset.CPUSet
}

// findDrift compares every known container's cgroup with its assignment
// and calls repair with those that differ (logged and counted first).
// Nothing is repaired while disconnected or before the first Synchronize,
// nor when a commit came while the cgroups were read (what was read may
// predate it: the next round sees it). It returns how many it found.
func (u *updater) findDrift(repair func(found []drifted, s stub.Stub, gen uint64)) int {
	l := u.l
	s := u.conn.get()
	l.Lock()
	if s == nil || l.Syncs() == 0 {
		l.Unlock()
		return 0
	}
	gen := l.Gen()
	items := make([]wantedCPUs, 0, l.Len())
	for _, r := range l.Records() {
		items = append(items, wantedCPUs{r, l.RightCPUs(r)})
	}
	l.Unlock()
	sort.Slice(items, func(i, j int) bool { return items[i].rec.ID < items[j].rec.ID })

	found := u.readDrift(items)
	if len(found) == 0 {
		return 0
	}
	l.Lock()
	stale := l.Gen() != gen
	l.Unlock()
	if stale || u.conn.get() != s {
		return 0
	}
	u.logDrift(found)
	u.obs.drift.Add(float64(len(found)))
	repair(found, s, gen)
	return len(found)
}

// readDrift reads the cgroups of items and returns those that differ
// from what they should have. A cgroup that is gone is skipped.
func (u *updater) readDrift(items []wantedCPUs) []drifted {
	var found []drifted
	for _, it := range items {
		if it.rec.CgroupsPath == "" || it.cpus.IsEmpty() {
			continue // an empty cpuset is never applied (see emptypool.go)
		}
		cpus, mems, err := u.cg.Read(it.rec.CgroupsPath)
		if errors.Is(err, cgroups.ErrGone) {
			continue
		}
		if err != nil {
			u.log.WithError(err).WithField("container", it.rec.Name).Debug("reconcile: cannot read the cgroup")
			continue
		}
		dr := drifted{rec: it.rec, wantCPUs: it.cpus, haveCPUs: cpus, wantMems: it.rec.Mems, haveMems: mems.String()}
		if it.rec.Mems != "" && !sameList(it.rec.Mems, mems.String()) {
			dr.updateMems = true
		}
		if cpus.Equals(it.cpus) && !dr.updateMems {
			continue
		}
		found = append(found, dr)
	}
	return found
}

// checkUpdated reads the cgroup of a container the runtime just updated
// and returns it when it differs from the container's assignment (logged
// and counted), with the generation it was compared at. Nothing is found
// for an unknown container, before the first Synchronize, or when a
// commit came while the cgroup was read (whoever made it brings the
// container along).
func (u *updater) checkUpdated(id string) (found []drifted, gen uint64) {
	l := u.l
	l.Lock()
	r, ok := l.Record(id)
	if !ok || l.Engine() == nil || l.Syncs() == 0 {
		l.Unlock()
		return nil, 0
	}
	gen = l.Gen()
	want := l.RightCPUs(r)
	l.Unlock()
	found = u.readDrift([]wantedCPUs{{r, want}})
	if len(found) == 0 {
		return nil, gen
	}
	l.Lock()
	stale := l.Gen() != gen
	l.Unlock()
	if stale {
		return nil, gen
	}
	for _, dr := range found {
		u.log.WithFields(logrus.Fields{
			"pod": dr.rec.PodName, "container": dr.rec.Name, "id": dr.rec.ID,
			"cpus": dr.wantCPUs.String(), "found_cpus": dr.haveCPUs.String(), "mems": dr.wantMems, "found_mems": dr.haveMems,
		}).Warn("cpuset wrong after the runtime updated the container; restoring it")
	}
	u.obs.updateRepairs.Add(float64(len(found)))
	return found, gen
}

// logDrift logs each drifted container.
func (u *updater) logDrift(found []drifted) {
	for _, dr := range found {
		u.log.WithFields(logrus.Fields{
			"pod": dr.rec.PodName, "container": dr.rec.Name, "id": dr.rec.ID,
			"cpus": dr.wantCPUs.String(), "found_cpus": dr.haveCPUs.String(), "mems": dr.wantMems, "found_mems": dr.haveMems,
		}).Warn("cpuset drifted from the assignment; restoring it")
	}
}

// owed is nothing for an applier that never holds updates back (direct
// writes the cgroups itself); inAnswer's is below.
func (u *updater) owed(string, []*api.ContainerUpdate) []*api.ContainerUpdate { return nil }

// send pushes updates computed at generation gen, warning with failure when
// some did not apply. A commit since gen may have made them stale: the
// worker then pushes the shared pool again from the new state. Only
// where the connection's runtime takes unsolicited updates (inAnswer
// checks before it calls).
func (u *updater) send(s stub.Stub, updates []*api.ContainerUpdate, gen uint64, failure string) {
	if failed, err := s.UpdateContainers(updates); err != nil || len(failed) > 0 {
		u.log.WithError(err).WithField("failed", len(failed)).Warn(failure)
	}
	u.l.Lock()
	changed := u.l.Gen() != gen
	u.l.Unlock()
	if changed {
		u.kick()
	}
}

// inAnswer is shared_pool_updates = "in-answer": the runtime applies the
// shared pool. The answers of CreateContainer and StopContainer carry an
// update for every other shared-pool container; the worker pushes them
// with stub.UpdateContainers after events that cannot answer with
// updates, from outside any handler (inside one it deadlocks the
// runtime).
//
// On a runtime that can deadlock on an unsolicited update
// (runtimeSupport.unsolicited false: containerd before 2.4, CRI-O) there
// is no safe moment for such a push: the deadlock needs only a CRI call
// arriving while the update is under way, which the plugin cannot see.
// The worker and the reconcile loop then send nothing: they note what
// they would have sent (owedPool, repairs) and the next answer that can
// carry updates (CreateContainer, StopContainer, UpdateContainer)
// carries it, so every update the plugin makes is solicited. What is held
// back only ever widens a shared container's cpuset or restores a drifted
// one: a pool that shrinks (an exclusive admission or upsize) always
// rides in that event's own answer, so no exclusive CPU is ever shared
// because of the wait.
type inAnswer struct {
	*updater
	// repairMu guards repairs, the exclusive containers found wrong after
	// an update that the next push (or answer) restores, and owedPool, a
	// push of the shared pool held back for the next answer; a leaf.
	repairMu sync.Mutex
	repairs  map[string]struct{}
	owedPool bool
}

func newInAnswer(u *updater) *inAnswer { return &inAnswer{updater: u, repairs: map[string]struct{}{}} }

func (a *inAnswer) mode() string { return config.SharedUpdatesInAnswer }

func (a *inAnswer) poolChanged(skip string) []*api.ContainerUpdate { return a.sharedUpdates(skip) }

func (a *inAnswer) created(string, string) {}

// synchronized answers every container's cpuset, which settles whatever
// was held back.
func (a *inAnswer) synchronized(planned []cpuUpdate) []*api.ContainerUpdate {
	a.repairMu.Lock()
	a.owedPool = false
	clear(a.repairs)
	a.repairMu.Unlock()
	return cpusetUpdates(planned, ignoreFailure)
}

func (a *inAnswer) syncReadsCgroups() bool { return false }

func (a *inAnswer) startBarrier(string) {}

func (a *inAnswer) run(ctx context.Context) { a.loop(ctx, a.push, a.reconcile) }

// updated cannot push from PostUpdateContainer (containerd holds its NRI
// lock across it): a shared-pool container found wrong goes with the
// worker's next push of the pool, an exclusive one is queued for it.
func (a *inAnswer) updated(id string) {
	found, _ := a.checkUpdated(id)
	if len(found) == 0 {
		return
	}
	if found[0].rec.Exclusive {
		a.repairMu.Lock()
		a.repairs[id] = struct{}{}
		a.repairMu.Unlock()
	}
	a.kick()
}

// push sends the shared pool to every shared-pool container, and their
// assignment to the exclusive containers queued by updated; on a runtime
// that takes no unsolicited update it holds them for the next answer.
func (a *inAnswer) push() {
	s := a.conn.get()
	l := a.l
	l.Lock()
	if s == nil || l.Syncs() == 0 {
		l.Unlock()
		return
	}
	if !a.conn.unsolicited() {
		a.postpone(a.anyShared(), nil)
		l.Unlock()
		return
	}
	gen := l.Gen()
	updates := append(a.sharedUpdates(""), a.takeRepairs("")...)
	l.Unlock()
	if len(updates) == 0 {
		return
	}
	a.send(s, updates, gen, "pushing the shared pool to containers failed; the reconcile loop will retry")
}

// takeRepairs are the updates restoring the exclusive containers queued
// for repair, but skip (its own answer sets it); the queue is emptied.
// the ledger is locked.
func (a *inAnswer) takeRepairs(skip string) []*api.ContainerUpdate {
	l := a.l
	a.repairMu.Lock()
	defer a.repairMu.Unlock()
	ids := make([]string, 0, len(a.repairs))
	for id := range a.repairs {
		ids = append(ids, id)
	}
	clear(a.repairs)
	sort.Strings(ids)
	var updates []*api.ContainerUpdate
	for _, id := range ids {
		if r, ok := l.Record(id); ok && r.Exclusive && id != skip {
			updates = append(updates, cpusetUpdates([]cpuUpdate{{ID: id, CPUs: l.RightCPUs(r).String(), Mems: r.Mems}}, ignoreFailure)...)
		}
	}
	return updates
}

// postpone notes a push of the shared pool (pool) and repairs of exclusive
// containers that the next answer carries instead, and counts them once
// each: a held push already owed is not counted again.
func (a *inAnswer) postpone(pool bool, exclusive []string) {
	fields := a.conn.runtimeFields() // before repairMu: leaves are never nested
	a.repairMu.Lock()
	defer a.repairMu.Unlock()
	n := 0
	if pool && !a.owedPool {
		a.owedPool = true
		n++
	}
	for _, id := range exclusive {
		if _, ok := a.repairs[id]; !ok {
			a.repairs[id] = struct{}{}
			n++
		}
	}
	if n > 0 {
		a.obs.deferred.Add(float64(n))
		a.log.WithFields(fields).WithFields(logrus.Fields{"pool": a.owedPool, "exclusive": len(a.repairs)}).
			Debug("updates deferred to the next answer: this runtime takes no unsolicited update")
	}
}

// owed is what the answer to skip's event carries besides answer, its
// own updates: the push and the repairs held back, for the containers
// answer does not already update. the ledger is locked.
func (a *inAnswer) owed(skip string, answer []*api.ContainerUpdate) []*api.ContainerUpdate {
	a.repairMu.Lock()
	pool := a.owedPool
	a.owedPool = false
	a.repairMu.Unlock()
	var more []*api.ContainerUpdate
	if pool {
		more = a.sharedUpdates(skip)
	}
	more = append(more, a.takeRepairs(skip)...)
	if len(more) == 0 {
		return nil
	}
	in := make(map[string]bool, len(answer))
	for _, u := range answer {
		in[u.GetContainerId()] = true
	}
	out := more[:0]
	for _, u := range more {
		if !in[u.GetContainerId()] {
			out = append(out, u)
		}
	}
	return out
}

// reconcile restores drifted cpusets through the runtime, or, where the
// runtime takes no unsolicited update, holds them for the next answer.
func (a *inAnswer) reconcile() int {
	return a.findDrift(func(found []drifted, s stub.Stub, gen uint64) {
		if a.conn.unsolicited() {
			a.send(s, driftUpdates(found), gen, "reconcile: restoring cpusets failed; retrying next period")
			return
		}
		pool := false
		var excl []string
		for _, dr := range found {
			if dr.rec.Exclusive {
				excl = append(excl, dr.rec.ID)
			} else {
				pool = true
			}
		}
		a.postpone(pool, excl)
	})
}

// sharedUpdates are the updates moving every shared-pool container except
// skip to its current pool: the node's shared pool, or its pod's private
// pool (ledger.Pools). Failures are ignored by the runtime (a container
// may be stopping); the reconcile loop repairs what is left. the ledger
// is locked.
func (a *inAnswer) sharedUpdates(skip string) []*api.ContainerUpdate {
	l := a.l
	pools := l.Pools()
	targets := make([]cpuUpdate, 0, l.Len())
	for id, r := range l.Records() {
		if id == skip || r.Exclusive {
			continue
		}
		// No CPU for it (nothing reserved): never an empty cpuset.
		if cpus := pools.Of(r); cpus != "" {
			targets = append(targets, cpuUpdate{ID: id, CPUs: cpus})
		}
	}
	slices.SortFunc(targets, func(a, b cpuUpdate) int { return strings.Compare(a.ID, b.ID) })
	return cpusetUpdates(targets, ignoreFailure|oneCPUSet)
}

// anyShared says whether sharedUpdates("") would send anything, without
// building the updates. The ledger is locked.
func (a *inAnswer) anyShared() bool {
	l := a.l
	pools := l.Pools()
	for _, r := range l.Records() {
		if !r.Exclusive && pools.Of(r) != "" {
			return true
		}
	}
	return false
}

// driftUpdates are the updates that restore the drifted containers
// through the runtime.
func driftUpdates(found []drifted) []*api.ContainerUpdate {
	targets := make([]cpuUpdate, 0, len(found))
	for _, dr := range found {
		t := cpuUpdate{ID: dr.rec.ID, CPUs: dr.wantCPUs.String()}
		if dr.updateMems {
			t.Mems = dr.wantMems
		}
		targets = append(targets, t)
	}
	return cpusetUpdates(targets, ignoreFailure)
}

// connection is the current NRI connection, nil between connections,
// and what its runtime supports (set at Configure, which comes before
// Synchronize and before any update the plugin sends). Its mutex is a
// leaf: taken under the ledger's lock or alone.
type connection struct {
	mu      sync.Mutex
	s       stub.Stub
	runtime runtimeSupport
}

// setRuntime records the runtime the connection's Configure named.
func (c *connection) setRuntime(rs runtimeSupport) {
	c.mu.Lock()
	c.runtime = rs
	c.mu.Unlock()
}

// unsolicited reports whether the plugin may call stub.UpdateContainers
// on its own on this connection: never before a Configure said which
// runtime it is (supportOf's zero value says no).
func (c *connection) unsolicited() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runtime.unsolicited
}

// runtimeFields are the log fields naming the connection's runtime.
func (c *connection) runtimeFields() logrus.Fields {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.runtime.fields()
}

func (c *connection) get() stub.Stub {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.s
}

func (c *connection) set(s stub.Stub) {
	c.mu.Lock()
	c.s = s
	c.mu.Unlock()
}

// kickCounter counts the worker's kicks and the ones it has served, so
// that a caller can wait until every pass asked for so far (and every
// re-push a stale one caused) is done: the only moment the cgroups must
// equal the state, since a push computed before a commit may land after
// that commit's own updates. Its mutex is a leaf.
type kickCounter struct {
	mu            sync.Mutex
	asked, served uint64
	caughtUp      chan struct{} // closed when served reaches asked; nil without a waiter
}

func (k *kickCounter) ask() {
	k.mu.Lock()
	k.asked++
	k.mu.Unlock()
}

// upTo is the kicks asked so far: a pass started now serves these.
func (k *kickCounter) upTo() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked
}

func (k *kickCounter) serve(upTo uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.served = max(k.served, upTo)
	if k.served >= k.asked && k.caughtUp != nil {
		close(k.caughtUp)
		k.caughtUp = nil
	}
}

// servedUpTo reports whether the kicks up to upTo have been served.
func (k *kickCounter) servedUpTo(upTo uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.served >= upTo
}

// settled reports whether every kick asked so far has been served.
func (k *kickCounter) settled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.served >= k.asked
}

// wait returns once every kick asked so far has been served, or with
// ctx's error.
func (k *kickCounter) wait(ctx context.Context) error {
	for {
		k.mu.Lock()
		if k.served >= k.asked {
			k.mu.Unlock()
			return nil
		}
		if k.caughtUp == nil {
			k.caughtUp = make(chan struct{})
		}
		ch := k.caughtUp
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
