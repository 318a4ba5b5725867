//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// Fixture machines over the real NRI protocol: the daemon runs in this
// process (internal/daemon), reads a fixture sysfs tree written by
// pkg/sysfs/sysfstest, and talks ttRPC to NRI's own runtime side
// (internal/nritest), so multi-NUMA and multi-L3 placements are exercised
// end to end on any machine, without root. Expected CPU sets are worked out by hand
// from the kubelet's rules (kubelet-rules.md); the fixture numbering is the
// one documented in pkg/sysfs/sysfstest/fixtures.go.

// FixtureDaemon is an in-process nri-cpualign on a fixture machine.
type FixtureDaemon struct {
	RT  *nritest.Runtime
	All cpuset.CPUSet // every CPU of the fixture
}

// StartFixtureDaemon writes fixture name, starts the NRI runtime side and the
// daemon with the given TOML (state, sysfs root and socket are filled in)
// and waits until the daemon has synchronized. Both stop when the current
// node's scope ends.
func StartFixtureDaemon(ctx context.Context, name, toml string) *FixtureDaemon {
	GinkgoHelper()
	if os.Getenv("E2E_FIXTURES") == "0" {
		// scripts/e2e.sh runs them in its first pass only.
		Skip("the fixture machines run in-process over NRI's own runtime side, whatever the runtime: they ran in this make e2e's containerd pass")
	}
	dir := GinkgoT().TempDir()
	sys := filepath.Join(dir, "sys")
	Expect(sysfstest.WriteNamed(sys, name)).To(Succeed())
	rt := nritest.New(dir, nritest.WithErrorf(GinkgoT().Errorf))
	Expect(rt.Start()).To(Succeed())
	DeferCleanup(rt.Stop)
	// The fixed keys go first: the caller's TOML may end inside a table.
	// These specs read the runtime's view, which in-answer keeps equal to
	// the cgroups (this runtime side has none for direct to write).
	cfg, err := config.Load([]byte(`state_dir = "` + filepath.Join(dir, "state") + `"
sysfs_root = "` + sys + `"
socket_path = "` + rt.Socket() + `"
metrics_address = ""
reconcile_period = "0s"
shared_pool_updates = "in-answer"
` + toml))
	Expect(err).NotTo(HaveOccurred())
	log := logrus.New()
	log.SetOutput(GinkgoWriter)
	d, err := daemon.New(cfg, daemon.WithLogger(log))
	Expect(err).NotTo(HaveOccurred())
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Run(runCtx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done).WithTimeout(10 * time.Second).Should(Receive())
	})
	Expect(rt.WaitForPlugin(1, 20*time.Second)).To(Succeed())
	host, err := framework.ReadHost(sys)
	Expect(err).NotTo(HaveOccurred())
	return &FixtureDaemon{RT: rt, All: host.CPUs}
}

// Placement is the plugin's answer to one CreateContainer.
type Placement struct {
	Pod       *api.PodSandbox
	Container *api.Container
	CPUs      cpuset.CPUSet     // the adjustment's cpuset.cpus
	Mems      string            // the adjustment's cpuset.mems
	Updates   map[string]string // other containers' new cpuset.cpus, by container name
}

// Place runs a one-container pod with the kubelet's values for r and sends
// CreateContainer (then StartContainer, when it is accepted), as containerd
// would, and returns the plugin's placement.
func (f *FixtureDaemon) Place(ctx context.Context, name string, r framework.Resources) (*api.PodSandbox, Placement, error) {
	GinkgoHelper()
	uid := fmt.Sprintf("uid-%s-%d", name, f.RT.Next())
	pod := nritest.NewPod(uid, name, "e2e", framework.PodQOS(r))
	pod.Linux.Resources = nritest.PodResources(r)
	Expect(f.RT.RunPod(ctx, pod)).To(Succeed())
	c := f.RT.NewContainer(pod, name, r)
	resp, err := f.RT.CreateContainer(ctx, pod, c)
	if err != nil {
		return pod, Placement{}, err
	}
	cpu := resp.GetAdjust().GetLinux().GetResources().GetCpu()
	p := Placement{Pod: pod, Container: c, Mems: cpu.GetMems(), Updates: f.RT.UpdatesByName(resp.GetUpdate())}
	p.CPUs, err = cpuset.Parse(cpu.GetCpus())
	Expect(err).NotTo(HaveOccurred(), "adjusted cpuset %q", cpu.GetCpus())
	Expect(f.RT.StartContainer(ctx, c)).To(Succeed())
	return pod, p, nil
}

