//go:build e2e

package cluster

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

const (
	// nrtNS holds this container's pods (labelled like testNS).
	nrtNS = "cpualign-e2e-nrt"
	// topoScheduler is the second scheduler's profile, which pods name.
	topoScheduler = "topo-aware-scheduler"
	// nrtSchedulerPort is its health/metrics port (not the cluster
	// scheduler's).
	nrtSchedulerPort = "10359"
)

// Issue 27: the plugin publishes the node's NodeResourceTopology and the
// real consumer, kube-scheduler with NodeResourceTopologyMatch (from
// ../shared/nrt), schedules by it. This machine's two CPUs are split over
// two NUMA nodes by a fake sysfs tree (sysfs_root), one CPU each; the
// plugin runs on the host (as in the resize specs) with nothing reserved
// and topology_manager_policy = single-numa-node, writing through a
// kubeconfig that carries deploy/'s service account's token, so deploy/'s
// RBAC is what lets it write.
var _ = Describe("NodeResourceTopology export read by the topology-aware scheduler, the plugin on the host with two fake NUMA nodes of one CPU", Ordered, Serial, func() {
	var (
		logPath   string
		cpuOfZone map[string]int // zone name -> its one CPU
	)

	BeforeAll(func(ctx SpecContext) {
		requireCluster()
		if os.Getenv("E2E_NRT_SCHEDULER") == "" {
			Skip(os.Getenv("NRT_MISSING"))
		}
		if !HostCPUs.Equals(cpuset.New(0, 1)) {
			Skip(fmt.Sprintf("needs CPUs 0-1 exactly (the fake topology puts one on each NUMA node); this machine has %s", HostCPUs))
		}
		waitNodeReady(ctx)
		waitNodeEmpty(ctx)

		// deploy/'s namespace, CRD and RBAC, as an operator applies them.
		for _, f := range []string{"namespace.yaml", "noderesourcetopology-crd.yaml", "rbac.yaml"} {
			mustKubectl(ctx, "apply", "-f", filepath.Join(repoRoot, "deploy", f))
		}
		DeferCleanup(func(ctx SpecContext) {
			for _, args := range [][]string{
				{"delete", "-f", filepath.Join(repoRoot, "deploy/rbac.yaml"), "--wait=true", "--ignore-not-found"},
				{"delete", "-f", filepath.Join(repoRoot, "deploy/noderesourcetopology-crd.yaml"), "--wait=true", "--ignore-not-found"},
				{"delete", "namespace", pluginNS, "--wait=true", "--timeout=90s", "--ignore-not-found"},
			} {
				_, err := kubectl(ctx, args...)
				Expect(err).NotTo(HaveOccurred())
			}
		}, NodeTimeout(3*time.Minute))
		mustKubectl(ctx, "wait", "--for=condition=established", "--timeout=60s", "crd/noderesourcetopologies.topology.node.k8s.io")
		sa := "system:serviceaccount:" + pluginNS + ":nri-cpualign"
		// The API server's RBAC authorizer reads roles and bindings from
		// its informer cache, which sees the binding just applied a moment
		// later (kubectl auth can-i exits 1 on "no").
		Eventually(func() (string, error) {
			out, err := kubectl(ctx, "auth", "can-i", "--as", sa, "patch", "noderesourcetopologies.topology.node.k8s.io")
			return strings.TrimSpace(out), err
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(Equal("yes"),
			"the API server's authorizer does not let %s patch NodeResourceTopology objects within 30 s (deploy/rbac.yaml)", sa)
		canRead, _ := kubectl(ctx, "auth", "can-i", "--as", sa, "get", "pods")
		Expect(strings.TrimSpace(canRead)).To(Equal("no"), "the plugin's account may read pods")

		dir := filepath.Join(Env.Dir, "nrt-plugin")

		// The fake machine: 2 sockets of one single-thread core, a NUMA
		// node each: CPU 0 on node 0, CPU 1 on node 1, distance 21. The
		// memory stays where the real machine has it, on node 0 only
		// (memory_manager_policy None gives containers every memory
		// node as cpuset.mems, which the kernel must accept).
		sysRoot := filepath.Join(dir, "sys")
		Expect(sysfstest.Write(sysRoot, sysfstest.Spec{Description: "this machine's 2 CPUs on 2 NUMA nodes",
			Sockets: 2, CoresPerSocket: 1, ThreadsPerCore: 1, MemoryMiBPerNode: 4096})).To(Succeed())
		nodeDir := filepath.Join(sysRoot, "devices/system/node")
		Expect(os.WriteFile(filepath.Join(nodeDir, "node1/meminfo"), []byte("Node 1 MemTotal:       0 kB\nNode 1 MemFree:        0 kB\n"), 0o644)).To(Succeed())
		Expect(os.WriteFile(filepath.Join(nodeDir, "has_memory"), []byte("0\n"), 0o644)).To(Succeed())
		cpuOfZone = map[string]int{"node-0": 0, "node-1": 1}

		// A kubeconfig of the plugin's service account.
		var admin struct {
			Clusters []struct {
				Cluster map[string]any `json:"cluster"`
			} `json:"clusters"`
		}
		Expect(json.Unmarshal([]byte(mustKubectl(ctx, "config", "view", "--raw", "--minify", "--flatten", "-o", "json")), &admin)).To(Succeed())
		Expect(admin.Clusters).To(HaveLen(1))
		token := strings.TrimSpace(mustKubectl(ctx, "-n", pluginNS, "create", "token", "nri-cpualign", "--duration=1h"))
		kc := filepath.Join(dir, "kubeconfig")
		Expect(os.WriteFile(kc, []byte(fmt.Sprintf(`apiVersion: v1
kind: Config
current-context: plugin
contexts: [{name: plugin, context: {cluster: c, user: plugin}}]
clusters: [{name: c, cluster: {server: %q, certificate-authority-data: %q}}]
users: [{name: plugin, user: {token: %q}}]
`, admin.Clusters[0].Cluster["server"], admin.Clusters[0].Cluster["certificate-authority-data"], token)), 0o600)).To(Succeed())

		var cfg config.Config
		logPath, cfg = startHostPlugin(ctx, dir, map[string]string{
			"reserved_cpu_count":      "0",
			"topology_manager_policy": `"single-numa-node"`,
			"sysfs_root":              fmt.Sprintf("%q", sysRoot),
			"node_resource_topology":  `"on"`,
			"kubeconfig":              fmt.Sprintf("%q", kc),
			"node_name":               fmt.Sprintf("%q", Env.Node),
		}, func(g Gomega, st observe.StateView) {
			g.Expect(st.Topology).To(Equal("single-numa-node"))
		})
		Expect(cfg.NodeResourceTopology).To(Equal(config.NRTOn))
		// The topology-aware scheduler lists the objects when it starts and
		// watches them afterwards: started once the plugin has published
		// the node's object, its first view already has both zones.
		Eventually(func(g Gomega) {
			var o nrt.Object
			g.Expect(getJSON(ctx, &o, "get", "noderesourcetopologies.topology.node.k8s.io", Env.Node)).To(Succeed())
			g.Expect(o.Zones).To(HaveLen(2))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(),
			func() string {
				return "the plugin did not publish NodeResourceTopology " + Env.Node + " with two zones within 30 s; its log:\n" + logSince(logPath, 0)
			})

		// The consumer, beside the cluster's own scheduler.
		schedCfg := filepath.Join(dir, "scheduler.yaml")
		Expect(os.WriteFile(schedCfg, []byte(fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: false
clientConnection:
  kubeconfig: %q
profiles:
  - schedulerName: %s
    plugins:
      multiPoint:
        enabled:
          - name: NodeResourceTopologyMatch
      reserve:
        disabled:
          - name: NodeResourceTopologyMatch
    pluginConfig:
      - name: NodeResourceTopologyMatch
        args:
          scoringStrategy:
            type: LeastAllocated
          cacheResyncPeriodSeconds: 0
`, Env.Kubeconfig, topoScheduler)), 0o644)).To(Succeed())
		schedLog, err := os.Create(filepath.Join(dir, "kube-scheduler-nrt.log"))
		Expect(err).NotTo(HaveOccurred())
		sched := exec.Command(os.Getenv("E2E_NRT_SCHEDULER"), "--config", schedCfg,
			"--authentication-kubeconfig", Env.Kubeconfig, "--authorization-kubeconfig", Env.Kubeconfig,
			"--bind-address", "127.0.0.1", "--secure-port", nrtSchedulerPort, "-v", "2")
		sched.Stdout, sched.Stderr = schedLog, schedLog
		Expect(sched.Start()).To(Succeed())
		DeferCleanup(func() {
			_ = sched.Process.Kill()
			_ = sched.Wait()
			schedLog.Close()
		})

		// Ready: serving, its informers (the NodeResourceTopology objects'
		// too) synced. /readyz is one of the paths it serves without
		// authorization; its certificate is its own, self-signed.
		insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		Eventually(func(g Gomega) {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, "https://127.0.0.1:"+nrtSchedulerPort+"/readyz", nil)
			g.Expect(err).NotTo(HaveOccurred())
			resp, err := insecure.Do(req)
			g.Expect(err).NotTo(HaveOccurred())
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			g.Expect(resp.StatusCode).To(Equal(http.StatusOK), "/readyz: %s", b)
		}).WithContext(ctx).WithTimeout(60*time.Second).WithPolling(250*time.Millisecond).Should(Succeed(),
			func() string {
				b, _ := os.ReadFile(schedLog.Name())
				return "the topology-aware scheduler is not ready (https://127.0.0.1:" + nrtSchedulerPort + "/readyz) within 60 s; its log:\n" + string(b)
			})

		createNamespace(ctx, nrtNS)
	}, NodeTimeout(5*time.Minute))

	// object is the node's NodeResourceTopology as the API server has it.
	object := func(g Gomega, ctx context.Context) nrt.Object {
		var o nrt.Object
		g.Expect(getJSON(ctx, &o, "get", "noderesourcetopologies.topology.node.k8s.io", Env.Node)).To(Succeed())
		return o
	}
	// available is the zones' available CPUs, by zone name.
	available := func(o nrt.Object) map[string]int64 {
		out := map[string]int64{}
		for _, z := range o.Zones {
			for _, r := range z.Resources {
				if r.Name == "cpu" {
					out[z.Name] = r.Available
				}
			}
		}
		return out
	}
	topoPod := func(name, cpu string) *corev1.Pod {
		spec := podSpec(resources(cpu, cpu, "32Mi"))
		spec.SchedulerName = topoScheduler
		return &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: nrtNS, Labels: map[string]string{"app": name}}, Spec: spec}
	}

	It("publishes one zone per NUMA node with its CPU, the NUMA distances and the topology manager policy, through deploy/'s RBAC", func(ctx SpecContext) {
		Eventually(func(g Gomega) {
			o := object(g, ctx)
			g.Expect(o.Zones).To(HaveLen(2))
			for i, z := range o.Zones {
				name := fmt.Sprintf("node-%d", i)
				other := fmt.Sprintf("node-%d", 1-i)
				g.Expect(z.Name).To(Equal(name))
				g.Expect(z.Type).To(Equal("Node"))
				cpu := nrt.Resource{Name: "cpu", Capacity: 1, Allocatable: 1, Available: 1}
				if i == 0 {
					g.Expect(z.Resources).To(ConsistOf(cpu, nrt.Resource{Name: "memory", Capacity: 4096 << 20, Allocatable: 4096 << 20, Available: 4096 << 20}))
				} else {
					g.Expect(z.Resources).To(ConsistOf(cpu), "node 1 has no memory")
				}
				g.Expect(z.Costs).To(ConsistOf(nrt.Cost{Name: name, Value: 10}, nrt.Cost{Name: other, Value: 21}))
			}
			g.Expect(o.Attributes).To(ContainElements(nrt.Attribute{Name: "topologyManagerPolicy", Value: "single-numa-node"},
				nrt.Attribute{Name: "topologyManagerScope", Value: "container"}))
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(500*time.Millisecond).Should(Succeed(), "plugin log:\n%s", logSince(logPath, 0))
		Eventually(func(g Gomega) {
			g.Expect(hostMetric(g, ctx, "nri_cpualign_nrt_updates_total")).To(BeNumerically(">=", 1))
			g.Expect(hostMetric(g, ctx, "nri_cpualign_nrt_last_success_timestamp_seconds")).To(BeNumerically(">", 0))
		}).WithContext(ctx).WithTimeout(10 * time.Second).Should(Succeed())
	}, SpecTimeout(time.Minute))

	It("keeps a Guaranteed 1500m pod that fits the node but no single zone Pending with the consumer's reason", func(ctx SpecContext) {
		apply(ctx, topoPod("unaligned", "1500m"))
		Eventually(func(g Gomega) {
			var p corev1.Pod
			g.Expect(getJSON(ctx, &p, "-n", nrtNS, "get", "pod", "unaligned")).To(Succeed())
			g.Expect(p.Spec.NodeName).To(BeEmpty(), "bound to %s", p.Spec.NodeName)
			var cond *corev1.PodCondition
			for i, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled {
					cond = &p.Status.Conditions[i]
				}
			}
			g.Expect(cond).NotTo(BeNil(), "no PodScheduled condition yet")
			g.Expect(cond.Status).To(Equal(corev1.ConditionFalse))
			g.Expect(cond.Reason).To(Equal(corev1.PodReasonUnschedulable))
			g.Expect(cond.Message).To(ContainSubstring("cannot align container"))
		}).WithContext(ctx).WithTimeout(60 * time.Second).WithPolling(time.Second).Should(Succeed())
		mustKubectl(ctx, "-n", nrtNS, "delete", "pod", "unaligned", "--wait=true")
	}, SpecTimeout(2*time.Minute))

	It("binds a Guaranteed 1-CPU pod that fits a zone; the plugin pins it there and the object follows its placement and its removal", func(ctx SpecContext) {
		apply(ctx, topoPod("aligned", "1"))
		var pod corev1.Pod
		Eventually(func(g Gomega) {
			pod = runningPod(g, ctx, nrtNS, "app=aligned")
		}).WithContext(ctx).WithTimeout(90 * time.Second).Should(Succeed())
		Expect(pod.Spec.NodeName).To(Equal(Env.Node))
		cpus := cpusOf(Default, ctx, pod)
		Expect(cpus.Size()).To(Equal(1))
		zone := ""
		for z, c := range cpuOfZone {
			if cpus.Contains(c) {
				zone = z
			}
		}
		want := map[string]int64{"node-0": 1, "node-1": 1}
		want[zone] = 0
		Eventually(func(g Gomega) map[string]int64 { return available(object(g, ctx)) }).
			WithContext(ctx).WithTimeout(10*time.Second).WithPolling(200*time.Millisecond).Should(Equal(want), "pod on CPU %s (%s)", cpus, zone)

		mustKubectl(ctx, "-n", nrtNS, "delete", "pod", "aligned", "--wait=true")
		Eventually(func(g Gomega) map[string]int64 { return available(object(g, ctx)) }).
			WithContext(ctx).WithTimeout(10 * time.Second).WithPolling(200 * time.Millisecond).Should(Equal(map[string]int64{"node-0": 1, "node-1": 1}))
	}, SpecTimeout(3*time.Minute))
})

// hostMetric is an unlabelled metric of the host plugin's /metrics.
func hostMetric(g Gomega, ctx context.Context, name string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+hostMetrics+"/metrics", nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	g.Expect(err).NotTo(HaveOccurred())
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			g.Expect(err).NotTo(HaveOccurred())
			return f
		}
	}
	g.Expect(string(b)).To(ContainSubstring(name+" "), "metric %s not served", name)
	return 0
}
