//go:build testhooks

package churn

import (
	"bytes"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"maps"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/invariant"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/internal/podres"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

var (
	seedFlag = flag.Int64("churn.seed", 0, "seed of TestChurn (0: $CHURN_SEED, else the clock)")
	opsFlag  = flag.Int("churn.ops", 0, "operations of TestChurn over all setups (0: $CHURN_OPS, else 9000; 2000 with -short)")
)

// defaultOps is the churn length of `make test`: operations are the NRI
// events sent to the plugin (create, stop, remove, pod removal,
// synchronize) and the runtime changes made while it is away.
const defaultOps = 9000

// setup is one fixture machine with one option set.
type setup struct {
	name, fixture, toml string
	// node is what the node has besides the fixture machine and the
	// cgroupfs driver on cgroup v1: "systemd", the systemd driver on
	// cgroup v2 (containers are scopes in pod slices) with systemd on
	// D-Bus (a fake that records what it is asked, systemd_test.go);
	// "systemd-unreachable", that driver with no bus socket (the plugin
	// falls back to "in-answer"); "devices", PCI devices on both NUMA
	// nodes that containers are given (devices_test.go); "containerd-2.3",
	// a runtime whose NRI takes no unsolicited update (deferral_test.go);
	// "memory", a /sys root with the machine's NUMA memory for the static
	// memory manager (memory_test.go), and a first start that imports the
	// kubelet's cpu_manager_state and memory_manager_state (import_test.go);
	// "kubelet-import", a first start that imports the kubelet's state
	// (import_test.go).
	node string
}

// setups: seven machines, fourteen option sets, covering both CPU policies,
// every topology manager policy but none-with-pod-scope, both scopes, the
// static options that change placement or admission (strict uncore too),
// pod-level resources (pod_level_resource_managers, in both update modes)
// and the systemd cgroup driver (with systemd reachable: "direct" through
// its D-Bus API; and unreachable: the fallback to "in-answer") and device
// hints, the static memory manager, a first start that imports the
// kubelet's state, and a runtime that takes no unsolicited update
// (containerd 2.3: "in-answer" defers to the next answer). Eight run
// "direct" (four of them by not setting it), six "in-answer".
var setups = []setup{
	{"ht-2s-6c_kubelet-import_direct", "ht-2s-6c", `shared_pool_updates = "direct"
cpu_manager_policy = "static"
reserved_cpu_count = 2
`, "kubelet-import"},
	{"epyc-7303-2p_full-pcpus_single-numa_default", "epyc-7303-2p", `cpu_manager_policy = "static"
reserved_cpu_count = 4
topology_manager_policy = "single-numa-node"
[cpu_manager_policy_options]
full-pcpus-only = "true"
`, ""},
	{"ht-2s-4numa-80_distribute-numa_restricted_pod_in-answer", "ht-2s-4numa-80", `shared_pool_updates = "in-answer"
cpu_manager_policy = "static"
reserved_system_cpus = "0,40"
topology_manager_policy = "restricted"
topology_manager_scope = "pod"
[cpu_manager_policy_options]
distribute-cpus-across-numa = "true"
`, ""},
	{"ampere-altra_uncore_strict_best-effort_direct", "ampere-altra", `shared_pool_updates = "direct"
cpu_manager_policy = "static"
reserved_cpu_count = 8
topology_manager_policy = "best-effort"
[cpu_manager_policy_options]
prefer-align-cpus-by-uncorecache = "true"
strict-cpu-reservation = "true"
`, ""},
	{"epyc-7702p-smt_strict-uncore-exclusive_restricted_default", "epyc-7702p-smt", `cpu_manager_policy = "static"
reserved_cpu_count = 2
topology_manager_policy = "restricted"
[cpu_manager_policy_options]
strict-align-cpus-by-uncorecache = "exclusive"
`, ""},
	{"offline-cpu_spread-cores_direct", "offline-cpu", `shared_pool_updates = "direct"
cpu_manager_policy = "static"
reserved_system_cpus = "0"
[cpu_manager_policy_options]
distribute-cpus-across-cores = "true"
`, ""},
	{"ht-1s-4c_none_in-answer", "ht-1s-4c", `shared_pool_updates = "in-answer"
cpu_manager_policy = "none"
`, ""},
	{"ht-2s-6c_pod-level_single-numa_pod_direct", "ht-2s-6c", `shared_pool_updates = "direct"
cpu_manager_policy = "static"
reserved_system_cpus = "0,12"
topology_manager_policy = "single-numa-node"
topology_manager_scope = "pod"
pod_level_resource_managers = true
`, ""},
	{"epyc-7303-2p_pod-level_best-effort_pod_in-answer", "epyc-7303-2p", `shared_pool_updates = "in-answer"
cpu_manager_policy = "static"
reserved_cpu_count = 2
topology_manager_policy = "best-effort"
topology_manager_scope = "pod"
pod_level_resource_managers = true
`, ""},
	{"ht-2s-6c_systemd_pod-level_default", "ht-2s-6c", `cpu_manager_policy = "static"
reserved_cpu_count = 2
topology_manager_policy = "best-effort"
topology_manager_scope = "pod"
pod_level_resource_managers = true
`, "systemd"},
	{"ht-1s-4c_systemd-unreachable_default", "ht-1s-4c", `cpu_manager_policy = "static"
reserved_cpu_count = 1
`, "systemd-unreachable"},
	{"ht-2s-6c_devices_single-numa_in-answer", "ht-2s-6c", `shared_pool_updates = "in-answer"
cpu_manager_policy = "static"
reserved_system_cpus = "0,12"
topology_manager_policy = "single-numa-node"
`, "devices"},
	{"epyc-7303-2p_containerd-2.3_best-effort_in-answer", "epyc-7303-2p", `shared_pool_updates = "in-answer"
cpu_manager_policy = "static"
reserved_cpu_count = 2
topology_manager_policy = "best-effort"
`, "containerd-2.3"},
	{"ht-2s-6c_memory-static_single-numa_direct", "ht-2s-6c", `shared_pool_updates = "direct"
cpu_manager_policy = "static"
reserved_system_cpus = "0,12"
topology_manager_policy = "single-numa-node"
memory_manager_policy = "Static"
[[reserved_memory]]
numa_node = 0
limits = { memory = "1Gi" }
[[reserved_memory]]
numa_node = 1
limits = { memory = "1Gi" }
`, "memory"},
}

func envInt(name string) int64 {
	v, err := strconv.ParseInt(os.Getenv(name), 10, 64)
	if err != nil {
		return 0
	}
	return v
}

// TestChurn runs random operations over every setup and checks the
// invariants after each one. The op count is split evenly over the setups.
func TestChurn(t *testing.T) {
	seed := *seedFlag
	if seed == 0 {
		seed = envInt("CHURN_SEED")
	}
	if seed == 0 {
		seed = time.Now().UnixNano() % 1e9
	}
	total := *opsFlag
	if total == 0 {
		total = int(envInt("CHURN_OPS"))
	}
	if total == 0 {
		total = defaultOps
		if testing.Short() {
			total = 2000
		}
	}
	per := (total + len(setups) - 1) / len(setups)
	t.Logf("CHURN_SEED=%d CHURN_OPS=%d (%d per setup)", seed, total, per)

	var mu sync.Mutex
	sum := stats{ops: map[string]int{}, faults: map[string]int{}}
	for i, s := range setups {
		t.Run(s.name, func(t *testing.T) {
			c := newChurn(t, s, seed+int64(i), total)
			c.run(per)
			mu.Lock()
			sum.add(c.stats)
			mu.Unlock()
			t.Logf("%s: %s", s.name, c.stats)
		})
	}
	t.Logf("total over %d setups: %s", len(setups), sum)
}

type stats struct {
	steps  int
	ops    map[string]int // NRI-level operations by kind
	faults map[string]int // injected faults by kind
}

func (s *stats) add(o stats) {
	s.steps += o.steps
	for k, v := range o.ops {
		s.ops[k] += v
	}
	for k, v := range o.faults {
		s.faults[k] += v
	}
}

func (s stats) String() string {
	f := func(m map[string]int) (string, int) {
		keys := make([]string, 0, len(m))
		n := 0
		for k, v := range m {
			keys = append(keys, k)
			if !notCounted[k] {
				n += v
			}
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = fmt.Sprintf("%s=%d", k, m[k])
		}
		return strings.Join(parts, " "), n
	}
	ops, nOps := f(s.ops)
	faults, nFaults := f(s.faults)
	return fmt.Sprintf("%d steps, %d operations (%s; create-rejected, resize-rejected, resize-up, resize-down, restart, kubelet-retry and settled-late are outcomes, not counted again), %d faults injected (%s)",
		s.steps, nOps, ops, nFaults, faults)
}

// churn is one run: the runtime, the daemon, and the model of what must
// hold.
type churn struct {
	t        *testing.T
	s        setup
	seed     int64
	totalOps int
	rng      *rand.Rand
	topo     *topology.Topology
	cfg      config.Config
	stateDir string
	rt       *nritest.Runtime
	logs     *ring
	logger   *logrus.Logger

	d      *daemon.Daemon
	cancel context.CancelFunc
	done   chan error

	// admitted holds, by container ID, the exclusive CPUs of every running
	// container the plugin admitted: they must never change.
	admitted map[string]cpuset.CPUSet
	// held holds, by pod and name, the exclusive CPUs of containers that
	// exited (told to the plugin or not) while their pod lives: they stay
	// the pod's, nobody else's, until the pod goes, and the next container
	// of that pod and name gets exactly them.
	held map[invariant.Key]cpuset.CPUSet
	// names counts the containers created per pod, for unique names.
	names map[string]int
	res   map[string]framework.Resources // by container ID
	// nameRes is a pod and name's resources as last created or resized:
	// what the kubelet's next restart of that name asks for (an in-place
	// resize changes the pod's spec, not only the running container).
	nameRes map[invariant.Key]framework.Resources
	qos     map[string]framework.QOS // by pod sandbox ID

	history []string
	stats
	reconnects int
	// stepSyncs is the runtime's Synchronize count when the step began
	// (printed on a failure: a reconnect nobody asked for shows there).
	stepSyncs int

	connMu sync.Mutex
	conn   net.Conn // the plugin's connection to the runtime

	// resizes is what opResizeExclusive knows of baselines.
	resizes map[invariant.Key]resizeModel

	// budget is the CPU budget of each pod-level pod (by sandbox ID):
	// its pod-level resources, in whole CPUs.
	budget map[string]int
	// rebuilt are the pod-level pods whose state was rebuilt from the
	// runtime (by sandbox ID): see rebuildPodLevel.
	rebuilt map[string]bool
	// sd is the fake systemd of a setup whose systemd is reachable.
	sd *fakeSystemd
	// devs are the devices of each pod and name given any (devices_test.go).
	devs map[invariant.Key]device
	// opts are the daemon's options beyond the topology and the logger.
	opts []daemon.Option
	// rtName and rtVersion are what the runtime tells the plugin in
	// Configure.
	rtName, rtVersion string
	// owed: an event no answer follows (a removal, a downsize, a repair)
	// has left updates for the next answer (deferral_test.go).
	owed bool
	// memFresh are the pods and names whose next container may take its
	// memory afresh beside the CPUs it keeps (memory_test.go).
	memFresh map[invariant.Key]bool
	// importedMemory is the memory the kubelet's memory_manager_state
	// gave the containers of the first start ("memory" imports it).
	importedMemory map[invariant.Key]kubeletPod
}

// dial is the plugin's dialer: it keeps the connection so that a runtime
// restart can cut it (pkg/adaptation's Stop leaves external plugins'
// connections open; a real runtime restart closes them with the process).
func (c *churn) dial(path string) (net.Conn, error) {
	conn, err := net.Dial("unix", path)
	if err == nil {
		c.connMu.Lock()
		c.conn = conn
		c.connMu.Unlock()
	}
	return conn, err
}

func newChurn(t *testing.T, s setup, seed int64, totalOps int) *churn {
	// Socket paths are limited to 108 bytes; t.TempDir() can be long. The
	// state lives in memory (/dev/shm) when possible: the checkpoint's
	// fsyncs are not what is tested here.
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "churn-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c := &churn{
		t: t, s: s, seed: seed, totalOps: totalOps, rng: rand.New(rand.NewSource(seed)),
		topo: sysfstest.Load(t, s.fixture), stateDir: filepath.Join(dir, "state"),
		logs: newRing(400), admitted: map[string]cpuset.CPUSet{}, held: map[invariant.Key]cpuset.CPUSet{}, names: map[string]int{},
		res: map[string]framework.Resources{}, nameRes: map[invariant.Key]framework.Resources{}, qos: map[string]framework.QOS{},
		stats: stats{ops: map[string]int{}, faults: map[string]int{}}, budget: map[string]int{}, rebuilt: map[string]bool{},
		devs: map[invariant.Key]device{}, memFresh: map[invariant.Key]bool{},
	}
	// The runtime keeps a fake cgroup v1 tree under cgroup_root, which is
	// what the checker reads: under shared_pool_updates = "direct" (the
	// default) the plugin writes shared-pool containers' cgroups there
	// itself; under "in-answer" the runtime writes what the plugin asks.
	// Containers are created, then started, as in both runtimes. On the
	// systemd driver the tree is cgroup v2 (systemd.go).
	cgroupRoot := filepath.Join(dir, "cgroup")
	rtOpts := []nritest.Option{nritest.WithErrorf(t.Errorf), nritest.WithCreatedUntilStarted(), nritest.WithCgroupsRemoved(),
		nritest.WithCgroupRoot(cgroupRoot), nritest.WithUnpinnedCPUs(c.topo.CPUs().String()),
		nritest.WithUnpinnedMems(cpuset.New(c.topo.MemoryNodes()...).String())}
	c.rtName, c.rtVersion = "containerd", "v2.4.2" // nritest's default
	if s.node == "containerd-2.3" {
		c.rtVersion = "v2.3.7"
		rtOpts = append(rtOpts, nritest.WithName(c.rtName), nritest.WithVersion(c.rtVersion))
	}
	if strings.HasPrefix(s.node, "systemd") {
		rtOpts = append(rtOpts, c.systemdNode(cgroupRoot)...)
	} else if err := os.MkdirAll(filepath.Join(cgroupRoot, "cpuset"), 0o755); err != nil {
		t.Fatal(err)
	}
	c.rt = nritest.New(dir, rtOpts...)
	if c.sd != nil {
		c.rt.SetBeforeWrite(c.runtimeWrote)
	}
	if err := c.rt.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.rt.Stop)
	// The reconcile loop runs when the test says (ReconcileNow).
	doc := fmt.Sprintf("state_dir = %q\nsocket_path = %q\ncgroup_root = %q\nreconcile_period = \"0\"\nlog_level = \"info\"\n",
		c.stateDir, c.rt.Socket(), cgroupRoot)
	if !strings.Contains(s.toml, "metrics_address") {
		doc += "metrics_address = \"\"\n"
	}
	switch s.node {
	case "devices":
		doc += c.deviceTree(dir)
	case "memory":
		doc += c.memoryTree(dir)
	}
	doc += s.toml
	c.cfg, err = config.Load([]byte(doc))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	c.logger = logrus.New()
	c.logger.SetOutput(c.logs)
	var imported map[invariant.Key]cpuset.CPUSet
	if s.node == "kubelet-import" || s.node == "memory" {
		imported = c.importNode(dir)
	}
	c.startDaemon()
	t.Cleanup(c.stopDaemon)
	if imported != nil {
		c.checkImported(imported)
	}
	return c
}

