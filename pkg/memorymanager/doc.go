// Package memorymanager is the kubelet's memory manager with the Static
// policy (KEP-1769): per-NUMA-node accounting of memory and hugepages for
// the containers of Guaranteed pods, topology hints for the topology
// manager (hints.Hint, merged by hints.Merger), and the kubelet's state
// file. It is pure: no I/O, no clocks, no globals; every function takes a
// State and returns a new one.
//
// The kubelet's behaviour, kept:
//
//   - the machine state (NewState): per node and resource a table of total,
//     system reserved (the node's reservedMemory entry), allocatable,
//     reserved and free bytes; regular memory's allocatable also leaves out
//     the node's hugepage pools; reservedMemory is checked as the kubelet
//     checks it per node (ValidateReservations, which NewState and the
//     configuration's reserved_memory run). The kubelet's other check,
//     that the nodes' sums equal what Node Allocatable holds back
//     (ValidateReservedTotals), needs kubeReserved, systemReserved and the
//     eviction threshold, which the plugin's configuration does not have:
//     the daemon does not call it; it is kept, with the kubelet's error
//     texts, for a caller that knows them;
//   - hints (Hints, PodHints): every mask of nodes whose free memory (plus
//     the pod's reusable init-container memory) holds each requested
//     resource, preferred when as narrow as the narrowest mask whose
//     allocatable memory could hold it; a node is used alone or within one
//     group of nodes, never both (Cells, NumberOfAssignments);
//   - Allocate: the default hint when the merge gave no affinity, widening
//     an affinity that cannot hold the request, the kubelet's refusals and
//     their texts, memory taken in node order, init-container memory reused
//     by the later containers of the pod, sidecars never reused;
//   - the kubelet version (kubever.Version, config key kubelet_version)
//     decides two pod-scope rules: under v1.38 PodRequest counts resources
//     only init containers request (#140816) and PodHints regenerates the
//     hints of a pod with allocated containers from the first such
//     container's blocks against its own request (#141070: its nodes,
//     preferred); under v1.37 PodRequest lists the app containers'
//     resources only and PodHints checks those blocks against the pod's
//     request (nil, no preference, for a multi-container pod);
//   - Remove and RemovePod free in node order and dissolve groups left
//     without assignments; Compare is the kubelet's start-up check of a
//     restored state against the machine;
//   - ImportKubelet reads /var/lib/kubelet/memory_manager_state, in the GA
//     layout and the newer one with "data", and verifies its checksum as
//     the kubelet does (FNV-32a of the value as go-spew prints it).
//
// Deliberate differences:
//
//   - a single node that is in a multi-node group is refused at Allocate
//     ("preferred hint violates NUMA node allocation"): the kubelet's hints
//     never offer it, but its Allocate accepts it when the merge narrows a
//     group to one node, and its group bookkeeping then disagrees between
//     the nodes;
//   - the reusable init-container memory is part of the State, per pod,
//     until RemovePod: NRI creates a pod's containers over time, where the
//     kubelet admits them in one go and keeps it for the last pod only; an
//     Allocate of a container that already has blocks therefore changes
//     nothing, where the kubelet counts its reuse again;
//   - a reservation larger than what it is taken from, or of a page size
//     the node lacks, is refused (the kubelet's unsigned arithmetic wraps);
//     a resource a node has no table for counts as zero bytes;
//   - the blocks of a container come in resource name order;
//   - ValidateReservedTotals prints amounts with FormatBytes, where the
//     kubelet keeps the format each quantity was written in;
//   - podEntries (pod-level resources, a newer kubelet's) are refused on
//     import; the caller marks pods with pod-level resources as not
//     Guaranteed, since the kubelet's Static policy skips them.
//
// The caller reads the machine (NodeCapacity: sysfs.ReadMemory reads each
// node's MemTotal and hugepage pools) and passes each container's
// requests as admitted (after an in-place resize, the allocated values the
// kubelet uses).
package memorymanager
