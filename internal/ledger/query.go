package ledger

import (
	"iter"
	"maps"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

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
	n := 0
	for id, r := range l.dur.ctrs {
		if id != skip && !r.Exclusive {
			n++
		}
	}
	return n
}

// Tracks reports whether the index holds a container of pod by name.
func (l *Tx) Tracks(pod, name string) bool {
	for _, r := range l.dur.ctrs {
		if r.Pod == pod && r.Name == name {
			return true
		}
	}
	return false
}

// NameInUse reports whether a container of pod by name other than but
// (the container an event removes; "" for none) is known, tracked or
// stopped and not removed (a restart's older instance).
func (l *Tx) NameInUse(pod, name, but string) bool {
	for id, r := range l.dur.ctrs {
		if id != but && r.Pod == pod && r.Name == name {
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
	for id, r := range l.dur.ctrs {
		if id != but && r.Pod == pod {
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

// View is what observers read (/state, metrics, the NodeResourceTopology
// export): consistent values taken under the lock, none of which the
// ledger changes in place afterwards (the engine state is a value whose
// maps are replaced, never edited, and Ctrs, Devices and Shrinking are
// copies).
type View struct {
	Cfg    config.Config
	Topo   *topology.Topology
	Engine *policy.Engine
	St     policy.State
	Ctrs   []Record
	Syncs  int
	// Devices are the devices of the containers in Ctrs.
	Devices map[string][]DeviceView
	// Shrinking are the downsizes answered and not committed.
	Shrinking map[string]Shrink
}

// RightCPUs is the cpuset a container of the view should have
// (RightCPUs), as Tx.RightCPUs answers at the view's generation.
func (v View) RightCPUs(r Record) cpuset.CPUSet { return RightCPUs(v.Engine, v.St, r, v.Shrinking) }

// View returns the ledger's current values, read in one Read.
func (l *Ledger) View() (v View) {
	l.Read(func(tx *Tx) { v = tx.View() })
	return v
}

// View is the transaction's values as a View (a copy).
func (l *Tx) View() View {
	v := View{Cfg: l.conf.cfg, Topo: l.conf.topo, Engine: l.conf.engine, St: l.dur.st, Syncs: l.life.syncs}
	if l.conf.engine != nil {
		v.Ctrs = make([]Record, 0, len(l.dur.ctrs))
		for _, r := range l.dur.ctrs {
			v.Ctrs = append(v.Ctrs, r)
		}
		v.Devices = maps.Clone(l.life.devices)
		v.Shrinking = maps.Clone(l.life.shrinking)
	}
	return v
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
