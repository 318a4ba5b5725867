package applier

import (
	"context"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// inAnswer is shared_pool_updates = "in-answer": the runtime applies the
// shared pool. The answers of CreateContainer and StopContainer carry an
// update for every other shared-pool container; the worker pushes them
// with stub.UpdateContainers after events that cannot answer with
// updates, from outside any handler (inside one it deadlocks the
// runtime).
//
// On a runtime that can deadlock on an unsolicited update
// (RuntimeSupport.unsolicited false: containerd before 2.4, CRI-O) there
// is no safe moment for such a push: the deadlock needs only a CRI call
// arriving while the update is under way, which the plugin cannot see.
// The worker and the reconcile loop then send nothing: they note what
// they would have sent (owedPool, repairs) and the next answer that can
// carry updates (CreateContainer, StopContainer, UpdateContainer)
// carries it, so every update the plugin makes is solicited. What is
// deferred only ever widens a shared container's cpuset or restores a drifted
// one: a pool that shrinks (an exclusive admission or upsize) always
// rides in that event's own answer, so no exclusive CPU is ever shared
// because of the wait.
type inAnswer struct {
	*updater
	// repairMu guards repairs, the exclusive containers found wrong after
	// an update that the next push (or answer) restores, and owedPool, a
	// push of the shared pool deferred to the next answer; a leaf.
	repairMu sync.Mutex
	repairs  map[string]struct{}
	owedPool bool
}

func newInAnswer(u *updater) *inAnswer {
	u.wakeDelay.Store(0) // a push is the answer's stand-in: at once
	return &inAnswer{updater: u, repairs: map[string]struct{}{}}
}

func (a *inAnswer) Mode() string { return config.SharedUpdatesInAnswer }

func (a *inAnswer) PoolChanged(tx *ledger.Tx, skip string) []*api.ContainerUpdate {
	return a.sharedUpdates(tx, skip)
}

func (a *inAnswer) Created(string, string) {}

// Synchronized answers every container's cpuset, which settles whatever
// was deferred.
func (a *inAnswer) Synchronized(_ *ledger.Tx, planned []CPUUpdate) []*api.ContainerUpdate {
	a.repairMu.Lock()
	a.owedPool = false
	clear(a.repairs)
	a.repairMu.Unlock()
	return cpusetUpdates(planned, ignoreFailure)
}

func (a *inAnswer) SyncReadsCgroups() bool { return false }

func (a *inAnswer) StartBarrier(string) {}

func (a *inAnswer) Run(ctx context.Context) { a.loop(ctx, a.push, a.Reconcile) }

// Updated cannot push from PostUpdateContainer (containerd holds its NRI
// lock across it): a shared-pool container found wrong goes with the
// worker's next push of the pool, an exclusive one is queued for it.
func (a *inAnswer) Updated(id string) {
	found, _ := a.checkUpdated(id)
	if len(found) == 0 {
		return
	}
	if found[0].rec.Exclusive {
		a.repairMu.Lock()
		a.repairs[id] = struct{}{}
		a.repairMu.Unlock()
	}
	a.Kick()
}

// Freed always kicks: besides the grown pool, the pass delivers the
// updates and repairs owed, which no answer may come to carry.
func (a *inAnswer) Freed(*ledger.Tx) { a.Kick() }

// push sends the shared pool to every shared-pool container, and their
// assignment to the exclusive containers queued by updated; on a runtime
// that takes no unsolicited update it defers them to the next answer.
func (a *inAnswer) push() {
	s := a.conn.Get()
	var (
		gen     uint64
		updates []*api.ContainerUpdate
	)
	a.l.Read(func(tx *ledger.Tx) {
		switch {
		case s == nil || tx.Syncs() == 0:
		case !a.conn.unsolicited():
			a.postpone(a.anyShared(tx), nil)
		default:
			gen = tx.Gen()
			updates = append(a.sharedUpdates(tx, ""), a.takeRepairs(tx, "")...)
		}
	})
	if len(updates) == 0 {
		return
	}
	a.send(s, updates, gen, "pushing the shared pool to containers failed; the reconcile loop will retry")
}

// takeRepairs are the updates restoring the exclusive containers queued
// for repair, but skip (its own answer sets it); the queue is emptied.
func (a *inAnswer) takeRepairs(l *ledger.Tx, skip string) []*api.ContainerUpdate {
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
			updates = append(updates, cpusetUpdates([]CPUUpdate{{ID: id, CPUs: l.RightCPUs(r).String(), Mems: r.Mems}}, ignoreFailure)...)
		}
	}
	return updates
}

