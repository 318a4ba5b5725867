package request

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
)

// fakeLister answers from memory: what the plugin's side of the call
// costs without the socket.
type fakeLister struct{ devs []kubeletpodres.Device }

func (f fakeLister) ContainerDevices(context.Context, string, string, string) ([]kubeletpodres.Device, error) {
	return f.devs, nil
}

// BenchmarkPodResources is what asking the kubelet adds to one
// CreateContainer (PodResources.Add, which the handler calls before it
// takes the ledger's lock) for a container with one GPU on NUMA node 1:
//   - off: pod_resources = false;
//   - fake: an in-memory Lister (the plugin's own work);
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
			cfg, err := config.Load([]byte(fmt.Sprintf("topology_manager_policy = \"best-effort\"\npod_resources_socket = %q\n%s", c.sock, c.extra)))
			if err != nil {
				b.Fatal(err)
			}
			log := logrus.New()
			log.SetOutput(io.Discard)
			var s PodResources
			defer s.Close()
			if c.name == "fake" {
				s.socket = sock
				s.lister = fakeLister{devs: []kubeletpodres.Device{{Resource: gpu.Resource, IDs: gpu.IDs, NUMA: []int{1}}}}
			}
			entry := logrus.NewEntry(log)
			ctx := context.Background()
			info, _ := s.Add(ctx, cfg, pod, ctr, DeviceInfo{}, entry) // connected
			if want := c.name == "fake" || c.name == "grpc"; want != (len(info.Nodes) == 1) {
				b.Fatalf("nodes %v", info.Nodes)
			}
			var lat []time.Duration
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				t0 := time.Now()
				s.Add(ctx, cfg, pod, ctr, DeviceInfo{}, entry)
				lat = append(lat, time.Since(t0))
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Nanoseconds()), "p50-ns")
			b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
		})
	}
}
