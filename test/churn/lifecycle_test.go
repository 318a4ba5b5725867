package churn

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The rest of a container's life after its CreateContainer: its start (and
// the start barrier of shared_pool_updates = "direct"), in-place resizes,
// a death before the start, container_start_timeout on the test's clock,
// a start after that timeout, and cgroups changed behind the plugin's back
// with the reconcile loop's repair.

// startTimeout is the churn's container_start_timeout; only the test's
// clock (startClock) measures it.
const startTimeout = time.Minute

// startDue is when a container's start timer fires, and whose it is.
type startDue struct {
	at  time.Duration
	key invariant.Key
}

// startClock is the plugin's start-timer clock: time moves only when the
// test advances it, and the timers that come due then run in the test's
// goroutine, in the order they were due and armed.
type startClock struct {
	mu     sync.Mutex
	t      time.Duration
	seq    int
	timers []*startTimer
}

type startTimer struct {
	at   time.Duration
	seq  int
	f    func()
	done bool // fired or stopped
}

func (k *startClock) now() time.Duration {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.t
}

// afterFunc is daemon.WithStartTimers' function.
func (k *startClock) afterFunc(d time.Duration, f func()) func() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.seq++
	tm := &startTimer{at: k.t + d, seq: k.seq, f: f}
	k.timers = append(k.timers, tm)
	return func() bool {
		k.mu.Lock()
		defer k.mu.Unlock()
		if tm.done {
			return false
		}
		tm.done = true
		return true
	}
}

// armed is the number of timers neither fired nor stopped.
func (k *startClock) armed() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timers = slices.DeleteFunc(k.timers, func(tm *startTimer) bool { return tm.done })
	return len(k.timers)
}

// advance moves the clock by d and returns the functions of the timers
// that came due, in order, marked fired.
func (k *startClock) advance(d time.Duration) []func() {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.t += d
	var due []*startTimer
	for _, tm := range k.timers {
		if !tm.done && tm.at <= k.t {
			tm.done = true
			due = append(due, tm)
		}
	}
	sort.Slice(due, func(i, j int) bool {
		if due[i].at != due[j].at {
			return due[i].at < due[j].at
		}
		return due[i].seq < due[j].seq
	})
	fs := make([]func(), len(due))
	for i, tm := range due {
		fs[i] = tm.f
	}
	return fs
}

// drop forgets every timer: the plugin that armed them is gone.
func (k *startClock) drop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, tm := range k.timers {
		tm.done = true
	}
	k.timers = nil
}

func (c *churn) direct() bool { return c.d.Config().SharedPoolUpdates == config.SharedUpdatesDirect }

func (c *churn) keyOf(ct *api.Container) invariant.Key {
	return invariant.Key{Pod: c.rt.PodOf(ct).GetUid(), Container: ct.Name}
}

// tracked is the cpuset.cpus in the cgroup of every live container the
// plugin tracks: every one but those its start timer gave up while they
// were still being created (their cgroups keep what they were created
// with until they start).
func (c *churn) tracked() (map[invariant.Key]cpuset.CPUSet, error) {
	applied, err := c.rt.Running()
	if err != nil {
		return nil, err
	}
	for _, ct := range c.rt.Containers() {
		if c.gaveUp[ct.Id] {
			delete(applied, c.keyOf(ct))
		}
	}
	return applied, nil
}

// opStart starts a container being created: StartContainer, then
// PostStartContainer, as both runtimes send them.
func (c *churn) opStart() {
	ct := c.pick(c.inState(api.ContainerState_CONTAINER_CREATED))
	if ct == nil {
		c.opCreate()
		return
	}
	if c.gaveUp[ct.Id] {
		c.lateStart(ct)
		return
	}
	c.record("start %s", ct.Id)
	if err := c.rt.StartContainer(context.Background(), ct); err != nil {
		c.fail("StartContainer %s: %v", ct.Id, err)
	}
	c.ops["start"]++
	delete(c.pending, ct.Id)
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
// an exclusive container's CPUs are in no other container's cgroup, and a
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
			if other != k && !set.Intersection(cpus).IsEmpty() {
				c.fail("start barrier: %s (%s) started on its exclusive CPUs %s while %s runs on %s", ct.Id, k, cpus, other, set)
			}
		}
		return
	}
	e, st := c.d.EngineState()
	if pool := e.SharedPool(st).CPUSet(); !pool.IsEmpty() && !sameSet(applied[k], pool) {
		c.fail("start barrier: shared-pool container %s (%s) started on %q, the shared pool is %s", ct.Id, k, applied[k], pool)
	}
}

