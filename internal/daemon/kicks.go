package daemon

import (
	"context"
	"sync"
)

// kickLedger counts the update worker's kicks and the ones it has served,
// so that a caller can wait until every push asked for so far (and every
// re-push a stale one caused) has come back from the runtime: the only
// moment the runtime's cpusets must equal the state, since a push
// computed before a handler's change may land after that handler's own
// updates.
type kickLedger struct {
	mu            sync.Mutex
	asked, served uint64
	caughtUp      chan struct{} // closed when served reaches asked; nil without a waiter
}

func (k *kickLedger) ask() {
	k.mu.Lock()
	k.asked++
	k.mu.Unlock()
}

// asked so far: a push started now serves these.
func (k *kickLedger) upTo() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked
}

func (k *kickLedger) serve(upTo uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.served = max(k.served, upTo)
	if k.served >= k.asked && k.caughtUp != nil {
		close(k.caughtUp)
		k.caughtUp = nil
	}
}

// settled reports whether every kick asked so far has been served.
func (k *kickLedger) settled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.served >= k.asked
}

// wait returns once every kick asked so far has been served, or with
// ctx's error.
func (k *kickLedger) wait(ctx context.Context) error {
	for {
		k.mu.Lock()
		if k.served >= k.asked {
			k.mu.Unlock()
			return nil
		}
		if k.caughtUp == nil {
			k.caughtUp = make(chan struct{})
		}
		ch := k.caughtUp
		k.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
