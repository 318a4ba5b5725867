//go:build e2e

package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	cri "k8s.io/cri-api/pkg/apis/runtime/v1"

	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// containerd#13733 on the real runtime: a node operator's busy day under
// shared_pool_updates = "in-answer". Shared containers are resized through
// CRI UpdateContainerResources in a loop (each call takes the runtime's
// NRI lock and then NRI's adaptation lock) while Guaranteed 1-CPU pods are
// created and removed beside them (each removal frees a CPU that the
// shared containers get back: a plugin that pushes it with an unsolicited
// UpdateContainers takes the two locks in the other order). On a runtime
// whose NRI is older than v0.12.1 (containerd 2.2 and 2.3, CRI-O 1.37)
// the old plugin hung the runtime within about 30 cycles; the plugin now
// holds those updates for the next answer there (docs/runtimes.md).
//
// The failure detector is a bound on every CRI call: a call that does not
// return within callBound means the runtime is hung, which is the failure;
// a healthy runtime answers these in well under a second, so the bound
// never decides a pass. The number of cycles, not a duration, ends the
// spec. The race wants parallelism: the suite's containerd runs with
// GOMAXPROCS=8 (setup-containerd.sh), as on a node with 8 CPUs or more.
var _ = Describe("no deadlock with the runtime under in-place resizes beside exclusive pods coming and going, on a real "+RuntimeName, Label("deadlock"), Ordered, Serial, func() {
	const (
		sharedCount = 3
		callBound   = 20 * time.Second
	)
	var (
		plugin *Plugin
		pods   = &Pods{}
		shared []*framework.Container
		base   string // http://host:port of the plugin's /metrics
		cycles = 20
	)

	// bounded runs one CRI call with callBound as its deadline; a call
	// that runs out of it is the hang this spec is about.
	bounded := func(ctx context.Context, what string, call func(context.Context) error) error {
		cctx, cancel := context.WithTimeout(ctx, callBound)
		defer cancel()
		err := call(cctx)
		if errors.Is(cctx.Err(), context.DeadlineExceeded) {
			return fmt.Errorf("%s did not return within %s: the runtime is hung (containerd#13733): %w", what, callBound, err)
		}
		return err
	}

	metricValue := func(ctx context.Context, name string) float64 {
		GinkgoHelper()
		_, b, err := framework.HTTPGet(ctx, base+"/metrics")
		Expect(err).NotTo(HaveOccurred())
		m := regexp.MustCompile(`(?m)^` + name + ` (\S+)$`).FindStringSubmatch(string(b))
		Expect(m).NotTo(BeNil(), "metric %s not served", name)
		v, err := strconv.ParseFloat(m[1], 64)
		Expect(err).NotTo(HaveOccurred())
		return v
	}

	BeforeAll(func(ctx SpecContext) {
		RequireRuntime()
		if Host.CPUs.Size() < 2 {
			Skip("the static policy needs 2 CPUs: one reserved, one to give out exclusively")
		}
		if s := os.Getenv("E2E_DEADLOCK_CYCLES"); s != "" {
			n, err := strconv.Atoi(s)
			Expect(err).NotTo(HaveOccurred(), "E2E_DEADLOCK_CYCLES")
			cycles = n
		}
		DeferCleanup(pods.RemoveAll, NodeTimeout(2*time.Minute))
		plugin = NewPlugin("deadlock", `shared_pool_updates = "in-answer"`, `metrics_address = "127.0.0.1:0"`,
			// The reconcile loop's repairs are the other unsolicited path.
			`reconcile_period = "1s"`)
		plugin.Start(ctx)
		addr, err := framework.MetricsAddress(plugin.LogPath, 0)
		Expect(err).NotTo(HaveOccurred(), "its log:\n%s", plugin.LogTail())
		base = "http://" + addr
		for i := range sharedCount {
			shared = append(shared, pods.RunWith(ctx, fmt.Sprintf("resized-%d", i), framework.Resources{CPURequestMilli: 100, CPULimitMilli: 500}))
		}
	}, NodeTimeout(3*time.Minute))

	It("answers every CRI call while shared containers are resized and Guaranteed pods come and go", func(ctx SpecContext) {
		v, err := CRI.RT.Version(ctx, &cri.VersionRequest{})
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("runtime %s %s, %d cycles\n", v.GetRuntimeName(), v.GetRuntimeVersion(), cycles)

		// The resizers: each shared container's CPU limit goes back and
		// forth between 500m and 700m (quota 50000 and 70000), the
		// kubelet's UpdateContainerResources of an in-place resize.
		stop := make(chan struct{})
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			failures []error
			resizes  int
		)
		fail := func(err error) {
			mu.Lock()
			failures = append(failures, err)
			mu.Unlock()
		}
		for _, ct := range shared {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					limit := int64(500 + 200*(i%2))
					res := framework.Resources{CPURequestMilli: 100, CPULimitMilli: limit}.CRIOnNode(framework.Burstable, CRI.NodeMemory)
					CRI.ClampOOMScoreAdj(res)
					err := bounded(ctx, "UpdateContainerResources "+ct.Name, func(c context.Context) error {
						_, err := CRI.RT.UpdateContainerResources(c, &cri.UpdateContainerResourcesRequest{ContainerId: ct.ID, Linux: res})
						return err
					})
					if err != nil {
						fail(err)
						return
					}
					mu.Lock()
					resizes++
					mu.Unlock()
				}
			}()
		}
		stopResizers := func() {
			select {
			case <-stop:
			default:
				close(stop)
			}
			wg.Wait()
		}
		defer stopResizers()

		failed := func() error {
			mu.Lock()
			defer mu.Unlock()
			return errors.Join(failures...)
		}
		for i := range cycles {
			if err := failed(); err != nil {
				break
			}
			name := fmt.Sprintf("exclusive-%d", i)
			r := framework.GuaranteedCPUs(1)
			var p *framework.Pod
			err := bounded(ctx, "RunPodSandbox "+name, func(c context.Context) error {
				var err error
				p, err = CRI.RunPod(c, framework.PodSpec{Name: name, UID: NewPodUID(name), Containers: []framework.Resources{r}})
				return err
			})
			if err == nil {
				err = bounded(ctx, "CreateContainer and StartContainer "+name, func(c context.Context) error {
					_, err := CRI.RunContainer(c, p, name, r)
					return err
				})
			}
			if p != nil {
				if rerr := bounded(ctx, "StopPodSandbox and RemovePodSandbox "+name, func(c context.Context) error {
					return CRI.RemovePod(c, p.ID, p.CgroupParent())
				}); rerr != nil {
					err = errors.Join(err, rerr)
				}
			}
			if err != nil {
				fail(err)
				break
			}
		}
		stopResizers()
		Expect(failed()).NotTo(HaveOccurred(), "plugin log:\n%s", plugin.LogTail())
		mu.Lock()
		GinkgoWriter.Printf("%d cycles, %d resizes\n", cycles, resizes)
		Expect(resizes).To(BeNumerically(">", 0))
		mu.Unlock()

		// Every shared container is back on every CPU: the last pod's
		// CPU came back, by a push or, where pushes are held, with the
		// answer to one more resize, the next solicited event.
		for _, ct := range shared {
			res := framework.Resources{CPURequestMilli: 100, CPULimitMilli: 500}.CRIOnNode(framework.Burstable, CRI.NodeMemory)
			CRI.ClampOOMScoreAdj(res)
			Expect(bounded(ctx, "UpdateContainerResources "+ct.Name, func(c context.Context) error {
				_, err := CRI.RT.UpdateContainerResources(c, &cri.UpdateContainerResourcesRequest{ContainerId: ct.ID, Linux: res})
				return err
			})).To(Succeed())
		}
		Eventually(func(g Gomega) {
			for _, ct := range shared {
				g.Expect(CPUsOfG(g, ctx, ct)).To(EqualCPUs(Host.CPUs), "shared container %s", ct.Name)
			}
		}).WithContext(ctx).WithTimeout(10*time.Second).Should(Succeed(), "plugin log:\n%s", plugin.LogTail())

		// Which way the plugin went is the runtime's NRI: it held updates
		// back exactly where the runtime can deadlock on them.
		held := metricValue(ctx, "nri_cpualign_updates_deferred_total")
		if affectedRuntime(v.GetRuntimeName(), v.GetRuntimeVersion()) {
			Expect(held).To(BeNumerically(">", 0), "runtime %s %s can deadlock on unsolicited updates: the plugin must have held some", v.GetRuntimeName(), v.GetRuntimeVersion())
		} else {
			Expect(held).To(BeZero(), "runtime %s %s takes unsolicited updates: nothing to hold", v.GetRuntimeName(), v.GetRuntimeVersion())
		}
	}, NodeTimeout(15*time.Minute))
})

// affectedRuntime says whether the runtime, as CRI's Version names it,
// vendors an NRI older than v0.12.1 (docs/runtimes.md): containerd before
// 2.4, and every CRI-O tested here. Independent of the plugin's own
// table, from the same sources.
func affectedRuntime(name, version string) bool {
	if !strings.EqualFold(name, "containerd") {
		return true
	}
	s := strings.TrimPrefix(version, "v")
	majMin := strings.SplitN(s, ".", 3)
	if len(majMin) < 2 {
		return true
	}
	maj, err1 := strconv.Atoi(majMin[0])
	minor, err2 := strconv.Atoi(majMin[1])
	if err1 != nil || err2 != nil {
		return true
	}
	return maj < 2 || (maj == 2 && minor < 4)
}
