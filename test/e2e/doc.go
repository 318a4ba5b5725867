// Package e2e is the real-runtime end-to-end suite of nri-cpualign (build
// tag e2e, run by scripts/e2e.sh, `make e2e`), run once per runtime: against
// the containerd of ../shared/e2e/setup-containerd.sh and against the CRI-O
// of ../shared/e2e/setup-crio.sh (E2E_RUNTIME=crio). It starts the real
// nri-cpualign binary and drives pods through CRI as the kubelet does; each
// check reads the container's CPUs from inside (/proc/1/status
// Cpus_allowed_list) and from its cgroup on the host (cpuset.cpus,
// cpuset.mems). The reusable pieces (CRI client, resources, cgroup and sysfs
// readers, the plugin process) live in package framework.
package e2e
