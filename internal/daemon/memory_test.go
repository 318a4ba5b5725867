package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

const (
	mib = int64(1) << 20
	gib = int64(1) << 30
)

// memoryConfig is memory_manager_policy Static on ht-2s-6c written under a
// sysfs root (the daemon reads the nodes' memory and pools there): 16 GiB
// per node, 1 GiB of 2 MiB pages and one 1 GiB page; 1 GiB of memory
// reserved per node, so 13 GiB of memory is allocatable per node.
func memoryConfig(t *testing.T, topoPolicy string) string {
	t.Helper()
	root := t.TempDir()
	if err := sysfstest.WriteNamed(root, "ht-2s-6c"); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprintf("reserved_system_cpus = \"0,12\"\ntopology_manager_policy = %q\nsysfs_root = %q\nmemory_manager_policy = \"Static\"\n"+
		"[[reserved_memory]]\nnuma_node = 0\nlimits = { memory = \"1Gi\" }\n[[reserved_memory]]\nnuma_node = 1\nlimits = { memory = \"1Gi\" }\n",
		topoPolicy, root)
}

// createMem creates a container with CPU, memory and 2 MiB hugepage limits
// as the kubelet sends them (a hugetlb limit for every page size, 0 for
// those not requested).
func (rt *fakeRuntime) createMem(pod *api.PodSandbox, name string, milli, mem, huge2M int64) (*api.Container, error) {
	c := rt.newCtr(pod, name, milli, milli)
	res := c.Linux.Resources
	res.Memory = &api.LinuxMemory{Limit: &api.OptionalInt64{Value: mem}}
	res.HugepageLimits = []*api.HugepageLimit{{PageSize: "2MB", Limit: uint64(huge2M)}, {PageSize: "1GB"}}
	_, err := rt.CreateContainer(context.Background(), pod, c)
	return c, err
}

func memFree(v observe.StateView, node int, resource string) int64 {
	for _, m := range v.Memory {
		if m.NUMANode == node && m.Resource == resource {
			return int64(m.Free)
		}
	}
	return -1
}

// The daemon end to end under Static (single-numa-node): the memory and
// hugepages NRI reports are accounted per node, cpuset.mems comes from the
// allocation, the memory manager's refusal fails the container, a
// Burstable container keeps every node, a restart restores the state from
// the journal unchanged, and the pod's removal frees its memory.
func TestMemoryManagerDaemon(t *testing.T) {
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), memoryConfig(t, "single-numa-node"))
	topo := loadFixture(t, "ht-2s-6c")
	r := startDaemon(t, rt, cfg, topo)

	a := rt.addPod(podSpec{uid: "a", name: "a", qos: "guaranteed"})
	ca, err := rt.createMem(a, "app", 2000, 4*gib, 512*mib)
	if err != nil {
		t.Fatal(err)
	}
	if rt.cpus(ca) != "1,13" || rt.mems(ca) != "0" {
		t.Errorf("a: cpus %s mems %s, want 1,13 and 0", rt.cpus(ca), rt.mems(ca))
	}
	b := rt.addPod(podSpec{uid: "b", name: "b", qos: "guaranteed"})
	cb, err := rt.createMem(b, "app", 2000, 10*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rt.cpus(cb) != "6,18" || rt.mems(cb) != "1" {
		t.Errorf("b: cpus %s mems %s, want 6,18 and 1", rt.cpus(cb), rt.mems(cb))
	}
	c := rt.addPod(podSpec{uid: "c", name: "c", qos: "guaranteed"})
	_, err = rt.createMem(c, "app", 1000, 10*gib, 0)
	if err == nil || !strings.Contains(err.Error(), "UnexpectedAdmissionError") ||
		!strings.Contains(err.Error(), "[memorymanager] failed to find NUMA nodes to extend the current topology hint") {
		t.Fatalf("c: %v, want the memory manager's refusal", err)
	}
	bu := rt.addPod(podSpec{uid: "bu", name: "bu", qos: "burstable"})
	cbu := rt.newCtr(bu, "app", 500, 0)
	cbu.Linux.Resources.Memory = &api.LinuxMemory{Limit: &api.OptionalInt64{Value: gib}}
	if _, err := rt.CreateContainer(context.Background(), bu, cbu); err != nil {
		t.Fatal(err)
	}
	if rt.mems(cbu) != "0-1" {
		t.Errorf("Burstable mems %s, want 0-1", rt.mems(cbu))
	}

	v := r.d.State()
	if memFree(v, 0, "memory") != 9*gib || memFree(v, 0, "hugepages-2Mi") != 512*mib || memFree(v, 1, "memory") != 3*gib {
		t.Errorf("/state memory: %+v", v.Memory)
	}
	for _, cv := range v.Containers {
		want := map[string]string{"a": "0", "b": "1", "bu": ""}[cv.PodUID]
		if cv.Mems != want {
			t.Errorf("/state %s mems %q, want %q", cv.PodUID, cv.Mems, want)
		}
	}
	if got := gauge(t, r.d, "nri_cpualign_memory_free_bytes", "0", "memory"); got != float64(9*gib) {
		t.Errorf("nri_cpualign_memory_free_bytes{numa_node=0,resource=memory} = %v, want 9 GiB", got)
	}
	if got := gauge(t, r.d, "nri_cpualign_memory_allocated_bytes", "0", "hugepages-2Mi"); got != float64(512*mib) {
		t.Errorf("nri_cpualign_memory_allocated_bytes{numa_node=0,resource=hugepages-2Mi} = %v, want 512 MiB", got)
	}
	snap := func(l *ledger.Tx) json.RawMessage { return l.Engine().MemorySnapshot(l.State()) }
	before := readLedger(r.d, snap)
	r.stop(t)

	r = startDaemon(t, rt, cfg, topo)
	if after := readLedger(r.d, snap); !reflect.DeepEqual(after, before) {
		t.Errorf("restored memory state\n%s\nwant\n%s", after, before)
	}
	if ups := rt.SyncUpdates(); len(ups) != 0 {
		t.Errorf("restart updated %s", rt.describe(ups))
	}

	rt.stop(ca)
	rt.remove(ca)
	rt.removePod(a)
	if got := memFree(r.d.State(), 0, "memory"); got != 13*gib {
		t.Errorf("node 0 memory free after the pod's removal %d, want 13 GiB", got)
	}
}

