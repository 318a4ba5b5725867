//go:build testhooks

package churn

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// A runtime that takes no unsolicited update (docs/runtimes.md: containerd
// before 2.4, CRI-O). The runtime says it is containerd 2.3.7; under
// "in-answer" the plugin then never calls UpdateContainers on its own, and
// two things wait for the next answer that can carry updates (a
// CreateContainer, StopContainer or UpdateContainer answer):
//   - the CPUs a removal, a pod's end or a downsize gives back to the
//     shared pool: the shared containers stay on the smaller pool until
//     then, never on an exclusive CPU;
//   - the reconcile loop's repairs.
//
// So the model allows, while something may be owed (c.owed: an event no
// answer followed), a shared-pool container on a non-empty part of the
// shared pool; after an answered event everything holds exactly, and no
// update ever arrives unsolicited.

func (c *churn) deferring() bool { return c.s.node == "containerd-2.3" }

// answered notes an event whose answer carried what was owed (only where
// something can be owed: the concurrency test creates from many
// goroutines at once).
func (c *churn) answered() {
	if c.deferring() {
		c.owed = false
	}
}

// unanswered notes an event that can leave updates owed.
func (c *churn) unanswered() {
	if c.deferring() {
		c.owed = true
	}
}

// checkDeferred checks that no update came unsolicited and, while
// something may be owed, puts the shared pool in place of a shared-pool
// container's cpuset in applied when that cpuset is a non-empty part of
// the pool (what the deferral allows), so the invariants are checked as
// if the owed push had come; anything else stays for them to report.
func (c *churn) checkDeferred(e *policy.Engine, st policy.State, applied map[invariant.Key]cpuset.CPUSet) []string {
	if !c.deferring() {
		return nil
	}
	var probs []string
	if n := c.rt.Pushes(); n > 0 {
		probs = append(probs, fmt.Sprintf("the plugin sent %d unsolicited updates (%v) to a runtime that takes none", n, c.rt.Unsolicited()))
	}
	if !c.owed {
		return probs
	}
	runsOn := e.SharedCPUs(st)
	for k, have := range applied {
		if _, ok := e.Assignment(st, k.Pod, k.Container); ok {
			continue
		}
		if _, ok := e.PodPoolOf(st, k.Pod, k.Container); ok {
			continue
		}
		if !have.IsEmpty() && have.IsSubsetOf(runsOn) {
			applied[k] = runsOn
		}
	}
	return probs
}

// repairByAnswer follows a reconcile that found drift on a runtime that
// takes no unsolicited update: the repairs wait for the next answer. The
// kubelet's UpdateContainerResources of a running container with its
// resources unchanged is such an answer; after it every invariant holds
// exactly, the drifted containers restored. Where none runs (every live
// container created and not started yet), a created one takes the same
// CRI call (CRI updates a created container's configuration; containerd
// sends NRI's UpdateContainer for it too): the drifted container itself is
// live, so there is always one, and the deferred repairs are never left
// without an answer.
func (c *churn) repairByAnswer() {
	c.unanswered()
	ct := c.pick(c.inState(api.ContainerState_CONTAINER_RUNNING))
	if ct == nil {
		ct = c.pick(c.live())
	}
	if ct == nil {
		c.fail("a reconcile found drift with no live container to answer for it")
		return
	}
	c.record("update %s, resources unchanged (the answer carries the deferred repairs)", ct.Id)
	if _, err := c.rt.UpdateContainer(context.Background(), ct, nritest.ContainerResources(c.res[ct.Id])); err != nil {
		c.fail("UpdateContainer %s, resources unchanged: %v", ct.Id, err)
	}
	c.ops["update"]++
	c.answered()
}
