package daemon

import "github.com/nri-cpualign/nri-cpualign/internal/ledger"

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
