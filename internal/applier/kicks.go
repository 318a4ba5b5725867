package applier

import (
	"context"
	"sync"
	"time"
)

// KickCounter counts the worker's kicks and the ones it has served, so
// that a caller can wait until every pass asked for so far (and every
// re-push a stale one caused) is done: the only moment the cgroups must
// equal the state, since a push computed before a commit may land after
// that commit's own updates. Its mutex is a leaf.
type KickCounter struct {
	mu            sync.Mutex
	asked, served uint64
	caughtUp      chan struct{} // closed when served reaches asked; nil without a waiter
}

func (k *KickCounter) ask() {
	k.mu.Lock()
	k.asked++
	k.mu.Unlock()
}

// Asked is the kicks asked so far: a pass started now serves these.
func (k *KickCounter) Asked() uint64 {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.asked
}

func (k *KickCounter) serve(upTo uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.served = max(k.served, upTo)
	if k.served >= k.asked && k.caughtUp != nil {
		close(k.caughtUp)
		k.caughtUp = nil
	}
}

// servedUpTo reports whether the kicks up to upTo have been served.
func (k *KickCounter) servedUpTo(upTo uint64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.served >= upTo
}

// Settled reports whether every kick asked so far has been served.
func (k *KickCounter) Settled() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.served >= k.asked
}

// Wait returns once every kick asked so far has been served, or with
// ctx's error.
func (k *KickCounter) Wait(ctx context.Context) error {
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

// Kick has the worker bring every shared-pool container to the current
// pool: it wakes it at once, or under direct arms its wake-up passDelay
// later.
func (u *updater) Kick() {
	u.kicks.ask() // before the wake-up, which the worker serves with it
	d := time.Duration(u.wakeDelay.Load())
	if d == 0 {
		u.wake()
		return
	}
	// One armed wake-up serves every kick asked before it fires.
	if u.wakePending.CompareAndSwap(false, true) {
		u.after(d, func() {
			u.wakePending.Store(false)
			u.wake()
		})
	}
}

// afterFunc runs f after d (time.AfterFunc, its timer dropped).
func afterFunc(d time.Duration, f func()) { time.AfterFunc(d, f) }

// wake has the worker pass unless a wake-up is waiting for it already.
func (u *updater) wake() {
	select {
	case u.kickC <- struct{}{}:
	default:
	}
}
