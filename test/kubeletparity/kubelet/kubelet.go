// Package kubelet runs the side-by-side check (test/kubeletparity) against
// the kubelet's own static policy: its own module, so that the main module
// does not depend on k8s.io/kubernetes. One source serves every release:
// go.mod pins kubelet v1.37.2, v138.mod (go -modfile=v138.mod, with the
// build tag kubelet138) v1.38.0-beta.0, and release_*.go hold what the
// releases' APIs differ in. Run it with scripts/kubelet-parity.sh (make
// kubelet-parity).
package kubelet

import (
	"errors"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	kubetopo "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/topology"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager"
	"k8s.io/kubernetes/pkg/kubelet/cm/topologymanager/bitmask"
	"k8s.io/kubernetes/pkg/kubelet/lifecycle"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
	"github.com/nri-cpualign/nri-cpualign/test/kubeletparity"
)

// logger discards: the kubelet logs several lines per call.
var logger = logr.Discard()

// EnableOptions turns on the feature gates every option needs
// (distribute-cpus-across-cores and align-by-socket are alpha).
func EnableOptions() error {
	return utilfeature.DefaultMutableFeatureGate.Set("CPUManagerPolicyAlphaOptions=true,CPUManagerPolicyBetaOptions=true")
}

// CPUTopology is topo as the kubelet's cpumanager sees it (what its
// Discover makes of cadvisor's view of the same machine).
func CPUTopology(topo *topology.Topology) *kubetopo.CPUTopology {
	d := kubetopo.CPUDetails{}
	for _, c := range topo.Details() {
		d[c.CPU] = kubetopo.CPUInfo{NUMANodeID: c.NUMA, SocketID: c.Socket, CoreID: c.Core, UncoreCacheID: c.L3}
	}
	return &kubetopo.CPUTopology{
		NumCPUs: topo.NumCPUs(), NumCores: topo.NumCores(), NumUncoreCache: topo.NumL3(),
		NumSockets: topo.NumSockets(), NumNUMANodes: topo.NumNUMANodes(), CPUDetails: d,
	}
}

// Kubelet is the kubelet's static policy over an in-memory state, with a
// topology manager that answers the affinity set before each Allocate.
type Kubelet struct {
	pol  cpumanager.Policy
	st   state.State
	hint *topologymanager.TopologyHint
	res  cpuset.CPUSet
}

// New builds the kubelet's static policy (kubeletparity.NewKubelet).
func New(topo *topology.Topology, reservedCount int, opts map[string]string) (kubeletparity.Kubelet, error) {
	return NewKubelet(topo, reservedCount, opts)
}

// NewKubelet is New with the concrete type (the benchmarks use it).
func NewKubelet(topo *topology.Topology, reservedCount int, opts map[string]string) (*Kubelet, error) {
	hint := &topologymanager.TopologyHint{}
	pol, err := cpumanager.NewStaticPolicy(logger, CPUTopology(topo), reservedCount, cpuset.New(),
		topologymanager.NewFakeManagerWithHint(logger, hint), opts)
	if err != nil {
		return nil, err
	}
	st := state.NewMemoryState(logger)
	if err := pol.Start(logger, st); err != nil {
		return nil, err
	}
	// The reserved set is what the policy leaves out of GetAvailableCPUs
	// on an idle machine (it has no getter).
	all := CPUTopology(topo).CPUDetails.CPUs()
	res := all.Difference(pol.GetAllocatableCPUs(st))
	return &Kubelet{pol: pol, st: st, hint: hint, res: res}, nil
}

// Reserved implements kubeletparity.Kubelet.
func (k *Kubelet) Reserved() cpuset.CPUSet { return k.res }

// Default implements kubeletparity.Kubelet.
func (k *Kubelet) Default() cpuset.CPUSet { return k.st.GetDefaultCPUSet() }

// State is the kubelet's state (benchmarks copy a filled one in).
func (k *Kubelet) State() state.State { return k.st }

