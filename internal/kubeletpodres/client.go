// Package kubeletpodres asks the kubelet's PodResources API
// (v1.PodResourcesLister.Get on its pod-resources socket) which devices a
// container was given and the NUMA nodes their device plugins reported
// (TopologyInfo): what the kubelet's own device manager aligns CPUs with,
// for every vendor and every way a plugin hands a device to a container.
//
// The client keeps one connection, opened in the background when it is
// made (grpc.NewClient never blocks), and checks that the socket exists
// before each call, so an absent kubelet costs a stat. The caller bounds
// each call with its context.
package kubeletpodres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	podresv1 "k8s.io/kubelet/pkg/apis/podresources/v1"
)

// DefaultSocket is where the kubelet serves the PodResources API (its
// root directory's pod-resources/kubelet.sock).
const DefaultSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// maxNode bounds the NUMA node ids kept: the hint masks hold 64 nodes.
const maxNode = 64

// ErrNoSocket is returned when the socket does not exist (no kubelet, or
// its directory is not mounted).
var ErrNoSocket = errors.New("no kubelet PodResources socket")

// Device is one entry of a container's devices as the kubelet lists them.
type Device struct {
	// Resource is the extended resource name, e.g. "nvidia.com/gpu".
	Resource string
	// IDs are the device plugin's device IDs.
	IDs []string
	// NUMA are the nodes of its TopologyInfo, ascending and unique; empty
	// when the plugin reported no topology (no hint).
	NUMA []int
}

// Lister returns the devices the kubelet gave a container.
type Lister interface {
	ContainerDevices(ctx context.Context, namespace, pod, container string) ([]Device, error)
}

// Client is the Lister of a kubelet's socket. Its zero value is not
// usable; make it with New.
type Client struct {
	socket string

	mu   sync.Mutex
	conn *grpc.ClientConn
	api  podresv1.PodResourcesListerClient
}

// New returns a client of the socket. It dials nothing yet: the
// connection is made by the first call that finds the socket.
func New(socket string) *Client { return &Client{socket: socket} }

// Socket is the socket's path.
func (c *Client) Socket() string { return c.socket }

// ContainerDevices asks the kubelet for the pod's resources and returns
// the named container's devices. It fails with ErrNoSocket when the socket
// does not exist, and with an error that is context.DeadlineExceeded when
// the kubelet does not answer in time.
func (c *Client) ContainerDevices(ctx context.Context, namespace, pod, container string) ([]Device, error) {
	api, err := c.client()
	if err != nil {
		return nil, err
	}
	resp, err := api.Get(ctx, &podresv1.GetPodResourcesRequest{PodName: pod, PodNamespace: namespace})
	if status.Code(err) == codes.DeadlineExceeded {
		// This status can come before the context's own timer has run,
		// so ctx.Err() is still nil: grpc fails a call whose deadline has
		// passed by the clock before sending it, and the server, told the
		// deadline, may reset the stream first.
		return nil, fmt.Errorf("kubelet PodResources Get %s/%s on %s: %w (%w)", namespace, pod, c.socket, err, context.DeadlineExceeded)
	}
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources Get %s/%s on %s: %w", namespace, pod, c.socket, err)
	}
	return Devices(resp, container), nil
}

// client returns the API client, connecting on first use. The socket is
// looked at every time: the stat is what an absent kubelet costs.
func (c *Client) client() (podresv1.PodResourcesListerClient, error) {
	fi, err := os.Stat(c.socket)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoSocket, err)
	}
	if fi.Mode().Type() != fs.ModeSocket {
		return nil, fmt.Errorf("%w: %s is not a socket", ErrNoSocket, c.socket)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.api != nil {
		return c.api, nil
	}
	abs, err := filepath.Abs(c.socket)
	if err != nil {
		return nil, err
	}
	// A kubelet that restarts makes a new socket: retry within a second
	// rather than grpc's default backoff of up to two minutes.
	bo := backoff.DefaultConfig
	bo.BaseDelay, bo.MaxDelay = 50*time.Millisecond, time.Second
	conn, err := grpc.NewClient("unix://"+abs,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: bo, MinConnectTimeout: time.Second}))
	if err != nil {
		return nil, fmt.Errorf("kubelet PodResources socket %s: %w", c.socket, err)
	}
	conn.Connect()
	c.conn, c.api = conn, podresv1.NewPodResourcesListerClient(conn)
	return c.api, nil
}

// Connect starts connecting in the background when the socket exists, so
// that the first container does not wait for the handshake. It never
// blocks.
func (c *Client) Connect() { _, _ = c.client() }

// Close closes the connection, if any.
func (c *Client) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return nil
	}
	err := c.conn.Close()
	c.conn, c.api = nil, nil
	return err
}

// Devices returns the container's devices from a Get response: one per
// entry the kubelet lists, with the NUMA nodes of its topology (ids below
// 0 or from 64 up are dropped). Nil when the pod or the container is not
// in it.
func Devices(resp *podresv1.GetPodResourcesResponse, container string) []Device {
	for _, cr := range resp.GetPodResources().GetContainers() {
		if cr.GetName() != container {
			continue
		}
		var out []Device
		for _, cd := range cr.GetDevices() {
			d := Device{Resource: cd.GetResourceName(), IDs: slices.Clone(cd.GetDeviceIds())}
			for _, n := range cd.GetTopology().GetNodes() {
				id := n.GetID()
				if id < 0 || id >= maxNode || slices.Contains(d.NUMA, int(id)) {
					continue
				}
				d.NUMA = append(d.NUMA, int(id))
			}
			slices.Sort(d.NUMA)
			out = append(out, d)
		}
		return out
	}
	return nil
}
