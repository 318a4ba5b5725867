//go:build testhooks

package churn

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubeletstate"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// The migration from the kubelet's static policy (docs/migration.md): the
// node already runs Guaranteed containers on the CPUs the kubelet gave
// them, the kubelet's cpu_manager_state (1.37's V4) lists them, and the
// plugin starts for the first time with --import-kubelet-state
// (daemon.WithKubeletState). It must adopt every exclusive assignment of
// the file: those containers are exclusive on exactly the kubelet's CPUs,
// the others share the rest. The file also has an entry on a reserved CPU
// (refused by the engine and skipped: its container, created while the
// plugin was away, is placed afresh at Synchronize) and one of a pod that
// is gone (released at Synchronize: the leak check of verify). Later
// starts use the plugin's own checkpoint and ignore the file.

// kubeletPods are the containers running before the plugin's first start,
// and their CPUs in the kubelet's state: CPUs of the setup's machine
// (ht-2s-6c: NUMA node 0 = CPUs 0-5,12-17, node 1 = 6-11,18-23) outside
// its reserved CPUs, and CPU 0, reserved. Under the static memory manager
// the kubelet's memory_manager_state also gives each its memory (mem bytes
// on the node of its CPUs), all but the reserved entry's, whose container
// is placed afresh with memory and CPUs together.
var kubeletPods = []kubeletPod{{"1-2", gib, 0}, {"3,15", 512 * mib, 0}, {"6-9", 2 * gib, 1}, {"0", 0, 0}}

// goneMemory is the kubelet's memory for the gone pod's container (CPUs
// 10-11, node 1): released at Synchronize with its CPUs.
const goneMemory = gib

// importNode runs kubeletPods in the runtime, unpinned as the kubelet with
// the none policy leaves them, writes the kubelet's state under dir and
// returns what the model must find after the first Synchronize.
func (c *churn) importNode(dir string) map[invariant.Key]cpuset.CPUSet {
	want := map[invariant.Key]cpuset.CPUSet{}
	mem := map[invariant.Key]kubeletPod{}
	entries := []string{`"gone-pod":{"c1":"10-11"}`}
	for _, kp := range kubeletPods {
		cpus, err := cpuset.Parse(kp.cpus)
		if err != nil {
			c.t.Fatal(err)
		}
		p := c.newPod(framework.Guaranteed)
		c.qos[p.Id] = framework.Guaranteed
		c.rt.RunPodAway(p)
		name := c.nextName(p)
		r := framework.GuaranteedMilli(int64(cpus.Size()) * 1000)
		if c.memoryStatic() && kp.mem > 0 {
			r.MemRequest, r.MemLimit = kp.mem, kp.mem
			mem[invariant.Key{Pod: p.Uid, Container: name}] = kp
		}
		ct := c.rt.NewContainer(p, name, r)
		c.rt.CreateContainerAway(ct)
		c.res[ct.Id], c.nameRes[c.keyOf(ct)] = r, r
		want[invariant.Key{Pod: p.Uid, Container: name}] = cpus
		entries = append(entries, fmt.Sprintf(`%q:{%q:%q}`, p.Uid, name, kp.cpus))
		c.record("kubelet: %s/%s on %s -> %s", p.Uid, name, cpus, ct.Id)
	}
	data := `{"policyName":"static","defaultCpuSet":"0,4-5,10-14,16-23","entries":{` + strings.Join(entries, ",") + `}}`
	file := `{"policyName":"static","defaultCpuSet":"0-23","checksum":0,"data":` + strconv.Quote(data) +
		`,"dataChecksum":` + strconv.FormatUint(uint64(kubeletstate.StringChecksum(data)), 10) + `}`
	path := filepath.Join(dir, "kubelet-cpu_manager_state")
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		c.t.Fatal(err)
	}
	if c.memoryStatic() {
		c.writeKubeletMemory(dir, mem)
		c.importedMemory = mem
	}
	c.opts = append(c.opts, daemon.WithKubeletState(path))
	return want
}

// kubeletPod is one container the kubelet placed: its CPUs and, under the
// static memory manager, mem bytes on NUMA node node (none when mem is 0).
type kubeletPod struct {
	cpus string
	mem  int64
	node int
}

