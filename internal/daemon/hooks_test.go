package daemon

import "github.com/nri-cpualign/nri-cpualign/pkg/policy"

// restore loads the store into the ledger, as Run does before the first
// connection (tests that drive handlers without Run).
func (d *Daemon) restore() error {
	d.led.Lock()
	defer d.led.Unlock()
	return d.restoreLocked()
}

// engineState is the engine and the committed state, read together (the
// package's own tests build without the testhooks tag, so they cannot use
// EngineState).
func (d *Daemon) engineState() (*policy.Engine, policy.State) {
	d.led.Lock()
	defer d.led.Unlock()
	return d.led.Engine(), d.led.State()
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
