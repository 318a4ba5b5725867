//go:build testhooks

package churn

import (
	"context"
	"fmt"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/persist"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The machine of both tests: ht-2s-4numa-80 (80 CPUs), two CPUs reserved.
var concSetup = setup{name: "concurrency", fixture: "ht-2s-4numa-80", toml: "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\n"}

const (
	workers      = 8
	perWorkerOps = 60
)

// TestConcurrentHandlers calls the plugin's CreateContainer, StopContainer,
// RemoveContainer and RemovePodSandbox from many goroutines at once, with
// no runtime serializing them (the runtime may call concurrently for
// different pods), while the daemon is connected and its update worker
// runs. Afterwards the state must hold exactly the exclusive containers
// still alive, each on the CPUs its CreateContainer answer gave it, the
// checkpoint on disk must equal the state in memory, and the invariants
// hold: no deadlock (the test would time out), no lost update.
func TestConcurrentHandlers(t *testing.T) {
	c := newChurn(t, concSetup, 1, 0)
	h := c.d.Handlers()
	ctx := context.Background()

	type alive struct {
		key  invariant.Key
		cpus cpuset.CPUSet // exclusive CPUs from the adjustment, empty = shared
	}
	var mu sync.Mutex
	survivors := map[string]alive{} // by container ID
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorkerOps)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(w)))
			var mine []*api.Container
			pods := map[string]*api.PodSandbox{}
			for i := 0; i < perWorkerOps; i++ {
				switch x := rng.Intn(10); {
				case x < 6 || len(mine) == 0:
					q := framework.Guaranteed
					r := framework.GuaranteedCPUs(1 + rng.Intn(3))
					if rng.Intn(3) == 0 {
						q, r = framework.Burstable, framework.Resources{CPURequestMilli: 500}
					}
					pod := c.newPod(q)
					ct := c.rt.NewContainer(pod, fmt.Sprintf("w%d-%d", w, i), r)
					adj, _, err := h.CreateContainer(ctx, pod, ct)
					if err != nil {
						// A full machine rejects, with the reason first.
						if _, ok := reasonOf(err); !ok {
							errs <- fmt.Errorf("create %s: %v", ct.Id, err)
						}
						continue
					}
					cpus, err := cpuset.Parse(adj.GetLinux().GetResources().GetCpu().GetCpus())
					if err != nil {
						errs <- err
						continue
					}
					a := alive{key: invariant.Key{Pod: pod.Uid, Container: ct.Name}}
					if q == framework.Guaranteed {
						a.cpus = cpus
					}
					pods[ct.Id] = pod
					mine = append(mine, ct)
					mu.Lock()
					survivors[ct.Id] = a
					mu.Unlock()
				case x < 8:
					k := rng.Intn(len(mine))
					ct := mine[k]
					mine = append(mine[:k], mine[k+1:]...)
					if _, err := h.StopContainer(ctx, pods[ct.Id], ct); err != nil {
						errs <- fmt.Errorf("stop %s: %v", ct.Id, err)
					}
					if err := h.RemoveContainer(ctx, pods[ct.Id], ct); err != nil {
						errs <- fmt.Errorf("remove %s: %v", ct.Id, err)
					}
					mu.Lock()
					delete(survivors, ct.Id)
					mu.Unlock()
				default:
					// Pod removal without a stop first.
					k := rng.Intn(len(mine))
					ct := mine[k]
					mine = append(mine[:k], mine[k+1:]...)
					if err := h.RemovePodSandbox(ctx, pods[ct.Id]); err != nil {
						errs <- fmt.Errorf("remove pod of %s: %v", ct.Id, err)
					}
					mu.Lock()
					delete(survivors, ct.Id)
					mu.Unlock()
				}
			}
		}(w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: concurrent handler calls did not finish within 60s")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}

	e, st := c.d.EngineState()
	applied := map[invariant.Key]cpuset.CPUSet{}
	want := 0
	for id, a := range survivors {
		if a.cpus.IsEmpty() {
			continue
		}
		want++
		applied[a.key] = a.cpus
		if got, ok := e.Assignment(st, a.key.Pod, a.key.Container); !ok || !got.Equals(a.cpus) {
			t.Errorf("lost update: %s (%s) was given %s, the state says %s (%v)", id, a.key, a.cpus, got, ok)
		}
	}
	n := 0
	for _, byName := range st.Alloc.Assignments {
		n += len(byName)
	}
	if n != want {
		t.Errorf("state holds %d exclusive assignments, %d exclusive containers are alive", n, want)
	}
	if err := (invariant.Options{NoPodOverlap: true}).Check(e, st, applied); err != nil {
		t.Error(err)
	}
	// What is on disk is what is in memory: persist and commit stayed in
	// step under concurrency.
	disk, err := persist.ReadState(c.stateDir) // snapshot and journal
	if err != nil {
		t.Fatal(err)
	}
	mem := e.Snapshot(st)
	if fmt.Sprint(disk.Assignments) != fmt.Sprint(mem.Assignments) || disk.Shared != mem.Shared {
		t.Errorf("checkpoint differs from the state:\n disk %v shared %s\n  mem %v shared %s", disk.Assignments, disk.Shared, mem.Assignments, mem.Shared)
	}
	t.Logf("%d workers x %d operations; %d containers alive, %d exclusive", workers, perWorkerOps, len(survivors), want)
}

