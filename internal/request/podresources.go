package request

import (
	"context"
	"errors"
	"strings"
	"sync"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/kubeletpodres"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// podResourcesWarnEvery spaces the warnings of one kind (no socket, no
// answer in time, an error): a node without a reachable kubelet would
// otherwise warn on every container.
const podResourcesWarnEvery = time.Minute

// PodResources is the kubelet's PodResources API as a device hint
// source: the client of the configured socket, made when the socket
// changes, and when each kind of warning was last written. The zero
// value is ready; the daemon keeps one for its life (one connection).
type PodResources struct {
	mu     sync.Mutex
	socket string
	lister kubeletpodres.Lister
	closer func() error
	warned map[string]time.Time
	now    func() time.Time
}

// listerFor returns the lister of socket, replacing the one of another
// socket (a configuration change).
func (s *PodResources) listerFor(socket string) kubeletpodres.Lister {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lister != nil && s.socket == socket {
		return s.lister
	}
	if s.closer != nil {
		_ = s.closer()
	}
	c := kubeletpodres.New(socket)
	c.Connect()
	s.socket, s.lister, s.closer = socket, c, c.Close
	return c
}

// Warm connects to the kubelet in the background when the call will be
// made, so that the first container does not wait for the handshake
// (0.3-2 ms on a busy two-CPU machine).
func (s *PodResources) Warm(cfg config.Config) {
	if cfg.PodResources && cfg.TopologyManagerPolicy != "" && cfg.TopologyManagerPolicy != hints.PolicyNone {
		s.listerFor(cfg.PodResourcesSocket)
	}
}

// warnOnce reports whether a warning of kind may be written now.
func (s *PodResources) warnOnce(kind string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	if last, ok := s.warned[kind]; ok && now.Sub(last) < podResourcesWarnEvery {
		return false
	}
	if s.warned == nil {
		s.warned = map[string]time.Time{}
	}
	s.warned[kind] = now
	return true
}

// Close closes the client, if any.
func (s *PodResources) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closer != nil {
		_ = s.closer()
	}
	s.lister, s.closer, s.socket = nil, nil, ""
}

// Add adds to info the devices the kubelet's PodResources API lists for
// the container that carry a NUMA node, each named "RESOURCE ID[,ID] via
// PodResources", and returns entry with them as the field pod_resources,
// so that the decision's line names them. CreateContainer calls it
// before it takes the ledger's lock, with the current configuration. It waits
// at most pod_resources_timeout; a kubelet that does not answer in time,
// or has no socket, gives no hint and a warning (at most one a minute of
// each kind). Nothing is asked when the call is off or the topology
// manager consults no provider.
func (s *PodResources) Add(ctx context.Context, cfg config.Config, pod *api.PodSandbox, ctr *api.Container, info DeviceInfo, entry *logrus.Entry) (DeviceInfo, *logrus.Entry) {
	if !cfg.PodResources || cfg.TopologyManagerPolicy == "" || cfg.TopologyManagerPolicy == hints.PolicyNone {
		return info, entry
	}
	timeout := time.Duration(cfg.PodResourcesTimeout)
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	devs, err := s.listerFor(cfg.PodResourcesSocket).ContainerDevices(ctx, pod.GetNamespace(), pod.GetName(), ctr.GetName())
	if err != nil {
		kind, msg := "error", "kubelet PodResources: Get failed; no device hint from it"
		switch {
		case errors.Is(err, kubeletpodres.ErrNoSocket):
			kind, msg = "socket", "kubelet PodResources: no socket; no device hint from it (set pod_resources = false where no kubelet runs)"
		case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
			kind, msg = "timeout", "kubelet PodResources: no answer within pod_resources_timeout; no device hint from it"
		}
		if s.warnOnce(kind) {
			entry.WithError(err).WithFields(logrus.Fields{"socket": cfg.PodResourcesSocket, "timeout": timeout.String()}).Warn(msg)
		}
		return info, entry
	}
	var named []string
	for _, dev := range devs {
		info.Considered++
		if len(dev.NUMA) == 0 {
			continue // no TopologyInfo: no hint, as under the kubelet
		}
		name := dev.Resource + " " + strings.Join(dev.IDs, ",") + " via PodResources"
		info.Devices = append(info.Devices, Device{Device: name, NUMA: dev.NUMA})
		info.Nodes = sysfs.UnionNodes([]sysfs.Locality{{Nodes: info.Nodes}, {Nodes: dev.NUMA}})
		named = append(named, name+" numa "+intList(dev.NUMA))
	}
	if len(named) > 0 {
		entry = entry.WithField("pod_resources", named)
	}
	return info, entry
}
