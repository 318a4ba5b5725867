//go:build testhooks

package churn

import (
	"github.com/containerd/nri/pkg/api"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Pod-level resources (docs/pod-level-resources.md). Under
// pod_level_resource_managers most Guaranteed pods carry pod-level
// resources of whole CPUs: the pod's first container takes the whole
// budget as one block, its whole-CPU containers exclusive slices of it,
// its other containers the rest, the pod's private pool. What a pod may be
// refused (the block, EmptyPodSharedPoolError) is pkg/policy's tests'; the
// churn checks what an admitted container gets, and internal/invariant,
// after every step, that the pod-pool containers run on their pod's pool
// and the blocks are nobody else's.

// maybePodLevel gives most Guaranteed pods pod-level resources of 1 to 6
// CPUs where the option is on.
func (c *churn) maybePodLevel(p *api.PodSandbox, q framework.QOS) {
	if !c.cfg.PodLevelResourceManagers || q != framework.Guaranteed || c.rng.Intn(100) >= 60 {
		return
	}
	b := 1 + c.rng.Intn(6)
	p.Linux.PodResources = nritest.ContainerResources(framework.Resources{CPURequestMilli: int64(b) * 1000, CPULimitMilli: int64(b) * 1000})
	c.budget[p.Id] = b
}

// checkPodLevel checks an admitted container of a pod-level pod: the pod
// has a block of its budget; an exclusive container's CPUs are a slice of
// it; any other container is on the pod's pool.
func (c *churn) checkPodLevel(e *policy.Engine, st policy.State, p *api.PodSandbox, name string, n int, cpus cpuset.CPUSet) {
	block, ok := st.Alloc.Assignments[p.Uid][policy.PodPoolEntry]
	if !ok {
		// Not managed as a block (the container scope, or no budget the
		// engine takes): the ordinary per-container rules hold.
		return
	}
	if block.Size() != c.budget[p.Id] {
		c.fail("pod-level pod %s of %d CPUs has the block %s", p.Uid, c.budget[p.Id], block)
	}
	if n > 0 {
		if !cpus.IsSubsetOf(block) && !c.rebuilt[p.Id] {
			c.fail("%s/%s: exclusive CPUs %s outside its pod's block %s", p.Uid, name, cpus, block)
		}
		return
	}
	if _, ok := e.PodPoolOf(st, p.Uid, name); !ok {
		c.fail("%s/%s of pod-level pod %s (block %s) is not on its pod's pool", p.Uid, name, p.Uid, block)
	}
}

// rebuildPodLevel marks the pod-level pods with live containers before a
// rebuild of the state from the runtime (a corrupt checkpoint): the
// runtime shows containers and their CPUs, not blocks, so a running
// container keeps its CPUs as a plain exclusive assignment and the pod's
// next container takes a new block beside it (the pod then holds more
// than its budget until it ends). Their later slices are not checked to be
// in the block.
func (c *churn) rebuildPodLevel() {
	for _, ct := range c.live() {
		if c.budget[ct.PodSandboxId] > 0 && !c.rebuilt[ct.PodSandboxId] {
			c.rebuilt[ct.PodSandboxId] = true
			c.faults["pod-level-rebuilt"]++
		}
	}
}
