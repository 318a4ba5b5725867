// Package ledger is the one owner of nri-cpualign's policy state
// (docs/architecture.md): the engine and the configuration it was built
// from, the engine state, the container index, the generation, and the
// lifecycle facts the NRI events leave (containers placed and not started,
// stopped and not removed, each pod's sandbox, downsizes not committed,
// devices). Its fields are unexported: the only way to change any of it is
// Commit with a Change, which makes the durable part durable first (the
// Store) and then bumps the generation, checks the shared pool and
// signals Changed. Everything else reads through the query methods of a
// Tx (inside Update or Read, which hold the ledger's lock: no caller takes
// it) or a View: the gauges and the NodeResourceTopology export read a
// View when they need one, so a commit calls out only to save and on the
// rare events (a failed save, the shared pool emptying or filling).
//
// The package imports no NRI, cgroup or daemon code: it is told what
// happened and decides nothing about containers.
package ledger

import (
	"errors"
	"fmt"
	"iter"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

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

// Observer is told of a commit's rare events (the daemon's metrics): a
// failed save, and the shared pool's emptiness when it flips. The gauges
// of the state are read from a View at scrape time instead.
type Observer interface {
	CheckpointError()
	PoolEmpty(empty bool)
}

// Deps are the ledger's collaborators.
type Deps struct {
	Store Store
	Obs   Observer
	Log   *logrus.Logger
	Now   func() time.Time // stamps Record.Since; nil: time.Now
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
	changed   chan struct{} // Ledger.Changed; 1-buffered, sent without blocking
	readOnly  bool          // inside Read: Commit refuses
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
	// byPod and shared index ctrs, for the queries every admission asks
	// (a walk of 500 records each was a third of a create's handler
	// time): the container IDs of each pod, and how many records are
	// not exclusive. Kept by setCtrs and applyIndex only.
	byPod  map[string]map[string]struct{}
	shared int
}

// setCtrs makes m the index and rebuilds byPod and shared.
func (d *durable) setCtrs(m map[string]Record) {
	if m == nil {
		m = map[string]Record{}
	}
	d.ctrs, d.byPod, d.shared = m, make(map[string]map[string]struct{}, len(m)), 0
	for id, r := range m {
		d.index(id, r)
	}
}

// index adds record r of container id to byPod and shared, unindex
// takes it out; each changes nothing when it is in, or out, already.
func (d *durable) index(id string, r Record) {
	ids := d.byPod[r.Pod]
	if _, ok := ids[id]; ok {
		return
	}
	if ids == nil {
		ids = map[string]struct{}{}
		d.byPod[r.Pod] = ids
	}
	ids[id] = struct{}{}
	if !r.Exclusive {
		d.shared++
	}
}

func (d *durable) unindex(id string, r Record) {
	ids := d.byPod[r.Pod]
	if _, ok := ids[id]; !ok {
		return
	}
	delete(ids, id)
	if len(ids) == 0 {
		delete(d.byPod, r.Pod)
	}
	if !r.Exclusive {
		d.shared--
	}
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
		life: newLifecycle(), deps: deps, changed: make(chan struct{}, 1)}}
	l.tx.dur.setCtrs(nil)
	if engine != nil {
		l.tx.dur.st = engine.NewState()
	}
	return l
}

// Changed is signalled by every commit that changes the state (the
// generation's bump). Signals coalesce: one is pending at most, so a
// reader that takes it and then reads a View has seen every commit up to
// that View. The NodeResourceTopology exporter follows it (its one
// reader: the daemon forwards it to the exporter's Kick). Commit never
// waits on it.
func (l *Ledger) Changed() <-chan struct{} { return l.tx.changed }

// ErrReadOnly is Commit's answer inside Read.
var ErrReadOnly = errors.New("ledger: Commit inside Read")

// Update runs fn with the ledger's lock held and returns its error: one
// event's plan, its Commit and whatever must see the same generation. The
// lock is the ledger's own: no caller takes or releases it, so none can
// forget to. fn must not call Update, Read, View, Config or Synced (the
// lock is not reentrant), nor wait on the runtime.
func (l *Ledger) Update(fn func(tx *Tx) error) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fn(&l.tx)
}

