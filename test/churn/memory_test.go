//go:build testhooks

package churn

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The static memory manager (docs/topology-manager.md, "Memory manager").
// Where the node is "memory", a /sys root holds the fixture machine (each
// NUMA node's MemTotal and hugepage pools, read at start-up) and the
// setup's options run memory_manager_policy = "Static". Guaranteed
// containers then carry memory limits of 64 MiB to 3 GiB, some more than
// any node holds, as the kubelet sends them. What the docs define is
// checked: a Guaranteed container (exclusive or of the shared pool) may be
// refused for its memory, with the kubelet's reason (UnexpectedAdmissionError
// from the memory manager, TopologyAffinityError from the merge); memory
// no single node's allocatable holds is refused, with one of them, under
// single-numa-node; a Guaranteed container's cpuset.mems is its memory
// assignment's nodes, one node under single-numa-node, holding its
// exclusive CPUs (see memFresh for two exceptions); Burstable and
// BestEffort containers keep every memory node.

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// memoryTree writes the /sys root under dir and returns its configuration
// line.
func (c *churn) memoryTree(dir string) string {
	sys := filepath.Join(dir, "sys")
	if err := sysfstest.WriteNamed(sys, c.s.fixture); err != nil {
		c.t.Fatal(err)
	}
	return fmt.Sprintf("sysfs_root = %q\n", sys)
}

func (c *churn) memoryStatic() bool { return c.s.node == "memory" }

// withMemory draws a Guaranteed container's memory (request = limit):
// mostly 64 MiB to 3 GiB, now and then more than a node's allocatable.
func (c *churn) withMemory(r framework.Resources) framework.Resources {
	if !c.memoryStatic() {
		return r
	}
	m := 64*mib + c.rng.Int63n(3*gib-64*mib+1)
	if c.rng.Intn(20) == 0 {
		m = c.maxNodeAllocatable() + gib
	}
	r.MemRequest, r.MemLimit = m, m
	return r
}

// maxNodeAllocatable is the most memory one NUMA node's allocatable holds
// (its MemTotal less reserved_memory and the hugepage pools).
func (c *churn) maxNodeAllocatable() int64 {
	_, st := c.d.EngineState()
	most := int64(0)
	for _, n := range st.Memory.Nodes {
		most = max(most, int64(n.MemoryMap[memorymanager.Memory].Allocatable))
	}
	return most
}

// memoryMustFail is the memory half of mustFail: under single-numa-node
// memory that no single node's allocatable holds has at most a multi-node
// hint, which the merge refuses (TopologyAffinityError); with no hint at
// all (the nodes' free memory together is short: the kubelet's memory
// manager then states no preference) its Allocate refuses
// (UnexpectedAdmissionError).
func (c *churn) memoryMustFail(pod, name string, q framework.QOS, r framework.Resources) string {
	if !c.memoryStatic() || q != framework.Guaranteed || c.cfg.TopologyManagerPolicy != "single-numa-node" {
		return ""
	}
	e, st := c.d.EngineState()
	if e.MemoryPinned(st, pod, name) {
		return "" // a restart gets its memory back
	}
	if most := c.maxNodeAllocatable(); r.MemLimit > most {
		return fmt.Sprintf("memory %d > %d allocatable in one NUMA node under single-numa-node", r.MemLimit, most)
	}
	return ""
}

// memoryRefusal says whether a refused Guaranteed container's reason (the
// refusal's text, after the ttRPC wrapping) is one the memory manager's
// admission gives.
func (c *churn) memoryRefusal(msg string, q framework.QOS) bool {
	return c.memoryStatic() && q == framework.Guaranteed &&
		(strings.HasPrefix(msg, "UnexpectedAdmissionError") || strings.HasPrefix(msg, "TopologyAffinityError"))
}

// Where the memory of a pod and name goes with its CPUs kept: the next
// container of such a name keeps the CPUs (held for it, or kept by a
// rebuild) and takes the memory it lacks afresh, without admission (an
// existing exclusive assignment is returned as is, pkg/policy's
// Engine.Add), so that memory may lie on another node than the CPUs, or
// be refused although the pod holds the CPUs. Those names (memFresh) are
// exempt from these two checks until their pod goes:
//
//   - a rebuild from the runtime (a damaged checkpoint) keeps the live
//     containers' CPUs (what they run on), and their memory on the nodes
//     they run on only where those nodes' free memory still holds it
//     (policy.Engine.KeepMemory): loseMemory, then keptMemory for those
//     that got it back;
//   - a later container of the pod takes over the memory the pod holds
//     for its exited ones, as the kubelet lets app containers take over
//     init containers' memory; the exited one's block shrinks by what was
//     taken (docs/topology-manager.md, "Init containers"): tookOver.

// loseMemory notes, when the checkpoint is damaged (the state may then be
// rebuilt from the runtime), the pods and names of the live containers; it
// returns those it newly noted.
func (c *churn) loseMemory() []invariant.Key {
	if !c.memoryStatic() {
		return nil
	}
	var noted []invariant.Key
	for _, ct := range c.live() {
		if k := c.keyOf(ct); !c.memFresh[k] {
			c.memFresh[k] = true
			noted = append(noted, k)
		}
	}
	return noted
}

