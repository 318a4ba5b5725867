//go:build testhooks

package churn

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The rest of a container's life after its CreateContainer: its start (and
// the start barrier of shared_pool_updates = "direct"), in-place resizes,
// a death before the start (its CPUs stay with its pod for the kubelet's
// retry), and cgroups changed behind the plugin's back with the reconcile
// loop's repair.

func (c *churn) direct() bool { return c.d.Config().SharedPoolUpdates == config.SharedUpdatesDirect }

func (c *churn) keyOf(ct *api.Container) invariant.Key {
	return invariant.Key{Pod: c.rt.PodOf(ct).GetUid(), Container: ct.Name}
}

// tracked is the cpuset.cpus in the cgroup of every live container.
func (c *churn) tracked() (map[invariant.Key]cpuset.CPUSet, error) { return c.rt.Running() }

// opStart starts a container being created: StartContainer, then
// PostStartContainer, as both runtimes send them.
func (c *churn) opStart() {
	ct := c.pick(c.inState(api.ContainerState_CONTAINER_CREATED))
	if ct == nil {
		c.opCreate()
		return
	}
	c.record("start %s", ct.Id)
	if err := c.rt.StartContainer(context.Background(), ct); err != nil {
		c.fail("StartContainer %s: %v", ct.Id, err)
	}
	c.ops["start"]++
	c.checkStartBarrier(ct)
	c.postStart(ct)
	c.check(false)
}

func (c *churn) postStart(ct *api.Container) {
	if err := c.rt.PostStartContainer(context.Background(), ct); err != nil {
		c.fail("PostStartContainer %s: %v", ct.Id, err)
	}
	c.ops["post-start"]++
}

// checkStartBarrier checks, under "direct", what StartContainer must have
// made true by the time it answers, with no waiting for the update worker:
// an exclusive container's CPUs are in no other pod's container's cgroup
// (its own pod's may share them: a container reusing the CPUs held for
// an exited one of its pod, which then restarts on them), and a
// shared-pool container's own cgroup holds the current shared pool.
func (c *churn) checkStartBarrier(ct *api.Container) {
	if !c.direct() {
		return
	}
	applied, err := c.tracked()
	if err != nil {
		c.fail("%v", err)
	}
	k := c.keyOf(ct)
	if cpus, ok := c.admitted[ct.Id]; ok {
		for other, set := range applied {
			if other.Pod != k.Pod && !set.Intersection(cpus).IsEmpty() {
				c.fail("start barrier: %s (%s) started on its exclusive CPUs %s while %s runs on %s", ct.Id, k, cpus, other, set)
			}
		}
		return
	}
	e, st := c.d.EngineState()
	if pool, ok := e.PodPoolOf(st, k.Pod, k.Container); ok {
		if !sameSet(applied[k], pool) {
			c.fail("start barrier: pod-pool container %s (%s) started on %q, its pod's pool is %s", ct.Id, k, applied[k], pool)
		}
		return
	}
	if pool := e.SharedPool(st).CPUSet(); !pool.IsEmpty() && !sameSet(applied[k], pool) {
		c.fail("start barrier: shared-pool container %s (%s) started on %q, the shared pool is %s", ct.Id, k, applied[k], pool)
	}
}

// opResize sends an in-place resize of a running container: one that
// keeps its exclusive CPU count goes through and is stored by the runtime
// with the cpuset the plugin answered; one between the shared pool and
// exclusive CPUs is refused with InPlaceResizeRejected and changes
// nothing. (Exclusive counts that change are opResizeExclusive's: such a
// resize here keeps the count.)
func (c *churn) opResize() {
	var cands []*api.Container
	for _, ct := range c.inState(api.ContainerState_CONTAINER_RUNNING) {
		if c.qos[ct.PodSandboxId] != framework.BestEffort {
			cands = append(cands, ct)
		}
	}
	ct := c.pick(cands)
	if ct == nil {
		c.opCreate()
		return
	}
	q, old := c.qos[ct.PodSandboxId], c.res[ct.Id]
	next := c.pickResources(q)
	if next.CPULimitMilli == 0 && next.CPURequestMilli == 0 {
		next = old
	}
	if c.memoryStatic() {
		// An in-place resize does not change a container's memory
		// assignment (docs/topology-manager.md): resize the CPUs only.
		next.MemRequest, next.MemLimit = old.MemRequest, old.MemLimit
	}
	if have, want := c.admitted[ct.Id].Size(), c.exclusiveCPUs(q, next); have > 0 && want > 0 && want != have {
		next = old
	}
	res := nritest.ContainerResources(next)
	how := "shares+quota"
	switch x := c.rng.Intn(10); {
	case x < 3:
		// The same CPU values again (a resize of the memory only, as the
		// kubelet sends it).
		next = old
		res = nritest.ContainerResources(old)
		res.Memory.Limit = api.Int64(res.GetMemory().GetLimit().GetValue() + 1<<20)
		how = "memory only"
	case x < 5 && q == framework.Guaranteed:
		// Shares alone: the limit then equals the request.
		res.Cpu.Quota, res.Cpu.Period = nil, nil
		how = "shares only"
	}
	have := c.admitted[ct.Id].Size()
	want := c.exclusiveCPUs(q, next)
	c.record("resize %s (%s) %s: req=%d lim=%d -> req=%d lim=%d (exclusive %d -> %d)", ct.Id, q, how,
		old.CPURequestMilli, old.CPULimitMilli, next.CPURequestMilli, next.CPULimitMilli, have, want)
	before, _, _ := c.rt.CPUs(ct.Id)
	_, err := c.rt.UpdateContainer(context.Background(), ct, res)
	c.ops["resize"]++
	c.unanswered() // a downsize gives CPUs back after the answer
	switch {
	case want == have && err != nil:
		c.fail("resize of %s keeping %d exclusive CPUs refused: %v", ct.Id, have, err)
	case want != have && err == nil:
		c.fail("resize of %s from %d to %d exclusive CPUs went through", ct.Id, have, want)
	case err != nil:
		msg := err.Error()
		if i := strings.LastIndex(msg, "desc = "); i >= 0 {
			msg = msg[i+len("desc = "):]
		}
		if !strings.HasPrefix(msg, "InPlaceResizeRejected") {
			c.fail("resize of %s refused without InPlaceResizeRejected first: %q", ct.Id, msg)
		}
		c.ops["resize-rejected"]++
	default:
		c.res[ct.Id] = next
		c.nameRes[c.keyOf(ct)] = next
	}
	// The answer to an accepted resize records in the runtime the cpuset
	// the container must have now: the current pool, or its exclusive CPUs
	// (under direct the record may be older: a shared-pool container's
	// creation pool, the CPUs a late start or a reconcile replaced); a
	// refused one changes nothing.
	record := before
	if e, st := c.d.EngineState(); err == nil {
		k := c.keyOf(ct)
		if cpus, ok := e.Assignment(st, k.Pod, k.Container); ok && have > 0 {
			record = cpus.String()
		} else if pool, ok := e.PodPoolOf(st, k.Pod, k.Container); ok && have == 0 {
			record = pool.String()
		} else if have == 0 && !e.SharedCPUs(st).IsEmpty() {
			record = e.SharedCPUs(st).String()
		}
	}
	if after, _, _ := c.rt.CPUs(ct.Id); after != record {
		c.fail("resize of %s: the runtime's record of its cpuset is %q (before: %q), want %q", ct.Id, after, before, record)
	}
	c.check(false)
}