// Read runs fn with the ledger's lock held: a consistent read of one
// generation. Commit refuses inside it (ErrReadOnly).
func (l *Ledger) Read(fn func(tx *Tx)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tx.readOnly = true
	defer func() { l.tx.readOnly = false }()
	fn(&l.tx)
}

// Within is Update for a function with a result besides its error.
func Within[T any](l *Ledger, fn func(tx *Tx) (T, error)) (T, error) {
	var out T
	err := l.Update(func(tx *Tx) error {
		var err error
		out, err = fn(tx)
		return err
	})
	return out, err
}

// Gen is the generation, read in one Read: what a worker compares with
// the generation it started from.
func (l *Ledger) Gen() (g uint64) {
	l.Read(func(tx *Tx) { g = tx.Gen() })
	return g
}

// Config is the effective configuration, read in one Read.
func (l *Ledger) Config() (c config.Config) {
	l.Read(func(tx *Tx) { c = tx.conf.cfg })
	return c
}

// Synced reports, in one Read, whether a Synchronize has completed.
func (l *Ledger) Synced() (ok bool) {
	l.Read(func(tx *Tx) { ok = tx.life.syncs > 0 })
	return ok
}

// Engine is the policy engine, nil until configured.
func (l *Tx) Engine() *policy.Engine { return l.conf.engine }

// PendingErr is why the engine is nil.
func (l *Tx) PendingErr() error { return l.conf.pendingErr }

// Settings is the effective configuration (Config without the lock).
func (l *Tx) Settings() config.Config { return l.conf.cfg }

// Topology is the machine.
func (l *Tx) Topology() *topology.Topology { return l.conf.topo }

// State is the committed engine state. It is a value whose maps the
// engine never edits in place: it stays valid after Unlock.
func (l *Tx) State() policy.State { return l.dur.st }

// Gen is the generation: bumped by every commit that changed the state.
func (l *Tx) Gen() uint64 { return l.dur.gen }

// Syncs counts the completed Synchronize calls.
func (l *Tx) Syncs() int { return l.life.syncs }

// Restored reports whether the state on disk has been read.
func (l *Tx) Restored() bool { return l.dur.restored }

// Record is the index's record of container id.
func (l *Tx) Record(id string) (Record, bool) {
	r, ok := l.dur.ctrs[id]
	return r, ok
}

// Records iterates over the index, by container ID, in no order.
func (l *Tx) Records() iter.Seq2[string, Record] { return maps.All(l.dur.ctrs) }

// Len is the number of containers in the index.
func (l *Tx) Len() int { return len(l.dur.ctrs) }

// Index is a copy of the container index.
func (l *Tx) Index() map[string]Record { return CloneRecords(l.dur.ctrs) }

// RightCPUs is the cpuset a known container should have now
// (RightCPUs): a downsize answered and not committed yet narrows it
// already.
func (l *Tx) RightCPUs(r Record) cpuset.CPUSet {
	return RightCPUs(l.conf.engine, l.dur.st, r, l.life.shrinking)
}

// Shrinks is a copy of the downsizes answered and not committed, by
// container ID (RightCPUs' shrinking).
func (l *Tx) Shrinks() map[string]Shrink { return maps.Clone(l.life.shrinking) }

// Pools is what the non-exclusive containers should run on now.
func (l *Tx) Pools() Pools { return PoolsOf(l.conf.engine, l.dur.st) }

// Static reports cpu_manager_policy = static.
func (l *Tx) Static() bool { return l.conf.cfg.CPUManagerPolicy == policy.CPUPolicyStatic }

// QuotaOff reports disable_cpu_quota: exclusive containers run without a
// CFS quota.
func (l *Tx) QuotaOff() bool { return l.conf.cfg.DisableCPUQuota }

