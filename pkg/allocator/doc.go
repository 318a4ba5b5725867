// Package allocator is the CPU manager's static policy: the reserved,
// shared and exclusive CPU pools and the topology-aware choice of exclusive
// CPUs, with every kubelet static-policy option. It is pure: it takes a
// topology and a State and returns a decision and the next State; it never
// modifies its inputs, does no I/O and keeps no globals.
//
// # Placement
//
// The choice follows the kubelet's observable rules (its static policy,
// k8s.io/kubernetes pkg/kubelet/cm/cpumanager) so that a pod gets the CPUs
// the kubelet would give it. takeByTopology (static.go) dispatches, as the
// kubelet's does, to package take (pkg/allocator/take), whose functions
// carry the kubelet's names: the NUMA-packed best fit (whole NUMA nodes
// and sockets, larger level first; with prefer-align-cpus-by-uncorecache
// whole and then partial uncore caches; whole cores unless
// distribute-cpus-across-cores; then single CPUs), always from the
// most-used group that can satisfy, ties by lowest id; and
// distribute-cpus-across-numa, the kubelet's balanced split with its
// rounded standard deviation. Allocation inside a hint takes min(n,
// aligned) CPUs from the hinted NUMA nodes (their sockets under
// align-by-socket) and the rest from everything else.
//
// # Kubelet versions followed
//
// Options.KubeletVersion (config key kubelet_version) picks the rule set:
// kubever.V138 (the zero value, the default) follows kubelet
// v1.38.0-beta.0, kubever.V137 follows v1.37.2 (take.Fit.V137). The rules
// that differ (kubelet138_test.go, here for the static policy's rows and
// in take for the best fit's, holds the v1.38 rows, under both; the
// functions named are take's but for Allocate, Take and generateHints):
//   - distribute-cpus-across-cores (takeRemainingCPUsSpread): v1.38 walks
//     each socket's cores with free CPUs by ascending free CPUs then core
//     id and takes one thread of each before any sibling (#140766); v1.37
//     took the socket's free CPUs by ascending id.
//   - distribute-cpus-across-numa (rangeNUMANodesNeeded): v1.38 raises
//     the fewest NUMA nodes to the topology manager hint's node count when
//     that is within the feasible range (#139456): Allocate passes the
//     merged hint's count to the aligned take, none to the rest; Take (a
//     pod-level pod's slice of its block) the pod hint's. v1.37 took no
//     hint.
//   - "Free" cores and sockets (coreIsFree, socketFull): v1.38 compares a
//     core's (socket's) free CPUs with its own size (#140498); v1.37 with
//     the machine averages CPUs/cores and CPUs/sockets. The whole-core
//     step stops once the need is below the smallest core (v1.38) or the
//     average core (v1.37).
//   - prefer-align-cpus-by-uncorecache (sortedUncore, takeUncoreCache):
//     v1.38 lists a cache spanning NUMA nodes once, under its first node,
//     and makes two passes: every wholly free cache the need covers (its
//     own size), then a partial take in each; v1.37 listed such a cache
//     under each node, and took whole caches only while the need was at
//     least the average cache size, interleaved with the partial takes.
//   - Hint Score (generateHints; #141796): v1.38 gives each CPU hint the
//     share of its NUMA nodes' unreserved CPUs that are not in the shared
//     pool (hints.UtilizationScore, the nodes as one pool; a container's
//     own and its pod's reusable CPUs count as taken); v1.37 has none. It
//     moves no placement: the merge and admission ignore it.
//
// Two v1.38 fixes hold under both rule sets, because the v1.37 code would
// hang or allocate on nodes it did not choose (see the differences below):
// a remainder subset must take the remainder in whole groups (#140730),
// and the combination chosen is the one that scored best (#141238).
//
// Before v1.37 the rules followed v1.36.3; two changed in v1.37.2 and are
// kept under both rule sets:
//   - The existing-assignment return comes before the full-pcpus-only
//     checks (Allocate): a restored container keeps its CPUs even when
//     too few whole cores are free, or its count is not a multiple of the
//     SMT level. v1.36 refused it with SMTAlignmentError.
//   - distribute-cpus-across-numa with align-by-socket (take's
//     Machine.Distributed):
//     among the NUMA combinations of one size, any within one socket
//     beats any that crosses sockets (balance decides within each kind),
//     and each node's even share is capped at its free CPUs in whole
//     groups, so a socket's nodes can split a request one of them could
//     not hold evenly. v1.36 ignored align-by-socket there.
//
// These are the only placement changes from v1.36.3 to v1.37.2: the
// kubelet's cpu_assignment.go changed in the distributed fit only, and
// policy_static.go's container path in the order of those two steps (the
// rest is logging and the resize operation plumbing, which leaves
// placement alone). Their new table rows, read from the
// k8s.io/kubernetes@v1.37.2 module, are kubelet137_test.go.
//
// A Static precomputes every grouping once (a take.Machine); a decision
// works on bitsets (take.Bits) over the online CPUs, so its cost is linear
// in the CPUs. The shared pool in State is a cpumask.Mask (a word copy
// away from those bitsets): as a map-based cpuset.CPUSet, converting it
// was most of a decision on large machines. Exclusive sets, a few CPUs
// each, stay cpuset.CPUSet. The scratch space of a placement is recycled
// through a sync.Pool held by the Static's take.Machine, which changes no
// result.
//
// # Where this differs from the kubelet
//
// In placement, only where the kubelet's code would corrupt its own state
// or hang:
//   - Under v1.37, a core (socket) counted "free" because its free CPUs
//     equal the machine average while its real size is larger (hybrid P/E
//     parts, sockets with offline CPUs) is taken for its free CPUs only;
//     the v1.37 kubelet adds the whole core to the result, busy sibling
//     included. v1.38 never counts such a core free.
//   - Under v1.37, the distributed fit allocates on the NUMA combination
//     and remainder subset it scored best. The v1.37 kubelet shared the
//     backing array of combinations of 4 or more nodes between siblings,
//     so on machines with 5 or more NUMA nodes it could allocate on
//     another combination than the best (v1.38 copies them, #141238).
//   - A group that the nested best-fit order lists under two parents (a
//     socket spanning NUMA nodes on a sockets-first machine, an uncore
//     cache spanning NUMA nodes in the whole-cache step) is taken once; the
//     kubelet would take it twice. The partial uncore walk keeps the
//     kubelet's repeated visits, which are harmless.
//   - distribute-cpus-across-numa skips a remainder subset that cannot take
//     the remainder in whole groups (kubelet v1.36 and v1.37 loop forever
//     there, with the CPU manager's lock held; v1.38 skips it too, #140730),
//     skips, under align-by-socket, a one-socket combination that no subset
//     can take the remainder of (v1.37 would choose it for its socket and
//     then loop forever handing the remainder out), and falls back to packed when one size has more than 100000 NUMA node
//     combinations (dozens of NUMA nodes; never with 16 or fewer).
//   - CPU hint generation states no preference (nil) on machines with more
//     than 16 NUMA nodes with CPUs. The kubelet enumerates every NUMA mask
//     for each container (2^n-1: 131071 at 17 nodes) and its merge walks
//     the cross product with every other provider's list (a device on one
//     node offers 2^(n-1) masks: billions of combinations), which does not
//     finish on the container-create path. Only a machine with more than
//     16 such nodes and max-allowable-numa-nodes raised above 16 reaches
//     this (the topology manager refuses more than 8 by default): there
//     the other providers' hints alone decide the affinity and restricted
//     admission, and exclusive CPUs are taken from that affinity first.
//   - A pod-level pod's checkpoint (pkg/policy; kubelet v1.38 restores it
//     too, #141041) is kept as the plugin wrote it, every assignment being
//     a container's that may be running: assignments that are not a
//     prefix of the spec order keep their CPUs (a container removed before
//     a later one leaves that shape; the kubelet takes it for a dead
//     instance's leftovers and allocates the pod again); a block that
//     overlaps the checkpoint's shared pool stays the pod's (the pool is
//     recomputed from the assignments, so no release is ever half done);
//     a slice the block can no longer hold refuses that container only
//     (the kubelet releases the whole pod, its running containers' CPUs
//     included). A shared regular init container stays on its pod's pool
//     until it is removed (nothing tells the plugin it has finished), so
//     an app slice that would empty that pool is refused
//     (EmptyPodSharedPoolError) while the kubelet lets it overlap the
//     finished init container; such a pod (a sidecar slice, a shared init
//     container, app slices filling the rest of the block) does not start.
//   - Inside a pod-level block, an app slice reuses a regular init
//     container's slice only when the request says Init (simulate, the
//     engine's callers); the daemon marks no container so (NRI does not),
//     and a stopped container there may be an app container in back-off
//     whose restart gets its slice back, so the daemon reuses nothing
//     inside a block.
//   - A pod's reusable init-container CPUs exclude CPUs another pod holds
//     (reachable only through Assign). AssignReusing restores the
//     same-pod overlaps init-container reuse creates; Assign refuses any
//     overlap.
//
// The shared pool empties as in the kubelet: every assignable CPU may be
// handed out, so under strict-cpu-reservation (reserved CPUs outside the
// pool) or with no reserved CPUs the last shared CPU goes to an exclusive
// container, and Assign may take it too. Where the pool's containers run
// then is not the allocator's decision; it differs from the kubelet, for
// the NRI runtimes' sake (pkg/policy, internal/daemon):
//   - While the pool is empty, shared-pool containers run on the reserved
//     CPUs (policy.Engine.SharedCPUs), which no container holds
//     exclusively. The kubelet skips containers whose cpuset is empty and
//     leaves them where they were, on CPUs that are now exclusive; an NRI
//     plugin must hand the runtime a non-empty cpuset, and exclusive CPUs
//     stay exclusive.
//   - With no reserved CPUs and an empty pool a shared-pool container has
//     no CPU that is not exclusive: policy.Engine.Add refuses it
//     (InsufficientCPUs, *policy.NoSharedCPUsError) where the kubelet
//     would run it unpinned on the exclusive CPUs, and the daemon refuses
//     an exclusive container whose CPUs would empty the pool while
//     shared-pool containers run (they would be left with no CPU). The
//     kubelet's CPU manager refuses to start with no reserved CPUs (only
//     its policy code accepts it), so no node moving from the kubelet
//     has this configuration; the daemon takes it only when written
//     explicitly (reserved_cpu_count = 0) and warns at start-up.
//   - InsufficientCPUs names the whole request and every assignable CPU
//     (the pod's reusable ones included). With a NUMA affinity the
//     kubelet's text gives what its second takeByTopology lacked after
//     the aligned step took what it could (7 CPUs asked with 6 free:
//     "requested=1, available=0"); the admission is the same, and the
//     operator reads the numbers of the pod.
//   - A checkpoint whose pool is empty is restored. The kubelet's own
//     state check takes an empty default set with assignments for a
//     corrupt file and will not start until the node is drained.
//
// strict-align-cpus-by-uncorecache is not a kubelet option but this
// project's extension of KEP-4800 (uncore_strict.go; the choice of caches
// is take's PlanStrict, take/strict.go): under it exclusive
// CPUs are chosen by the strict uncore rules instead of takeByTopology,
// and a container they cannot place is refused (UncoreCacheAlignmentError).
// Off, it changes nothing.
//
// Everything else, including what looks accidental (the partial uncore
// step's exact-match and need%2 quirks, the reuse set of only the most
// recently allocated pod), is reproduced.
package allocator
