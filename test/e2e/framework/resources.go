package framework

import "github.com/nri-cpualign/nri-cpualign/internal/podres"

// The resource model lives in internal/podres, which the in-process NRI
// runtime (internal/nritest) uses too; these names keep the framework's.

// QOS is a pod's Kubernetes QoS class.
type QOS = podres.QOS

// The three QoS classes, spelled as the kubelet's cgroupfs driver names their
// cgroup directories.
const (
	Guaranteed = podres.Guaranteed
	Burstable  = podres.Burstable
	BestEffort = podres.BestEffort
)

// Resources is what a pod spec says for one container (podres.Resources).
type Resources = podres.Resources

// The kubelet's conversions (see podres).
var (
	GuaranteedCPUs  = podres.GuaranteedCPUs
	GuaranteedMilli = podres.GuaranteedMilli
	PodQOS          = podres.PodQOS
	MilliToShares   = podres.MilliToShares
	MilliToQuota    = podres.MilliToQuota
	OOMScoreAdj     = podres.OOMScoreAdj
	NodeMemory      = podres.NodeMemory
	PodCRI          = podres.PodCRI
	CgroupParent    = podres.CgroupParent
)
