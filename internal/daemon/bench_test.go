package daemon

import (
	"context"
	"fmt"
	"io"
	"testing"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// BenchmarkCreateStopRemove measures one exclusive container's way through
// the handlers (admission, checkpoint write with fsync, shared-pool updates
// for 50 shared containers), without the NRI socket: the time the runtime
// waits on the plugin per container, which must stay far below its 2 s
// request timeout.
func BenchmarkCreateStopRemove(b *testing.B) {
	topo := sysfstest.Load(b, "epyc-7702p-smt")
	cfg, err := config.Load([]byte(fmt.Sprintf("reserved_cpu_count = 2\nstate_dir = %q\nmetrics_address = \"\"\ncontainer_start_timeout = \"0\"\n", b.TempDir())))
	if err != nil {
		b.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := New(cfg, WithTopology(topo), WithLogger(log))
	if err != nil {
		b.Fatal(err)
	}
	p := &plugin{d: d}
	ctx := context.Background()
	if _, err := p.Synchronize(ctx, nil, nil); err != nil {
		b.Fatal(err)
	}
	bePod := &api.PodSandbox{Id: "sb-be", Uid: "be", Name: "be", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/besteffort/podbe"}}
	for i := range 50 {
		c := &api.Container{Id: fmt.Sprintf("be-%d", i), Name: fmt.Sprintf("be-%d", i), Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{}}}}
		if _, _, err := p.CreateContainer(ctx, bePod, c); err != nil {
			b.Fatal(err)
		}
	}
	pod := &api.PodSandbox{Id: "sb-g", Uid: "g", Name: "g", Linux: &api.LinuxPodSandbox{CgroupParent: "/kubepods/podg"}}
	b.ResetTimer()
	for i := range b.N {
		c := &api.Container{Id: fmt.Sprintf("g-%d", i), Name: "app", Linux: &api.LinuxContainer{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{
			Shares: &api.OptionalUInt64{Value: 4096}, Quota: &api.OptionalInt64{Value: 400000}, Period: &api.OptionalUInt64{Value: 100000}}}}}
		_, ups, err := p.CreateContainer(ctx, pod, c)
		if err != nil {
			b.Fatal(err)
		}
		if len(ups) != 50 {
			b.Fatalf("%d updates, want 50", len(ups))
		}
		if _, err := p.StopContainer(ctx, pod, c); err != nil {
			b.Fatal(err)
		}
		if err := p.RemoveContainer(ctx, pod, c); err != nil {
			b.Fatal(err)
		}
	}
}