// TestConcurrentThroughNRI has many goroutines drive the runtime side at
// once (pkg/adaptation serializes the plugin calls, as containerd does,
// but the plugin's worker pushes updates concurrently with them). After
// the dust settles every container must run where the state says.
func TestConcurrentThroughNRI(t *testing.T) {
	c := newChurn(t, concSetup, 2, 0)
	var wg sync.WaitGroup
	errs := make(chan error, workers*perWorkerOps)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewSource(int64(100 + w)))
			var mine []*api.Container
			for i := 0; i < perWorkerOps; i++ {
				switch x := rng.Intn(10); {
				case x < 6 || len(mine) == 0:
					q := framework.Guaranteed
					r := framework.GuaranteedCPUs(1 + rng.Intn(3))
					if rng.Intn(3) == 0 {
						q, r = framework.BestEffort, framework.Resources{}
					}
					pod := c.newPod(q)
					if err := c.rt.RunPod(context.Background(), pod); err != nil {
						errs <- err
						continue
					}
					ct, err := c.createIn(pod, "c", r)
					if err != nil {
						if _, ok := reasonOf(err); !ok {
							errs <- fmt.Errorf("create: %v", err)
						}
						continue
					}
					mine = append(mine, ct)
				case x < 8:
					k := rng.Intn(len(mine))
					ct := mine[k]
					mine = append(mine[:k], mine[k+1:]...)
					if _, err := c.rt.StopContainer(context.Background(), ct); err != nil {
						errs <- err
					}
					if err := c.rt.RemoveContainer(context.Background(), ct); err != nil {
						errs <- err
					}
				default:
					k := rng.Intn(len(mine))
					ct := mine[k]
					mine = append(mine[:k], mine[k+1:]...)
					if err := c.rt.RemovePod(context.Background(), c.rt.PodOf(ct)); err != nil {
						errs <- err
					}
				}
			}
		}(w)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatal("deadlock: concurrent runtime operations did not finish within 60s")
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// The worker's pushes (after RemoveContainer / RemovePodSandbox) may
	// still be on their way.
	c.settle()
	if err := c.verify(); err != nil {
		t.Fatalf("after concurrent operations: %v", err)
	}
}

// TestPushRacingCreate orders the events of a race between the plugin's
// worker and a creation: a pod holding exclusive CPUs is removed
// (RemovePodSandbox cannot answer with updates, so the worker pushes the
// grown shared pool with UpdateContainers); the push reaches the runtime,
// but a CreateContainer of a new exclusive container gets the runtime's
// lock first and shrinks the pool again; then the push, computed before
// the creation, is applied. containerd orders them the same way when the
// creation wins its lock. Unless the plugin pushes again, the shared
// containers end up on the new container's exclusive CPUs (until the
// reconcile loop, off here, notices); the daemon re-kicks its worker when
// the state changed during a push. The pushes are the runtime path's
// (in-answer); under direct the plugin writes the cgroups itself.
func TestPushRacingCreate(t *testing.T) {
	c := newChurn(t, setup{name: "push-race", fixture: "ht-2s-6c", toml: "shared_pool_updates = \"in-answer\"\ncpu_manager_policy = \"static\"\nreserved_cpu_count = 2\n"}, 3, 0)
	shared := c.newPod(framework.BestEffort)
	if err := c.rt.RunPod(context.Background(), shared); err != nil {
		t.Fatal(err)
	}
	if _, err := c.createIn(shared, "s", framework.Resources{}); err != nil {
		t.Fatal(err)
	}
	x := c.newPod(framework.Guaranteed)
	y := c.newPod(framework.Guaranteed)
	for _, p := range []*api.PodSandbox{x, y} {
		if err := c.rt.RunPod(context.Background(), p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.createIn(x, "x", framework.GuaranteedCPUs(4)); err != nil {
		t.Fatal(err)
	}
	arrived, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.rt.SetBeforeUpdate(func() {
		once.Do(func() { close(arrived); <-release })
	})
	if err := c.rt.RemovePod(context.Background(), x); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-time.After(5 * time.Second):
		t.Fatal("the plugin did not push the grown shared pool after RemovePodSandbox")
	}
	if _, err := c.createIn(y, "y", framework.GuaranteedCPUs(4)); err != nil {
		t.Fatal(err)
	}
	pushes := c.rt.Pushes()
	close(release)
	// The stale push lands, then the plugin corrects it.
	c.settle()
	if c.rt.Pushes() < pushes+2 {
		t.Fatalf("%d pushes after the stale one was released, want it and a correcting one", c.rt.Pushes()-pushes)
	}
	if err := c.verify(); err != nil {
		t.Fatal(err)
	}
}
