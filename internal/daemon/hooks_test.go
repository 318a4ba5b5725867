package daemon

// restore loads the store into the ledger, as Run does before the first
// connection (tests that drive handlers without Run).
func (d *Daemon) restore() error {
	d.led.Lock()
	defer d.led.Unlock()
	return d.restoreLocked(nil)
}
