package allocator

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// ParseOptions turns the kubelet-style option table (cpuManagerPolicyOptions:
// option name -> string value) into Options. Values parse as the kubelet
// parses them (strconv.ParseBool: "true", "false", "1", "0", ...). An unknown
// option or a bad value is an *OptionsError naming the option; with several
// bad entries the alphabetically first is reported, so the message is stable.
// Compatibility between options is checked by Validate.
func ParseOptions(opts map[string]string) (Options, error) {
	names := slices.Sorted(maps.Keys(opts))
	var o Options
	for _, name := range names {
		var field *bool
		switch name {
		case OptFullPCPUsOnly:
			field = &o.FullPCPUsOnly
		case OptDistributeCPUsAcrossNUMA:
			field = &o.DistributeCPUsAcrossNUMA
		case OptAlignBySocket:
			field = &o.AlignBySocket
		case OptDistributeCPUsAcrossCores:
			field = &o.DistributeCPUsAcrossCores
		case OptPreferAlignByUncoreCache:
			field = &o.PreferAlignByUncoreCache
		case OptStrictCPUReservation:
			field = &o.StrictCPUReservation
		case OptStrictAlignByUncoreCache:
			v, err := parseUncoreStrictness(opts[name])
			if err != nil {
				return Options{}, &OptionsError{Option: name, Err: fmt.Errorf("bad value for option %q: %w", name, err)}
			}
			o.StrictUncoreCache = v
			continue
		default:
			return Options{}, &OptionsError{Option: name, Err: fmt.Errorf("unknown CPU Manager Policy option: %q", name)}
		}
		v, err := strconv.ParseBool(opts[name])
		if err != nil {
			return Options{}, &OptionsError{Option: name, Err: fmt.Errorf("bad value for option %q: %w", name, err)}
		}
		*field = v
	}
	return o, nil
}

// Map returns the options that are on, as the option table ParseOptions
// reads ("true" values only).
func (o Options) Map() map[string]string {
	m := map[string]string{}
	for _, f := range []struct {
		on   bool
		name string
	}{
		{o.FullPCPUsOnly, OptFullPCPUsOnly},
		{o.DistributeCPUsAcrossNUMA, OptDistributeCPUsAcrossNUMA},
		{o.AlignBySocket, OptAlignBySocket},
		{o.DistributeCPUsAcrossCores, OptDistributeCPUsAcrossCores},
		{o.PreferAlignByUncoreCache, OptPreferAlignByUncoreCache},
		{o.StrictCPUReservation, OptStrictCPUReservation},
	} {
		if f.on {
			m[f.name] = "true"
		}
	}
	if o.StrictUncoreCache != UncoreStrictOff {
		m[OptStrictAlignByUncoreCache] = o.StrictUncoreCache.String()
	}
	return m
}

// Validate checks the options against each other and against the machine,
// as the kubelet does at start-up: the incompatible pairs are named in the
// error, and align-by-socket is refused where sockets outnumber NUMA nodes
// (topo may be nil to skip that hardware check). Compatibility with the
// topology manager policy (align-by-socket with single-numa-node) is the
// policy engine's check.
func (o Options) Validate(topo *topology.Topology) error {
	pairs := []struct {
		a, b   bool
		na, nb string
	}{
		{o.FullPCPUsOnly, o.DistributeCPUsAcrossCores, OptFullPCPUsOnly, OptDistributeCPUsAcrossCores},
		{o.DistributeCPUsAcrossNUMA, o.DistributeCPUsAcrossCores, OptDistributeCPUsAcrossNUMA, OptDistributeCPUsAcrossCores},
		{o.PreferAlignByUncoreCache, o.DistributeCPUsAcrossCores, OptPreferAlignByUncoreCache, OptDistributeCPUsAcrossCores},
		{o.PreferAlignByUncoreCache, o.DistributeCPUsAcrossNUMA, OptPreferAlignByUncoreCache, OptDistributeCPUsAcrossNUMA},
		// The strict form places whole-cache and single-cache sets of its
		// own; spreading over cores or NUMA nodes contradicts it.
		{o.StrictUncoreCache != UncoreStrictOff, o.DistributeCPUsAcrossCores, OptStrictAlignByUncoreCache, OptDistributeCPUsAcrossCores},
		{o.StrictUncoreCache != UncoreStrictOff, o.DistributeCPUsAcrossNUMA, OptStrictAlignByUncoreCache, OptDistributeCPUsAcrossNUMA},
	}
	for _, p := range pairs {
		if p.a && p.b {
			return &OptionsError{Option: p.na, Err: fmt.Errorf("static policy options %s and %s can not be used at the same time", p.na, p.nb)}
		}
	}
	if o.AlignBySocket && topo != nil && topo.NumSockets() > topo.NumNUMANodes() {
		return &OptionsError{Option: OptAlignBySocket, Err: fmt.Errorf(
			"option %s is not compatible with hardware where sockets (%d) outnumber NUMA nodes (%d)",
			OptAlignBySocket, topo.NumSockets(), topo.NumNUMANodes())}
	}
	return nil
}
