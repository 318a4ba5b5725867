package kubeletpodres_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres"
	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres/podrestest"
)

// served is a client of a fake kubelet on a socket in a temporary
// directory.
func served(t *testing.T) (*kubeletpodres.Client, *podrestest.Server) {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "kubelet.sock")
	srv := podrestest.Start(t, sock)
	c := kubeletpodres.New(sock)
	t.Cleanup(func() { _ = c.Close() })
	return c, srv
}

// ask is ContainerDevices with a deadline far above a real answer's time
// (it only keeps a broken test from hanging).
func ask(t *testing.T, c *kubeletpodres.Client, ns, pod, ctr string) ([]kubeletpodres.Device, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return c.ContainerDevices(ctx, ns, pod, ctr)
}

// The container's own devices, one entry each, with their nodes sorted
// and unique; ids the hint masks cannot hold (below 0, 64 and up) are
// dropped; a device without TopologyInfo has no nodes; the pod's other
// container's devices are not its.
func TestContainerDevices(t *testing.T) {
	c, srv := served(t)
	srv.Set("ml", "train", "main",
		podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-b"}, NUMA: []int64{1}},
		podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-c"}, NUMA: []int64{3, 2, 3, -1, 64}},
		podrestest.Device{Resource: "example.com/fpga", IDs: []string{"fpga0", "fpga1"}},
	)
	srv.Set("ml", "train", "sidecar", podrestest.Device{Resource: "nvidia.com/gpu", IDs: []string{"GPU-a"}, NUMA: []int64{0}})

	got, err := ask(t, c, "ml", "train", "main")
	if err != nil {
		t.Fatal(err)
	}
	want := []kubeletpodres.Device{
		{Resource: "nvidia.com/gpu", IDs: []string{"GPU-b"}, NUMA: []int{1}},
		{Resource: "nvidia.com/gpu", IDs: []string{"GPU-c"}, NUMA: []int{2, 3}},
		{Resource: "example.com/fpga", IDs: []string{"fpga0", "fpga1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("main: got %+v, want %+v", got, want)
	}

	// A container the kubelet lists for the pod with no entry for it.
	got, err = ask(t, c, "ml", "train", "init")
	if err != nil || got != nil {
		t.Errorf("a container without devices: got %+v, %v; want none, no error", got, err)
	}
	// The same pod name in another namespace is another pod: NotFound.
	_, err = ask(t, c, "default", "train", "main")
	if status.Code(errors.Unwrap(err)) != codes.NotFound {
		t.Errorf("a pod the kubelet does not know: got %v, want NotFound", err)
	}
	if n := srv.Gets.Load(); n != 3 {
		t.Errorf("the server got %d calls, want 3", n)
	}
}

// No socket, or a path that is not one: ErrNoSocket, and nothing dialled.
func TestNoSocket(t *testing.T) {
	dir := t.TempDir()
	for _, path := range []string{filepath.Join(dir, "absent.sock"), dir} {
		c := kubeletpodres.New(path)
		_, err := ask(t, c, "ns", "pod", "ctr")
		if !errors.Is(err, kubeletpodres.ErrNoSocket) {
			t.Errorf("%s: got %v, want ErrNoSocket", path, err)
		}
		if err := c.Close(); err != nil {
			t.Errorf("Close of a client that never connected: %v", err)
		}
	}
	file := filepath.Join(dir, "file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ask(t, kubeletpodres.New(file), "ns", "pod", "ctr"); !errors.Is(err, kubeletpodres.ErrNoSocket) {
		t.Errorf("a regular file: got %v, want ErrNoSocket", err)
	}
}

// A kubelet that does not answer: the call ends at the caller's deadline
// with DeadlineExceeded, and the next answers once the kubelet does.
func TestDeadline(t *testing.T) {
	c, srv := served(t)
	srv.Set("ns", "pod", "ctr", podrestest.Device{Resource: "r", IDs: []string{"d"}, NUMA: []int64{0}})
	if _, err := ask(t, c, "ns", "pod", "ctr"); err != nil { // connected
		t.Fatal(err)
	}
	srv.Hold()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Millisecond)
	_, err := c.ContainerDevices(ctx, "ns", "pod", "ctr")
	cancel()
	if status.Code(err) != codes.DeadlineExceeded || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("held: got %v, want DeadlineExceeded", err)
	}
	srv.Release()
	got, err := ask(t, c, "ns", "pod", "ctr")
	if err != nil || len(got) != 1 || !reflect.DeepEqual(got[0].NUMA, []int{0}) {
		t.Errorf("after release: got %+v, %v", got, err)
	}
}

// The server's deadline can fire before the caller's (grpc sends it along
// and the server resets the stream): the DeadlineExceeded status then
// arrives while the caller's context is still live, and must read as the
// deadline all the same, not as a failed call (a loaded machine showed it:
// the daemon warned "Get failed" instead of naming pod_resources_timeout).
func TestServerDeadlineFirst(t *testing.T) {
	c, srv := served(t)
	srv.FailWith(status.Error(codes.DeadlineExceeded, "the server's deadline"))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.ContainerDevices(ctx, "ns", "pod", "ctr")
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
		t.Fatalf("got %v (context: %v), want an error that is context.DeadlineExceeded before the caller's deadline", err, ctx.Err())
	}
	srv.FailWith(status.Error(codes.Unavailable, "down"))
	if _, err := c.ContainerDevices(ctx, "ns", "pod", "ctr"); errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Unavailable reads as the deadline: %v", err)
	}
}

// The socket going away (the kubelet stopped): ErrNoSocket from the stat,
// whatever the connection's state.
func TestSocketGone(t *testing.T) {
	c, srv := served(t)
	srv.Set("ns", "pod", "ctr")
	if _, err := ask(t, c, "ns", "pod", "ctr"); err != nil {
		t.Fatal(err)
	}
	srv.Stop() // grpc's Serve removes the unix socket when it stops
	if _, err := os.Stat(c.Socket()); !os.IsNotExist(err) {
		t.Fatalf("the socket is still there after Stop: %v", err)
	}
	if _, err := ask(t, c, "ns", "pod", "ctr"); !errors.Is(err, kubeletpodres.ErrNoSocket) {
		t.Errorf("got %v, want ErrNoSocket", err)
	}
}
