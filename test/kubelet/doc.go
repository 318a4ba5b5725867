// Package kubelet is the real-kubelet end-to-end suite of nri-cpualign (build
// tag e2e, run by scripts/e2e-kubelet.sh, `make e2e-kubelet`). A real kubelet
// v1.37 runs standalone (static pods from a directory, no API server) with the
// CPU, topology and memory managers off, against containerd or CRI-O from
// ../shared/e2e, with the real nri-cpualign binary connected to the runtime.
// Pods are static pod manifests; their status comes from the kubelet's
// read-only port (/pods); each container's CPUs are read from its process
// (/proc/<pid>/status Cpus_allowed_list, the pid from the container's
// cgroup) and from its cgroup (cpuset.cpus).
package kubelet
