package daemon

import (
	"context"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"
)

// These tests run on ht-1s-4c with core 0 ({0,4}) reserved (handlerDaemon):
// the free cores are {1,5}, {2,6}, {3,7}, and exclusive CPUs come whole
// cores first, lowest id first; single CPUs from the most used core first.

func (h *handlerDaemon) stop(t *testing.T, pod *api.PodSandbox, c *api.Container) {
	t.Helper()
	ups, err := h.p.StopContainer(context.Background(), pod, c)
	if err != nil {
		t.Fatalf("StopContainer %s: %v", c.Name, err)
	}
	if len(ups) != 0 {
		t.Errorf("StopContainer %s answered %d updates; the shared pool does not change", c.Name, len(ups))
	}
	c.State = api.ContainerState_CONTAINER_STOPPED
}

func (h *handlerDaemon) removePod(t *testing.T, pod *api.PodSandbox) {
	t.Helper()
	if err := h.p.RemovePodSandbox(context.Background(), pod); err != nil {
		t.Fatalf("RemovePodSandbox %s: %v", pod.Name, err)
	}
}

// refused creates c in pod and fails the test unless it is refused with
// InsufficientCPUs.
func (h *handlerDaemon) refused(t *testing.T, pod *api.PodSandbox, c *api.Container) {
	t.Helper()
	c.PodSandboxId = pod.Id
	if _, _, err := h.p.CreateContainer(context.Background(), pod, c); err == nil || !strings.Contains(err.Error(), "InsufficientCPUs") {
		t.Fatalf("CreateContainer %s/%s: err %v, want InsufficientCPUs", pod.Uid, c.Name, err)
	}
}

// held is /state's held list as "uid/container=cpus", in its order.
func (h *handlerDaemon) held() string {
	var out []string
	for _, x := range h.d.State().Held {
		out = append(out, x.PodUID+"/"+x.Container+"="+x.CPUs)
	}
	return strings.Join(out, " ")
}

// gauge is a gauge's value as /metrics serves it (-1: absent).
func (h *handlerDaemon) gauge(name string) float64 {
	mfs, err := h.d.Registry().Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}

// A stopped container of a live pod keeps its CPUs while other pods come
// and go: the shared pool does not grow, other pods cannot have them, and
// the restart (a new container, same pod and name) gets exactly them;
// the pod's removal frees them.
func TestRestartGetsTheSameCPUs(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	bePod, a := testPod("be"), testPod("a")
	be := testCtr("be-1", "be", 0)
	h.create(t, bePod, be)
	h.start(t, bePod, be)
	app := testCtr("a-1", "app", 2000)
	if cpus, _ := h.create(t, a, app); cpus != "1,5" {
		t.Fatalf("a-1 on %q, want 1,5", cpus)
	}
	h.start(t, a, app)
	h.kicked()

	h.stop(t, a, app)
	if h.shared() != "0,2-4,6-7" || h.kicked() {
		t.Errorf("after the stop: shared %s, want 0,2-4,6-7 unchanged and no push", h.shared())
	}
	if got := h.held(); got != "a/app=1,5" {
		t.Errorf("/state held %q, want a/app=1,5", got)
	}
	if got := h.gauge("nri_cpualign_held_cpus"); got != 2 {
		t.Errorf("nri_cpualign_held_cpus = %v, want 2", got)
	}
	if got := h.gauge("nri_cpualign_exclusive_cpus"); got != 2 {
		t.Errorf("nri_cpualign_exclusive_cpus = %v, want 2", got)
	}
	// Other pods come and go: b takes {2,6}, c {3,7}; a 1-CPU container
	// of d finds nothing left; b goes and d gets 2.
	b, c, dPod := testPod("b"), testPod("c"), testPod("d")
	if cpus, _ := h.create(t, b, testCtr("b-1", "app", 2000)); cpus != "2,6" {
		t.Fatalf("b-1 on %q, want 2,6", cpus)
	}
	if cpus, _ := h.create(t, c, testCtr("c-1", "app", 2000)); cpus != "3,7" {
		t.Fatalf("c-1 on %q, want 3,7", cpus)
	}
	h.refused(t, dPod, testCtr("d-1", "app", 1000))
	h.removePod(t, b)
	if cpus, _ := h.create(t, dPod, testCtr("d-1", "app", 1000)); cpus != "2" {
		t.Fatalf("d-1 on %q, want 2", cpus)
	}
	// The restart: exactly {1,5}, with the same mems.
	app2 := testCtr("a-2", "app", 2000)
	adj, ups, err := h.p.CreateContainer(ctx, a, app2)
	if err != nil {
		t.Fatal(err)
	}
	if cpus, mems := adj.GetLinux().GetResources().GetCpu().GetCpus(), adj.GetLinux().GetResources().GetCpu().GetMems(); cpus != "1,5" || mems != "0" || len(ups) != 0 {
		t.Errorf("restart on %q mems %q with %d updates, want 1,5, 0 and none", cpus, mems, len(ups))
	}
	// The kubelet's container GC removes the old one: a-2 lives on.
	h.remove(t, a, app)
	if got := h.held(); got != "" {
		t.Errorf("/state held %q after the restart, want none", got)
	}
	if got := h.gauge("nri_cpualign_held_cpus"); got != 0 {
		t.Errorf("nri_cpualign_held_cpus = %v after the restart, want 0", got)
	}
	// The pod goes: {1,5} is shared again (c holds 3,7, d 2).
	h.stop(t, a, app2)
	h.kicked()
	h.removePod(t, a)
	if h.shared() != "0-1,4-6" || !h.kicked() {
		t.Errorf("after the pod's removal: shared %s, want 0-1,4-6 and a push", h.shared())
	}
	if got := h.held(); got != "" {
		t.Errorf("/state held %q after the pod's removal, want none", got)
	}
}