// SharedOthers counts the shared-pool containers of the index but skip.
func (l *Tx) SharedOthers(skip string) int {
	n := l.dur.shared
	if r, ok := l.dur.ctrs[skip]; ok && !r.Exclusive {
		n--
	}
	return n
}

// Tracks reports whether the index holds a container of pod by name.
func (l *Tx) Tracks(pod, name string) bool {
	for id := range l.dur.byPod[pod] {
		if l.dur.ctrs[id].Name == name {
			return true
		}
	}
	return false
}

// PodRecords are the index's records of pod.
func (l *Tx) PodRecords(pod string) iter.Seq2[string, Record] {
	return func(yield func(string, Record) bool) {
		for id := range l.dur.byPod[pod] {
			if !yield(id, l.dur.ctrs[id]) {
				return
			}
		}
	}
}

// NameInUse reports whether a container of pod by name other than but
// (the container an event removes; "" for none) is known, tracked or
// stopped and not removed (a restart's older instance).
func (l *Tx) NameInUse(pod, name, but string) bool {
	for id := range l.dur.byPod[pod] {
		if id != but && l.dur.ctrs[id].Name == name {
			return true
		}
	}
	for id, pc := range l.life.stopped {
		if id != but && pc.Pod == pod && pc.Name == name {
			return true
		}
	}
	return false
}

// AwaitingStart reports whether the container was placed and has not
// started yet.
func (l *Tx) AwaitingStart(id string) bool {
	_, ok := l.life.awaiting[id]
	return ok
}

// StoppedAs is the pod and name of a stopped container not removed yet.
func (l *Tx) StoppedAs(id string) (PodContainer, bool) {
	pc, ok := l.life.stopped[id]
	return pc, ok
}

// PodHasContainers reports whether a container of pod other than but
// (the container an event removes; "" for none) is known, tracked or
// stopped and not removed.
func (l *Tx) PodHasContainers(pod, but string) bool {
	for id := range l.dur.byPod[pod] {
		if id != but {
			return true
		}
	}
	for id, pc := range l.life.stopped {
		if id != but && pc.Pod == pod {
			return true
		}
	}
	return false
}

// Sandbox is the pod's sandbox of its newest container.
func (l *Tx) Sandbox(pod string) (string, bool) {
	sb, ok := l.life.sandboxes[pod]
	return sb, ok
}

// Shrinking is the container's downsize answered and not committed.
func (l *Tx) Shrinking(id string) (Shrink, bool) {
	s, ok := l.life.shrinking[id]
	return s, ok
}

// Stamp is the Since of a record made now.
func (l *Tx) Stamp() string { return StampOf(l.deps.Now()) }

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

// ErrNotConfigured is a durable change before the engine exists.
var ErrNotConfigured = errors.New("not configured")

// Commit applies c: its durable part is saved first, and only if that
// succeeds does anything change. A commit that changes the state (durable,
// reconfigure, restore) bumps the generation, signals Changed and reports
// the shared pool's emptiness when it changed. It
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
		l.dur.st, l.dur.restored = r.State, true
		l.dur.setCtrs(r.Index)
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
	select {
	case l.changed <- struct{}{}:
	default: // one pending already: its reader will see this commit too
	}
	e := l.conf.engine
	if e == nil {
		return false, nil
	}
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
		l.dur.setCtrs(c.All)
		return
	}
	for _, id := range c.Edit.Del {
		l.life.forget(id)
	}
	touched := func(f func(id string)) {
		for _, id := range c.Edit.Del {
			f(id)
		}
		for _, r := range c.Edit.Put {
			f(r.ID)
		}
	}
	touched(func(id string) {
		if r, ok := l.dur.ctrs[id]; ok {
			l.dur.unindex(id, r)
		}
	})
	c.Edit.ApplyTo(l.dur.ctrs)
	touched(func(id string) {
		if r, ok := l.dur.ctrs[id]; ok {
			l.dur.index(id, r)
		}
	})
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
// adapter's strandedError). Of gives RightCPUs' answer for a non-exclusive
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

// StampOf formats t as Record.Since.
func StampOf(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }
