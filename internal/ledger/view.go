package ledger

import (
	"maps"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

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
	// Gen is the generation: 0 before the first commit that changed the
	// state (the gauges read 0 until then).
	Gen uint64
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
	v := View{Cfg: l.conf.cfg, Topo: l.conf.topo, Engine: l.conf.engine, St: l.dur.st, Syncs: l.life.syncs, Gen: l.dur.gen}
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