// StopPodSandbox ends the pod as RemovePodSandbox does.
func TestStopPodSandboxFreesThePod(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	a := testPod("a")
	app, side := testCtr("a-1", "app", 2000), testCtr("a-2", "side", 1000)
	h.create(t, a, app)
	h.create(t, a, side)
	h.stop(t, a, app)
	if h.shared() != "0,3-4,6-7" {
		t.Fatalf("shared %s, want 0,3-4,6-7 (app on 1,5, side on 2)", h.shared())
	}
	if err := h.p.StopPodSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
	if h.shared() != "0-7" || h.tracked("a-2") || h.held() != "" {
		t.Errorf("after StopPodSandbox: shared %s, side tracked %v, held %q; want 0-7, false, none", h.shared(), h.tracked("a-2"), h.held())
	}
	if err := h.p.RemovePodSandbox(ctx, a); err != nil {
		t.Fatal(err)
	}
}

// The kubelet's init-container reuse, told by the order of events: the
// init container has stopped when the app containers are created, and
// they may take its CPUs. Init 2 CPUs on {1,5}; then:
//   - smaller, 1 CPU: the most used core of free ∪ reusable is core 1,
//     both free: CPU 1; a second 1-CPU container takes the rest, 5; the
//     shared pool never changes;
//   - equal, 2 CPUs: {1,5} again, the pool unchanged;
//   - larger, 4 CPUs: {1,5} and the next core {2,6}; the pool loses only
//     {2,6}.
//
// In every case the pod's removal frees all.
func TestInitContainerReuse(t *testing.T) {
	for _, tc := range []struct {
		name   string
		apps   []uint64 // milli CPUs of the app containers, created in order
		want   []string
		shared string // after the app containers
	}{
		{"smaller", []uint64{1000, 1000}, []string{"1", "5"}, "0,2-4,6-7"},
		{"equal", []uint64{2000}, []string{"1,5"}, "0,2-4,6-7"},
		{"larger", []uint64{4000}, []string{"1-2,5-6"}, "0,3-4,7"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandlerDaemon(t, t.TempDir(), "")
			ctx := context.Background()
			if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
				t.Fatal(err)
			}
			p := testPod("p")
			init := testCtr("p-init", "init", 2000)
			if cpus, _ := h.create(t, p, init); cpus != "1,5" {
				t.Fatalf("init on %q, want 1,5", cpus)
			}
			h.start(t, p, init)
			h.stop(t, p, init)
			// Another pod's admission in between changes nothing.
			if cpus, _ := h.create(t, testPod("o"), testCtr("o-1", "be", 0)); cpus != "0,2-4,6-7" {
				t.Fatalf("another pod's shared container on %q, want 0,2-4,6-7", cpus)
			}
			for i, milli := range tc.apps {
				c := testCtr("p-app"+string(rune('a'+i)), "app"+string(rune('a'+i)), milli)
				if cpus, _ := h.create(t, p, c); cpus != tc.want[i] {
					t.Errorf("app %d (%dm) on %q, want %s", i, milli, cpus, tc.want[i])
				}
			}
			if h.shared() != tc.shared {
				t.Errorf("shared %s, want %s", h.shared(), tc.shared)
			}
			if got := h.held(); got != "p/init=1,5" {
				t.Errorf("/state held %q, want p/init=1,5", got)
			}
			// CPUs 1,5 are used by the app containers in every case.
			if got := h.gauge("nri_cpualign_held_cpus"); got != 0 {
				t.Errorf("nri_cpualign_held_cpus = %v, want 0 (the app containers run on the init container's CPUs)", got)
			}
			h.removePod(t, p)
			if h.shared() != "0-7" {
				t.Errorf("after the pod's removal: shared %s, want 0-7", h.shared())
			}
		})
	}
}

