package policy

import (
	"fmt"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
)

// validateStrictUncore refuses strict-align-cpus-by-uncorecache with the
// pod scope under restricted or single-numa-node: pod-scope CPU hints are
// for the pod's whole request and cannot know how its containers will
// split over uncore caches, so the topology manager could admit a pod
// whose containers the strict placement then refuses.
func validateStrictUncore(o allocator.Options, cfg Config) error {
	if o.StrictUncoreCache == allocator.UncoreStrictOff || cfg.TopologyScope != hints.ScopePod {
		return nil
	}
	if cfg.TopologyPolicy == hints.PolicyRestricted || cfg.TopologyPolicy == hints.PolicySingleNUMANode {
		return &ConfigError{Key: KeyCPUManagerPolicyOptions, Err: fmt.Errorf(
			"option %s is incompatible with topology_manager_scope %s under topology_manager_policy %s "+
				"(pod-scope hints cannot tell how the pod's containers split over uncore caches); use the container scope",
			allocator.OptStrictAlignByUncoreCache, hints.ScopePod, cfg.TopologyPolicy)}
	}
	return nil
}

// StrictUncore is the strict-align-cpus-by-uncorecache setting (off under
// cpu_manager_policy none).
func (e *Engine) StrictUncore() allocator.UncoreStrictness {
	if e.static == nil {
		return allocator.UncoreStrictOff
	}
	return e.static.StrictUncore()
}

// checkStrictUncore refuses, before the topology manager's admission, an
// exclusive container that strict-align-cpus-by-uncorecache cannot place
// anywhere on the machine, so that its rejection carries
// UncoreCacheAlignmentError under every topology policy (under restricted
// its CPU hints would be empty and the reason TopologyAffinityError).
// full-pcpus-only's SMTAlignmentError comes first, as in Allocate.
func (e *Engine) checkStrictUncore(st State, req Request, exclusive bool) error {
	if !exclusive || e.StrictUncore() == allocator.UncoreStrictOff {
		return nil
	}
	return e.static.CheckStrictUncore(st.Alloc, allocRequest(req))
}