// A kubelet memory_manager_state next to cpu_manager_state is imported on
// a first start (here the migration's copies, kubelet-cpu_manager_state
// and kubelet-memory_manager_state); its containers keep their memory, a
// shared-pool one and an exclusive one adopted with its CPUs alike, and
// run on its node.
func TestImportKubeletMemoryState(t *testing.T) {
	dir := t.TempDir()
	cpuState := filepath.Join(dir, "kubelet-cpu_manager_state")
	// Pod x's container db holds CPUs 6-7 (node 1 of ht-2s-6c).
	if err := os.WriteFile(cpuState, []byte(`{"policyName":"static","defaultCpuSet":"0-5,8-23","entries":{"x":{"db":"6-7"}},"checksum":0}`), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kubelet's file for ht-2s-6c with 1 GiB reserved per node, pod
	// u's container app holding 2 GiB on node 1 and pod x's db 1 GiB there
	// (checksum 0: not verified, as the kubelet accepts it).
	const g = uint64(1) << 30
	table := func(total, reserved, alloc, used uint64) string {
		return fmt.Sprintf(`{"total":%d,"systemReserved":%d,"allocatable":%d,"reserved":%d,"free":%d}`, total, reserved, alloc, used, alloc-used)
	}
	node := func(n int, used uint64, assigned int) string {
		return fmt.Sprintf(`"%d":{"numberOfAssignments":%d,"memoryMap":{"hugepages-1Gi":%s,"hugepages-2Mi":%s,"memory":%s},"cells":[%d]}`,
			n, assigned, table(g, 0, g, 0), table(g, 0, g, 0), table(16*g, g, 13*g, used), n)
	}
	mem := `{"policyName":"Static","machineState":{` + node(0, 0, 0) + "," + node(1, 3*g, 2) +
		`},"entries":{"u":{"app":[{"numaAffinity":[1],"type":"memory","size":` + fmt.Sprint(2*g) + `}]},` +
		`"x":{"db":[{"numaAffinity":[1],"type":"memory","size":` + fmt.Sprint(g) + `}]}},"checksum":0}`
	if err := os.WriteFile(filepath.Join(dir, "kubelet-memory_manager_state"), []byte(mem), 0o644); err != nil {
		t.Fatal(err)
	}
	rt := startRuntime(t)
	// Pod u's container runs (created while no plugin was connected): a
	// Guaranteed one on the shared pool with the 2 GiB the file holds.
	u := rt.addPod(podSpec{uid: "u", name: "u", qos: "guaranteed"})
	app := rt.newCtr(u, "app", 500, 500)
	app.Linux.Resources.Memory = &api.LinuxMemory{Limit: &api.OptionalInt64{Value: 2 * gib}}
	rt.CreateContainerAway(app)
	// Pod x's db, exclusive with 2 CPUs and 1 GiB, as the kubelet ran it.
	x := rt.addPod(podSpec{uid: "x", name: "x", qos: "guaranteed"})
	db := rt.newCtr(x, "db", 2000, 2000)
	db.Linux.Resources.Memory = &api.LinuxMemory{Limit: &api.OptionalInt64{Value: gib}}
	rt.CreateContainerAway(db)
	cfg := testConfig(t, rt, t.TempDir(), memoryConfig(t, "single-numa-node"))
	r := startDaemon(t, rt, cfg, loadFixture(t, "ht-2s-6c"), WithKubeletState(cpuState))
	blocks := readLedger(r.d, (*ledger.Tx).State).Memory.Blocks("u", "app")
	if len(blocks) != 1 || blocks[0].Type != memorymanager.Memory || blocks[0].Size != 2*g || !reflect.DeepEqual(blocks[0].NUMAAffinity, []int{1}) {
		t.Fatalf("imported blocks %+v", blocks)
	}
	if blocks := readLedger(r.d, (*ledger.Tx).State).Memory.Blocks("x", "db"); len(blocks) != 1 || blocks[0].Size != g || !reflect.DeepEqual(blocks[0].NUMAAffinity, []int{1}) {
		t.Fatalf("db's imported blocks %+v", blocks)
	}
	if got := memFree(r.d.State(), 1, "memory"); got != int64(10*g) {
		t.Errorf("node 1 free %d, want 10 GiB (13 allocatable less 2 and 1)", got)
	}
	// Synchronize placed app on the shared pool with its memory's node,
	// and adopted db on its CPUs with its memory's node.
	if got := rt.mems(app); got != "1" {
		t.Errorf("app's mems %q, want 1", got)
	}
	if got, mems := rt.cpus(db), rt.mems(db); got != "6-7" || mems != "1" {
		t.Errorf("db runs on cpus %q mems %q, want 6-7 and 1", got, mems)
	}
}

// gauge is the value of a memory gauge's series, -1 when absent.
func gauge(t *testing.T, d *Daemon, name, node, resource string) float64 {
	t.Helper()
	mfs, err := d.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			if labels["numa_node"] == node && labels["resource"] == resource {
				return m.GetGauge().GetValue()
			}
		}
	}
	return -1
}