// EndPod ends the placement's pod as the kubelet does: StopContainer and
// RemoveContainer (its CPUs stay with the pod: no updates), then
// RemovePodSandbox, which frees them; the plugin pushes the grown pool
// to the shared containers from its worker.
func (f *FixtureDaemon) EndPod(ctx context.Context, p Placement) {
	GinkgoHelper()
	updates, err := f.RT.StopContainer(ctx, p.Container)
	Expect(err).NotTo(HaveOccurred())
	Expect(updates).To(BeEmpty(), "StopContainer of a container whose pod lives changes no pool")
	Expect(f.RT.RemoveContainer(ctx, p.Container)).To(Succeed())
	Expect(f.RT.RemovePod(ctx, p.Pod)).To(Succeed())
}

// CPUsOf is the cpuset the runtime currently has for the container named
// name (after every adjustment and update).
func (f *FixtureDaemon) CPUsOf(name string) string {
	c, ok := f.RT.ContainerNamed(name)
	if !ok {
		return ""
	}
	cpus, _, _ := f.RT.CPUs(c.Id)
	return cpus
}

// ExpectPlaced places a Guaranteed container of n CPUs and checks its CPUs
// and memory nodes.
func (f *FixtureDaemon) ExpectPlaced(ctx context.Context, name string, n int, cpus, mems string) (*api.PodSandbox, Placement) {
	GinkgoHelper()
	pod, p, err := f.Place(ctx, name, framework.GuaranteedCPUs(n))
	Expect(err).NotTo(HaveOccurred())
	Expect(p.CPUs).To(EqualCPUs(mustParse(cpus)), "container %s (%d CPUs)", name, n)
	Expect(p.Mems).To(Equal(mems), "cpuset.mems of container %s", name)
	return pod, p
}

// ExpectShared checks the runtime's cpuset of a shared container: every CPU
// but the exclusive ones.
func (f *FixtureDaemon) ExpectShared(name string, exclusive ...Placement) {
	GinkgoHelper()
	want := f.All
	for _, p := range exclusive {
		want = want.Difference(p.CPUs)
	}
	Eventually(func() cpuset.CPUSet { return mustParse(f.CPUsOf(name)) }).
		WithTimeout(5*time.Second).Should(EqualCPUs(want), "shared container %s", name)
}

func mustParse(s string) cpuset.CPUSet {
	GinkgoHelper()
	c, err := cpuset.Parse(s)
	Expect(err).NotTo(HaveOccurred(), "cpuset %q", s)
	return c
}

// burstable is a shared container's resources: 500m request, 1 CPU limit.
var burstable = framework.Resources{CPURequestMilli: 500, CPULimitMilli: 1000, MemLimit: 64 << 20}