// postpone notes a push of the shared pool (pool) and repairs of exclusive
// containers that the next answer carries instead, and counts them once
// each: a push already owed is not counted again.
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
		a.obs.Deferred(n)
		a.log.WithFields(fields).WithFields(logrus.Fields{"pool": a.owedPool, "exclusive": len(a.repairs)}).
			Debug("updates deferred to the next answer: this runtime takes no unsolicited update")
	}
}

// Owed is what the answer to skip's event carries besides answer, its
// own updates: the push and the repairs deferred, for the containers
// answer does not already update.
func (a *inAnswer) Owed(tx *ledger.Tx, skip string, answer []*api.ContainerUpdate) []*api.ContainerUpdate {
	a.repairMu.Lock()
	pool := a.owedPool
	a.owedPool = false
	a.repairMu.Unlock()
	var more []*api.ContainerUpdate
	if pool {
		more = a.sharedUpdates(tx, skip)
	}
	more = append(more, a.takeRepairs(tx, skip)...)
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

// Reconcile restores drifted cpusets through the runtime, or, where the
// runtime takes no unsolicited update, defers them to the next answer.
func (a *inAnswer) Reconcile() int {
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
// may be stopping); the reconcile loop repairs what is left.
func (a *inAnswer) sharedUpdates(l *ledger.Tx, skip string) []*api.ContainerUpdate {
	pools := l.Pools()
	targets := make([]CPUUpdate, 0, l.Len())
	for id, r := range l.Records() {
		if id == skip || r.Exclusive {
			continue
		}
		// No CPU for it (nothing reserved): never an empty cpuset.
		if cpus := pools.Of(r); cpus != "" {
			targets = append(targets, CPUUpdate{ID: id, CPUs: cpus})
		}
	}
	slices.SortFunc(targets, func(a, b CPUUpdate) int { return strings.Compare(a.ID, b.ID) })
	return cpusetUpdates(targets, ignoreFailure|oneCPUSet)
}

// anyShared says whether sharedUpdates("") would send anything, without
// building the updates.
func (a *inAnswer) anyShared(l *ledger.Tx) bool {
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
	targets := make([]CPUUpdate, 0, len(found))
	for _, dr := range found {
		t := CPUUpdate{ID: dr.rec.ID, CPUs: dr.wantCPUs.String()}
		if dr.updateMems {
			t.Mems = dr.wantMems
		}
		targets = append(targets, t)
	}
	return cpusetUpdates(targets, ignoreFailure)
}

// CPUUpdate moves a container to CPUs (and Mems, when not "").
type CPUUpdate struct{ ID, CPUs, Mems string }

// updateOpts says how cpusetUpdates builds its updates.
type updateOpts uint8

const (
	// ignoreFailure: the runtime goes on when one fails (a container may
	// be stopping); the reconcile loop repairs what is left.
	ignoreFailure updateOpts = 1 << iota
	// oneCPUSet: the targets share few cpusets (the shared pool's
	// fan-out: the node's pool, and pod-level pods' private pools): one
	// Linux part serves each run of targets with the same cpuset and no
	// mems. The updates must then
	// only be marshalled, never edited (withNoQuota edits exclusive
	// containers' updates, which never come from a fan-out).
	oneCPUSet
)

// cpusetUpdates is the one builder of the updates that give containers
// their cpuset: cpuset.cpus, and cpuset.mems when the target names them
// (a shared-pool container's mems are never set by the plugin). One block
// holds the updates. None for no targets.
func cpusetUpdates(targets []CPUUpdate, opts updateOpts) []*api.ContainerUpdate {
	if len(targets) == 0 {
		return nil
	}
	block := make([]api.ContainerUpdate, len(targets))
	out := make([]*api.ContainerUpdate, len(targets))
	var lin *api.LinuxContainerUpdate
	for i, t := range targets {
		if lin == nil || opts&oneCPUSet == 0 || lin.Resources.Cpu.Cpus != t.CPUs || lin.Resources.Cpu.Mems != t.Mems {
			cpu := &api.LinuxCPU{Cpus: t.CPUs, Mems: t.Mems}
			lin = &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: cpu}}
		}
		u := &block[i]
		u.SetContainerId(t.ID)
		u.Linux = lin
		if opts&ignoreFailure != 0 {
			u.SetIgnoreFailure()
		}
		out[i] = u
	}
	return out
}

// CPUSetUpdate is the update giving container id cpus and, unless it is
// empty, mems (cpusetUpdates of one).
func CPUSetUpdate(id, cpus, mems string) *api.ContainerUpdate {
	return cpusetUpdates([]CPUUpdate{{ID: id, CPUs: cpus, Mems: mems}}, 0)[0]
}
