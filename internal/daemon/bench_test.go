package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"
	"unsafe"

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
	cfg, err := config.Load([]byte(fmt.Sprintf("reserved_cpu_count = 2\nshared_pool_updates = \"in-answer\"\nstate_dir = %q\nmetrics_address = \"\"\n", b.TempDir())))
	if err != nil {
		b.Fatal(err)
	}
	log := logrus.New()
	log.SetOutput(io.Discard)
	d, err := New(cfg, WithTopology(topo), WithLogger(log))
	if err != nil {
		b.Fatal(err)
	}
	p := d.handlers()
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

// BenchmarkCreateContainerHandler is the daemon's own work for one
// CreateContainer with 500 containers placed (one in five exclusive with 2
// CPUs, the rest Burstable, as in test/bench's round trip) on the 256-CPU
// epyc-9754: the handler alone, without the NRI socket, with the state on
// tmpfs when there is one (the journal's flush there costs next to
// nothing), and the info line per decision formatted and discarded. Only
// the creation is timed; the container is stopped and removed again
// outside the timer.
func BenchmarkCreateContainerHandler(b *testing.B) {
	for _, c := range []struct{ kind, updates string }{
		{"shared", config.SharedUpdatesInAnswer}, {"exclusive", config.SharedUpdatesInAnswer}, {"exclusive", config.SharedUpdatesDirect},
	} {
		kind := c.kind
		b.Run("existing=500/kind="+kind+"/updates="+c.updates, func(b *testing.B) {
			dir, err := os.MkdirTemp("/dev/shm", "handler-")
			if err != nil {
				dir = b.TempDir()
			}
			defer os.RemoveAll(dir)
			if err := os.Mkdir(dir+"/cpuset", 0o755); err != nil {
				b.Fatal(err)
			}
			// direct: no update worker runs here (no Run), so the handler's
			// kick is all there is of the pass; cgroup_root is an empty
			// cpuset tree for the start-up check.
			cfg, err := config.Load([]byte(fmt.Sprintf("reserved_cpu_count = 2\nshared_pool_updates = %q\ncgroup_root = %q\ntopology_manager_policy = \"best-effort\"\nstate_dir = %q\nmetrics_address = \"\"\n", c.updates, dir, dir)))
			if err != nil {
				b.Fatal(err)
			}
			log := logrus.New()
			log.SetOutput(io.Discard)
			d, err := New(cfg, WithTopology(sysfstest.Load(b, "epyc-9754")), WithLogger(log))
			if err != nil {
				b.Fatal(err)
			}
			defer d.store.Reset()
			p := d.handlers()
			ctx := context.Background()
			if _, err := p.Synchronize(ctx, nil, nil); err != nil {
				b.Fatal(err)
			}
			newPod := func(uid string, excl bool) *api.PodSandbox {
				parent := "/kubepods/burstable/pod" + uid
				if excl {
					parent = "/kubepods/pod" + uid
				}
				return &api.PodSandbox{Id: "sb-" + uid, Uid: uid, Name: uid, Namespace: "bench", Linux: &api.LinuxPodSandbox{CgroupParent: parent}}
			}
			newCtr := func(pod *api.PodSandbox, id string, excl bool) *api.Container {
				cpu := &api.LinuxCPU{Shares: &api.OptionalUInt64{Value: 256}, Quota: &api.OptionalInt64{Value: 100000}, Period: &api.OptionalUInt64{Value: 100000}}
				if excl {
					cpu = &api.LinuxCPU{Shares: &api.OptionalUInt64{Value: 2048}, Quota: &api.OptionalInt64{Value: 200000}, Period: &api.OptionalUInt64{Value: 100000}}
				}
				return &api.Container{Id: id, PodSandboxId: pod.Id, Name: "c", Linux: &api.LinuxContainer{
					CgroupsPath: pod.Linux.CgroupParent + "/" + id, Resources: &api.LinuxResources{Cpu: cpu}}}
			}
			for i := range 500 {
				excl := i%5 == 0
				pod := newPod(fmt.Sprintf("pop-%d", i), excl)
				c := newCtr(pod, fmt.Sprintf("%064d", i), excl)
				if _, _, err := p.CreateContainer(ctx, pod, c); err != nil {
					b.Fatal(err)
				}
				if err := p.StartContainer(ctx, pod, c); err != nil {
					b.Fatal(err)
				}
			}
			excl := kind == "exclusive"
			pod := newPod("bench", excl)
			// The thread's CPU time per creation as well: on this shared
			// machine wall-clock figures mostly measure the neighbours.
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			cpu := make([]time.Duration, b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				c := newCtr(pod, fmt.Sprintf("bench-%d", i), excl)
				t0 := threadCPUTime()
				if _, _, err := p.CreateContainer(ctx, pod, c); err != nil {
					b.Fatal(err)
				}
				cpu[i] = threadCPUTime() - t0
				b.StopTimer()
				if _, err := p.StopContainer(ctx, pod, c); err != nil {
					b.Fatal(err)
				}
				if err := p.RemoveContainer(ctx, pod, c); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.StopTimer()
			slices.Sort(cpu)
			b.ReportMetric(float64(cpu[len(cpu)/2].Nanoseconds()), "cpu-p50-ns")
		})
	}
}

// threadCPUTime is CLOCK_THREAD_CPUTIME_ID: the calling thread's CPU time,
// without the time other processes ran on its CPU.
func threadCPUTime() time.Duration {
	var ts syscall.Timespec
	if _, _, errno := syscall.Syscall(syscall.SYS_CLOCK_GETTIME, 3, uintptr(unsafe.Pointer(&ts)), 0); errno != 0 {
		return 0
	}
	return time.Duration(ts.Nano())
}