// Pod is p as a Guaranteed v1.Pod: every container's requests equal its
// limits (CPUs whole, 1Gi of memory).
func Pod(p kubeletparity.Pod) *v1.Pod {
	pod := &v1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.UID, Namespace: "default", UID: types.UID(p.UID)}}
	for _, c := range p.Containers {
		rl := v1.ResourceList{
			v1.ResourceCPU:    *resource.NewQuantity(int64(c.CPUs), resource.DecimalSI),
			v1.ResourceMemory: resource.MustParse("1Gi"),
		}
		ct := v1.Container{Name: c.Name, Resources: v1.ResourceRequirements{Requests: rl, Limits: rl}}
		if c.Init {
			pod.Spec.InitContainers = append(pod.Spec.InitContainers, ct)
		} else {
			pod.Spec.Containers = append(pod.Spec.Containers, ct)
		}
	}
	return pod
}

func container(pod *v1.Pod, name string) *v1.Container {
	for i := range pod.Spec.InitContainers {
		if pod.Spec.InitContainers[i].Name == name {
			return &pod.Spec.InitContainers[i]
		}
	}
	for i := range pod.Spec.Containers {
		if pod.Spec.Containers[i].Name == name {
			return &pod.Spec.Containers[i]
		}
	}
	panic("no container " + name)
}

// Hints implements kubeletparity.Kubelet.
func (k *Kubelet) Hints(p kubeletparity.Pod, c int) []kubeletparity.Hint {
	pod := Pod(p)
	hs, ok := k.pol.GetTopologyHints(logger, k.st, pod, container(pod, p.Containers[c].Name), lifecycle.AddOperation)[string(v1.ResourceCPU)]
	if !ok {
		return nil
	}
	out := make([]kubeletparity.Hint, 0, len(hs))
	for _, h := range hs {
		var m hints.Mask
		if h.NUMANodeAffinity != nil {
			m = hints.NewMask(h.NUMANodeAffinity.GetBits()...)
		}
		out = append(out, hintOf(h, m))
	}
	return out
}

// Allocate implements kubeletparity.Kubelet.
func (k *Kubelet) Allocate(p kubeletparity.Pod, c int, aff hints.Mask) (cpuset.CPUSet, *kubeletparity.Refusal) {
	pod := Pod(p)
	return k.AllocatePod(pod, container(pod, p.Containers[c].Name), aff)
}

// AllocatePod is Allocate for a built pod.
func (k *Kubelet) AllocatePod(pod *v1.Pod, ct *v1.Container, aff hints.Mask) (cpuset.CPUSet, *kubeletparity.Refusal) {
	*k.hint = topologymanager.TopologyHint{}
	if aff != 0 {
		m, err := bitmask.NewBitMask(aff.Nodes()...)
		if err != nil {
			return cpuset.New(), &kubeletparity.Refusal{Reason: "error", Detail: err.Error()}
		}
		*k.hint = topologymanager.TopologyHint{NUMANodeAffinity: m, Preferred: true}
	}
	if err := k.pol.Allocate(logger, k.st, pod, ct, lifecycle.AddOperation); err != nil {
		return cpuset.New(), refusal(err)
	}
	cpus, _ := k.st.GetCPUSet(string(pod.UID), ct.Name)
	return cpus, nil
}

func refusal(err error) *kubeletparity.Refusal {
	var smt cpumanager.SMTAlignmentError
	if errors.As(err, &smt) {
		return &kubeletparity.Refusal{Reason: allocator.ReasonSMTAlignment,
			Detail: kubeletparity.SMTDetail(smt.RequestedCPUs, smt.CpusPerCore, smt.AvailablePhysicalCPUs, smt.CausedByPhysicalCPUs)}
	}
	if strings.HasPrefix(err.Error(), "not enough cpus available to satisfy request") {
		return &kubeletparity.Refusal{Reason: allocator.ReasonInsufficientCPUs}
	}
	return &kubeletparity.Refusal{Reason: "error", Detail: fmt.Sprint(err)}
}

// Remove implements kubeletparity.Kubelet.
func (k *Kubelet) Remove(pod, container string) {
	if err := k.pol.RemoveContainer(logger, k.st, pod, container); err != nil {
		panic(err) // never: RemoveContainer only returns nil
	}
}
