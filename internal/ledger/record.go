package ledger

import (
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// Record is what the daemon remembers about a container it has placed.
// The engine knows containers by pod UID and name; the runtime by ID. Its
// JSON is the checkpoint's index entry.
type Record struct {
	ID          string `json:"id"`
	Pod         string `json:"pod"`      // engine pod key (pod UID)
	PodName     string `json:"pod_name"` // namespace/name, for logs and /state
	Name        string `json:"name"`
	CgroupsPath string `json:"cgroups_path,omitempty"`
	Exclusive   bool   `json:"exclusive"`
	// Mems is the cpuset.mems the daemon set, "" when it leaves mems to
	// the runtime (shared-pool containers, adopted assignments).
	Mems string `json:"mems,omitempty"`
	// Since is when the container got its CPUs (RFC 3339, UTC, seconds):
	// its admission, or the Synchronize that placed or adopted it. Records
	// of earlier releases have none.
	Since string `json:"since,omitempty"`
}

// PodContainer names an engine assignment.
type PodContainer struct{ Pod, Name string }

// DeviceView is one device of a container and the NUMA nodes it gave:
// the runtime's path with the numbers sysfs was asked about
// ("/dev/vfio/90 (char 242:1)"), or the device plugin's variable and the
// address ("PCIDEVICE_INTEL_COM_SRIOV 0000:af:02.1"). /state serves it.
type DeviceView struct {
	Device string `json:"device"`
	NUMA   []int  `json:"numa"`
}

// Shrink is a downsize answered and not committed yet (the adapter's
// resize.go).
type Shrink struct {
	From cpuset.CPUSet  // the container's CPUs when it was answered
	Req  policy.Request // the resized request, decided again at commit
	To   cpuset.CPUSet  // the CPUs it was answered with
}
