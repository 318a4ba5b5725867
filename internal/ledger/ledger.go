// Package ledger is the one owner of nri-cpualign's policy state
// (docs/architecture.md): the engine and the configuration it was built
// from, the engine state, the container index, the generation, and the
// lifecycle facts the NRI events leave (containers placed and not started,
// stopped and not removed, each pod's sandbox, downsizes not committed,
// devices). Its fields are unexported: the only way to change any of it is
// Commit with a Change, which makes the durable part durable first (the
// Store) and then bumps the generation, sets the gauges, checks the shared
// pool and tells the NodeResourceTopology exporter. Everything else reads
// through the query methods of a Tx (inside Update or Read, which hold
// the ledger's lock: no caller takes it) or a View.
//
// The package imports no NRI, cgroup or daemon code: it is told what
// happened and decides nothing about containers.
package ledger

import (
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Store makes a change durable before the ledger commits it.
type Store interface {
	Save(s Save) error
}

// Save is what a Store writes: the committed values (Index is the
// ledger's own map, read only) and the change.
type Save struct {
	Cfg    config.Config
	Topo   *topology.Topology
	Engine *policy.Engine
	State  policy.State
	Index  map[string]Record
	Next   policy.State
	Change IndexChange
}

// Observer is told what a commit changed (the daemon's metrics).
type Observer interface {
	CheckpointError()
	Gauges(e *policy.Engine, st policy.State, containers int)
	PoolEmpty(empty bool)
}

// Deps are the ledger's collaborators.
type Deps struct {
	Store Store
	Obs   Observer
	Log   *logrus.Logger
	Now   func() time.Time // stamps Record.Since; nil: time.Now
	// Changed, when set, is told of every commit that changed the state;
	// it must not block (the NodeResourceTopology exporter's Kick).
	Changed func()
}

// Ledger owns the state. Its lock is its own: an event reads and changes
// the state inside Update (or reads it inside Read), holding the lock for
// the whole function, from its plan to its Commit; observers take a View.
type Ledger struct {
	mu sync.Mutex
	tx Tx // the state, handed to Update's and Read's function
}

// Tx is the ledger's state as one Update or Read sees it: the queries
// and, in an Update, Commit. It is valid only inside that function (the
// ledger's lock is held there); keep none of it but the values its
// queries return.
type Tx struct {
	conf      conf
	dur       durable
	life      lifecycle
	poolEmpty bool // the shared pool's emptiness as last reported
	deps      Deps
	readOnly  bool // inside Read: Commit refuses
}

// conf changes only with a runtime's Configure.
type conf struct {
	cfg    config.Config
	topo   *topology.Topology
	engine *policy.Engine // nil until configured (pre-registered plugin)
	// pendingErr is why engine is nil: the start-up configuration was
	// refused and the runtime's Configure must bring a valid one.
	pendingErr error
}

// durable is what the store keeps (st, ctrs) and its generation.
type durable struct {
	st       policy.State
	ctrs     map[string]Record // by container ID
	gen      uint64            // bumped by every commit that changes state
	restored bool              // the store has been loaded
}

// lifecycle is what the events leave that the store does not keep:
// Synchronize rebuilds it from the runtime.
type lifecycle struct {
	syncs int // completed Synchronize calls
	// awaiting holds the containers placed but not started yet.
	awaiting map[string]struct{}
	// stopped holds the containers that stopped and are not removed yet.
	stopped map[string]PodContainer
	// sandboxes is each pod's sandbox of its newest container (pod key ->
	// sandbox ID): the kubelet recreates a dead sandbox under the same pod
	// UID, and the old one's StopPodSandbox or RemovePodSandbox, which can
	// come after the new containers, must not end the pod.
	sandboxes map[string]string
	// shrinking holds the downsizes answered and not committed yet.
	shrinking map[string]Shrink
	// devices are the devices of each container that gave the device
	// hint provider NUMA nodes, for /state.
	devices map[string][]DeviceView
}

func newLifecycle() lifecycle {
	return lifecycle{awaiting: map[string]struct{}{}, stopped: map[string]PodContainer{}, sandboxes: map[string]string{},
		shrinking: map[string]Shrink{}, devices: map[string][]DeviceView{}}
}

// forget drops the lifecycle facts of a container leaving the index.
func (lc *lifecycle) forget(id string) {
	delete(lc.awaiting, id)
	delete(lc.shrinking, id)
	delete(lc.devices, id)
}

// New is a ledger for cfg; engine is nil (and pendingErr why) when the
// configuration must come from the runtime.
func New(cfg config.Config, topo *topology.Topology, engine *policy.Engine, pendingErr error, deps Deps) *Ledger {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	l := &Ledger{tx: Tx{conf: conf{cfg: cfg, topo: topo, engine: engine, pendingErr: pendingErr},
		dur: durable{ctrs: map[string]Record{}}, life: newLifecycle(), deps: deps}}
	if engine != nil {
		l.tx.dur.st = engine.NewState()
	}
	return l
}

// Change is every fact an event hands to Commit: one event builds one
// Change, its durable part and its lifecycle facts together, and commits
// it once (one Store.Save, at most one fdatasync). Next and Index are the
// durable part: saved by the Store before anything changes; a failed save
// changes nothing, lifecycle facts included. The rest is applied after
// them, in this order: Reconfigure, Restore, the index, Sync, Life.
type Change struct {
	// Next is the engine state the event leads to; nil keeps the state.
	Next  *policy.State
	Index IndexChange
	// Reconfigure is a runtime's Configure: a new engine and the state
	// carried over to it. Not saved: the next save compacts under the new
	// fingerprint.
	Reconfigure *Reconfigure
	// Restore is the state read from disk (or imported from the kubelet)
	// before the first connection.
	Restore *Restore
	// Sync is what a Synchronize learnt from the runtime.
	Sync *Sync
	// Life are the lifecycle facts of a single event.
	Life Life
}

// Reconfigure replaces the configuration and the engine.
type Reconfigure struct {
	Cfg    config.Config
	Topo   *topology.Topology
	Engine *policy.Engine
	State  policy.State
}

// Restore is the state on disk.
type Restore struct {
	State policy.State
	Index map[string]Record
}

// Sync replaces the lifecycle facts with the runtime's: the containers
// awaiting their start, the stopped ones, each pod's sandbox, and the
// devices of the containers placed.
type Sync struct {
	AwaitStart []string
	Stopped    map[string]PodContainer
	Sandboxes  map[string]string
	Devices    map[string][]DeviceView
}

// Life are the lifecycle facts of one event, applied after its index
// change.
type Life struct {
	// AwaitStart is a container placed that has not started (admission).
	AwaitStart string
	// Started no longer awaits its start (StartContainer).
	Started string
	// Stopped are containers stopped and not removed, by ID.
	Stopped map[string]PodContainer
	// Removed is a stopped container removed (RemoveContainer).
	Removed string
	// PodStopped forgets every stopped container of the pod (key).
	PodStopped string
	// Sandbox is a pod's sandbox of its newest container.
	Sandbox *PodSandbox
	// SandboxGone forgets the pod's (key) sandbox.
	SandboxGone string
	// Devices are the devices of a container placed, by ID.
	Devices map[string][]DeviceView
	// Shrink notes a downsize answered, ShrinkDone forgets one (both by
	// container ID); ShrinkDone is applied first.
	Shrink     map[string]Shrink
	ShrinkDone string
}

// PodSandbox is a pod (key) and its sandbox ID.
type PodSandbox struct{ Pod, ID string }

// persists reports whether c has a durable part.
func (c Change) persists() bool { return c.Next != nil || !c.Index.empty() }

// ErrNotConfigured is a durable change before the engine exists.
var ErrNotConfigured = errors.New("not configured")

// Commit applies c: its durable part is saved first, and only if that
// succeeds does anything change. A commit that changes the state (durable,
// reconfigure, restore) bumps the generation, tells Deps.Changed, sets
// the gauges and reports the shared pool's emptiness when it changed. It
// reports whether the shared pool changed: the node's, or a pod-level
// pod's private pool (Pools). A failed save returns a PersistError; a
// change without a durable part saves nothing and returns no error.
func (l *Tx) Commit(c Change) (poolChanged bool, err error) {
	if l.readOnly {
		return false, ErrReadOnly
	}
	persists := c.persists()
	if persists {
		if l.conf.engine == nil {
			return false, ErrNotConfigured
		}
		next := l.dur.st
		if c.Next != nil {
			next = *c.Next
		}
		err := l.deps.Store.Save(Save{Cfg: l.conf.cfg, Topo: l.conf.topo, Engine: l.conf.engine, State: l.dur.st,
			Index: l.dur.ctrs, Next: next, Change: c.Index})
		if err != nil {
			l.deps.Obs.CheckpointError()
			return false, fmt.Errorf("PersistError: %w", err)
		}
	}
	prevEngine := l.conf.engine
	var prev policy.State
	if prevEngine != nil {
		prev = l.dur.st
	}
	if r := c.Reconfigure; r != nil {
		l.conf = conf{cfg: r.Cfg, topo: r.Topo, engine: r.Engine}
		l.dur.st = r.State
	}
	if r := c.Restore; r != nil {
		l.dur.st, l.dur.ctrs, l.dur.restored = r.State, r.Index, true
		if l.dur.ctrs == nil {
			l.dur.ctrs = map[string]Record{}
		}
	}
	if c.Next != nil {
		l.dur.st = *c.Next
	}
	l.applyIndex(c.Index)
	if s := c.Sync; s != nil {
		l.life.syncs++
		clear(l.life.awaiting)
		for _, id := range s.AwaitStart {
			l.life.awaiting[id] = struct{}{}
		}
		l.life.stopped = orEmpty(s.Stopped)
		l.life.sandboxes = orEmpty(s.Sandboxes)
		l.life.devices = orEmpty(s.Devices)
	}
	l.applyLife(c.Life)
	if !persists && c.Reconfigure == nil && c.Restore == nil {
		return false, nil
	}
	l.dur.gen++
	if l.deps.Changed != nil {
		l.deps.Changed()
	}
	e := l.conf.engine
	if e == nil {
		return false, nil
	}
	l.deps.Obs.Gauges(e, l.dur.st, len(l.dur.ctrs))
	l.checkPool()
	if prevEngine == nil {
		return true, nil
	}
	return poolsChanged(prevEngine, prev, e, l.dur.st), nil
}

// SetMode makes the configuration say the shared_pool_updates mode that
// runs, when the first container's cgroups path settled it (the daemon's
// chooseMode, through seeDriver). It is no event's fact and no state: the
// applier is swapped with it whatever the event's Commit does, so it is
// not part of a Change. Nothing is saved, the generation stays. Inside
// Read it does nothing.
func (l *Tx) SetMode(mode string) {
	if !l.readOnly {
		l.conf.cfg.SharedPoolUpdates = mode
	}
}

func orEmpty[M ~map[K]V, K comparable, V any](m M) M {
	if m == nil {
		return M{}
	}
	return m
}

// applyIndex makes c the index; the containers it removes lose their
// lifecycle facts but their stop (a stopped container stays stopped
// until removed).
func (l *Tx) applyIndex(c IndexChange) {
	if c.All != nil {
		for id := range l.dur.ctrs {
			if _, ok := c.All[id]; !ok {
				l.life.forget(id)
			}
		}
		l.dur.ctrs = c.All
		return
	}
	for _, id := range c.Edit.Del {
		l.life.forget(id)
	}
	c.Edit.ApplyTo(l.dur.ctrs)
}

func (l *Tx) applyLife(f Life) {
	lc := &l.life
	if f.Started != "" {
		delete(lc.awaiting, f.Started)
	}
	if f.Removed != "" {
		delete(lc.stopped, f.Removed)
	}
	if f.PodStopped != "" {
		for id, pc := range lc.stopped {
			if pc.Pod == f.PodStopped {
				delete(lc.stopped, id)
			}
		}
	}
	maps.Copy(lc.stopped, f.Stopped)
	if f.SandboxGone != "" {
		delete(lc.sandboxes, f.SandboxGone)
	}
	if f.Sandbox != nil {
		lc.sandboxes[f.Sandbox.Pod] = f.Sandbox.ID
	}
	maps.Copy(lc.devices, f.Devices)
	if f.ShrinkDone != "" {
		delete(lc.shrinking, f.ShrinkDone)
	}
	maps.Copy(lc.shrinking, f.Shrink)
	if f.AwaitStart != "" {
		lc.awaiting[f.AwaitStart] = struct{}{}
	}
}

// checkPool reports a change of the shared pool's emptiness: a warning
// when it empties, an info line when it has CPUs again, and the gauge.
// The engine is set.
func (l *Tx) checkPool() {
	e, st := l.conf.engine, l.dur.st
	empty := e.SharedPoolEmpty(st)
	if empty == l.poolEmpty {
		return
	}
	l.poolEmpty = empty
	entry := l.deps.Log.WithFields(logrus.Fields{"shared_containers": l.SharedOthers(""), "reserved": e.Reserved().String()})
	l.deps.Obs.PoolEmpty(empty)
	switch {
	case !empty:
		entry.WithField("cpus", e.SharedCPUs(st).String()).
			Info("shared pool has CPUs again: shared-pool containers run on it")
	case e.SharedCPUs(st).IsEmpty():
		entry.WithField("reason", allocator.ReasonInsufficientCPUs).
			Warn("shared pool is empty and no CPUs are reserved: shared-pool containers are refused until exclusive CPUs are released")
	default:
		entry.WithField("cpus", e.SharedCPUs(st).String()).
			Warn("shared pool is empty: shared-pool containers run on the reserved CPUs until exclusive CPUs are released")
	}
}
