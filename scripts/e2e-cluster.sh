#!/usr/bin/env bash
# e2e-cluster.sh - the DaemonSet on a real control plane (`make e2e-cluster`,
# part of `make test`). Builds or finds the Kubernetes v1.36 binaries
# (../shared/e2e/setup-kube.sh), starts the test containerd, then etcd,
# kube-apiserver, kube-controller-manager, kube-scheduler and a kubelet
# registered as a node, all on 127.0.0.1 with their data in a temporary
# directory (scripts/lib-cluster.sh), runs the ginkgo suite in test/cluster
# (which installs the plugin the way the README's "Install on a cluster"
# says) and stops everything at exit, failure or not. One run at a time per
# machine: the whole run holds /tmp/nri-cpualign-e2e.lock.
#
# Extra arguments go to the test binary, e.g.
#   scripts/e2e-cluster.sh -ginkgo.focus='refuse'
# Keep the work dir (component logs, certificates, kubelet and plugin state)
# with E2E_KEEP=1; it is also kept when the suite fails.
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
# shellcheck source=scripts/lib-cluster.sh
source "$(dirname "$0")/lib-cluster.sh"
check_prereqs
command -v openssl >/dev/null || die "openssl not found (it makes the cluster's certificates)"

exec 9>/tmp/nri-cpualign-e2e.lock
if ! flock -n 9; then
	log "another e2e run holds /tmp/nri-cpualign-e2e.lock, waiting"
	flock 9
fi

# The demo's plugin would clash with the DaemonSet's (same NRI name).
if demo_plugin_running || [ -d "$DEMO_RUN" ]; then
	log "a demo is running: stopping it first (as make demo-down would)"
	stop_demo_plugin
	rm -rf "$DEMO_RUN"
fi

T0=$SECONDS
CLUSTER_DIR=$(mktemp -d /tmp/nri-cpualign-cluster.XXXXXX)
status=1
cleanup() {
	local t=$SECONDS
	cluster_stop
	teardown_containerd
	if [ "$status" = 0 ] && [ "${E2E_KEEP:-0}" != 1 ]; then
		rm -rf "$CLUSTER_DIR"
	else
		log "component logs, certificates, kubelet and plugin state kept in $CLUSTER_DIR"
	fi
	log "teardown took $((SECONDS - t))s; e2e-cluster finished in $((SECONDS - T0))s, status $status"
}
trap cleanup EXIT

kube_binaries
cluster_kill_leftovers
# A clean slate: pods an earlier run left in the test containerd would hold CPUs.
teardown_containerd
setup_containerd
cluster_cni_placeholder
cluster_certs
cluster_start

export KUBECONFIG=$CLUSTER_DIR/admin.kubeconfig E2E_KUBECTL=$E2E_KUBE_BIN/kubectl
export E2E_CLUSTER_NODE=$CLUSTER_NODE E2E_CLUSTER_DIR=$CLUSTER_DIR
cd "$REPO_ROOT"
color=()
[ -t 1 ] || color=(-ginkgo.no-color)
set +e
go test -tags e2e -count=1 -timeout 20m -v ./test/cluster -ginkgo.v "${color[@]}" "$@" 9>&-
status=$?
set -e
exit "$status"