// Memory follows the CPUs' held rule (the adapter's withReuse): a stopped and removed
// container's memory stays assigned to its pod and name while the pod
// lives (here it keeps another container), its re-creation gets the same
// nodes without counting it twice, and the pod's end frees it. A pod
// holding memory only (a Guaranteed container on the shared pool) that
// goes while the plugin is away is released at the next Synchronize.
func TestMemoryHeldForThePod(t *testing.T) {
	rt := startRuntime(t)
	cfg := testConfig(t, rt, t.TempDir(), memoryConfig(t, "single-numa-node"))
	topo := loadFixture(t, "ht-2s-6c")
	r := startDaemon(t, rt, cfg, topo)
	p := rt.addPod(podSpec{uid: "p", name: "p", qos: "guaranteed"})
	if _, err := rt.createMem(p, "side", 1000, gib, 0); err != nil {
		t.Fatal(err)
	}
	c, err := rt.createMem(p, "app", 2000, 4*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Node 0: 13 GiB allocatable, 5 GiB taken.
	rt.stop(c)
	rt.remove(c)
	if got := memFree(r.d.State(), 0, "memory"); got != 8*gib {
		t.Errorf("node 0 free after app's removal %d, want 8 GiB (held for the pod)", got)
	}
	again, err := rt.createMem(p, "app", 2000, 4*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rt.mems(again) != "0" {
		t.Errorf("re-created: mems %s, want 0", rt.mems(again))
	}
	if got := memFree(r.d.State(), 0, "memory"); got != 8*gib {
		t.Errorf("node 0 free after the re-creation %d, want 8 GiB", got)
	}
	rt.removePod(p)
	if got := memFree(r.d.State(), 0, "memory"); got != 13*gib {
		t.Errorf("node 0 free after the pod's removal %d, want 13 GiB", got)
	}

	// A pod holding memory only: its last container's removal ends it, as
	// for a pod with exclusive CPUs.
	mp := rt.addPod(podSpec{uid: "m", name: "m", qos: "guaranteed"})
	mc, err := rt.createMem(mp, "app", 500, 3*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	rt.stop(mc)
	rt.remove(mc)
	if got := memFree(r.d.State(), 0, "memory"); got != 13*gib {
		t.Errorf("node 0 free after a memory-only pod's last container went %d, want 13 GiB", got)
	}

	// 500m: shared pool, memory pinned; its pod goes while the plugin is
	// away.
	sp := rt.addPod(podSpec{uid: "s", name: "s", qos: "guaranteed"})
	sc, err := rt.createMem(sp, "app", 500, 2*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rt.mems(sc) != "0" || memFree(r.d.State(), 0, "memory") != 11*gib {
		t.Fatalf("shared-pool Guaranteed container: mems %s, node 0 free %d", rt.mems(sc), memFree(r.d.State(), 0, "memory"))
	}
	r.stop(t)
	rt.removeAway(sc)
	rt.RemovePodAway(sp)
	r = startDaemon(t, rt, cfg, topo)
	if got := memFree(r.d.State(), 0, "memory"); got != 13*gib {
		t.Errorf("node 0 free after the pod went while the plugin was away %d, want 13 GiB", got)
	}
}

// An init container's memory is taken over by the pod's next container,
// as under the kubelet: node 0 has 6 GiB free once pod x holds 7; the init
// container takes 4 and exits; the app's 4 GiB then fit node 0 again and
// node 0 keeps 2 GiB free. Without the reuse the app is refused: its CPU
// hints keep to the init container's CPU on node 0 (the CPU manager's
// reuse), its memory would need node 1.
func TestMemoryInitContainerReuse(t *testing.T) {
	rt := startRuntime(t)
	r := startDaemon(t, rt, testConfig(t, rt, t.TempDir(), memoryConfig(t, "single-numa-node")), loadFixture(t, "ht-2s-6c"))
	x := rt.addPod(podSpec{uid: "x", name: "x", qos: "guaranteed"})
	if _, err := rt.createMem(x, "app", 2000, 7*gib, 0); err != nil {
		t.Fatal(err)
	}
	p := rt.addPod(podSpec{uid: "p", name: "p", qos: "guaranteed"})
	ic, err := rt.createMem(p, "init", 1000, 4*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rt.mems(ic) != "0" {
		t.Fatalf("init mems %s, want 0", rt.mems(ic))
	}
	rt.stop(ic)
	app, err := rt.createMem(p, "app", 1000, 4*gib, 0)
	if err != nil {
		t.Fatal(err)
	}
	if rt.mems(app) != "0" {
		t.Errorf("app mems %s, want 0 (the init container's memory taken over)", rt.mems(app))
	}
	if got := memFree(r.d.State(), 0, "memory"); got != 2*gib {
		t.Errorf("node 0 free %d, want 2 GiB", got)
	}
}

// createMemOn creates pod's container "app" with createMem's limits and
// stops the test unless it was placed on cpus and mems.
func (rt *fakeRuntime) createMemOn(t *testing.T, pod *api.PodSandbox, milli, mem, huge2M int64, cpus, mems string) *api.Container {
	t.Helper()
	c, err := rt.createMem(pod, "app", milli, mem, huge2M)
	if err != nil {
		t.Fatal(err)
	}
	if rt.cpus(c) != cpus || rt.mems(c) != mems {
		t.Fatalf("%s: cpus %s mems %s, want %s and %s", pod.Uid, rt.cpus(c), rt.mems(c), cpus, mems)
	}
	return c
}

// A damaged checkpoint: the state is rebuilt from the runtime, and the
// running Guaranteed containers keep their memory assignments on the
// nodes they run on along with their CPUs, so node 0's memory that a
// holds is not given again (c's 10 GiB is refused as before the damage)
// and a's re-creation gets node 0 back beside its CPUs.
func TestRebuildKeepsMemory(t *testing.T) {
	rt := startRuntime(t)
	stateDir := t.TempDir()
	cfg := testConfig(t, rt, stateDir, memoryConfig(t, "single-numa-node"))
	topo := loadFixture(t, "ht-2s-6c")
	r := startDaemon(t, rt, cfg, topo)
	a := rt.addPod(podSpec{uid: "a", name: "a", qos: "guaranteed"})
	ca := rt.createMemOn(t, a, 2000, 4*gib, 512*mib, "1,13", "0")
	b := rt.addPod(podSpec{uid: "b", name: "b", qos: "guaranteed"})
	rt.createMemOn(t, b, 2000, 10*gib, 0, "6,18", "1")
	r.stop(t)
	path := filepath.Join(stateDir, CheckpointName)
	if err := os.WriteFile(path, []byte(`{"version":1,"checksum":"sha256:00","data":{"trunc`), 0o600); err != nil {
		t.Fatal(err)
	}

	r = startDaemon(t, rt, cfg, topo)
	if ups := rt.SyncUpdates(); len(ups) != 0 {
		t.Errorf("rebuild updated %s", rt.describe(ups))
	}
	v := r.d.State()
	// Node 0: 13 GiB allocatable less a's 4; 1 GiB of 2 MiB pages less
	// a's 512 MiB. Node 1: 13 GiB less b's 10.
	if memFree(v, 0, "memory") != 9*gib || memFree(v, 0, "hugepages-2Mi") != 512*mib || memFree(v, 1, "memory") != 3*gib {
		t.Errorf("/state memory after the rebuild: %+v", v.Memory)
	}
	for _, cv := range v.Containers {
		if want := map[string]string{"a": "0", "b": "1"}[cv.PodUID]; cv.Mems != want {
			t.Errorf("/state %s mems %q, want %q", cv.PodUID, cv.Mems, want)
		}
	}
	c := rt.addPod(podSpec{uid: "c", name: "c", qos: "guaranteed"})
	if _, err := rt.createMem(c, "app", 1000, 10*gib, 0); err == nil || !strings.Contains(err.Error(), "UnexpectedAdmissionError") {
		t.Errorf("c after the rebuild: %v, want the memory manager's refusal", err)
	}
	rt.stop(ca)
	rt.remove(ca)
	rt.createMemOn(t, a, 2000, 4*gib, 512*mib, "1,13", "0")
	if got := memFree(r.d.State(), 0, "memory"); got != 9*gib {
		t.Errorf("node 0 free after a's re-creation %d, want 9 GiB", got)
	}
}

// A restart whose reserved_memory changed drops the checkpoint's memory
// manager state (it no longer matches, as the kubelet checks at start);
// the running container's CPUs are still assigned, and the next
// Synchronize keeps its memory on the node it runs on, counted against
// the new allocatable: node 0 then has 16 - 2 (reserved) - 2 (the pools)
// - 4 (a) = 8 GiB free.
func TestDroppedMemoryStateKept(t *testing.T) {
	rt := startRuntime(t)
	stateDir := t.TempDir()
	topo := loadFixture(t, "ht-2s-6c")
	doc := memoryConfig(t, "single-numa-node")
	r := startDaemon(t, rt, testConfig(t, rt, stateDir, doc), topo)
	rt.createMemOn(t, rt.addPod(podSpec{uid: "a", name: "a", qos: "guaranteed"}), 2000, 4*gib, 0, "1,13", "0")
	r.stop(t)

	more := strings.Replace(doc, "numa_node = 0\nlimits = { memory = \"1Gi\" }", "numa_node = 0\nlimits = { memory = \"2Gi\" }", 1)
	if more == doc {
		t.Fatal("memoryConfig's reservation for node 0 not found")
	}
	r = startDaemon(t, rt, testConfig(t, rt, stateDir, more), topo)
	if ups := rt.SyncUpdates(); len(ups) != 0 {
		t.Errorf("restart updated %s", rt.describe(ups))
	}
	v := r.d.State()
	if got := memFree(v, 0, "memory"); got != 8*gib {
		t.Errorf("node 0 memory free %d, want 8 GiB", got)
	}
	if len(v.Containers) != 1 || v.Containers[0].Mems != "0" {
		t.Errorf("/state containers %+v, want a on mems 0", v.Containers)
	}
}