// freeCPUs are the CPUs no container holds and not reserved.
func freeCPUs(e *policy.Engine, st policy.State) cpuset.CPUSet {
	held := cpuset.New()
	for _, byName := range st.Alloc.Assignments {
		for _, cpus := range byName {
			held = held.Union(cpus)
		}
	}
	return e.Topology().CPUs().Difference(e.Reserved()).Difference(held)
}

// lateStart starts a container the start timer gave up: a runtime slower
// than container_start_timeout. It is placed again: an exclusive one on
// the CPUs it was created on while they are still free, else afresh (and
// the reconcile loop moves its cgroup there).
func (c *churn) lateStart(ct *api.Container) {
	p := c.rt.PodOf(ct)
	k := c.keyOf(ct)
	n := c.exclusiveCPUs(c.qos[p.Id], c.res[ct.Id])
	had, _, _ := c.rt.CPUs(ct.Id)
	old, _ := cpuset.Parse(had)
	e, st := c.d.EngineState()
	keep := n > 0 && old.Size() == n && old.IsSubsetOf(freeCPUs(e, st))
	c.record("start %s after its start timer gave it up (exclusive=%d, created on %q, still free: %v)", ct.Id, n, had, keep)
	if err := c.rt.StartContainer(context.Background(), ct); err != nil {
		c.fail("StartContainer %s: %v", ct.Id, err)
	}
	c.ops["start"]++
	c.ops["late-start"]++
	delete(c.gaveUp, ct.Id)
	e, st = c.d.EngineState()
	got, ok := e.Assignment(st, k.Pod, k.Container)
	switch {
	case n == 0 && ok:
		c.fail("late start of %s (not exclusive) got exclusive CPUs %s", ct.Id, got)
	case keep && (!ok || !sameSet(got, old)):
		c.fail("late start of %s: its CPUs %s were still free, it was placed on %q", ct.Id, old, got)
	case n > 0 && ok && got.Size() != n:
		c.fail("late start of %s asked for %d exclusive CPUs and got %s", ct.Id, n, got)
	case ok:
		c.admitted[ct.Id] = got
	case n > 0:
		// No room left: it is tracked as a shared-pool container and
		// moved to the pool (it ran on what it was created with).
		c.faults["late-start-refused"]++
	}
	c.postStart(ct)
	c.reconcileRepair("late start of " + ct.Id)
}

// opResize sends an in-place resize of a running container: one that
// keeps its exclusive CPU count goes through and is stored by the runtime;
// one between the shared pool and exclusive CPUs is refused with
// InPlaceResizeRejected and changes nothing. (Exclusive counts that change
// are opResizeExclusive's: such a resize here keeps the count.)
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
	}
	if after, _, _ := c.rt.CPUs(ct.Id); after != before {
		c.fail("resize of %s changed its cpuset from %q to %q", ct.Id, before, after)
	}
	c.check(false)
}

// opDieBeforeStart kills a container being created: its OCI runtime create
// failed after the plugin's answer. CRI-O then forgets it and containerd
// keeps it exited, neither telling the plugin; its CPUs stay assigned until
// its start timer fires, the kubelet creates it again (at once here, half
// the time), or Synchronize.
func (c *churn) opDieBeforeStart() {
	ct := c.pick(c.inState(api.ContainerState_CONTAINER_CREATED))
	if ct == nil {
		c.opCreate()
		return
	}
	p := c.rt.PodOf(ct)
	k := c.keyOf(ct)
	crio := c.rng.Intn(2) == 0
	retry := c.rng.Intn(2) == 0
	before, wasExclusive := c.admitted[ct.Id]
	c.record("%s dies before its start (crio=%v, kubelet retries=%v)", ct.Id, crio, retry)
	if crio {
		c.rt.RemoveContainerAway(ct)
	} else {
		c.rt.StopContainerAway(ct)
	}
	c.faults["died-before-start"]++
	if !c.gaveUp[ct.Id] {
		c.ghosts[k] = true
	}
	delete(c.admitted, ct.Id)
	delete(c.gaveUp, ct.Id)
	c.check(false)
	if !retry {
		return
	}
	again := c.create(p, ct.Name, c.res[ct.Id])
	c.ops["kubelet-retry"]++
	switch {
	case !wasExclusive:
	case again == nil:
		// Refused only where full-pcpus-only counts the free cores first
		// (see opRestartContainer); the dead attempt keeps its CPUs.
		if c.cfg.CPUManagerPolicyOptions["full-pcpus-only"] != "true" {
			c.fail("the kubelet's retry of %s was rejected; the dead attempt held %s", ct.Id, before)
		}
	case !sameSet(c.admitted[again.Id], before):
		c.fail("the kubelet's retry of %s moved from %s to %s", ct.Id, before, c.admitted[again.Id])
	}
	c.check(false)
}

