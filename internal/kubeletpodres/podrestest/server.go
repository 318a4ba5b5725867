// Package podrestest is a PodResources server on a unix socket that
// answers Get the way the kubelet does (the pod's containers, each with
// its devices and their TopologyInfo), for tests and benchmarks of the
// real client.
package podrestest

import (
	"context"
	"fmt"
	"net"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// Device is one device of a container: its resource, IDs and NUMA nodes
// (none: the plugin reported no topology).
type Device struct {
	Resource string
	IDs      []string
	NUMA     []int64
}

// Server is a fake kubelet PodResources server.
type Server struct {
	podresv1.UnimplementedPodResourcesListerServer

	srv *grpc.Server
	// Gets counts the Get calls received.
	Gets atomic.Int64

	mu   sync.Mutex
	pods map[string]map[string][]Device // "ns/name" -> container -> devices
	hold chan struct{}                  // non-nil: Get waits until closed or its caller gives up
	fail error                          // non-nil: Get answers it at once
}

// Start serves on a unix socket at path until the test's cleanup (t is
// anything with Cleanup, e.g. *testing.T or *testing.B).
func Start(t interface {
	Cleanup(func())
	Fatalf(string, ...any)
}, path string) *Server {
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatalf("listen %s: %v", path, err)
	}
	s := &Server{srv: grpc.NewServer(), pods: map[string]map[string][]Device{}}
	podresv1.RegisterPodResourcesListerServer(s.srv, s)
	go func() { _ = s.srv.Serve(l) }()
	t.Cleanup(s.Stop)
	return s
}

// Stop stops serving and removes the socket; calls in flight end.
func (s *Server) Stop() {
	s.mu.Lock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
	s.mu.Unlock()
	s.srv.Stop()
}

// Set makes the pod's container have the devices.
func (s *Server) Set(namespace, pod, container string, devs ...Device) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key := namespace + "/" + pod
	if s.pods[key] == nil {
		s.pods[key] = map[string][]Device{}
	}
	s.pods[key][container] = devs
}

// Hold makes every Get wait until Release (a kubelet that does not
// answer).
func (s *Server) Hold() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold == nil {
		s.hold = make(chan struct{})
	}
}

// FailWith makes every Get answer err at once (nil: answer again), e.g.
// the DeadlineExceeded status a server whose own timer fired first sends.
func (s *Server) FailWith(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fail = err
}

// Release lets the held Get calls answer.
func (s *Server) Release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hold != nil {
		close(s.hold)
		s.hold = nil
	}
}

// Get answers as the kubelet: NotFound for a pod it does not know, else
// every container of the pod with its devices, one entry per device.
func (s *Server) Get(ctx context.Context, req *podresv1.GetPodResourcesRequest) (*podresv1.GetPodResourcesResponse, error) {
	s.Gets.Add(1)
	s.mu.Lock()
	if err := s.fail; err != nil {
		s.mu.Unlock()
		return nil, err
	}
	hold := s.hold
	ctrs, ok := s.pods[req.GetPodNamespace()+"/"+req.GetPodName()]
	var resp *podresv1.GetPodResourcesResponse
	if ok {
		resp = &podresv1.GetPodResourcesResponse{PodResources: &podresv1.PodResources{
			Name: req.GetPodName(), Namespace: req.GetPodNamespace()}}
		for name, devs := range ctrs {
			cr := &podresv1.ContainerResources{Name: name}
			for _, d := range devs {
				cd := &podresv1.ContainerDevices{ResourceName: d.Resource, DeviceIds: d.IDs}
				if len(d.NUMA) > 0 {
					cd.Topology = &podresv1.TopologyInfo{}
					for _, n := range d.NUMA {
						cd.Topology.Nodes = append(cd.Topology.Nodes, &podresv1.NUMANode{ID: n})
					}
				}
				cr.Devices = append(cr.Devices, cd)
			}
			resp.PodResources.Containers = append(resp.PodResources.Containers, cr)
		}
	}
	s.mu.Unlock()
	if hold != nil {
		select {
		case <-hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if !ok {
		return nil, status.Error(codes.NotFound, fmt.Sprintf("pod %s not found in namespace %s", req.GetPodName(), req.GetPodNamespace()))
	}
	return resp, nil
}
