package allocator

import (
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubever"
)

// Static-policy option names, identical to the kubelet's.
const (
	OptFullPCPUsOnly             = "full-pcpus-only"
	OptDistributeCPUsAcrossNUMA  = "distribute-cpus-across-numa"
	OptAlignBySocket             = "align-by-socket"
	OptDistributeCPUsAcrossCores = "distribute-cpus-across-cores"
	OptPreferAlignByUncoreCache  = "prefer-align-cpus-by-uncorecache"
	OptStrictCPUReservation      = "strict-cpu-reservation"
	// OptStrictAlignByUncoreCache is this project's own extension, not a
	// kubelet option (see uncore_strict.go): "true" or "exclusive".
	OptStrictAlignByUncoreCache = "strict-align-cpus-by-uncorecache"
)

// Options are the parsed static-policy options (see ParseOptions).
type Options struct {
	FullPCPUsOnly             bool
	DistributeCPUsAcrossNUMA  bool
	AlignBySocket             bool
	DistributeCPUsAcrossCores bool
	PreferAlignByUncoreCache  bool
	StrictCPUReservation      bool
	// StrictUncoreCache is strict-align-cpus-by-uncorecache (off, strict
	// or exclusive).
	StrictUncoreCache UncoreStrictness
	// KubeletVersion is the kubelet release whose placement rules are
	// followed (config key kubelet_version; the zero value is 1.38). Not a
	// kubelet option: ParseOptions leaves it zero and Map leaves it out.
	KubeletVersion kubever.Version
}

// ContainerType tells app containers from init containers (whose CPUs the
// pod's later containers may reuse) and sidecars (restartable init
// containers, never reused).
type ContainerType int

// Container types.
const (
	App ContainerType = iota
	Init
	Sidecar
)

// State is the static policy's state. Treat it as immutable: every
// operation returns a new State and leaves its argument untouched.
type State struct {
	// Default is the shared pool (the kubelet's defaultCpuSet). It holds
	// the reserved CPUs unless strict-cpu-reservation is on. A bitmap, not
	// a cpuset.CPUSet: it changes on every allocation and holds most of
	// the machine.
	Default cpumask.Mask
	// Assignments maps pod UID -> container name -> exclusive CPUs.
	Assignments map[string]map[string]cpuset.CPUSet
	// ReusablePod and Reusable are the CPUs of finished init containers of
	// the most recently allocated pod, which its later containers may reuse.
	ReusablePod string
	Reusable    cpuset.CPUSet
}

// Request asks for exclusive CPUs for one container.
type Request struct {
	Pod       string // pod UID
	Container string // container name
	Type      ContainerType
	CPUs      int // number of exclusive CPUs, >= 1
}

// Reasoner is implemented by every error the allocator returns; Reason is
// the stable reason word (e.g. "SMTAlignmentError") that starts the error
// text and labels metrics.
type Reasoner interface {
	error
	Reason() string
}
