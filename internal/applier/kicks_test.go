package applier

import (
	"context"
	"runtime"
	"testing"
	"time"

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

// TestDelayedWakeServesTheKicksMeanwhile: under a wake delay (direct's
// passDelay) a kick arms one wake-up; the kicks before it fires are
// served by the one pass it starts, and a kick after it arms the next.
func TestDelayedWakeServesTheKicksMeanwhile(t *testing.T) {
	u := newUpdater(ledger.New(config.Config{}, nil, nil, nil, ledger.Deps{}), nil, nil, cgroups.Root{}, nil)
	var armed []func()
	u.after = func(d time.Duration, f func()) {
		if d != passDelay {
			t.Errorf("wake-up armed for %v, want passDelay", d)
		}
		armed = append(armed, f)
	}
	newDirect(u)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	passes := make(chan int, 4)
	n := 0
	done := make(chan struct{})
	go func() {
		defer close(done)
		u.loop(ctx, func() { n++; passes <- n }, func() int { return 0 })
	}()

	u.Kick()
	u.Kick()
	u.Kick()
	if len(armed) != 1 {
		t.Fatalf("%d wake-ups armed for three kicks before the first fired, want 1", len(armed))
	}
	if u.kicks.Settled() || len(passes) != 0 {
		t.Fatal("a kick was served before its wake-up fired")
	}
	armed[0]()
	if got := <-passes; got != 1 {
		t.Fatalf("pass %d, want 1", got)
	}
	if err := u.kicks.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	u.Kick()
	if len(armed) != 2 {
		t.Fatalf("%d wake-ups armed after a kick behind a fired one, want 2", len(armed))
	}
	armed[1]()
	if got := <-passes; got != 2 {
		t.Fatalf("pass %d, want 2", got)
	}
	if err := u.kicks.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-done
	if len(passes) != 0 {
		t.Fatalf("%d passes more than the wake-ups asked for", len(passes))
	}

	// in-answer wakes at once: a push stands in for an answer.
	newInAnswer(u)
	u.Kick()
	if len(armed) != 2 || len(u.kickC) != 1 {
		t.Fatalf("in-answer: %d wake-ups armed, %d wake-ups waiting; want 2 and 1", len(armed), len(u.kickC))
	}
}
