// Package podres is what a pod spec says for a container's resources and
// the kubelet's conversions of it (QoS class, CPU shares and quota,
// oom_score_adj, the pod-level sums, the cgroupfs pod cgroup): the model
// the in-process NRI runtime (internal/nritest) and the real-runtime
// framework (test/e2e/framework) share. It does no I/O but NodeMemory.
package podres

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	cri "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// QOS is a pod's Kubernetes QoS class.
type QOS string

// The three QoS classes, spelled as the kubelet's cgroupfs driver names their
// cgroup directories.
const (
	Guaranteed QOS = "guaranteed"
	Burstable  QOS = "burstable"
	BestEffort QOS = "besteffort"
)

// The kubelet's CPU conversions for cgroup v1 with CFS quota enforced (its
// default): pkg/kubelet/cm/helpers_linux.go semantics, reimplemented.
const (
	cfsPeriod      = 100000 // the kubelet always sends this period
	minShares      = 2
	sharesPerCPU   = 1024
	milliPerCPU    = 1000
	minQuotaPeriod = 1000
)

// Resources is what a pod spec says for one container. Zero means "not set".
// A missing request defaults to the limit, as the API server does.
type Resources struct {
	CPURequestMilli int64
	CPULimitMilli   int64
	MemRequest      int64
	MemLimit        int64
}

// GuaranteedCPUs is a Guaranteed container with n whole CPUs (request = limit)
// and 64 MiB of memory (request = limit).
func GuaranteedCPUs(n int) Resources {
	return GuaranteedMilli(int64(n) * milliPerCPU)
}

// GuaranteedMilli is a Guaranteed container with milli CPU (request = limit)
// and 64 MiB of memory.
func GuaranteedMilli(milli int64) Resources {
	return Resources{CPURequestMilli: milli, CPULimitMilli: milli, MemRequest: 64 << 20, MemLimit: 64 << 20}
}

func (r Resources) normalized() Resources {
	if r.CPURequestMilli == 0 {
		r.CPURequestMilli = r.CPULimitMilli
	}
	if r.MemRequest == 0 {
		r.MemRequest = r.MemLimit
	}
	return r
}

// PodQOS classifies a pod by its containers' resources, as the kubelet's
// GetPodQOS does: Guaranteed when every container has CPU and memory limits
// equal to its requests, BestEffort when nothing is requested or limited, else
// Burstable.
func PodQOS(ctrs ...Resources) QOS {
	guaranteed, empty := true, true
	for _, r := range ctrs {
		n := r.normalized()
		if n.CPURequestMilli != 0 || n.CPULimitMilli != 0 || n.MemRequest != 0 || n.MemLimit != 0 {
			empty = false
		}
		if n.CPULimitMilli == 0 || n.MemLimit == 0 || n.CPURequestMilli != n.CPULimitMilli || n.MemRequest != n.MemLimit {
			guaranteed = false
		}
	}
	switch {
	case len(ctrs) == 0 || empty:
		return BestEffort
	case guaranteed:
		return Guaranteed
	default:
		return Burstable
	}
}

// MilliToShares is the kubelet's cpu.shares for a CPU request in milli CPU.
func MilliToShares(milli int64) int64 {
	if milli == 0 {
		return minShares
	}
	return max(milli*sharesPerCPU/milliPerCPU, minShares)
}

// MilliToQuota is the kubelet's CFS quota for a CPU limit in milli CPU; 0 (no
// quota) when there is no limit.
func MilliToQuota(milli int64) int64 {
	if milli == 0 {
		return 0
	}
	return max(milli*cfsPeriod/milliPerCPU, minQuotaPeriod)
}

// OOMScoreAdj is the kubelet's oom_score_adj for a container of the given QoS
// class on a node with nodeMemory bytes.
func OOMScoreAdj(q QOS, r Resources, nodeMemory int64) int64 {
	switch q {
	case Guaranteed:
		return -997
	case BestEffort:
		return 1000
	}
	adj := int64(1000)
	if nodeMemory > 0 {
		adj = 1000 - 1000*r.normalized().MemRequest/nodeMemory
	}
	return min(max(adj, 2), 999)
}

// CRI returns the LinuxContainerResources the kubelet sends in
// CreateContainer for a container of a pod in class q: shares from the
// request, quota from the limit (0 without a limit), period always 100000.
// The node's memory size is not known here, so a Burstable container gets
// oom_score_adj 999; CRIOnNode computes it.
func (r Resources) CRI(q QOS) *cri.LinuxContainerResources { return r.CRIOnNode(q, 0) }

// CRIOnNode is CRI on a node with nodeMemory bytes (0 = unknown), which
// the kubelet's Burstable oom_score_adj depends on.
func (r Resources) CRIOnNode(q QOS, nodeMemory int64) *cri.LinuxContainerResources {
	n := r.normalized()
	return &cri.LinuxContainerResources{
		CpuShares:          MilliToShares(n.CPURequestMilli),
		CpuPeriod:          cfsPeriod,
		CpuQuota:           MilliToQuota(n.CPULimitMilli),
		MemoryLimitInBytes: n.MemLimit,
		OomScoreAdj:        OOMScoreAdj(q, n, nodeMemory),
	}
}

// NodeMemory is MemTotal of /proc/meminfo in bytes, 0 if unreadable.
func NodeMemory() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, err := strconv.ParseInt(f[1], 10, 64)
			if err == nil {
				return kb << 10
			}
		}
	}
	return 0
}

// PodCRI returns the pod-level resources the kubelet sends in
// RunPodSandbox: the sum over the containers; a limit only when every
// container has one.
func PodCRI(q QOS, ctrs ...Resources) *cri.LinuxContainerResources {
	var sum Resources
	cpuLimited, memLimited := true, true
	for _, r := range ctrs {
		n := r.normalized()
		sum.CPURequestMilli += n.CPURequestMilli
		sum.CPULimitMilli += n.CPULimitMilli
		sum.MemRequest += n.MemRequest
		sum.MemLimit += n.MemLimit
		cpuLimited = cpuLimited && n.CPULimitMilli != 0
		memLimited = memLimited && n.MemLimit != 0
	}
	// A pod is limited only when every container is.
	if !cpuLimited {
		sum.CPULimitMilli = 0
	}
	if !memLimited {
		sum.MemLimit = 0
	}
	res := sum.CRI(q)
	res.OomScoreAdj = 0
	return res
}

// PodSlice is the kubelet's systemd slice name of a pod (what it sends as
// the CRI cgroup parent with the systemd driver):
// kubepods[-<qos>]-pod<uid>.slice, with the uid's dashes written as
// underscores (systemd reads a dash as nesting).
func PodSlice(q QOS, uid string) string {
	uid = strings.ReplaceAll(uid, "-", "_")
	if q == Guaranteed {
		return "kubepods-pod" + uid + ".slice"
	}
	return fmt.Sprintf("kubepods-%s-pod%s.slice", q, uid)
}

// CgroupParent is the kubelet's pod cgroup with the cgroupfs driver.
func CgroupParent(q QOS, uid string) string {
	if q == Guaranteed {
		return "/kubepods/pod" + uid
	}
	return fmt.Sprintf("/kubepods/%s/pod%s", q, uid)
}