// opTimePasses moves the plugin's clock: the start timers of containers
// not started within container_start_timeout fire and give their CPUs
// back, whether the container died or is only slow.
func (c *churn) opTimePasses() {
	d := startTimeout / 2
	if c.rng.Intn(2) == 0 {
		d = startTimeout + time.Second
	}
	if got, want := c.clock.armed(), len(c.pending); got != want {
		c.fail("the plugin has %d start timers armed; %d containers wait for their start: %v", got, want, c.pending)
	}
	now := c.clock.now() + d
	var due []string
	for id, s := range c.pending {
		if s.at <= now {
			due = append(due, id)
		}
	}
	sort.Strings(due)
	c.record("%s pass: start timers of %v due", d, due)
	fire := c.clock.advance(d)
	c.ops["time-passes"]++
	if len(fire) != len(due) {
		c.fail("%d start timers fired, %d containers were due: %v", len(fire), len(due), due)
	}
	for _, f := range fire {
		f()
	}
	live := map[string]bool{}
	for _, ct := range c.live() {
		live[ct.Id] = true
	}
	e, st := c.d.EngineState()
	for _, id := range due {
		k := c.pending[id].key
		delete(c.pending, id)
		delete(c.ghosts, k)
		if _, ok := e.Assignment(st, k.Pod, k.Container); ok {
			c.fail("%s (%s) still holds exclusive CPUs after its start timer fired", id, k)
		}
		if live[id] {
			c.gaveUp[id] = true
			delete(c.admitted, id)
			c.faults["start-timeout"]++
		}
	}
	c.check(true)
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
	c.rt.WriteCgroup(ct, wrong.String())
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
	c.check(true)
}

// A container started after its start timer gave its exclusive CPUs back,
// which cannot be placed again (no CPUs left), must run on the shared pool
// as the plugin logs it does, not on the CPUs it was created on, which
// another exclusive container holds now. Found by TestChurn
// (CHURN_SEED=20261121, setup epyc-7702p-smt_strict-uncore-exclusive_restricted_default).
//
// Machine ht-1s-4c (core k = {k, k+4}), core 0 reserved: A is created on
// core 1 and given up; B takes core 1, C core 2, D core 3; A starts late.
func TestLateStartRefusedRunsOnSharedPool(t *testing.T) {

	c := newChurn(t, setup{name: "late-refused", fixture: "ht-1s-4c", toml: "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n"}, 1, 0)
	ctx := context.Background()
	var pods []*api.PodSandbox
	for range 4 {
		p := c.newPod(framework.Guaranteed)
		c.qos[p.Id] = framework.Guaranteed
		if err := c.rt.RunPod(ctx, p); err != nil {
			t.Fatal(err)
		}
		pods = append(pods, p)
	}
	a := c.create(pods[0], "a", framework.GuaranteedCPUs(2))
	if a == nil || a.Linux.Resources.Cpu.Cpus != "1,5" {
		t.Fatalf("a: %v, want on 1,5", a)
	}
	fired := c.clock.advance(startTimeout)
	if len(fired) != 1 {
		t.Fatalf("%d start timers fired, want a's", len(fired))
	}
	fired[0]()
	c.forgetCtr(a.Id)
	for i, want := range []string{"1,5", "2,6", "3,7"} {
		ct := c.create(pods[i+1], "x", framework.GuaranteedCPUs(2))
		if ct == nil || ct.Linux.Resources.Cpu.Cpus != want {
			t.Fatalf("container %d: %v, want on %s", i+1, ct, want)
		}
		if err := c.rt.StartContainer(ctx, ct); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.rt.StartContainer(ctx, a); err != nil {
		t.Fatal(err)
	}
	c.settle()
	c.d.ReconcileNow()
	c.settle()
	applied, err := c.rt.Running()
	if err != nil {
		t.Fatal(err)
	}
	if got := applied[c.keyOf(a)].String(); got != "0,4" {
		t.Errorf("a runs on %q after its late start was refused, want the shared pool 0,4", got)
	}
	if err := c.verify(); err != nil {
		t.Error(err)
	}
}
