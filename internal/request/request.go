// Package request reads what a container asks for from what NRI reports,
// before the ledger's lock is taken: the policy.Request (QoS, CPU request
// and limit from the cgroup values the kubelet wrote, the pod's own
// request, memory), the NUMA nodes of its devices (sysfs, the NVIDIA
// driver's procfs files, DRA metadata) and the devices the kubelet's
// PodResources API lists for it. It knows nothing of the ledger or the
// daemon.
package request

import (
	"strings"

	"github.com/containerd/nri/pkg/api"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// The kubelet's CPU conversions for cgroup values: it writes
// cpu.shares = max(2, milli*1024/1000) and, with a CPU limit,
// cfs_quota = milli*period/1000 with period 100000. This file turns them
// back into milli-CPUs.
const (
	sharesPerCPU = 1024
	milliPerCPU  = 1000
	minShares    = 2
)

// milliFromShares is the CPU request the kubelet turned into shares.
// Shares of 2 or less are the kubelet's floor (BestEffort, or a request
// below 2m): no request.
func milliFromShares(shares uint64) int64 {
	if shares <= minShares {
		return 0
	}
	shares = min(shares, maxCgroupValue)
	return int64(shares * milliPerCPU / sharesPerCPU)
}

// maxCgroupValue caps shares, quota and period before the arithmetic
// (2^40: far beyond what a kernel accepts, while x*1000 cannot overflow),
// so that absurd values give absurd but non-negative requests instead of
// wrapping around to negative ones.
const maxCgroupValue = 1 << 40

// milliFromQuota is the CPU limit the kubelet turned into a CFS quota; a
// quota <= 0 (-1 = unlimited, 0 = unset) or no period means no limit.
func milliFromQuota(quota int64, period uint64) int64 {
	if quota <= 0 || period == 0 {
		return 0
	}
	quota, period = min(quota, maxCgroupValue), min(period, maxCgroupValue)
	return quota * milliPerCPU / int64(period)
}

// qosFromCgroupParent derives the pod's QoS class from the cgroup parent
// the kubelet chose for it: /kubepods/burstable/pod<uid> (cgroupfs) or
// kubepods-burstable-pod<uid>.slice (systemd) is Burstable, the same with
// besteffort is BestEffort, and a pod directly under kubepods is
// Guaranteed.
func qosFromCgroupParent(parent string) policy.QoS {
	p := strings.ToLower(parent)
	// Only the kubelet's own path components count, not a pod UID or
	// container ID that happens to contain the word.
	for _, part := range strings.FieldsFunc(p, func(r rune) bool { return r == '/' || r == ':' }) {
		part = strings.TrimSuffix(part, ".slice")
		for _, word := range strings.Split(part, "-") {
			switch word {
			case "besteffort":
				return policy.BestEffort
			case "burstable":
				return policy.Burstable
			}
		}
	}
	return policy.Guaranteed
}

// CPUOf returns the LinuxCPU of a resources message, or nil.
func CPUOf(r *api.LinuxResources) *api.LinuxCPU {
	if r == nil {
		return nil
	}
	return r.GetCpu()
}

// requestFromCPU turns cgroup CPU values into milli-CPU request and limit.
func requestFromCPU(cpu *api.LinuxCPU) (request, limit int64) {
	if cpu == nil {
		return 0, 0
	}
	return milliFromShares(cpu.GetShares().GetValue()), milliFromQuota(cpu.GetQuota().GetValue(), cpu.GetPeriod().GetValue())
}

// For builds the engine request for a container from what NRI
// reports: QoS from the pod's cgroup parent (or the container's cgroups
// path when the pod has none), request and limit from cpu.shares and the
// CFS quota, and under the pod scope the pod's request from the pod-level
// resources the kubelet sends with the sandbox (PodResources: the pod's
// effective request, init containers and sidecars counted as Kubernetes
// counts them).
//
// Every container is an app container: a real kubelet v1.36 sends nothing
// that marks an init container or a sidecar (restartable init container).
// Its container labels are the pod name, namespace, UID and container
// name; its annotations the container hash, restart count, termination
// message path and policy, grace period (and preStop, ports); the
// runtimes add their own (container type "container" for all three). The
// order of creation and the exit are the only differences, and the exit
// is what matters: the runtime sends StopContainer when an init container
// exits (containerd and CRI-O both, checked by test/kubelet), which gives
// its exclusive CPUs back before the kubelet creates the next container.
//
// The engine decides exclusivity from these values (Guaranteed, request
// equal to limit, whole CPUs). Because shares lose precision
// (333m -> 340 shares -> 332m), a non-integral request never comes back as
// an integral one, while n CPUs always come back as exactly n*1000.
func For(pod *api.PodSandbox, ctr *api.Container) policy.Request {
	return WithCPU(pod, ctr, CPUOf(ctr.GetLinux().GetResources()))
}

// WithCPU is For with the container's CPU values replaced by
// cpu (an in-place resize).
func WithCPU(pod *api.PodSandbox, ctr *api.Container, cpu *api.LinuxCPU) policy.Request {
	parent := pod.GetLinux().GetCgroupParent()
	if parent == "" {
		parent = ctr.GetLinux().GetCgroupsPath()
	}
	qos := qosFromCgroupParent(parent)
	req, lim := requestFromCPU(cpu)
	req, lim = guaranteedAgreement(qos, req, lim)
	if lim < 0 {
		qos, lim = policy.Burstable, -lim
	}
	// Only PodResources is the pod's: pod.Linux.Resources is the sandbox
	// (pause) container's own cgroup values (cpu.shares 2 from containerd
	// 2.4 and CRI-O 1.37 under a real kubelet), never the pod's sum.
	podReq, podLim := requestFromCPU(CPUOf(pod.GetLinux().GetPodResources()))
	return policy.Request{
		Pod:                PodKey(pod),
		Container:          ctr.GetName(),
		QoS:                qos,
		CPURequestMilli:    req,
		CPULimitMilli:      lim,
		Type:               allocator.App,
		PodCPURequestMilli: podReq,
		PodCPULimitMilli:   podLim,
		Memory:             memoryOf(ctr.GetLinux().GetResources()),
		PodMemory:          memoryOf(pod.GetLinux().GetPodResources()),
	}
}

// guaranteedAgreement reconciles a Guaranteed container's request (from
// shares) with its limit (from the quota), which the kubelet makes equal:
//   - no quota (the kubelet's cpuCFSQuota off writes 0) means limit =
//     request;
//   - shares lose precision (333m -> 340 shares -> 332m): when the two
//     disagree, the non-integral one is taken for both, so the container
//     runs on the shared pool: whole CPUs only when both agree on an
//     integer;
//   - two different whole numbers cannot come from the kubelet; the
//     values are returned with the limit negated to tell the caller to
//     treat the container as Burstable.
//
// Other QoS classes are returned unchanged.
func guaranteedAgreement(qos policy.QoS, req, lim int64) (int64, int64) {
	if qos != policy.Guaranteed {
		return req, lim
	}
	switch {
	case lim == 0:
		return req, req
	case req == lim:
		return req, lim
	case lim%milliPerCPU != 0:
		return lim, lim
	case req%milliPerCPU != 0:
		return req, req
	default:
		return req, -lim
	}
}

// PodKey is the engine's pod key: the pod UID, or the sandbox ID for a
// sandbox without one (not created by the kubelet).
func PodKey(pod *api.PodSandbox) string {
	if uid := pod.GetUid(); uid != "" {
		return uid
	}
	return pod.GetId()
}

// PodName is namespace/name for logs.
func PodName(pod *api.PodSandbox) string {
	if pod.GetNamespace() == "" {
		return pod.GetName()
	}
	return pod.GetNamespace() + "/" + pod.GetName()
}