// opDieBeforeStart kills a container being created: its OCI runtime create
// failed after the plugin's answer. CRI-O then forgets it and containerd
// keeps it exited, neither telling the plugin; its CPUs stay with its pod
// (held), and the kubelet's retry (at once here, half the time) gets
// exactly them.
func (c *churn) opDieBeforeStart() {
	ct := c.pick(c.inState(api.ContainerState_CONTAINER_CREATED))
	if ct == nil {
		c.opCreate()
		return
	}
	p := c.rt.PodOf(ct)
	crio := c.rng.Intn(2) == 0
	retry := c.rng.Intn(2) == 0
	c.record("%s dies before its start (crio=%v, kubelet retries=%v)", ct.Id, crio, retry)
	if crio {
		c.rt.RemoveContainerAway(ct)
	} else {
		c.rt.StopContainerAway(ct)
	}
	c.faults["died-before-start"]++
	c.exited(ct)
	c.check(false)
	if !retry {
		return
	}
	c.create(p, ct.Name, c.res[ct.Id])
	c.ops["kubelet-retry"]++
	c.check(false)
}

// opDrift changes a container's cgroup behind the plugin's back (an
// operator, another agent); the reconcile loop must find it and put it
// back, through the runtime or (direct) by writing the cgroup.
func (c *churn) opDrift() {
	applied, err := c.tracked()
	if err != nil {
		c.fail("%v", err)
	}
	var cands []*api.Container
	for _, ct := range c.live() {
		if _, ok := applied[c.keyOf(ct)]; ok {
			cands = append(cands, ct)
		}
	}
	ct := c.pick(cands)
	if ct == nil {
		c.opCreate()
		return
	}
	have := applied[c.keyOf(ct)]
	online := c.topo.CPUs().List()
	wrong := cpuset.New(online[c.rng.Intn(len(online))])
	if c.rng.Intn(2) == 0 || wrong.Equals(have) {
		wrong = c.topo.CPUs()
	}
	if wrong.Equals(have) {
		wrong = cpuset.New(online[0])
	}
	c.record("drift: cgroup of %s set to %s (was %s)", ct.Id, wrong, have)
	c.writeBehindBack(ct, wrong.String())
	c.faults["cgroup-drift"]++
	c.reconcileRepair("drift of " + ct.Id)
}

// reconcileRepair runs the reconcile loop once the update worker has
// settled: it must restore exactly the tracked containers whose cgroup
// differs from what they should run on, and leave every invariant true.
func (c *churn) reconcileRepair(why string) {
	c.settle()
	applied, err := c.tracked()
	if err != nil {
		c.fail("%v", err)
	}
	e, st := c.d.EngineState()
	var drifted []string
	for k, have := range applied {
		want, ok := e.Assignment(st, k.Pod, k.Container)
		if pool, inPool := e.PodPoolOf(st, k.Pod, k.Container); !ok && inPool {
			want, ok = pool, true
		}
		if !ok {
			want = e.SharedCPUs(st)
		}
		if !want.IsEmpty() && !sameSet(have, want) {
			drifted = append(drifted, fmt.Sprintf("%s on %s, want %s", k, have, want))
		}
	}
	sort.Strings(drifted)
	n := c.d.ReconcileNow()
	c.ops["reconcile"]++
	c.record("reconcile after %s: %d restored, %d drifted %v", why, n, len(drifted), drifted)
	if n != len(drifted) {
		again := c.d.ReconcileNow()
		c.settle()
		applied, _ = c.tracked()
		c.record("diagnostic: a second reconcile restored %d; %v", again, applied)
		c.fail("reconcile after %s restored %d containers; %d had drifted: %v", why, n, len(drifted), drifted)
	}
	if c.deferring() && n > 0 {
		c.repairByAnswer()
	}
	c.check(true)
}
