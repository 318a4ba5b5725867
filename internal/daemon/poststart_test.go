package daemon

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// postStart delivers the runtime's PostStartContainer for c (the fake
// runtime sends none by itself).
func postStart(t *testing.T, d *Daemon, c *api.Container) {
	t.Helper()
	if err := (&plugin{d: d}).PostStartContainer(context.Background(), nil, c); err != nil {
		t.Fatalf("PostStartContainer %s: %v", c.GetName(), err)
	}
}

// TestAfterAnswerPushWaitsForPostStart: under after-answer, the push that
// a new exclusive container's creation makes necessary waits for that
// container's PostStartContainer, so that the runtime's start path does
// not wait for every shared container's update; a container removed before
// it started pushes through its removal and leaves nothing pending.
// ht-1s-4c: CPUs 0-7, siblings (n, n+4); reserved 0,4.
func TestAfterAnswerPushWaitsForPostStart(t *testing.T) {
	topo := loadFixture(t, "ht-1s-4c")
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), reserveCore0+"shared_pool_updates = \"after-answer\"\n"), topo)

	be1, _, err := rt.create(rt.addPod(podSpec{uid: "be", name: "be", qos: "besteffort"}), "be1", 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	c2, ups, err := rt.create(rt.addPod(podSpec{uid: "g1", name: "g1", qos: "guaranteed"}), "c2", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c2); got != "1,5" || len(ups) != 0 {
		t.Fatalf("c2 cpus %q, updates %q; want 1,5 and none", got, rt.describe(ups))
	}
	settle(t, r.d)
	if got := rt.cpus(be1); got != "0-7" {
		t.Errorf("be1 on %q before c2's PostStartContainer, want 0-7 (push deferred)", got)
	}
	postStart(t, r.d, c2)
	settle(t, r.d)
	if got := rt.cpus(be1); got != "0,2-4,6-7" {
		t.Errorf("be1 on %q after c2's PostStartContainer, want 0,2-4,6-7", got)
	}
	// A second PostStartContainer (or one for a container that deferred
	// nothing) pushes nothing new and leaves be1 where it is.
	postStart(t, r.d, c2)
	postStart(t, r.d, be1)
	settle(t, r.d)
	if got := rt.cpus(be1); got != "0,2-4,6-7" {
		t.Errorf("be1 on %q after repeated PostStartContainer, want 0,2-4,6-7", got)
	}

	// c3 takes core 2 and never starts: its removal gives it back and
	// pushes; nothing stays pending for it.
	c3, _, err := rt.create(rt.addPod(podSpec{uid: "g2", name: "g2", qos: "guaranteed"}), "c3", 2000, 2000)
	if err != nil {
		t.Fatal(err)
	}
	if got := rt.cpus(c3); got != "2,6" {
		t.Fatalf("c3 cpus %q, want 2,6", got)
	}
	settle(t, r.d)
	if got := rt.cpus(be1); got != "0,2-4,6-7" {
		t.Errorf("be1 on %q before c3 started, want 0,2-4,6-7 (push deferred)", got)
	}
	rt.stop(c3)
	settle(t, r.d)
	if got := rt.cpus(be1); got != "0,2-4,6-7" {
		t.Errorf("be1 on %q after c3 stopped unstarted, want 0,2-4,6-7", got)
	}
	r.d.mu.Lock()
	pending := len(r.d.pushOnStart)
	r.d.mu.Unlock()
	if pending != 0 {
		t.Errorf("%d deferred pushes left after c3's removal, want 0", pending)
	}

	// Stopping c2 grows the pool at once (no start to wait for).
	rt.stop(c2)
	settle(t, r.d)
	if got := rt.cpus(be1); got != "0-7" {
		t.Errorf("be1 on %q after c2 stopped, want 0-7", got)
	}
}
