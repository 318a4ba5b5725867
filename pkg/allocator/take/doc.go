// Package take is the choice of exclusive CPUs behind the static policy of
// pkg/allocator: the kubelet's takeByTopology (the NUMA-packed best fit,
// the distribute-cpus-across-cores spread, the distribute-cpus-across-numa
// split) and the planning half of strict-align-cpus-by-uncorecache, run
// over a Machine, the topology's levels (cores, sockets, NUMA nodes,
// uncore caches) precomputed once, with CPU sets as Bits.
//
// It is separate from pkg/allocator because it knows nothing of pools,
// State, requests or options: a Fit names the rules a run follows
// (pkg/allocator translates its Options into one) and the answer is a set
// of CPUs or nil. Like pkg/allocator it is pure: no I/O, no globals, its
// inputs never modified; a Machine is immutable once built (the pool of
// scratch space it holds changes no result) and safe for concurrent use.
// It never imports pkg/allocator.
//
// pkg/allocator/doc.go says which kubelet release's rules Fit.V137 picks,
// where the two differ (the steps are named there: coreIsFree, socketFull,
// takeRemainingCPUsSpread, sortedUncore, takeUncoreCache in accumulator.go;
// rangeNUMANodesNeeded in distribute.go) and where this code departs from
// the kubelet's on purpose.
package take
