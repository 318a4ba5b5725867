//go:build testhooks

package churn

import (
	"context"
	"fmt"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
)

// resizeModel is what the churn knows of the baseline (the CPUs it was
// admitted with) of a pod's container that was resized: base, exact while
// no Synchronize came since it was learnt (syncs) and the container is the
// one it was learnt of (id). A rebuild may keep it (checkpoint) or make
// the container's CPUs its baseline (rebuilt from the runtime); a restart
// keeps it with the CPUs, a new admission under the same name starts
// afresh: afterwards the plugin's baseline lies between base and the
// container's CPUs. Once base is not part of the CPUs any more (moved at
// a rebuild, admitted afresh), nothing is known but that the baseline is
// part of the CPUs (void). A container of a name never resized has its
// CPUs as baseline.
type resizeModel struct {
	base  cpuset.CPUSet
	syncs int
	id    string
	void  bool
}

// opResizeExclusive resizes a running exclusive container in place to a
// random count between one below its baseline and three above its CPUs,
// or to a fractional request, and checks the outcome against KEP-5554's
// rules worked out here: below the baseline and exclusive to shared are
// refused with InPlaceResizeRejected; a downsize keeps the baseline and
// stays within the CPUs held; an upsize keeps every CPU held and is
// refused only with a reason word (and must be when the free CPUs cannot
// hold it, or under full-pcpus-only for a count that is not whole cores).
// A refusal changes nothing. The invariants are checked after it.
func (c *churn) opResizeExclusive() {
	var cands []*api.Container
	for _, ct := range c.inState(api.ContainerState_CONTAINER_RUNNING) {
		// A pod-level pod's slices resize within its block: not modelled.
		if _, ok := c.admitted[ct.Id]; ok && c.budget[ct.PodSandboxId] == 0 {
			cands = append(cands, ct)
		}
	}
	ct := c.pick(cands)
	if ct == nil {
		c.opCreate()
		return
	}
	if c.resizes == nil {
		c.resizes = map[invariant.Key]resizeModel{}
	}
	cur := c.admitted[ct.Id]
	pod := c.rt.PodOf(ct).GetUid()
	key := invariant.Key{Pod: pod, Container: ct.Name}
	m, known := c.resizes[key]
	base, exact := cur, true
	if known {
		if !m.void && m.base.IsSubsetOf(cur) {
			base, exact = m.base, m.syncs == c.rt.Syncs() && m.id == ct.Id
		} else {
			base, exact = cpuset.New(), false
		}
	}
	old := c.res[ct.Id]
	next := old
	want := 0
	switch x := c.rng.Intn(10); {
	case x == 0:
		next.CPURequestMilli = int64(cur.Size())*1000 + 500
	case x < 5 && cur.Size() > base.Size():
		// Half the time a container that grew shrinks, to the baseline
		// or above it.
		want = max(1, base.Size()+c.rng.Intn(cur.Size()-base.Size()))
	default:
		want = max(1, base.Size()-1+c.rng.Intn(cur.Size()-base.Size()+5))
	}
	if want > 0 {
		next.CPURequestMilli = int64(want) * 1000
	}
	next.CPULimitMilli = next.CPURequestMilli
	e, st := c.d.EngineState()
	held := cpuset.New()
	for _, byName := range st.Alloc.Assignments {
		for _, cpus := range byName {
			held = held.Union(cpus)
		}
	}
	free := c.topo.CPUs().Difference(e.Reserved()).Difference(held).Size()
	wholeCores := e.Config().CPUOptions["full-pcpus-only"] != "true" || want%c.topo.CPUsPerCore() == 0

	c.record("resize-exclusive %s (%s/%s) cpus=%s baseline=%s (exact %t) -> %dm", ct.Id, pod, ct.Name, cur, base, exact, next.CPURequestMilli)
	before, _, _ := c.rt.CPUs(ct.Id)
	_, err := c.rt.UpdateContainer(context.Background(), ct, nritest.ContainerResources(next))
	c.unanswered() // a downsize gives CPUs back after the answer
	c.ops["resize-exclusive"]++
	reason := ""
	if err != nil {
		reason = err.Error()
		if i := strings.LastIndex(reason, "desc = "); i >= 0 {
			reason = reason[i+len("desc = "):]
		}
		reason, _, _ = strings.Cut(reason, ":")
	}
	var must, mustNot string // the reason a refusal must carry; why it must not be refused
	switch {
	case want == 0:
		must = "InPlaceResizeRejected" // exclusive to shared
	case want < base.Size():
		must = "InPlaceResizeRejected" // below the baseline
	case want == cur.Size():
		mustNot = "same count"
	case !wholeCores && !exact && want < cur.Size():
		must = "SMTAlignmentError|InPlaceResizeRejected" // the plugin's baseline may be above want
	case !wholeCores:
		must = "SMTAlignmentError"
	case want < cur.Size() && exact:
		mustNot = "downsize above the baseline"
	case want > cur.Size() && want-cur.Size() > free:
		must = "InsufficientCPUs|SMTAlignmentError|UncoreCacheAlignmentError|TopologyAffinityError"
	}
	if err != nil {
		c.ops["resize-rejected"]++
		ok := false
		allowed := reasons
		if want != 0 && want < cur.Size() {
			allowed = []string{"InPlaceResizeRejected", "SMTAlignmentError"}
		}
		for _, r := range append(allowed, "InPlaceResizeRejected") {
			ok = ok || r == reason
		}
		switch {
		case mustNot != "":
			c.fail("resize of %s to %dm (%s) refused: %v", ct.Id, next.CPURequestMilli, mustNot, err)
		case must != "" && !strings.Contains("|"+must+"|", "|"+reason+"|"):
			c.fail("resize of %s to %dm refused with %q; want %s", ct.Id, next.CPURequestMilli, reason, must)
		case !ok:
			c.fail("resize of %s to %dm refused without a known reason word first: %v", ct.Id, next.CPURequestMilli, err)
		}
		if after, _, _ := c.rt.CPUs(ct.Id); after != before {
			c.fail("refused resize of %s changed its cpuset from %q to %q", ct.Id, before, after)
		}
		e, st := c.d.EngineState()
		if now, _ := e.Assignment(st, pod, ct.Name); !sameSet(now, cur) {
			c.fail("refused resize of %s changed its assignment from %s to %s", ct.Id, cur, now)
		}
		c.check(false)
		return
	}
	if must != "" {
		c.fail("resize of %s from %s (baseline %s) to %dm went through; want a refusal (%s)", ct.Id, cur, base, next.CPURequestMilli, must)
	}
	e, st = c.d.EngineState()
	now, _ := e.Assignment(st, pod, ct.Name)
	var bad string
	switch {
	case now.Size() != want:
		bad = fmt.Sprintf("holds %d CPUs", now.Size())
	case want > cur.Size() && !cur.IsSubsetOf(now):
		bad = "an upsize dropped CPUs it held"
	case want < cur.Size() && (!now.IsSubsetOf(cur) || !base.IsSubsetOf(now)):
		bad = "a downsize left its CPUs or dropped its baseline"
	}
	// The runtime's record (what the answer set; an unchanged count
	// answers nothing, and the record may be older than the cgroup then).
	if applied, _, _ := c.rt.CPUs(ct.Id); bad == "" && want != cur.Size() && applied != now.String() {
		bad = "runs on " + applied
	}
	if bad != "" {
		c.fail("resize of %s from %s (baseline %s) to %d CPUs: now %s: %s", ct.Id, cur, base, want, now, bad)
	}
	switch {
	case want > cur.Size():
		c.ops["resize-up"]++
	case want < cur.Size():
		c.ops["resize-down"]++
	}
	c.admitted[ct.Id] = now
	c.res[ct.Id] = next
	c.nameRes[c.keyOf(ct)] = next
	switch {
	case !known:
		c.resizes[key] = resizeModel{base: cur, syncs: c.rt.Syncs(), id: ct.Id}
	case exact:
		c.resizes[key] = resizeModel{base: base, syncs: c.rt.Syncs(), id: ct.Id}
	case base.IsEmpty():
		c.resizes[key] = resizeModel{void: true}
	}
	c.check(false)
}