// writeKubeletMemory writes the kubelet's memory_manager_state beside its
// cpu_manager_state copy (kubelet-memory_manager_state, as the migration
// names it): the "memory" setup's machine state (per node 16 GiB, 1 GiB
// of it reserved, 1 GiB each of 2 MiB and 1 GiB pages, so 13 GiB
// allocatable) less the blocks of mem and of the gone pod, as the
// kubelet's Static policy leaves it (checksum 0: not verified, as the
// kubelet accepts it).
func (c *churn) writeKubeletMemory(dir string, mem map[invariant.Key]kubeletPod) {
	g := uint64(gib)
	used := map[int]uint64{1: uint64(goneMemory)}
	count := map[int]int{1: 1}
	entries := []string{fmt.Sprintf(`"gone-pod":{"c1":[{"numaAffinity":[1],"type":"memory","size":%d}]}`, goneMemory)}
	for k, kp := range mem {
		used[kp.node] += uint64(kp.mem)
		count[kp.node]++
		entries = append(entries, fmt.Sprintf(`%q:{%q:[{"numaAffinity":[%d],"type":"memory","size":%d}]}`, k.Pod, k.Container, kp.node, kp.mem))
	}
	table := func(total, reserved, alloc, used uint64) string {
		return fmt.Sprintf(`{"total":%d,"systemReserved":%d,"allocatable":%d,"reserved":%d,"free":%d}`, total, reserved, alloc, used, alloc-used)
	}
	var nodes []string
	for n := range 2 {
		nodes = append(nodes, fmt.Sprintf(`"%d":{"numberOfAssignments":%d,"memoryMap":{"hugepages-1Gi":%s,"hugepages-2Mi":%s,"memory":%s},"cells":[%d]}`,
			n, count[n], table(g, 0, g, 0), table(g, 0, g, 0), table(16*g, g, 13*g, used[n]), n))
	}
	file := `{"policyName":"Static","machineState":{` + strings.Join(nodes, ",") + `},"entries":{` + strings.Join(entries, ",") + `},"checksum":0}`
	if err := os.WriteFile(filepath.Join(dir, "kubelet-memory_manager_state"), []byte(file), 0o600); err != nil {
		c.t.Fatal(err)
	}
}

// checkImported checks the first Synchronize after the import: every
// container of the kubelet's file is exclusive on exactly its CPUs and
// runs there; nothing is assigned to the reserved entry.
func (c *churn) checkImported(want map[invariant.Key]cpuset.CPUSet) {
	c.afterSync()
	e, st := c.d.EngineState()
	applied, err := c.tracked()
	if err != nil {
		c.fail("%v", err)
	}
	for k, cpus := range want {
		if cpus.IsSubsetOf(e.Reserved()) {
			// The entry on a reserved CPU: skipped, the container placed
			// afresh.
			if have, _ := e.Assignment(st, k.Pod, k.Container); !have.Intersection(e.Reserved()).IsEmpty() {
				c.fail("%s: the kubelet's entry on reserved CPUs %s was imported: assigned %s", k, cpus, have)
			}
			continue
		}
		if have, ok := e.Assignment(st, k.Pod, k.Container); !ok || !sameSet(have, cpus) || !sameSet(applied[k], cpus) {
			c.fail("%s: the kubelet's state gives it %s; after the import it is assigned %q (%v) and runs on %q", k, cpus, have, ok, applied[k])
		}
	}
	// The memory manager's state: each container keeps its node and size;
	// the gone pod's memory is released.
	for k, kp := range c.importedMemory {
		blocks := st.Memory.Blocks(k.Pod, k.Container)
		if len(blocks) != 1 || blocks[0].Type != memorymanager.Memory || blocks[0].Size != uint64(kp.mem) ||
			!slices.Equal(blocks[0].NUMAAffinity, []int{kp.node}) {
			c.fail("%s: the kubelet's memory state gives it %d bytes on node %d; after the import it holds %+v", k, kp.mem, kp.node, blocks)
		}
	}
	if blocks := st.Memory.Blocks("gone-pod", "c1"); c.importedMemory != nil && len(blocks) != 0 {
		c.fail("the gone pod's memory is still held after Synchronize: %+v", blocks)
	}
	c.check(true)
}
