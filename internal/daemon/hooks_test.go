package daemon

import (
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// restore loads the store into the ledger, as Run does before the first
// connection (tests that drive handlers without Run).
func (d *Daemon) restore() error {
	return d.led.Update(func(l *ledger.Tx) error { return d.restoreLocked(l, nil) })
}

// readLedger is what fn reads in one Read of d's ledger (tests).
func readLedger[T any](d *Daemon, fn func(l *ledger.Tx) T) T {
	var v T
	d.led.Read(func(l *ledger.Tx) { v = fn(l) })
	return v
}

// engineState is the engine and the committed state, read together (the
// package's own tests build without the testhooks tag, so they cannot use
// EngineState).
func (d *Daemon) engineState() (e *policy.Engine, st policy.State) {
	d.led.Read(func(l *ledger.Tx) { e, st = l.Engine(), l.State() })
	return e, st
}