// keptMemory, after the restart that followed loseMemory, takes back the
// names whose memory assignment the rebuild kept (or the checkpoint
// kept): it lies on the nodes the container ran on, those of its CPUs.
func (c *churn) keptMemory(noted []invariant.Key) {
	e, st := c.d.EngineState()
	for _, k := range noted {
		if e.MemoryPinned(st, k.Pod, k.Container) {
			delete(c.memFresh, k)
			c.faults["memory-kept-at-restart"]++
		}
	}
}

// tookOver notes, after a container of pod was admitted, the pod's names
// held for exited containers: the new one may have taken their memory.
func (c *churn) tookOver(pod string) {
	if !c.memoryStatic() {
		return
	}
	for k := range c.held {
		if k.Pod == pod {
			c.memFresh[k] = true
		}
	}
}

// checkMems checks the cpuset.mems every live container runs on (its
// cgroup): a container the memory manager holds memory for runs on its
// assignment's nodes, one node under single-numa-node, which holds its
// exclusive CPUs; a Burstable or BestEffort one on every memory node. A
// Guaranteed container without an assignment (refused at Synchronize, or
// rebuilt from the runtime after a damaged checkpoint where its nodes no
// longer held its memory) is left to the runtime (docs/metrics.md).
func (c *churn) checkMems() []string {
	if !c.memoryStatic() {
		return nil
	}
	e, st := c.d.EngineState()
	all := cpuset.New(c.topo.MemoryNodes()...)
	var probs []string
	for _, ct := range c.live() {
		p := c.rt.PodOf(ct)
		b, err := os.ReadFile(filepath.Join(filepath.Dir(c.rt.CgroupFile(ct)), "cpuset.mems"))
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: %v", ct.Id, err))
			continue
		}
		mems := strings.TrimSpace(string(b))
		have, err := cpuset.Parse(mems)
		if err != nil {
			probs = append(probs, fmt.Sprintf("%s: cpuset.mems %q: %v", ct.Id, mems, err))
			continue
		}
		pinned := e.MemoryPinned(st, p.Uid, ct.Name)
		want := e.MemsOf(st, p.Uid, ct.Name)
		switch {
		case c.qos[p.Id] != framework.Guaranteed && pinned:
			probs = append(probs, fmt.Sprintf("%s (%s) holds memory on %s", ct.Id, c.qos[p.Id], want))
		case c.qos[p.Id] != framework.Guaranteed && !have.Equals(all):
			probs = append(probs, fmt.Sprintf("%s (%s) runs on mems %q, want every node %s", ct.Id, c.qos[p.Id], mems, all))
		case !pinned:
		case !have.Equals(want):
			probs = append(probs, fmt.Sprintf("%s runs on mems %q, its memory assignment is %s", ct.Id, mems, want))
		case c.cfg.TopologyManagerPolicy == "single-numa-node" && want.Size() != 1:
			probs = append(probs, fmt.Sprintf("%s holds memory on %s under single-numa-node", ct.Id, want))
		default:
			if cpus, ok := e.Assignment(st, p.Uid, ct.Name); ok && c.cfg.TopologyManagerPolicy == "single-numa-node" && !c.memFresh[c.keyOf(ct)] &&
				!cpus.IsSubsetOf(c.topo.CPUsInNUMANodes(want.List()...)) {
				probs = append(probs, fmt.Sprintf("%s: exclusive CPUs %s off its memory's node %s under single-numa-node", ct.Id, cpus, want))
			}
		}
	}
	return probs
}

// checkMemoryView checks what /state and /metrics say of memory
// (docs/metrics.md): a container's mems are its memory assignment's nodes
// where it has one, otherwise absent or every memory node (a record that
// had mems, e.g. from a rebuild or an earlier assignment: Engine.MemsOf); each node and resource's row has
// free = allocatable - allocated, as the engine's table, and its free
// bytes are the nri_cpualign_memory_free_bytes gauge.
func (c *churn) checkMemoryView(sv observe.StateView, metrics string) {
	if !c.memoryStatic() {
		return
	}
	e, st := c.d.EngineState()
	for _, cv := range sv.Containers {
		want := ""
		if e.MemoryPinned(st, cv.PodUID, cv.Container) {
			want = e.MemsOf(st, cv.PodUID, cv.Container).String()
		} else if cv.Mems == e.Mems().String() {
			continue // a record that had mems: every node (Engine.MemsOf)
		}
		if cv.Mems != want {
			c.fail("/state: %s/%s mems %q, the memory assignment's %q", cv.PodUID, cv.Container, cv.Mems, want)
		}
	}
	if len(sv.Memory) == 0 {
		c.fail("/state lists no memory under the static memory manager")
	}
	for _, mv := range sv.Memory {
		t := st.Memory.Nodes[mv.NUMANode].MemoryMap[memorymanager.Resource(mv.Resource)]
		if mv.Allocatable != t.Allocatable || mv.Allocated != t.Reserved || mv.Free != t.Free || mv.Free+mv.Allocated != mv.Allocatable {
			c.fail("/state: memory of node %d %s %+v, the engine's table %+v", mv.NUMANode, mv.Resource, mv, t)
		}
		gauge := fmt.Sprintf("nri_cpualign_memory_free_bytes{numa_node=\"%d\",resource=\"%s\"} %s", mv.NUMANode, mv.Resource,
			strconv.FormatFloat(float64(mv.Free), 'g', -1, 64))
		if !strings.Contains(metrics, gauge) {
			c.fail("/metrics lacks %s", gauge)
		}
	}
}
