package daemon

import "github.com/nri-cpualign/nri-cpualign/pkg/policy"

// restore loads the store into the ledger, as Run does before the first
// connection (tests that drive handlers without Run).
func (d *Daemon) restore() error {
	d.led.mu.Lock()
	defer d.led.mu.Unlock()
	return d.led.store.load(d.led)
}

// persist saves (st, ctrs) as a whole new index without committing it
// (tests of the store).
func (d *Daemon) persist(st policy.State, ctrs map[string]ctrRecord) error {
	return d.led.store.save(d.led, st, indexChange{all: ctrs})
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
