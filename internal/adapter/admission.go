package adapter

import (
	"maps"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// admitInput is what one admission decides from, whichever event brings
// it (CreateContainer, or Synchronize for a container created while the
// plugin was away).
type admitInput struct {
	// Req is the container's request (request.For), without the device
	// hint provider, which Nodes gives: the NUMA nodes of its devices
	// (none: no preference).
	Req   policy.Request
	Nodes []int
	// Static is cpu_manager_policy = static (policy.ExclusiveCPUs).
	Static bool
	// Tracked tells whether a container of Req's pod by that name runs:
	// its CPUs and memory are not the pod's to reuse.
	Tracked func(name string) bool
	// SharedOthers counts the shared-pool containers beside it (stranding).
	SharedOthers int
}

// admission is the outcome of admit: Err is the refusal (reasonOf gives
// its reason word), else Decision is what it got and Next the state it
// leads to.
type admission struct {
	ID       string         // the container's, set by the planner
	Request  policy.Request // with the device hints it was decided with
	Decision policy.Decision
	Next     policy.State
	Err      error
}

// admit is the one admission of a container in st: the device hint
// provider, the pod's memory and CPUs its stopped containers leave for
// reuse (held.go, memory.go), the engine's decision, and the refusal of
// an exclusive decision that strands the shared-pool containers. It is
// pure: the callers log, count and commit.
func admit(e *policy.Engine, st policy.State, in admitInput) admission {
	req := withNodeHints(e, in.Req, in.Nodes)
	req = withMemoryReuse(e, st, req, in.Tracked)
	next, dec, err := e.Add(withReuse(st, req, in.Static, in.Tracked), req)
	if err == nil {
		err = stranding(e, req, next, dec, in.SharedOthers)
	}
	return admission{Request: req, Decision: dec, Next: next, Err: err}
}

// record is base with what the admission decided: exclusive or not, and
// the cpuset.mems the plugin set (exclusive CPUs, or memory the memory
// manager pinned).
func (a admission) record(base ledger.Record) ledger.Record {
	dec := a.Decision
	base.Exclusive = dec.Exclusive
	if (dec.Exclusive || dec.MemPinned) && !dec.Mems.IsEmpty() {
		base.Mems = dec.Mems.String()
	}
	return base
}

// deviceNodes is the NUMA nodes the device hint provider found
// (request.DeviceReader.Nodes), with its debug line. A sysfs error is logged and
// counts as no preference: device locality steers placement, it is never
// a reason to fail a container.
func deviceNodes(info request.DeviceInfo, err error, entry *logrus.Entry) []int {
	if err != nil {
		entry.WithError(err).Warn(request.NoDeviceHintMsg)
		return nil
	}
	info.Log(entry)
	return info.Nodes
}

// withNodeHints adds the device hint provider to req: the NUMA nodes of
// the container's devices (none: no preference).
func withNodeHints(e *policy.Engine, req policy.Request, nodes []int) policy.Request {
	if len(nodes) == 0 {
		return req
	}
	h := make(map[string][]hints.Hint, len(req.Hints)+1)
	maps.Copy(h, req.Hints)
	h[request.DeviceResource] = e.DeviceHints(nodes)
	req.Hints = h
	return req
}

// stranding refuses dec, an admission computed as next, when it is
// exclusive and leaves shared-pool containers nowhere to run while
// sharedOthers of them run.
func stranding(e *policy.Engine, req policy.Request, next policy.State, dec policy.Decision, sharedOthers int) error {
	if !dec.Exclusive || dec.Existing || sharedOthers == 0 || !e.SharedCPUs(next).IsEmpty() {
		return nil
	}
	return &strandedError{Pod: req.Pod, Container: req.Container, CPUs: dec.CPUs.Size(), Shared: sharedOthers}
}