// An init container's CPUs that the app container does not take stay
// with the pod, as under the kubelet: out of the shared pool, out of
// other pods' reach.
func TestUnreusedInitCPUsStayWithThePod(t *testing.T) {
	h := newHandlerDaemon(t, t.TempDir(), "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	p := testPod("p")
	init := testCtr("p-init", "init", 2000)
	h.create(t, p, init)
	h.stop(t, p, init)
	if cpus, _ := h.create(t, p, testCtr("p-app", "app", 1000)); cpus != "1" {
		t.Fatalf("app on %q, want 1", cpus)
	}
	if got := h.gauge("nri_cpualign_held_cpus"); got != 1 {
		t.Errorf("nri_cpualign_held_cpus = %v, want 1 (CPU 5)", got)
	}
	// Two cores are left for other pods, not CPU 5.
	if cpus, _ := h.create(t, testPod("o"), testCtr("o-1", "big", 4000)); cpus != "2-3,6-7" {
		t.Fatalf("other pod on %q, want 2-3,6-7", cpus)
	}
	h.refused(t, testPod("x"), testCtr("x-1", "one", 1000))
	if h.shared() != "0,4" {
		t.Errorf("shared %s, want 0,4", h.shared())
	}
}

// Synchronize releases what pods that no longer exist hold, their stopped
// containers' CPUs included, and keeps what live pods hold for theirs.
func TestSynchronizeFreesGonePods(t *testing.T) {
	dir := t.TempDir()
	h := newHandlerDaemon(t, dir, "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	a, b, c := testPod("a"), testPod("b"), testPod("c")
	ca, cb, cc := testCtr("a-1", "app", 2000), testCtr("b-1", "app", 2000), testCtr("c-1", "app", 2000)
	for _, x := range []struct {
		pod  *api.PodSandbox
		c    *api.Container
		cpus string
	}{{a, ca, "1,5"}, {b, cb, "2,6"}, {c, cc, "3,7"}} {
		if cpus, _ := h.create(t, x.pod, x.c); cpus != x.cpus {
			t.Fatalf("%s on %q, want %s", x.c.Id, cpus, x.cpus)
		}
		h.start(t, x.pod, x.c)
		x.c.Linux.Resources.Cpu.Cpus = x.cpus
	}
	h.stop(t, a, ca)
	h.stop(t, b, cb)
	// Reconnect: a is gone with its stopped container, b lives with its
	// stopped container, c runs.
	if _, err := h.p.Synchronize(ctx, []*api.PodSandbox{b, c}, []*api.Container{cb, cc}); err != nil {
		t.Fatal(err)
	}
	if h.shared() != "0-1,4-5" {
		t.Errorf("shared %s, want 0-1,4-5 (a's 1,5 released)", h.shared())
	}
	if got := h.held(); got != "b/app=2,6" {
		t.Errorf("/state held %q, want b/app=2,6", got)
	}
	if cpus, _ := h.create(t, b, testCtr("b-2", "app", 2000)); cpus != "2,6" {
		t.Errorf("b's restart on %q, want 2,6", cpus)
	}
}

// A plugin restart between a stop and the restart keeps what is held:
// the checkpoint has the assignment, and Synchronize, finding the pod
// alive and the container stopped, keeps it.
func TestPluginRestartKeepsHeldCPUs(t *testing.T) {
	dir := t.TempDir()
	h := newHandlerDaemon(t, dir, "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	a, b := testPod("a"), testPod("b")
	ca := testCtr("a-1", "app", 2000)
	h.create(t, a, ca)
	h.start(t, a, ca)
	h.stop(t, a, ca)

	h2 := newHandlerDaemon(t, dir, "")
	if h2.shared() != "0,2-4,6-7" || h2.held() != "a/app=1,5" {
		t.Fatalf("restored: shared %s held %q, want 0,2-4,6-7 and a/app=1,5", h2.shared(), h2.held())
	}
	if _, err := h2.p.Synchronize(ctx, []*api.PodSandbox{a}, []*api.Container{ca}); err != nil {
		t.Fatal(err)
	}
	if h2.shared() != "0,2-4,6-7" || h2.held() != "a/app=1,5" {
		t.Fatalf("synchronized: shared %s held %q, want 0,2-4,6-7 and a/app=1,5", h2.shared(), h2.held())
	}
	if cpus, _ := h2.create(t, b, testCtr("b-1", "app", 2000)); cpus != "2,6" {
		t.Errorf("another pod on %q, want 2,6", cpus)
	}
	if cpus, _ := h2.create(t, a, testCtr("a-2", "app", 2000)); cpus != "1,5" {
		t.Errorf("the restart on %q, want 1,5", cpus)
	}
}

func (h *handlerDaemon) remove(t *testing.T, pod *api.PodSandbox, c *api.Container) {
	t.Helper()
	if err := h.p.RemoveContainer(context.Background(), pod, c); err != nil {
		t.Fatalf("RemoveContainer %s: %v", c.Name, err)
	}
}

// After a containerd restart the runtime sends no StopPodSandbox or
// RemovePodSandbox for the pods it had (its NRI state of them is lost);
// the removal of the last container the plugin knows of a pod ends it.
// The kubelet keeps the newest exited container of every name while the
// pod lives, so a crash loop's older containers going ends nothing.
func TestLastContainerRemovedReleasesThePod(t *testing.T) {
	dir := t.TempDir()
	h := newHandlerDaemon(t, dir, "")
	ctx := context.Background()
	if _, err := h.p.Synchronize(ctx, nil, nil); err != nil {
		t.Fatal(err)
	}
	a, p := testPod("a"), testPod("p")
	// a crash-loops: a-1 exits, a-2 is created, a-1 is removed (the
	// kubelet's container GC), a-2 exits too.
	a1, a2 := testCtr("a-1", "app", 2000), testCtr("a-2", "app", 2000)
	h.create(t, a, a1)
	h.stop(t, a, a1)
	if cpus, _ := h.create(t, a, a2); cpus != "1,5" {
		t.Fatalf("a-2 on %q, want 1,5", cpus)
	}
	h.remove(t, a, a1)
	h.stop(t, a, a2)
	if h.shared() != "0,2-4,6-7" || h.held() != "a/app=1,5" {
		t.Fatalf("crash loop: shared %s held %q, want 0,2-4,6-7 and a/app=1,5", h.shared(), h.held())
	}
	// p: the init container's removal while the app runs ends nothing.
	init, app := testCtr("p-init", "init", 2000), testCtr("p-app", "app", 2000)
	h.create(t, p, init)
	h.stop(t, p, init)
	if cpus, _ := h.create(t, p, app); cpus != "2,6" {
		t.Fatalf("p's app on %q, want 2,6 (reusing its init container's)", cpus)
	}
	h.remove(t, p, init)
	if h.shared() != "0,3-4,7" {
		t.Fatalf("after p's init container's removal: shared %s, want 0,3-4,7", h.shared())
	}
	h.kicked()
	// a's last container goes: its CPUs are released, the worker pushes.
	h.remove(t, a, a2)
	if h.shared() != "0-1,3-5,7" || h.held() != "p/init=2,6" || !h.kicked() {
		t.Errorf("after a's last container's removal: shared %s held %q; want 0-1,3-5,7, p/init=2,6 and a push", h.shared(), h.held())
	}

	// A plugin restart in between: Synchronize says which containers
	// stopped; the removal of p's last one releases the pod.
	h.stop(t, p, app)
	h2 := newHandlerDaemon(t, dir, "")
	if _, err := h2.p.Synchronize(ctx, []*api.PodSandbox{p}, []*api.Container{app}); err != nil {
		t.Fatal(err)
	}
	if h2.shared() != "0-1,3-5,7" {
		t.Fatalf("restored: shared %s, want 0-1,3-5,7", h2.shared())
	}
	h2.remove(t, p, app)
	if h2.shared() != "0-7" || h2.held() != "" {
		t.Errorf("after p's last container's removal: shared %s held %q, want 0-7 and none", h2.shared(), h2.held())
	}
}