var _ = Describe("2P EPYC 9654 NPS2 (epyc-9654-2p-nps2), single-numa-node, uncore alignment", Ordered, func() {
	// 192 CPUs, no SMT; NUMA n = CPUs 48n..48n+47 (sockets: NUMA 0-1, 2-3);
	// L3 g = CPUs 8g..8g+7 (CPUsPerUncore = 192/24 = 8). CPUs 0-7 (= L3 0)
	// reserved. Sockets (2) < NUMA nodes (4): whole sockets, then whole NUMA
	// nodes, then (the option) whole L3s in ascending free-CPU, then id order.
	var (
		f       *FixtureDaemon
		a, b, c Placement
	)
	BeforeAll(func(ctx SpecContext) {
		f = StartFixtureDaemon(ctx, "epyc-9654-2p-nps2", `
cpu_manager_policy = "static"
reserved_system_cpus = "0-7"
topology_manager_policy = "single-numa-node"
[cpu_manager_policy_options]
prefer-align-cpus-by-uncorecache = "true"
`)
		_, web, err := f.Place(ctx, "web", burstable)
		Expect(err).NotTo(HaveOccurred())
		Expect(web.CPUs).To(EqualCPUs(f.All), "nothing exclusive yet: the shared pool is every CPU, reserved ones included")
		Expect(web.Mems).To(Equal("0-3"))
	})

	It("packs 8 CPUs into the first free L3 of NUMA 0", func(ctx SpecContext) {
		// Single-node hints {0} (40 free) .. {3} are preferred; the smallest
		// mask {0} wins. Inside NUMA 0 the only free whole L3s are 1-5; L3 1.
		_, a = f.ExpectPlaced(ctx, "a", 8, "8-15", "0-3")
		f.ExpectShared("web", a)
	})

	It("takes the next two whole L3s for 16 CPUs", func(ctx SpecContext) {
		// {0} still has 32 free: L3 2 (16-23) and L3 3 (24-31).
		_, b = f.ExpectPlaced(ctx, "b", 16, "16-31", "0-3")
		f.ExpectShared("web", a, b)
	})

	It("moves 40 CPUs to NUMA 1 when NUMA 0 cannot hold them", func(ctx SpecContext) {
		// {0} has 16 free < 40, so {1} is the narrowest preferred hint. NUMA 1
		// (48) is more than needed; its L3s 6-10 (48-87) are taken whole.
		_, c = f.ExpectPlaced(ctx, "c", 40, "48-87", "0-3")
		f.ExpectShared("web", a, b, c)
	})

	It("refuses 60 CPUs, which no single NUMA node has, with TopologyAffinityError", func(ctx SpecContext) {
		// Free per node: 16, 8, 48, 48; single-numa-node admits only a
		// preferred single-node hint.
		_, _, err := f.Place(ctx, "d", framework.GuaranteedCPUs(60))
		Expect(err).To(MatchError(ContainSubstring("TopologyAffinityError")))
		f.ExpectShared("web", a, b, c)
	})

	It("gives the CPUs of a removed pod back to the shared pool", func(ctx SpecContext) {
		f.EndPod(ctx, b)
		f.ExpectShared("web", a, c)
	})
})

var _ = Describe("2P Xeon 8490H SNC4 (xeon-8490h-2p-snc), restricted, full-pcpus-only", Ordered, func() {
	// 240 CPUs, core k = {k, k+120}; 8 NUMA nodes of 15 cores: NUMA 0 =
	// 0-14,120-134, NUMA 1 = 15-29,135-149, NUMA 2 = 30-44,150-164, NUMA 3 =
	// 45-59,165-179 (socket 0), NUMA 4-7 on socket 1. One L3 per socket.
	// Core 0 (CPUs 0,120) reserved.
	var (
		f    *FixtureDaemon
		a, b Placement
	)
	BeforeAll(func(ctx SpecContext) {
		f = StartFixtureDaemon(ctx, "xeon-8490h-2p-snc", `
cpu_manager_policy = "static"
reserved_system_cpus = "0,120"
topology_manager_policy = "restricted"
[cpu_manager_policy_options]
full-pcpus-only = "true"
`)
		_, web, err := f.Place(ctx, "web", burstable)
		Expect(err).NotTo(HaveOccurred())
		Expect(web.CPUs).To(EqualCPUs(f.All))
	})

	It("gives 4 CPUs as two whole cores of NUMA 0", func(ctx SpecContext) {
		// Hint {0} (28 free) is the smallest preferred one; whole free cores
		// in id order: core 1 {1,121}, core 2 {2,122}.
		_, a = f.ExpectPlaced(ctx, "a", 4, "1-2,121-122", "0-7")
		f.ExpectShared("web", a)
	})

	It("takes a whole NUMA node for 30 CPUs", func(ctx SpecContext) {
		// NUMA 0 has 24 free < 30; {1} is entirely free and exactly 30.
		_, b = f.ExpectPlaced(ctx, "b", 30, "15-29,135-149", "0-7")
		f.ExpectShared("web", a, b)
	})

	It("refuses an odd request with SMTAlignmentError", func(ctx SpecContext) {
		_, _, err := f.Place(ctx, "odd", framework.GuaranteedCPUs(3))
		Expect(err).To(MatchError(ContainSubstring("SMTAlignmentError")))
	})

	It("spreads 62 CPUs over the narrowest preferred set of three NUMA nodes", func(ctx SpecContext) {
		// ceil(62/30) = 3 nodes are preferred. Free: NUMA 0 24, NUMA 1 0,
		// others 30. Size-3 masks by bitmask: {0,1,2} 54, {0,1,3} 54 (too
		// few), {0,2,3} 84: the winner. Whole free NUMA nodes first (best
		// fit: 2 then 3, 60 CPUs), then a whole core for the last 2: core 3
		// {3,123}, the lowest free core of NUMA 0.
		_, big := f.ExpectPlaced(ctx, "big", 62, "3,30-59,123,150-179", "0-7")
		f.ExpectShared("web", a, b, big)
	})

	It("returns a removed pod's cores to the shared pool", func(ctx SpecContext) {
		f.EndPod(ctx, a)
		Expect(mustParse(f.CPUsOf("web")).IsSubsetOf(f.All)).To(BeTrue())
		Eventually(func() bool { return a.CPUs.IsSubsetOf(mustParse(f.CPUsOf("web"))) }).
			WithTimeout(5 * time.Second).Should(BeTrue())
	})
})

