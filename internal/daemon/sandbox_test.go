package daemon

import (
	"context"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// The kubelet recreates a pod's dead sandbox under the same pod UID: it
// stops the old sandbox (which ends the pod's CPUs, as its containers are
// gone), creates the new one and its containers, and removes the old
// sandbox later, by its garbage collection. That late RemovePodSandbox
// (or another StopPodSandbox) of the old sandbox must not take the CPUs
// of the containers in the new one. ht-1s-4c, core 0 ({0,4}) reserved.
func TestOldSandboxLeavesTheNewOnesCPUs(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	old := testPod("a")
	app := testCtr("a-1", "app", 2000)
	if cpus, _ := h.create(t, old, app); cpus != "1,5" {
		t.Fatalf("a-1 on %q, want 1,5", cpus)
	}
	h.start(t, old, app)
	h.stop(t, old, app)
	if err := h.p.StopPodSandbox(ctx, old); err != nil {
		t.Fatal(err)
	}
	if h.shared() != "0-7" {
		t.Fatalf("after the old sandbox stopped: shared %s, want 0-7", h.shared())
	}

	// The new sandbox, same UID: the lowest free core again, {1,5}.
	cur := testPod("a")
	cur.Id = "sb-a-2"
	app2 := testCtr("a-2", "app", 2000)
	if cpus, _ := h.create(t, cur, app2); cpus != "1,5" {
		t.Fatalf("a-2 on %q, want 1,5", cpus)
	}
	h.start(t, cur, app2)
	// The old sandbox's events, late: nothing moves.
	if err := h.p.StopPodSandbox(ctx, old); err != nil {
		t.Fatal(err)
	}
	h.remove(t, old, app)
	h.removePod(t, old)
	if h.shared() != "0,2-4,6-7" || !h.tracked("a-2") {
		t.Errorf("after the old sandbox's removal: shared %s, a-2 tracked %v; want 0,2-4,6-7 and true", h.shared(), h.tracked("a-2"))
	}
	// The current sandbox's removal ends the pod.
	h.stop(t, cur, app2)
	h.removePod(t, cur)
	if h.shared() != "0-7" || h.tracked("a-2") {
		t.Errorf("after the pod's removal: shared %s, a-2 tracked %v; want 0-7 and false", h.shared(), h.tracked("a-2"))
	}
}

// After a plugin restart the sandbox of a pod's newest container is the
// current one (Synchronize), so the old sandbox's removal still leaves
// the new containers alone.
func TestSyncKnowsTheCurrentSandbox(t *testing.T) {
	dir := t.TempDir()
	h := newHandlerDaemon(t, dir, "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	old, cur := testPod("a"), testPod("a")
	cur.Id = "sb-a-2"
	gone := testCtr("a-1", "app", 2000)
	gone.PodSandboxId, gone.State, gone.CreatedAt = old.Id, api.ContainerState_CONTAINER_STOPPED, 1
	app2 := testCtr("a-2", "app", 2000)
	app2.PodSandboxId, app2.State, app2.CreatedAt = cur.Id, api.ContainerState_CONTAINER_RUNNING, 2
	if cpus, _ := h.create(t, cur, app2); cpus != "1,5" {
		t.Fatalf("a-2 on %q, want 1,5", cpus)
	}
	app2.State = api.ContainerState_CONTAINER_RUNNING
	// A restart of the plugin: Synchronize reports both sandboxes.
	h2 := newHandlerDaemon(t, dir, "")
	if _, err := h2.p.Synchronize(ctx, []*api.PodSandbox{old, cur}, []*api.Container{gone, app2}); err != nil {
		t.Fatal(err)
	}
	h2.removePod(t, old)
	if h2.shared() != "0,2-4,6-7" || !h2.tracked("a-2") {
		t.Errorf("after the old sandbox's removal: shared %s, a-2 tracked %v; want 0,2-4,6-7 and true", h2.shared(), h2.tracked("a-2"))
	}
}
