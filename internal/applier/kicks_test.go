package applier

import (
	"context"
	"runtime"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// A cancelled context makes wait say whether it would return: nil only
// once every kick asked so far has been served.
func TestKickLedger(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var k KickCounter
	if err := k.Wait(done); err != nil {
		t.Fatalf("no kick asked: wait = %v, want nil", err)
	}
	k.ask()
	first := k.Asked() // a push starts: it serves the first kick
	k.ask()            // a kick during that push (a stale-push re-kick)
	k.serve(first)
	if err := k.Wait(done); err == nil {
		t.Fatal("one of two kicks served: wait returned nil")
	}
	k.serve(k.Asked())
	if err := k.Wait(done); err != nil {
		t.Fatalf("both kicks served: wait = %v", err)
	}
	k.serve(1) // an older push finishing late does not undo the count
	if err := k.Wait(done); err != nil {
		t.Fatalf("after a late serve of an older push: wait = %v", err)
	}

	// A waiter blocked in wait returns when the last kick is served.
	k.ask()
	returned := make(chan error, 1)
	go func() { returned <- k.Wait(context.Background()) }()
	k.serve(k.Asked())
	if err := <-returned; err != nil {
		t.Fatalf("blocked waiter: %v", err)
	}
}

// TestLeftoverWakeUpPassesNothing: a kick that lands between a pass's
// wake-up and its upTo is served by that pass, and leaves a wake-up token
// behind; the worker must not run a pass for that token, which no kick
// accounts for (a waiter on the ledger would return while it ran).
func TestLeftoverWakeUpPassesNothing(t *testing.T) {
	u := newUpdater(ledger.New(config.Config{}, nil, nil, nil, ledger.Deps{}), nil, nil, cgroups.Root{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := make(chan int, 4)
	n := 0
	pass := func() {
		n++
		if n == 1 {
			u.Kick() // lands during the first pass, after its upTo: a real kick
		}
		passes <- n
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.loop(ctx, pass, func() int { return 0 })
	}()

	// Token and kick 1; before the worker reads upTo, kick 2 asks without
	// a token of its own (the channel holds one): the first pass serves
	// both, and its own kick (3) during the pass puts a token back.
	u.kicks.ask()
	u.kicks.ask()
	u.kickC <- struct{}{}
	if got := <-passes; got != 1 {
		t.Fatalf("pass %d, want 1", got)
	}
	// Kick 3 came after the first pass's upTo: it gets a second pass.
	if got := <-passes; got != 2 {
		t.Fatalf("pass %d, want 2", got)
	}
	if err := u.kicks.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	// A leftover token with every kick served: no pass.
	u.kickC <- struct{}{}
	for len(u.kickC) > 0 { // the worker took it
		runtime.Gosched()
	}
	u.Kick() // a fresh kick behind it must still be passed exactly once
	if got := <-passes; got != 3 {
		t.Fatalf("pass %d, want 3", got)
	}
	if err := u.kicks.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if len(passes) != 0 {
		t.Fatalf("%d passes more than the kicks asked for", len(passes))
	}
}