// ring keeps the last lines the daemon logged, printed on a failure.
type ring struct {
	mu    sync.Mutex
	lines []string
	next  int
}

func newRing(n int) *ring { return &ring{lines: make([]string, 0, n)} }

func (r *ring) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		if len(r.lines) < cap(r.lines) {
			r.lines = append(r.lines, l)
		} else {
			r.lines[r.next] = l
			r.next = (r.next + 1) % len(r.lines)
		}
	}
	return len(p), nil
}

func (r *ring) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(append(append([]string{}, r.lines[r.next:]...), r.lines[:r.next]...), "\n")
}

func (c *churn) record(format string, args ...any) {
	c.history = append(c.history, fmt.Sprintf("%5d ", c.steps)+fmt.Sprintf(format, args...))
}

// fail stops the test with everything needed to replay it: seed, op count,
// the op list (in a file, the last ones inline) and the daemon's last log
// lines.
func (c *churn) fail(format string, args ...any) {
	c.t.Helper()
	msg := fmt.Sprintf(format, args...)
	file := filepath.Join(os.TempDir(), fmt.Sprintf("churn-%s-seed%d.ops", c.s.name, c.seed))
	_ = os.WriteFile(file, []byte(strings.Join(c.history, "\n")+"\n"), 0o644)
	last := c.history
	if len(last) > 40 {
		last = last[len(last)-40:]
	}
	msg += fmt.Sprintf("\n(plugin Synchronize calls: %d when the step began, %d now; connected: %v)", c.stepSyncs, c.rt.Syncs(), c.d.Connected())
	c.t.Fatalf("step %d of setup %s: %s\n\nreplay: CHURN_SEED=%d CHURN_OPS=%d go test -race -tags testhooks -run 'TestChurn/%s$' ./test/churn\n"+
		"(this setup's seed is %d) — full op list in %s; last ops:\n%s\n\ndaemon log (last lines):\n%s",
		c.steps, c.s.name, msg, c.seed-int64(setupIndex(c.s.name)), c.totalOps, c.s.name, c.seed, file,
		strings.Join(last, "\n"), c.logs)
}

