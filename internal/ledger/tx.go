package ledger

import "errors"

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
