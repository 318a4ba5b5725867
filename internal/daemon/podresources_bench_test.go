package daemon

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres"
	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres/podrestest"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// fakeLister answers from memory: what the daemon's side of the call
// costs without the socket.
type fakeLister struct{ devs []kubeletpodres.Device }

func (f fakeLister) ContainerDevices(context.Context, string, string, string) ([]kubeletpodres.Device, error) {
	return f.devs, nil
}

// BenchmarkPodResources is what asking the kubelet adds to one
// CreateContainer (withPodResources, the hook the handler calls before it
// takes the ledger's lock) for a container with one GPU on NUMA node 1:
//   - off: pod_resources = false;
//   - fake: an in-memory Lister (the daemon's own work);
//   - grpc: the real client against an in-process server on a unix socket
//     answering Get as the kubelet does (podrestest), the connection kept;
//   - absent: no socket (a stat, and the rate-limited warning's check).
//
// Besides the mean, each case reports its median and 99th percentile
// (p50-ns, p99-ns): the tail is what pod_resources_timeout bounds.
func BenchmarkPodResources(b *testing.B) {
	dir, err := os.MkdirTemp("", "podres-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(dir)
	sock := filepath.Join(dir, "kubelet.sock")
	srv := podrestest.Start(b, sock)
	gpu := podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-f7126b01-0a1b-4c2d-9e3f-1234567890ab"}, NUMA: []int64{1}}
	srv.Set("bench", "gpu", "c", gpu)
	pod := &api.PodSandbox{Id: "sb-gpu", Uid: "gpu", Name: "gpu", Namespace: "bench"}
	ctr := &api.Container{Id: "c1", PodSandboxId: pod.Id, Name: "c"}
	for _, c := range []struct{ name, extra, sock string }{
		{"off", "pod_resources = false\n", sock},
		{"fake", "", sock},
		{"grpc", "", sock},
		{"absent", "", filepath.Join(dir, "absent.sock")},
	} {
		b.Run(c.name, func(b *testing.B) {
			cfg, err := config.Load([]byte(fmt.Sprintf("reserved_cpu_count = 2\ntopology_manager_policy = \"best-effort\"\ncgroup_root = %q\nstate_dir = %q\nmetrics_address = \"\"\npod_resources_socket = %q\n%s",
				offHostRoot(b), b.TempDir(), c.sock, c.extra)))
			if err != nil {
				b.Fatal(err)
			}
			log := logrus.New()
			log.SetOutput(io.Discard)
			d, err := New(cfg, WithTopology(sysfstest.Load(b, "ht-2s-6c")), WithLogger(log))
			if err != nil {
				b.Fatal(err)
			}
			defer d.kube.podres.close()
			if c.name == "fake" {
				d.kube.podres.socket = sock
				d.kube.podres.lister = fakeLister{devs: []kubeletpodres.Device{{Resource: gpu.Resource, IDs: gpu.IDs, NUMA: []int{1}}}}
			}
			p := &plugin{d: d}
			entry := logrus.NewEntry(log)
			ctx := context.Background()
			info, _ := p.withPodResources(ctx, pod, ctr, deviceInfo{}, entry) // connected
			if want := c.name == "fake" || c.name == "grpc"; want != (len(info.Nodes) == 1) {
				b.Fatalf("nodes %v", info.Nodes)
			}
			var lat []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				p.withPodResources(ctx, pod, ctr, deviceInfo{}, entry)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