func setupIndex(name string) int {
	for i, s := range setups {
		if s.name == name {
			return i
		}
	}
	return 0
}

// startDaemon starts a daemon (from the checkpoint, if any) and waits until
// it has synchronized and is registered for events.
func (c *churn) startDaemon() {
	c.t.Helper()
	n := c.rt.Syncs() + 1
	d, err := daemon.New(c.cfg, append([]daemon.Option{daemon.WithTopology(c.topo), daemon.WithLogger(c.logger),
		daemon.WithStubOptions(stub.WithDialer(c.dial))}, c.opts...)...)
	if err != nil {
		c.t.Fatalf("daemon.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(ctx) }()
	c.d, c.cancel, c.done = d, cancel, done
	c.waitForPlugin(n)
	c.ops["synchronize"]++
}

func (c *churn) waitForPlugin(n int) {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for c.rt.Syncs() < n {
		select {
		case err := <-c.done:
			c.done <- err
			c.fail("daemon exited before synchronizing: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			c.fail("no Synchronize within 20s")
		}
		time.Sleep(time.Millisecond)
	}
	if err := c.rt.WaitForPlugin(n, time.Second); err != nil {
		c.fail("%v", err)
	}
	// Synchronize answers every container's cpuset: nothing is owed.
	c.answered()
}

// stopDaemon stops the plugin (its Run returns); idempotent.
func (c *churn) stopDaemon() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	c.cancel = nil
	select {
	case err := <-c.done:
		if err != nil {
			c.t.Errorf("daemon.Run: %v", err)
		}
	case <-time.After(10 * time.Second):
		c.t.Error("daemon did not stop within 10s")
	}
}

func (c *churn) static() bool { return c.cfg.CPUManagerPolicy == policy.CPUPolicyStatic }

// exclusiveCPUs is the static policy's rule, worked out independently of
// the daemon: a Guaranteed container with request = limit in whole CPUs
// gets that many exclusive CPUs.
func (c *churn) exclusiveCPUs(q framework.QOS, r framework.Resources) int {
	if !c.static() || q != framework.Guaranteed || r.CPULimitMilli < 1000 || r.CPULimitMilli%1000 != 0 {
		return 0
	}
	return int(r.CPULimitMilli / 1000)
}

// mustFail says whether an exclusive request of n CPUs cannot be admitted
// whatever the placement: more than the free non-reserved CPUs, an odd
// count under full-pcpus-only on SMT, more than one NUMA node holds under
// single-numa-node.
func (c *churn) mustFail(pod, name string, n int) string {
	if n == 0 {
		return ""
	}
	e, st := c.d.EngineState()
	if _, ok := e.Assignment(st, pod, name); ok {
		// A restart after a lost stop event: the existing assignment is
		// returned before the full-pcpus-only checks (kubelet v1.37's
		// order; v1.36 checked first).
		return ""
	}
	// Taken: what other pods hold, and what the pod's live containers
	// hold; the CPUs held for its exited ones may be reused (the
	// kubelet's init-container reuse). Counting too many as free only
	// makes this check weaker.
	live := map[string]bool{}
	for _, ct := range c.live() {
		if c.rt.PodOf(ct).GetUid() == pod {
			live[ct.Name] = true
		}
	}
	taken := cpuset.New()
	for p, byName := range st.Alloc.Assignments {
		for name, cpus := range byName {
			if p != pod || live[name] {
				taken = taken.Union(cpus)
			}
		}
	}
	free := c.topo.CPUs().Difference(e.Reserved()).Difference(taken)
	if n > free.Size() {
		return fmt.Sprintf("%d CPUs > %d free", n, free.Size())
	}
	cfg := e.Config()
	if cfg.CPUOptions["full-pcpus-only"] == "true" && n%c.topo.CPUsPerCore() != 0 {
		return fmt.Sprintf("%d CPUs not whole cores of %d under full-pcpus-only", n, c.topo.CPUsPerCore())
	}
	// Under the pod scope the pod's NUMA affinity is decided with its
	// first container the plugin sees (NRI shows no pod spec); a later
	// one is placed under it, spilling over as the kubelet's allocation
	// does, so only a first one must fail for its size.
	_, podHint := st.PodAffinity[pod]
	if cfg.TopologyPolicy == "single-numa-node" && !(cfg.TopologyScope == "pod" && podHint) {
		most := 0
		for _, node := range c.topo.NUMANodes() {
			most = max(most, c.topo.CPUsInNUMANodes(node).Size())
		}
		if n > most {
			return fmt.Sprintf("%d CPUs > %d in one NUMA node under single-numa-node", n, most)
		}
	}
	return ""
}

var reasons = []string{"SMTAlignmentError", "TopologyAffinityError", "InsufficientCPUs", "UncoreCacheAlignmentError",
	policy.ReasonEmptyPodSharedPool}

// reasonOf checks that a rejection's text (after the ttRPC wrapping)
// starts with a reason word and returns it.
func reasonOf(err error) (string, bool) {
	msg := err.Error()
	if i := strings.LastIndex(msg, "desc = "); i >= 0 {
		msg = msg[i+len("desc = "):]
	}
	for _, r := range reasons {
		if strings.HasPrefix(msg, r) {
			return r, true
		}
	}
	return msg, false
}

// run does random steps until n operations have been sent.
func (c *churn) run(n int) {
	for c.steps = 1; c.opCount() < n; c.steps++ {
		c.stepSyncs = c.rt.Syncs()
		c.step()
	}
	c.steps--
}

// notCounted are outcome labels in stats.ops, not operations of their own.
var notCounted = map[string]bool{"create-rejected": true, "restart": true, "settled-late": true,
	"resize-rejected": true, "kubelet-retry": true, "resize-up": true, "resize-down": true}

func (c *churn) opCount() int {
	n := 0
	for k, v := range c.ops {
		if !notCounted[k] {
			n += v
		}
	}
	return n
}

func (c *churn) step() {
	type choice struct {
		w int
		f func()
	}
	maxReconnects := 1 + c.totalOps/20000 // each costs the plugin's 1 s reconnect backoff
	choices := []choice{
		{300, c.opCreate},
		{260, c.opStart},
		{60, c.opResize},
		{50, c.opResizeExclusive},
		{100, c.opStop},
		{90, c.opRemove},
		{70, c.opRestartContainer},
		{50, c.opRestartExited},
		{c.removePodWeight(), c.opRemovePod},
		{12, c.opDieBeforeStart},
		{12, c.opDrift},
		{10, c.opPluginRestart},
		{7, c.opCorruptRestart},
	}
	if c.quotaOn() {
		choices = append(choices, choice{8, c.opQuotaRewrite}, choice{4, c.opQuotaCameBack})
	}
	scrape := 4
	if c.memoryStatic() {
		scrape = 20 // /state's and /metrics' memory (memory_test.go)
	}
	choices = append(choices, choice{scrape, c.opScrape}, choice{3, c.opConfigure})
	if c.reconnects < maxReconnects {
		choices = append(choices, choice{1, c.opRuntimeReconnect}, choice{1, c.opAnswerLost})
	}
	sum := 0
	for _, ch := range choices {
		sum += ch.w
	}
	x := c.rng.Intn(sum)
	for _, ch := range choices {
		if x < ch.w {
			ch.f()
			return
		}
		x -= ch.w
	}
}

// removePodWeight keeps the node at a realistic size: pod removals grow
// more likely past 30 pods (the kubelet's default limit is 110).
func (c *churn) removePodWeight() int {
	if n := len(c.rt.Pods()); n > 30 {
		return 50 + 20*(n-30)
	}
	return 50
}

func (c *churn) pickQOS() framework.QOS {
	switch x := c.rng.Intn(100); {
	case x < 60:
		return framework.Guaranteed
	case x < 85:
		return framework.Burstable
	default:
		return framework.BestEffort
	}
}

// pickResources draws a container's resources for a pod of class q:
// mostly small whole CPUs, some fractional, some too big to fit.
func (c *churn) pickResources(q framework.QOS) framework.Resources {
	switch q {
	case framework.BestEffort:
		return framework.Resources{}
	case framework.Burstable:
		req := int64(100 + c.rng.Intn(3000))
		if c.rng.Intn(2) == 0 {
			return framework.Resources{CPURequestMilli: req}
		}
		return framework.Resources{CPURequestMilli: req, CPULimitMilli: req + int64(1+c.rng.Intn(4000))}
	}
	var milli int64
	switch x := c.rng.Intn(100); {
	case x < 65:
		milli = int64(1+c.rng.Intn(4)) * 1000
	case x < 75:
		milli = int64(5+c.rng.Intn(12)) * 1000
	case x < 82:
		milli = int64(c.topo.NumCPUs()+c.rng.Intn(4)) * 1000 // never fits
	case x < 92:
		milli = int64(1+c.rng.Intn(3))*1000 + 500
	default:
		milli = int64(100 + c.rng.Intn(900))
	}
	return c.withMemory(framework.GuaranteedMilli(milli))
}

// newPod makes a pod as the kubelet runs it, with a fresh UID: its cgroup
// parent the slice the kubelet's systemd driver names on the systemd
// driver; with pod_level_resource_managers, most Guaranteed pods with
// pod-level resources of 1 to 6 CPUs (podlevel_test.go).
func (c *churn) newPod(q framework.QOS) *api.PodSandbox {
	uid := fmt.Sprintf("pod%d", c.rt.Next())
	p := nritest.NewPod(uid, uid, "churn", q)
	if c.systemdDriver() {
		p.Linux.CgroupParent = podres.PodSlice(q, uid)
	}
	c.maybePodLevel(p, q)
	return p
}

// createIn sends CreateContainer for a new container of r and returns it
// as created, with the plugin's adjustment applied: a snapshot the
// runtime never changes (the plugin's later updates go to its store).
func (c *churn) createIn(p *api.PodSandbox, name string, r framework.Resources) (*api.Container, error) {
	ct := c.rt.NewContainer(p, name, r)
	c.withDevices(p, ct)
	if _, err := c.rt.CreateContainer(context.Background(), p, ct); err != nil {
		return nil, err
	}
	c.answered()
	return ct, nil
}

// pickPod returns an existing pod (with fewer than 4 running containers) or
// a new one (run through the runtime, or stored only when away).
func (c *churn) pickPod(away bool) *api.PodSandbox {
	pods := c.rt.Pods()
	if len(pods) > 0 && c.rng.Intn(100) < 55 {
		p := pods[c.rng.Intn(len(pods))]
		if c.runningIn(p) < 4 {
			return p
		}
	}
	q := c.pickQOS()
	p := c.newPod(q)
	c.qos[p.Id] = q
	c.writePodQuota(p)
	if away {
		c.rt.RunPodAway(p)
	} else if err := c.rt.RunPod(context.Background(), p); err != nil {
		c.fail("RunPodSandbox %s: %v", p.Uid, err)
	}
	c.record("run-pod %s qos=%s away=%v budget=%d", p.Uid, q, away, c.budget[p.Id])
	return p
}

func (c *churn) runningIn(p *api.PodSandbox) int {
	n := 0
	for _, ct := range c.rt.Containers() {
		if ct.PodSandboxId == p.Id && ct.State != api.ContainerState_CONTAINER_STOPPED {
			n++
		}
	}
	return n
}

func (c *churn) nextName(p *api.PodSandbox) string {
	c.names[p.Id]++
	return "c" + strconv.Itoa(c.names[p.Id])
}

// live lists the containers created or running.
func (c *churn) live() []*api.Container {
	var out []*api.Container
	for _, ct := range c.rt.Containers() {
		if ct.State != api.ContainerState_CONTAINER_STOPPED {
			out = append(out, ct)
		}
	}
	return out
}

// inState lists the containers in state st.
func (c *churn) inState(st api.ContainerState) []*api.Container {
	var out []*api.Container
	for _, ct := range c.rt.Containers() {
		if ct.State == st {
			out = append(out, ct)
		}
	}
	return out
}

// create sends one CreateContainer and checks the answer against the
// model: must-fail requests fail with a reason word, exclusive requests get
// exactly their count, the others the shared pool.
func (c *churn) create(p *api.PodSandbox, name string, r framework.Resources) *api.Container {
	q := c.qos[p.Id]
	n := c.exclusiveCPUs(q, r)
	why := ""
	if c.budget[p.Id] == 0 {
		// A pod-level pod's admission (its block, EmptyPodSharedPoolError)
		// is the engine's unit tests'; here it must only be refused with a
		// reason word and hold what it was given.
		why = c.mustFail(p.Uid, name, n)
	}
	memWhy := c.memoryMustFail(p.Uid, name, q, r)
	key := invariant.Key{Pod: p.Uid, Container: name}
	heldCPUs, wasHeld := c.held[key]
	devNode := c.deviceNode(p, name)
	ct, err := c.createIn(p, name, r)
	c.ops["create"]++
	c.record("create %s/%s qos=%s req=%d lim=%d exclusive=%d -> %s", p.Uid, name, q, r.CPURequestMilli, r.CPULimitMilli, n, errOr(ct, err))
	if err != nil {
		reason, ok := reasonOf(err)
		// Under the static memory manager a Guaranteed container, of the
		// shared pool too, may be refused for its memory.
		memRefused := c.memoryRefusal(reason, q)
		if !ok && !memRefused {
			c.fail("CreateContainer %s/%s rejected without a reason word first: %q", p.Uid, name, reason)
		}
		if n == 0 && c.budget[p.Id] == 0 && !memRefused {
			c.fail("CreateContainer %s/%s of the shared pool rejected: %v", p.Uid, name, err)
		}
		if memWhy != "" && !memRefused {
			c.fail("CreateContainer %s/%s refused (%s) with %q, want the memory manager's reason", p.Uid, name, memWhy, reason)
		}
		// The next container of an exited one's pod and name gets the
		// CPUs held for that name: kubelet v1.37 returns them before the
		// full-pcpus-only checks (v1.36, kubelet-rules §6, could refuse
		// it there), so no option refuses it.
		if wasHeld && !(memRefused && c.memFresh[key]) {
			c.fail("CreateContainer %s/%s refused; the pod holds %s for that name: %v", p.Uid, name, heldCPUs, err)
		}
		c.ops["create-rejected"]++
		if why != "" || memWhy != "" {
			c.faults["must-fail-request"]++
		}
		if memRefused && !ok {
			c.faults["memory-manager-refusal"]++
		}
		return nil
	}
	if why != "" || memWhy != "" {
		c.fail("CreateContainer %s/%s admitted although it must fail (%s%s)", p.Uid, name, why, memWhy)
	}
	c.res[ct.Id] = r
	c.nameRes[c.keyOf(ct)] = r
	// The new container takes the place of any other of its pod and name
	// (a restart, or the retry of an attempt that never started).
	delete(c.held, key)
	c.tookOver(p.Uid)
	e, st := c.d.EngineState()
	cpus, ok := e.Assignment(st, p.Uid, name)
	switch {
	case wasHeld && !sameSet(cpus, heldCPUs):
		c.fail("%s/%s restarted on %q; its pod held %s for it", p.Uid, name, cpus, heldCPUs)
	case n == 0 && ok:
		c.fail("%s/%s (not exclusive by the static rule) got exclusive CPUs %s", p.Uid, name, cpus)
	case n > 0 && !ok:
		c.fail("%s/%s asked for %d exclusive CPUs and got none", p.Uid, name, n)
	case n > 0 && cpus.Size() != n:
		c.fail("%s/%s asked for %d exclusive CPUs and got %s", p.Uid, name, n, cpus)
	case c.budget[p.Id] > 0:
		c.checkPodLevel(e, st, p, name, n, cpus)
		if ok {
			c.admitted[ct.Id] = cpus
		}
	case ok:
		c.admitted[ct.Id] = cpus
		if devNode >= 0 && c.cfg.TopologyManagerPolicy == "single-numa-node" && !cpus.IsSubsetOf(c.topo.CPUsInNUMANodes(devNode)) {
			c.fail("%s/%s with a device on NUMA node %d got %s under single-numa-node", p.Uid, name, devNode, cpus)
		}
		// strict-align-cpus-by-uncorecache: up to one cache's CPUs, one
		// cache (every fixture's caches are of one size).
		if e.StrictUncore() != allocator.UncoreStrictOff && n <= c.topo.CPUsPerL3() {
			if l3 := c.topo.L3GroupsOf(cpus); len(l3) != 1 {
				c.fail("%s/%s: %d CPUs under the strict uncore option on caches %v: %s", p.Uid, name, n, l3, cpus)
			}
		}
	}
	return ct
}

func errOr(ct *api.Container, err error) string {
	if err != nil {
		r, _ := reasonOf(err)
		if len(r) > 60 {
			r = r[:60]
		}
		return "rejected: " + r
	}
	return ct.Id + " on " + ct.Linux.Resources.Cpu.Cpus
}

func (c *churn) opCreate() {
	p := c.pickPod(false)
	c.create(p, c.nextName(p), c.pickResources(c.qos[p.Id]))
	c.check(false)
}

func (c *churn) pick(list []*api.Container) *api.Container {
	if len(list) == 0 {
		return nil
	}
	return list[c.rng.Intn(len(list))]
}

func (c *churn) opStop() {
	ct := c.pick(c.inState(api.ContainerState_CONTAINER_RUNNING))
	if ct == nil {
		c.opCreate()
		return
	}
	c.record("stop %s", ct.Id)
	if _, err := c.rt.StopContainer(context.Background(), ct); err != nil {
		c.fail("StopContainer %s: %v", ct.Id, err)
	}
	c.answered()
	c.ops["stop"]++
	c.exited(ct)
	c.check(false)
}

// removedFrom follows a RemoveContainer of a container of p: when the
// runtime has no container of p left, the plugin takes the pod for
// ending (the kubelet keeps the newest exited container of every name
// while a pod lives; after a containerd restart nothing else says a pod
// ended) and releases what it held.
func (c *churn) removedFrom(p *api.PodSandbox) {
	if p == nil {
		return
	}
	for _, ct := range c.rt.Containers() {
		if ct.PodSandboxId == p.Id {
			return
		}
	}
	for k := range c.held {
		if k.Pod == p.Uid {
			delete(c.held, k)
		}
	}
}

// exited moves a container that stopped or went (the plugin told or not)
// while its pod lives from admitted to held.
func (c *churn) exited(ct *api.Container) {
	// A pod-level pod's slice goes back to its pod's pool when the
	// container is removed (docs/pod-level-resources.md): its block, which
	// internal/invariant checks, is what the pod holds.
	if cpus, ok := c.admitted[ct.Id]; ok && c.budget[ct.PodSandboxId] == 0 {
		c.held[c.keyOf(ct)] = cpus
	}
	c.forgetCtr(ct.Id)
}

// opRestartExited creates again, with the same name and resources, a
// container of a live pod that exited: the kubelet's restart after its
// back-off. It gets exactly the CPUs its pod held for it.
func (c *churn) opRestartExited() {
	live := map[invariant.Key]bool{}
	for _, ct := range c.live() {
		live[c.keyOf(ct)] = true
	}
	var cands []*api.Container
	for _, ct := range c.inState(api.ContainerState_CONTAINER_STOPPED) {
		if !live[c.keyOf(ct)] {
			cands = append(cands, ct)
		}
	}
	old := c.pick(cands)
	if old == nil {
		c.opStop()
		return
	}
	c.record("restart exited %s", old.Id)
	r, ok := c.nameRes[c.keyOf(old)]
	if !ok {
		r = c.res[old.Id]
	}
	c.create(c.rt.PodOf(old), old.Name, r)
	c.ops["restart"]++
	c.check(false)
}

func (c *churn) opRemove() {
	all := c.rt.Containers()
	ct := c.pick(all)
	if ct == nil {
		c.opCreate()
		return
	}
	c.record("remove %s (state %s)", ct.Id, ct.State)
	if err := c.rt.RemoveContainer(context.Background(), ct); err != nil {
		c.fail("RemoveContainer %s: %v", ct.Id, err)
	}
	c.unanswered()
	c.ops["remove"]++
	c.exited(ct)
	c.removedFrom(c.rt.PodOf(ct))
	// RemoveContainer cannot answer with updates: the plugin pushes the
	// grown shared pool from its worker.
	c.check(true)
}

// opRestartContainer restarts a running container under the same pod and
// name: as the kubelet does (StopContainer, RemoveContainer, a new
// CreateContainer), or after an exit whose StopContainer never reached the
// plugin. Either way the new container gets the old one's CPUs.
func (c *churn) opRestartContainer() {
	old := c.pick(c.inState(api.ContainerState_CONTAINER_RUNNING))
	if old == nil {
		c.opCreate()
		return
	}
	p := c.rt.PodOf(old)
	r := c.res[old.Id]
	silent := c.rng.Intn(2) == 0
	c.record("restart %s silent=%v", old.Id, silent)
	if silent {
		c.rt.StopContainerAway(old)
	} else if _, err := c.rt.StopContainer(context.Background(), old); err != nil {
		c.fail("StopContainer %s: %v", old.Id, err)
	} else {
		c.answered()
	}
	c.exited(old)
	if silent {
		c.faults["lost-stop-event"]++
	} else {
		c.ops["stop"]++
		c.check(false)
	}
	c.create(p, old.Name, r)
	c.ops["restart"]++
	c.check(false)
	if !silent && c.rng.Intn(2) == 0 {
		// The kubelet's container GC removes the exited one.
		c.record("remove %s (the kubelet's container GC)", old.Id)
		if err := c.rt.RemoveContainer(context.Background(), old); err != nil {
			c.fail("RemoveContainer %s: %v", old.Id, err)
		}
		c.unanswered()
		c.ops["remove"]++
		c.removedFrom(p)
		c.check(true)
	}
}

func (c *churn) opRemovePod() {
	pods := c.rt.Pods()
	if len(pods) == 0 {
		c.opCreate()
		return
	}
	p := pods[c.rng.Intn(len(pods))]
	c.record("remove-pod %s (%d running)", p.Uid, c.runningIn(p))
	c.forgetPod(p)
	if c.rng.Intn(2) == 0 {
		c.stopPod(p)
	}
	c.unanswered()
	if err := c.rt.RemovePod(context.Background(), p); err != nil {
		c.fail("RemovePodSandbox %s: %v", p.Uid, err)
	}
	c.ops["remove-pod"]++
	c.check(true)
}

// stopPod ends p as the kubelet does before removing it: StopContainer
// for each container created or running, then StopPodSandbox, after which
// the pod holds nothing.
func (c *churn) stopPod(p *api.PodSandbox) {
	for _, ct := range c.live() {
		if ct.PodSandboxId == p.Id {
			if _, err := c.rt.StopContainer(context.Background(), ct); err != nil {
				c.fail("StopContainer %s: %v", ct.Id, err)
			}
			c.answered()
			c.ops["stop"]++
		}
	}
	var err error
	c.rt.Op(func(a *adaptation.Adaptation) {
		err = a.StopPodSandbox(context.Background(), &api.StopPodSandboxRequest{Pod: p})
	})
	if err != nil {
		c.fail("StopPodSandbox %s: %v", p.Uid, err)
	}
	c.unanswered()
	c.record("stop-pod %s", p.Uid)
	c.ops["stop-pod"]++
	c.check(true)
	if _, st := c.d.EngineState(); len(st.Alloc.Assignments[p.Uid]) > 0 {
		c.fail("pod %s stopped and still holds %v", p.Uid, st.Alloc.Assignments[p.Uid])
	}
}

func (c *churn) forgetPod(p *api.PodSandbox) {
	for k := range c.held {
		if k.Pod == p.Uid {
			delete(c.held, k)
		}
	}
	for k := range c.memFresh {
		if k.Pod == p.Uid {
			delete(c.memFresh, k)
		}
	}
	for _, ct := range c.rt.Containers() {
		if ct.PodSandboxId == p.Id {
			c.forgetCtr(ct.Id)
		}
	}
}

// forgetCtr drops a container the plugin was told is gone (stopped,
// removed, or with its pod) from the model.
func (c *churn) forgetCtr(id string) {
	delete(c.admitted, id)
}

// awayOps changes the runtime while no plugin is connected: containers are
// created unpinned, containers exit and are removed, pods go away.
func (c *churn) awayOps(creates bool) {
	for i, k := 0, c.rng.Intn(6); i < k; i++ {
		switch x := c.rng.Intn(100); {
		case x < 50 && !creates:
		case x < 50:
			p := c.pickPod(true)
			name := c.nextName(p)
			r := c.pickResources(c.qos[p.Id])
			ct := c.rt.NewContainer(p, name, r)
			started := c.rng.Intn(3) > 0
			if started {
				c.rt.CreateContainerAway(ct)
			} else {
				c.rt.CreateContainerAwayNotStarted(ct)
			}
			c.res[ct.Id] = r
			c.record("away: create %s/%s qos=%s req=%d lim=%d started=%v -> %s", p.Uid, name, c.qos[p.Id], r.CPURequestMilli, r.CPULimitMilli, started, ct.Id)
		case x < 60:
			if ct := c.pick(c.inState(api.ContainerState_CONTAINER_CREATED)); ct != nil {
				c.record("away: start %s", ct.Id)
				c.rt.StartContainerAway(ct)
			}
		case x < 75:
			if ct := c.pick(c.live()); ct != nil {
				c.record("away: exit %s", ct.Id)
				c.rt.StopContainerAway(ct)
				c.exited(ct)
			}
		case x < 90:
			if ct := c.pick(c.rt.Containers()); ct != nil {
				c.record("away: remove %s", ct.Id)
				c.rt.RemoveContainerAway(ct)
				c.exited(ct)
			}
		default:
			if pods := c.rt.Pods(); len(pods) > 0 {
				p := pods[c.rng.Intn(len(pods))]
				c.record("away: remove-pod %s", p.Uid)
				c.forgetPod(p)
				c.rt.RemovePodAway(p)
			}
		}
		c.ops["while-away"]++
	}
}

// afterSync adopts into the model the containers the plugin placed in
// Synchronize (created while it was away) and checks them.
func (c *churn) afterSync() {
	e, st := c.d.EngineState()
	for _, ct := range c.live() {
		if _, ok := c.admitted[ct.Id]; ok {
			continue
		}
		p := c.rt.PodOf(ct)
		cpus, ok := e.Assignment(st, p.Uid, ct.Name)
		n := c.exclusiveCPUs(c.qos[p.Id], c.res[ct.Id])
		switch {
		case ok && n == 0:
			c.fail("%s (not exclusive) got exclusive CPUs %s at Synchronize", ct.Id, cpus)
		case ok && cpus.Size() != n:
			c.fail("%s asked for %d exclusive CPUs and got %s at Synchronize", ct.Id, n, cpus)
		case ok:
			c.admitted[ct.Id] = cpus
		}
	}
}

func (c *churn) opPluginRestart() {
	c.record("plugin killed")
	c.stopDaemon()
	c.faults["plugin-kill"]++
	if c.rng.Intn(3) == 0 {
		// A crash between writing the temporary checkpoint and renaming it.
		name := filepath.Join(c.stateDir, "."+daemon.CheckpointName+".tmp-"+strconv.Itoa(c.rng.Int()))
		_ = os.WriteFile(name, []byte(`{"version":1,"checks`), 0o600)
		c.faults["stale-temp-file"]++
		c.record("stale temp checkpoint %s", filepath.Base(name))
	}
	c.awayOps(true)
	c.record("plugin restarted")
	c.startDaemon()
	c.afterSync()
	c.check(false)
	if m, _ := filepath.Glob(filepath.Join(c.stateDir, ".*.tmp-*")); len(m) > 0 {
		c.fail("stale temporary checkpoint files left after a restart: %v", m)
	}
}

func (c *churn) opCorruptRestart() {
	c.record("plugin killed")
	c.stopDaemon()
	c.faults["plugin-kill"]++
	kind := c.corrupt()
	c.faults["corrupt-checkpoint:"+kind]++
	c.record("checkpoint corrupted: %s", kind)
	noted := c.loseMemory()
	c.awayOps(true)
	// A rebuild from the runtime knows only the live containers: what
	// exited containers held may be lost (and given to others).
	clear(c.held)
	c.rebuildPodLevel()
	c.mayMoveAtRebuild()
	c.record("plugin restarted")
	c.startDaemon()
	c.afterSync()
	c.keptMemory(noted)
	c.check(false)
}

// mayMoveAtRebuild drops from the model the exclusive containers a rebuild
// of the state from the runtime may move: it keeps a running container's
// CPUs only when no other live container runs on any of them, and two
// containers of a pod share CPUs when one reused those held for the other
// before it restarted. afterSync adopts them again on whatever CPUs they
// get.
func (c *churn) mayMoveAtRebuild() {
	applied, err := c.rt.Running()
	if err != nil {
		c.fail("%v", err)
	}
	for _, id := range slices.Sorted(maps.Keys(c.admitted)) {
		cpus := c.admitted[id]
		for _, ct := range c.live() {
			if ct.Id != id && !applied[c.keyOf(ct)].Intersection(cpus).IsEmpty() {
				c.record("%s on %s may move: %s runs on some of them", id, cpus, ct.Id)
				delete(c.admitted, id)
				c.faults["rebuild-beside-shared"]++
				break
			}
		}
	}
}

// corrupt damages the checkpoint in one of several ways and returns which.
func (c *churn) corrupt() string {
	path := filepath.Join(c.stateDir, daemon.CheckpointName)
	raw, err := os.ReadFile(path)
	if err != nil {
		c.fail("read checkpoint: %v", err)
	}
	write := func(b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			c.fail("corrupt checkpoint: %v", err)
		}
	}
	switch k := c.rng.Intn(10); k {
	case 7, 8, 9:
		if kind := c.corruptJournal(k); kind != "" {
			return kind
		}
		write(raw[:c.rng.Intn(len(raw))])
		return "truncated"
	case 0:
		write(raw[:c.rng.Intn(len(raw))])
		return "truncated"
	case 1:
		b := bytes.Clone(raw)
		i := c.rng.Intn(len(b))
		b[i] ^= byte(1 + c.rng.Intn(255))
		write(b)
		return "byte-flipped"
	case 2:
		b := make([]byte, c.rng.Intn(512))
		c.rng.Read(b)
		write(b)
		return "garbage"
	case 3:
		write(nil)
		return "empty"
	case 4:
		write(regexp.MustCompile(`"version": [0-9]+`).ReplaceAll(raw, []byte(`"version": 7`)))
		return "unknown-version"
	case 5:
		// A symbolic link in place of the file: refused, never followed.
		target := path + ".elsewhere"
		if err := os.WriteFile(target, raw, 0o600); err != nil {
			c.fail("%v", err)
		}
		_ = os.Remove(path)
		if err := os.Symlink(target, path); err != nil {
			c.fail("%v", err)
		}
		return "symlink"
	default:
		// A well-formed checkpoint (valid checksum) with entries that must
		// be reconciled, not trusted: reserved, offline and unparsable CPU
		// lists, and a pod that no longer exists.
		var p map[string]any
		f := checkpoint.New(c.stateDir, daemon.CheckpointName)
		if err := f.Load(&p); err != nil {
			c.fail("load checkpoint: %v", err)
		}
		eng, _ := p["engine"].(map[string]any)
		asg, _ := eng["assignments"].(map[string]any)
		if asg == nil {
			asg = map[string]any{}
			eng["assignments"] = asg
		}
		e, _ := c.d.EngineState()
		asg["zz-gone-pod"] = map[string]any{
			"reserved": e.Reserved().String(),
			"offline":  "9000-9001",
			"junk":     "1-x",
		}
		if err := f.Save(p); err != nil {
			c.fail("save checkpoint: %v", err)
		}
		return "bogus-entries"
	}
}

// corruptJournal damages the journal the snapshot names: a torn record
// after the last one (an append cut short: dropped, nothing lost), garbage
// there (ignored), or a damaged record with later ones intact (an answered
// decision lost: the state is rebuilt from the runtime). "" when there is
// no journal or no record to damage.
func (c *churn) corruptJournal(k int) string {
	var p struct {
		Journal *struct {
			ID  string `json:"id"`
			Seq uint64 `json:"seq"`
		} `json:"journal"`
	}
	if err := checkpoint.New(c.stateDir, daemon.CheckpointName).Load(&p); err != nil || p.Journal == nil {
		return ""
	}
	j, recs, _, err := checkpoint.OpenJournal(c.stateDir, daemon.CheckpointName, p.Journal.ID, p.Journal.Seq)
	if err != nil {
		c.fail("open journal: %v", err)
	}
	defer j.Close()
	f, err := os.OpenFile(j.Path(), os.O_RDWR, 0)
	if err != nil {
		c.fail("%v", err)
	}
	defer f.Close()
	at, b, kind := j.Offset(), make([]byte, 20+c.rng.Intn(200)), ""
	switch {
	case k == 7:
		copy(b, "NCJ1")
		binary.LittleEndian.PutUint32(b[4:], uint32(len(b)+c.rng.Intn(500)))
		binary.LittleEndian.PutUint64(b[8:], j.Next())
		c.rng.Read(b[16:])
		kind = "journal-torn-tail"
	case k == 8 || len(recs) < 2:
		c.rng.Read(b)
		b[0] = 'x' // not a record header
		kind = "journal-garbage-tail"
	default:
		// The first record's payload, the next one intact.
		i := c.rng.Intn(len(recs[0].Payload))
		at, b = 512+20+int64(i), []byte{recs[0].Payload[i] ^ 0x55}
		kind = "journal-damaged-record"
	}
	if at+int64(len(b)) > j.Size() {
		return ""
	}
	if _, err := f.WriteAt(b, at); err != nil {
		c.fail("%v", err)
	}
	return kind
}

func (c *churn) opRuntimeReconnect() {
	c.reconnects++
	c.record("runtime restarted")
	n := c.rt.Syncs() + 1
	c.rt.Stop()
	c.connMu.Lock()
	c.conn.Close()
	c.connMu.Unlock()
	c.faults["runtime-restart"]++
	c.awayOps(true)
	if err := c.rt.Start(); err != nil {
		c.fail("restart the runtime: %v", err)
	}
	c.waitForPlugin(n)
	c.ops["synchronize"]++
	c.afterSync()
	c.check(false)
}

// opAnswerLost plays a plugin too slow for the runtime: the plugin decides
// (and checkpoints) a creation, but the runtime gave up waiting, created
// the container unpinned, ignored the updates and closed the connection.
// After the plugin reconnects, Synchronize must put the container on the
// CPUs it was given and every other container back in place.
func (c *churn) opAnswerLost() {
	c.reconnects++
	p := c.pickPod(false)
	name := c.nextName(p)
	r := c.pickResources(c.qos[p.Id])
	n := c.rt.Syncs() + 1
	ct := c.rt.NewContainer(p, name, r)
	err := c.rt.CreateContainerAnswerLost(context.Background(), p, ct)
	c.ops["create"]++
	c.record("create %s/%s req=%d lim=%d, answer lost (runtime timeout) -> %s", p.Uid, name, r.CPURequestMilli, r.CPULimitMilli, errOr(ct, err))
	if err != nil {
		c.ops["create-rejected"]++
		return
	}
	c.res[ct.Id] = r
	e, st := c.d.EngineState()
	decided, exclusive := e.Assignment(st, p.Uid, name)
	c.connMu.Lock()
	c.conn.Close()
	c.connMu.Unlock()
	c.faults["answer-lost"]++
	c.waitForPlugin(n)
	c.ops["synchronize"]++
	c.afterSync()
	if exclusive {
		if got := c.admitted[ct.Id]; !sameSet(got, decided) {
			c.fail("%s was given %s before its answer was lost; after Synchronize it holds %q", ct.Id, decided, got)
		}
	}
	c.check(false)
}

// check verifies the invariants. The plugin pushes the shared pool from
// its worker after events that cannot answer with updates (RemoveContainer,
// RemovePodSandbox), and again when its state changed during a push; such a
// push, computed before a later handler's change, can reach the runtime
// after that handler's own updates and leave shared containers briefly on a
// stale pool until the next push corrects it. So the invariants must hold
// once the worker has settled (every push it was asked for, and every
// re-push, answered by the runtime); with settle (the step itself relies on
// the worker) that is expected, otherwise a step that passes only then is
// counted as "settled-late".
func (c *churn) check(settle bool) {
	c.t.Helper()
	early := error(nil)
	if !settle {
		early = c.verify()
	}
	c.settle()
	if err := c.verify(); err != nil {
		c.fail("%v", err)
	}
	if early != nil {
		c.ops["settled-late"]++
	}
}

// settle waits for the plugin's update worker (see daemon.Settle); the
// bound only keeps a hung worker from hanging the test.
func (c *churn) settle() {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := c.d.Settle(ctx); err != nil {
		c.fail("the plugin's update worker did not settle: %v", err)
	}
}

func (c *churn) verify() error {
	e, st := c.d.EngineState()
	applied, err := c.tracked()
	if err != nil {
		return err
	}
	var probs []string
	probs = append(probs, c.checkDeferred(e, st, applied)...)
	// A pod's containers may overlap: a new one reuses the CPUs held for
	// its exited ones.
	if err := invariant.Check(e, st, applied); err != nil {
		probs = append(probs, err.Error())
	}
	ids := slices.Sorted(maps.Keys(c.admitted))
	byID := map[string]*api.Container{}
	for _, ct := range c.rt.Containers() {
		byID[ct.Id] = ct
	}
	for _, id := range ids {
		want := c.admitted[id]
		ct, ok := byID[id]
		if !ok || ct.State == api.ContainerState_CONTAINER_STOPPED {
			probs = append(probs, fmt.Sprintf("model: admitted container %s is not running", id))
			continue
		}
		k := invariant.Key{Pod: c.rt.PodOf(ct).GetUid(), Container: ct.Name}
		have, _ := e.Assignment(st, k.Pod, k.Container)
		if !sameSet(have, want) || !sameSet(applied[k], want) {
			probs = append(probs, fmt.Sprintf("container %s (%s) lost its CPUs: admitted on %q, assignment now %q, runs on %q", id, k, want, have, applied[k]))
		}
	}
	// A pod's held CPUs are nobody else's: its assignment is unchanged,
	// no other pod's container and no shared-pool container runs on them.
	shared := e.SharedPool(st).CPUSet()
	for _, k := range slices.SortedFunc(maps.Keys(c.held), func(a, b invariant.Key) int { return strings.Compare(a.String(), b.String()) }) {
		want := c.held[k]
		if have, _ := e.Assignment(st, k.Pod, k.Container); !sameSet(have, want) {
			probs = append(probs, fmt.Sprintf("%s exited and its pod lives: held %s, assignment now %q", k, want, have))
		}
		if o := shared.Intersection(want); !o.IsEmpty() {
			probs = append(probs, fmt.Sprintf("CPUs %s held for %s are in the shared pool %s", o, k, shared))
		}
		for other, set := range applied {
			if other.Pod != k.Pod && !set.Intersection(want).IsEmpty() {
				probs = append(probs, fmt.Sprintf("%s of another pod runs on %s, CPUs held for %s (%s)", other, set, k, want))
			}
		}
	}
	// What a pod that is gone held is released.
	pods := map[string]bool{}
	for _, p := range c.rt.Pods() {
		pods[p.Uid] = true
	}
	for pod, byName := range st.Alloc.Assignments {
		for name, cpus := range byName {
			if !pods[pod] {
				probs = append(probs, fmt.Sprintf("CPUs %s leaked: assigned to %s/%s, whose pod is gone", cpus, pod, name))
			}
		}
	}
	probs = append(probs, c.checkSystemd(applied)...)
	probs = append(probs, c.checkMems()...)
	if len(probs) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(probs, "\n"))
}

// sameSet is CPUSet.Equals without its reflect.DeepEqual (checked for
// every admitted container after every step).
func sameSet(a, b cpuset.CPUSet) bool { return a.Size() == b.Size() && a.IsSubsetOf(b) }
