package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/containerd/nri/pkg/adaptation"
	"github.com/containerd/nri/pkg/api"
	nrilog "github.com/containerd/nri/pkg/log"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/nritest"
	"github.com/nri-cpualign/nri-cpualign/test/e2e/framework"
)

// StartRuntime starts the runtime side of NRI in-process
// (internal/nritest: pkg/adaptation, the code containerd embeds, with a
// containerd-like store) listening on dir/nri.sock; dir must be short (unix
// socket paths are limited to 108 bytes). Stop it with Stop.
//
// It raises NRI's plugin request timeout (2 s in containerd) to 30 s for
// the whole process: on a loaded machine a slow answer must be measured,
// not turned into a dropped plugin. NRI's own info lines are dropped too
// (warnings and errors still go to stderr): they would land in the middle
// of the benchmark result lines.
func StartRuntime(dir string, opts ...nritest.Option) (*nritest.Runtime, error) {
	adaptation.SetPluginRequestTimeout(30 * time.Second)
	nrilog.Set(quietLogger{})
	rt := nritest.New(dir, opts...)
	if err := rt.Start(); err != nil {
		return nil, err
	}
	return rt, nil
}

// RunPod sends RunPodSandbox for a one-container pod of r, with the
// kubelet's cgroup parent and pod-level resources.
func RunPod(ctx context.Context, rt *nritest.Runtime, name string, r framework.Resources) (*api.PodSandbox, error) {
	pod := nritest.NewPod(fmt.Sprintf("uid-%s-%d", name, rt.Next()), name, "bench", framework.PodQOS(r))
	pod.Linux.Resources = nritest.PodResources(r)
	return pod, rt.RunPod(ctx, pod)
}

// Shared is the Burstable container of the benchmarks: 250m request, 1 CPU
// limit, on the shared pool.
var Shared = framework.Resources{CPURequestMilli: 250, CPULimitMilli: 1000, MemLimit: 128 << 20}

// ExclusiveEvery: Populate makes every ExclusiveEvery-th container
// exclusive, starting with the first.
const ExclusiveEvery = 5

// SharedOf is how many of n Populate containers are on the shared pool.
func SharedOf(n int) int { return n - (n+ExclusiveEvery-1)/ExclusiveEvery }

// Populate creates and starts n one-container pods through NRI: every fifth
// a Guaranteed container with exclusiveCPUs CPUs, the others Shared, the mix
// of a busy node.
func Populate(ctx context.Context, rt *nritest.Runtime, n, exclusiveCPUs int) error {
	for i := 0; i < n; i++ {
		r := Shared
		if i%ExclusiveEvery == 0 {
			r = framework.GuaranteedCPUs(exclusiveCPUs)
		}
		pod, err := RunPod(ctx, rt, fmt.Sprintf("pop%d", i), r)
		if err != nil {
			return err
		}
		c := rt.NewContainer(pod, "c", r)
		if _, err := rt.CreateContainer(ctx, pod, c); err != nil {
			return fmt.Errorf("container %d of %d: %w", i+1, n, err)
		}
		if err := rt.StartContainer(ctx, c); err != nil {
			return err
		}
	}
	return nil
}

// quietLogger is NRI's logger without the debug and info levels.
type quietLogger struct{}

func (quietLogger) Debugf(context.Context, string, ...any) {}
func (quietLogger) Infof(context.Context, string, ...any)  {}
func (quietLogger) Warnf(ctx context.Context, format string, args ...any) {
	logrus.WithContext(ctx).Warnf(format, args...)
}
func (quietLogger) Errorf(ctx context.Context, format string, args ...any) {
	logrus.WithContext(ctx).Errorf(format, args...)
}