var _ = Describe("EPYC 7702P SMT (epyc-7702p-smt), uncore alignment", Ordered, func() {
	// 128 CPUs, core k = {k, k+64}; L3 g = cores 4g..4g+3 = CPUs
	// 4g..4g+3,64+4g..64+4g+3 (CPUsPerUncore 8, CPUsPerCore 2). Core 0
	// (CPUs 0,64) reserved, so L3 0 has 6 free CPUs. One NUMA node.
	var f *FixtureDaemon
	var placed []Placement
	BeforeAll(func(ctx SpecContext) {
		f = StartFixtureDaemon(ctx, "epyc-7702p-smt", `
cpu_manager_policy = "static"
reserved_system_cpus = "0,64"
topology_manager_policy = "none"
[cpu_manager_policy_options]
prefer-align-cpus-by-uncorecache = "true"
`)
		_, web, err := f.Place(ctx, "web", burstable)
		Expect(err).NotTo(HaveOccurred())
		Expect(web.CPUs).To(EqualCPUs(f.All))
	})

	DescribeTable("places each request by the uncore rules, in order",
		func(ctx SpecContext, name string, n int, want string) {
			_, p := f.ExpectPlaced(ctx, name, n, want, "0")
			placed = append(placed, p)
			f.ExpectShared("web", placed...)
		},
		// need 8 >= 8: whole free L3s; L3 0 is not whole (6 free), L3 1 is.
		Entry("8 CPUs: the first whole free L3", "a", 8, "4-7,68-71"),
		// need 6 < 8: partial L3, caches in ascending free order; L3 0 has
		// exactly 6 free in its 3 lowest cores with free CPUs (1,2,3).
		Entry("6 CPUs: the rest of the reserved CPU's L3", "b", 6, "1-3,65-67"),
		// 2 cores of the first L3 with free CPUs (L3 2): cores 8, 9.
		Entry("4 CPUs: two cores of the next L3", "c", 4, "8-9,72-73"),
		// odd need: cores 10, 11 of L3 2 (now 4 free, first in ascending
		// order) minus the highest CPU 75.
		Entry("3 CPUs: the remaining cores of L3 2 minus its highest CPU", "d", 3, "10-11,74"),
		// need 16: two whole free L3s, 3 and 4 (L3 2 keeps CPU 75 free).
		Entry("16 CPUs: two whole L3s", "e", 16, "12-19,76-83"),
	)
})
