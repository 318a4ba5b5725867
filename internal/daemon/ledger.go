package daemon

import (
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// ledger is the one owner of the policy state (docs/architecture.md):
// the engine and the configuration it was built from, the engine state,
// the container index, the generation and the containers placed but not
// started. Everything in it is guarded by mu, which
// an event holds from its plan to its commit.
//
// An event computes its next state (a plan) from the committed one and
// hands it to commit, the only code that changes st, ctrs or gen.
type ledger struct {
	mu sync.Mutex

	// cfg, topo and engine change only with a runtime's Configure.
	cfg    config.Config
	topo   *topology.Topology
	engine *policy.Engine // nil until configured (WithConfigFromRuntime)
	// pendingErr is why engine is nil: the start-up configuration was
	// refused and the runtime's Configure must bring a valid one.
	pendingErr error
	restored   bool // the store has been loaded

	st    policy.State
	ctrs  map[string]ctrRecord // by container ID
	gen   uint64               // bumped by every commit
	syncs int                  // completed Synchronize calls

	// starting holds the containers placed but not started yet (see
	// abandon.go); not stored: Synchronize rebuilds it from the runtime.
	starting map[string]struct{}
	// stopped holds the containers that stopped and are not removed yet,
	// by ID (see held.go); not stored: Synchronize rebuilds it.
	stopped map[string]podContainer
	// sandboxes is each pod's sandbox of its newest container (pod key ->
	// sandbox ID): the kubelet recreates a dead sandbox under the same pod
	// UID, and the old one's StopPodSandbox or RemovePodSandbox, which can
	// come after the new containers, must not end the pod. Not stored:
	// Synchronize rebuilds it.
	sandboxes map[string]string
	// poolEmpty is the shared pool's emptiness as last reported.
	poolEmpty bool
	// shrinking holds the downsizes answered and not committed yet (see
	// resize.go), by container ID; not stored.
	shrinking map[string]shrink
	// devices are the devices of each container that gave the device
	// hint provider NUMA nodes, by container ID, for /state; not stored:
	// Synchronize reads them again from the runtime's containers.
	devices map[string][]DeviceView

	store *store
	obs   *metrics
	log   *logrus.Logger
	now   func() time.Time // stamps ctrRecord.Since
	// changed, when set, is told of every commit; it must not block
	// (the NodeResourceTopology exporter's Kick).
	changed func()
}

func newLedger(cfg config.Config, topo *topology.Topology, engine *policy.Engine, pendingErr error) *ledger {
	l := &ledger{cfg: cfg, topo: topo, engine: engine, pendingErr: pendingErr,
		ctrs: map[string]ctrRecord{}, starting: map[string]struct{}{}, stopped: map[string]podContainer{},
		sandboxes: map[string]string{},
		shrinking: map[string]shrink{}, devices: map[string][]DeviceView{}}
	if engine != nil {
		l.st = engine.NewState()
	}
	return l
}

// stamp is the Since of a record made now.
func (l *ledger) stamp() string { return stampOf(l.now()) }

// stampOf formats t as ctrRecord.Since.
func stampOf(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// commit makes the next state durable and then current: the store saves
// st and the index change; only if that succeeds do the engine state and
// the index become them, the containers removed no longer await their
// start, the generation is bumped and the gauges and the pool's
// emptiness are reported. It reports whether the shared pool changed. A
// failed save changes nothing in memory and returns a PersistError.
// l.mu is held.
func (l *ledger) commit(st policy.State, c indexChange) (poolChanged bool, err error) {
	if err := l.store.save(l, st, c); err != nil {
		l.obs.checkpointErrors.Inc()
		return false, fmt.Errorf("PersistError: %w", err)
	}
	prev := l.engine.SharedMask(l.st)
	l.st = st
	if c.all != nil {
		for id := range l.ctrs {
			if _, ok := c.all[id]; !ok {
				delete(l.starting, id)
				delete(l.shrinking, id)
				delete(l.devices, id)
			}
		}
		l.ctrs = c.all
	} else {
		for _, id := range c.edit.del {
			delete(l.starting, id)
			delete(l.shrinking, id)
			delete(l.devices, id)
		}
		c.edit.applyTo(l.ctrs)
	}
	l.gen++
	if l.changed != nil {
		l.changed()
	}
	l.obs.updateGauges(l.engine, l.st, len(l.ctrs))
	l.checkPool()
	return !prev.Equals(l.engine.SharedMask(l.st)), nil
}

// rightCPUs is the cpuset a known container should have now: a downsize
// answered and not committed yet narrows it already. l.mu is held.
func (l *ledger) rightCPUs(r ctrRecord) cpuset.CPUSet {
	cpus := rightCPUsIn(l.engine, l.st, r)
	if s, ok := l.shrinking[r.ID]; ok && r.Exclusive && cpus.Equals(s.from) {
		return s.to
	}
	return cpus
}

// static reports cpu_manager_policy = static. l.mu is held.
func (l *ledger) static() bool { return l.cfg.CPUManagerPolicy == policy.CPUPolicyStatic }

// sharedOthers counts the shared-pool containers of the index but skip.
// l.mu is held.
func (l *ledger) sharedOthers(skip string) int {
	n := 0
	for id, r := range l.ctrs {
		if id != skip && !r.Exclusive {
			n++
		}
	}
	return n
}

// config is the effective configuration.
func (l *ledger) config() config.Config {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cfg
}

// checkPool reports a change of the shared pool's emptiness: a warning
// when it empties, an info line when it has CPUs again, and the gauge
// (see emptypool.go). l.mu is held.
func (l *ledger) checkPool() {
	empty := l.engine.SharedPoolEmpty(l.st)
	if empty == l.poolEmpty {
		return
	}
	l.poolEmpty = empty
	shared := l.sharedOthers("")
	entry := l.log.WithFields(logrus.Fields{"shared_containers": shared, "reserved": l.engine.Reserved().String()})
	l.obs.setPoolEmpty(empty)
	switch {
	case !empty:
		entry.WithField("cpus", l.engine.SharedCPUs(l.st).String()).
			Info("shared pool has CPUs again: shared-pool containers run on it")
	case l.engine.SharedCPUs(l.st).IsEmpty():
		entry.WithField("reason", allocator.ReasonInsufficientCPUs).
			Warn("shared pool is empty and no CPUs are reserved: shared-pool containers are refused until exclusive CPUs are released")
	default:
		entry.WithField("cpus", l.engine.SharedCPUs(l.st).String()).
			Warn("shared pool is empty: shared-pool containers run on the reserved CPUs until exclusive CPUs are released")
	}
}

// awaitStart notes a container placed (or found created at Synchronize)
// that has not started yet. l.mu is held.
func (l *ledger) awaitStart(id string) { l.starting[id] = struct{}{} }

// awaitingStart reports whether the container was placed and has not
// started yet. l.mu is held.
func (l *ledger) awaitingStart(id string) bool {
	_, ok := l.starting[id]
	return ok
}

// ledgerView is what observe reads: consistent values taken under l.mu,
// none of which the ledger changes in place afterwards (the engine state
// is a value whose maps are replaced, never edited, and ctrs is a copy).
type ledgerView struct {
	cfg    config.Config
	topo   *topology.Topology
	engine *policy.Engine
	st     policy.State
	ctrs   []ctrRecord
	syncs  int
	// devices are ledger.devices of the containers in ctrs.
	devices map[string][]DeviceView
}

// view returns the ledger's current values for observe.
func (l *ledger) view() ledgerView {
	l.mu.Lock()
	defer l.mu.Unlock()
	v := ledgerView{cfg: l.cfg, topo: l.topo, engine: l.engine, st: l.st, syncs: l.syncs}
	if l.engine != nil {
		v.ctrs = make([]ctrRecord, 0, len(l.ctrs))
		for _, r := range l.ctrs {
			v.ctrs = append(v.ctrs, r)
		}
		v.devices = maps.Clone(l.devices)
	}
	return v
}

// synced reports whether a Synchronize has completed.
func (l *ledger) synced() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.syncs > 0
}
