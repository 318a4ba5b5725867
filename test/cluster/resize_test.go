//go:build e2e

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// resizeBurstable is the spec of issue 22 §3's first bullet, run once the
// Guaranteed Deployment holds pinnedCPUs: the Burstable Deployment's pod is
// resized with `kubectl patch --subresource resize` (CPU only: the kubelet
// sends UpdateContainerResources with shares, quota and memory, and no
// cpuset), and its container stays on the shared pool before, while and
// after the resize is applied: inside it, on the host for its processes,
// in its cgroup (sampled from before the patch until three seconds after
// the new quota is in the cgroup) and in the runtime's record of it, which
// containerd re-applies with every update.
func resizeBurstable(ctx SpecContext, pinnedCPUs cpuset.CPUSet) {
	pool := HostCPUs.Difference(pinnedCPUs)
	var shared, pinned corev1.Pod
	Eventually(func(g Gomega) {
		shared = runningPod(g, ctx, testNS, "app=shared")
		pinned = runningPod(g, ctx, testNS, "app=pinned")
	}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
	Expect(shared.Status.QOSClass).To(Equal(corev1.PodQOSBurstable))
	id := containerID(shared, "app")
	dir := cgroupDir(shared, id)
	Expect(cpusOf(Default, ctx, shared)).To(equalCPUs(pool), "before the resize")
	Expect(cpusOf(Default, ctx, pinned)).To(equalCPUs(pinnedCPUs), "before the resize")

	// Every value the cgroup's cpuset.cpus takes, from now until stop.
	stop := make(chan struct{})
	seen := make(chan []string, 1)
	go func() {
		defer GinkgoRecover()
		var values []string
		last := ""
		for {
			if b, err := os.ReadFile(filepath.Join(dir, "cpuset.cpus")); err == nil {
				if v := strings.TrimSpace(string(b)); v != last {
					values, last = append(values, v), v
				}
			}
			select {
			case <-stop:
				seen <- values
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()

	patch := `{"spec":{"containers":[{"name":"app","resources":{"requests":{"cpu":"200m"},"limits":{"cpu":"700m"}}}]}}`
	mustKubectl(ctx, "-n", testNS, "patch", "pod", shared.Name, "--subresource", "resize", "--patch", patch)
	// Applied: the kubelet reports the new limit and no resize pending or
	// in progress, and the quota is in the cgroup (the OCI runtime's
	// update that carries it also carries the cpuset).
	Eventually(func(g Gomega) {
		var p corev1.Pod
		g.Expect(getJSON(ctx, &p, "-n", testNS, "get", "pod", shared.Name)).To(Succeed())
		for _, c := range p.Status.Conditions {
			g.Expect(c.Type).NotTo(BeElementOf(corev1.PodResizePending, corev1.PodResizeInProgress), "%s: %s", c.Reason, c.Message)
		}
		var st *corev1.ContainerStatus
		for i := range p.Status.ContainerStatuses {
			if p.Status.ContainerStatuses[i].Name == "app" {
				st = &p.Status.ContainerStatuses[i]
			}
		}
		g.Expect(st).NotTo(BeNil())
		g.Expect(st.Resources).NotTo(BeNil())
		g.Expect(st.Resources.Limits.Cpu().MilliValue()).To(Equal(int64(700)), "status: %s", podSummary(p))
		g.Expect(cpuQuota(g, dir)).To(Equal(int64(70000)))
	}).WithContext(ctx).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).Should(Succeed())
	checkHost(Default, shared, id, pool)
	// Sampling goes on a little while: anything that re-applies a stale
	// cpuset after the update (a second update, a late write) shows here.
	select {
	case <-time.After(3 * time.Second):
	case <-ctx.Done():
	}
	close(stop)
	values := <-seen
	GinkgoWriter.Printf("cpuset.cpus of %s/%s from before the patch to 3 s after the resize was applied: %q\n", shared.Name, id, values)
	Expect(values).To(HaveEach(pool.String()), "cgroup %s/cpuset.cpus while %s was resized (pool %s, %s exclusive to %s)",
		dir, shared.Name, pool, pinnedCPUs, pinned.Name)

	Expect(cpusOf(Default, ctx, shared)).To(equalCPUs(pool), "after the resize")
	Expect(cpusOf(Default, ctx, pinned)).To(equalCPUs(pinnedCPUs), "after the resize")
	Expect(recordedCPUs(ctx, id)).To(Equal(pool.String()), "the runtime's record of %s after the resize", shared.Name)
}

// cpuQuota is the CFS quota of the container whose cpuset cgroup is dir,
// in µs per 100 ms period (-1: none): cpu.cfs_quota_us in the cgroup v1
// cpu hierarchy, cpu.max under v2.
func cpuQuota(g Gomega, dir string) int64 {
	if rel, ok := strings.CutPrefix(dir, "/sys/fs/cgroup/cpuset/"); ok {
		b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/cpu", rel, "cpu.cfs_quota_us"))
		g.Expect(err).NotTo(HaveOccurred())
		q, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		g.Expect(err).NotTo(HaveOccurred())
		return q
	}
	b, err := os.ReadFile(filepath.Join(dir, "cpu.max"))
	g.Expect(err).NotTo(HaveOccurred())
	f := strings.Fields(string(b))
	g.Expect(f).To(HaveLen(2))
	if f[0] == "max" {
		return -1
	}
	q, err := strconv.ParseInt(f[0], 10, 64)
	g.Expect(err).NotTo(HaveOccurred())
	return q
}

// recordedCPUs is the cpuset.cpus in the runtime's stored OCI spec of a
// container (the runtimeSpec of its verbose CRI status, as crictl inspect
// shows it).
func recordedCPUs(ctx context.Context, id string) string {
	GinkgoHelper()
	ep := strings.TrimPrefix(os.Getenv("CRI_RUNTIME_ENDPOINT"), "unix://")
	Expect(ep).NotTo(BeEmpty(), "CRI_RUNTIME_ENDPOINT not set (the runtime's setup script exports it)")
	c, err := framework.Dial(ctx, ep, Env.TestImage)
	Expect(err).NotTo(HaveOccurred())
	defer c.Close()
	resp, err := c.RT.ContainerStatus(ctx, &cri.ContainerStatusRequest{ContainerId: id, Verbose: true})
	Expect(err).NotTo(HaveOccurred())
	var info struct {
		RuntimeSpec struct {
			Linux struct {
				Resources struct {
					CPU struct {
						Cpus string `json:"cpus"`
					} `json:"cpu"`
				} `json:"resources"`
			} `json:"linux"`
		} `json:"runtimeSpec"`
	}
	raw := resp.GetInfo()["info"]
	Expect(json.Unmarshal([]byte(raw), &info)).To(Succeed(), "verbose status of %s: %s", id, raw)
	Expect(raw).To(ContainSubstring("runtimeSpec"), fmt.Sprintf("verbose status of %s has no runtimeSpec", id))
	return info.RuntimeSpec.Linux.Resources.CPU.Cpus
}
