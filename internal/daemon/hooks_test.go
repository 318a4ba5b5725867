package daemon

import (
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// restore loads the store into the ledger, as Run does before the first
// connection (tests that drive handlers without Run).
func (d *Daemon) restore() error {
	d.led.Lock()
	defer d.led.Unlock()
	return d.restoreLocked()
}

// persist saves (st, ctrs) as a whole new index without committing it
// (tests of the store; the ledger is locked).
func (d *Daemon) persist(st policy.State, ctrs map[string]ctrRecord) error {
	l := d.led
	return d.store.Save(ledger.Save{Cfg: l.Settings(), Topo: l.Topology(), Engine: l.Engine(), State: l.State(),
		Index: l.Index(), Next: st, Change: indexChange{All: ctrs}})
}

// kickC is the worker's wake-up channel.
func (d *Daemon) kickC() chan struct{} {
	switch a := d.applier().(type) {
	case *direct:
		return a.kickC
	case *inAnswer:
		return a.kickC
	}
	return nil
}
