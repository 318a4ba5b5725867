package daemon

import (
	"context"
	"testing"
)

// A cancelled context makes wait say whether it would return: nil only
// once every kick asked so far has been served.
func TestKickLedger(t *testing.T) {
	done, cancel := context.WithCancel(context.Background())
	cancel()
	var k kickLedger
	if err := k.wait(done); err != nil {
		t.Fatalf("no kick asked: wait = %v, want nil", err)
	}
	k.ask()
	first := k.upTo() // a push starts: it serves the first kick
	k.ask()           // a kick during that push (a stale-push re-kick)
	k.serve(first)
	if err := k.wait(done); err == nil {
		t.Fatal("one of two kicks served: wait returned nil")
	}
	k.serve(k.upTo())
	if err := k.wait(done); err != nil {
		t.Fatalf("both kicks served: wait = %v", err)
	}
	k.serve(1) // an older push finishing late does not undo the count
	if err := k.wait(done); err != nil {
		t.Fatalf("after a late serve of an older push: wait = %v", err)
	}

	// A waiter blocked in wait returns when the last kick is served.
	k.ask()
	returned := make(chan error, 1)
	go func() { returned <- k.wait(context.Background()) }()
	k.serve(k.upTo())
	if err := <-returned; err != nil {
		t.Fatalf("blocked waiter: %v", err)
	}
}
