#!/usr/bin/env bash
# e2e-cluster.sh - the DaemonSet on a real control plane (`make e2e-cluster`,
# part of `make test`). Builds or finds the Kubernetes v1.37 binaries
# (scripts/setup-kube.sh); then, for containerd and then CRI-O, starts
# the test runtime, etcd, kube-apiserver, kube-controller-manager,
# kube-scheduler and a kubelet registered as a node, all on 127.0.0.1 with
# their data in a temporary directory (scripts/lib-cluster.sh), runs the
# ginkgo suite in test/cluster (which installs the plugin the way the
# README's "Install on a cluster" says) and stops everything, failure or
# not. One run at a time per machine: the whole run holds
# /tmp/nri-cpualign-e2e.lock.
#
# E2E_CLUSTER_RUNTIMES="containerd" (or "crio") runs one runtime only;
# without a CRI-O on the machine the CRI-O pass says why in one line.
# E2E_KUBE_VERSION_NEXT (v1.38.0-beta.0) is tried beside v1.37.2; when the
# module proxy cannot provide it one line says why and the run goes on.
# Extra arguments go to the test binary, e.g.
#   scripts/e2e-cluster.sh -ginkgo.focus='refuses'
# Keep the work dir (component and runtime logs, certificates, kubelet and
# plugin state, one junit report per runtime) with E2E_KEEP=1; it is also
# kept when the suite fails. E2E_REPORT_DIR puts the junit reports there
# instead (make test-stress reads them).
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
# shellcheck source=scripts/lib-cluster.sh
source "$(dirname "$0")/lib-cluster.sh"
check_prereqs
# helm (pinned, built into bin/ on first use): the suite installs the chart
# on containerd and deploy/ with kubectl apply -k on CRI-O
# (E2E_CLUSTER_INSTALL=helm|kustomize: one way on both).
E2E_HELM=$(bash "$(dirname "$0")/setup-helm.sh") || die "helm setup failed (scripts/setup-helm.sh)"
export E2E_HELM
# openssl makes the cluster's certificates; xz unpacks the topology-aware
# scheduler; curl asks the controller manager and the scheduler /healthz.
want_cmd openssl openssl
want_cmd xz xz-utils
want_cmd curl curl
install_wanted
# The topology-aware scheduler of the NodeResourceTopology specs: like
# CRI-O it cannot be built from the Go module proxy, so it comes from the
# shared directory beside the repository (SHARED_NRT, by default
# ../shared/nrt, whose README says what it is), unpacked into bin/ once.
# Without it those specs say why and skip.
SHARED_NRT=${SHARED_NRT:-$(dirname "$REPO_ROOT")/shared/nrt}
E2E_NRT_SCHEDULER=
NRT_MISSING=
if [ -f "$SHARED_NRT/kube-scheduler-nrt.xz" ]; then
	E2E_NRT_SCHEDULER=$REPO_ROOT/bin/kube-scheduler-nrt
	if [ ! -x "$E2E_NRT_SCHEDULER" ] || [ "$SHARED_NRT/kube-scheduler-nrt.xz" -nt "$E2E_NRT_SCHEDULER" ]; then
		mkdir -p "$REPO_ROOT/bin"
		xz -dc "$SHARED_NRT/kube-scheduler-nrt.xz" >"$E2E_NRT_SCHEDULER.tmp" && chmod +x "$E2E_NRT_SCHEDULER.tmp" &&
			mv "$E2E_NRT_SCHEDULER.tmp" "$E2E_NRT_SCHEDULER" || die "cannot unpack $SHARED_NRT/kube-scheduler-nrt.xz"
	fi
else
	NRT_MISSING="NodeResourceTopology specs: skipped, no $SHARED_NRT/kube-scheduler-nrt.xz (set SHARED_NRT)"
fi
export E2E_NRT_SCHEDULER NRT_MISSING
pick_runtimes E2E_CLUSTER_RUNTIMES

take_machine

T0=$SECONDS
WORK=$(mktemp -d /tmp/nri-cpualign-cluster.XXXXXX)
REPORT_DIR=${E2E_REPORT_DIR:-$WORK}
mkdir -p "$REPORT_DIR"
REPORT_DIR=$(cd "$REPORT_DIR" && pwd)
CLUSTER_DIR=
RUNTIME=
status=0
summary=()
# stop_runtime_cluster stops the cluster of the current runtime, keeps the
# runtime's log and stops the runtime.
stop_runtime_cluster() {
	[ -n "$CLUSTER_DIR" ] || return 0
	cluster_stop
	[ -z "${RUNTIME_LOG:-}" ] || cp -f "$RUNTIME_LOG" "$CLUSTER_DIR/logs/$RUNTIME.log" 2>/dev/null || true
	cluster_teardown_runtime "$RUNTIME"
	CLUSTER_DIR=
}
cleanup() {
	local rc=$? t=$SECONDS
	[ "$rc" = 0 ] || status=1
	stop_runtime_cluster
	if [ "$status" = 0 ] && [ "${E2E_KEEP:-0}" != 1 ]; then
		rm -rf "$WORK"
	else
		log "component and runtime logs, certificates, kubelet and plugin state kept in $WORK"
	fi
	for line in "${summary[@]}"; do log "$line"; done
	[ -z "$CRIO_SKIPPED" ] || log "$CRIO_SKIPPED"
	[ -z "$NRT_MISSING" ] || log "$NRT_MISSING"
	log "teardown took $((SECONDS - t))s; e2e-cluster finished in $((SECONDS - T0))s, status $status"
}
trap cleanup EXIT

kube_binaries
kube_next kubelet kube-apiserver
cluster_kill_leftovers
cd "$REPO_ROOT"
color=()
[ -t 1 ] || color=(-ginkgo.no-color)
for RUNTIME in $RUNTIMES; do
	t0=$SECONDS
	CLUSTER_DIR=$WORK/$RUNTIME
	mkdir -p "$CLUSTER_DIR"
	# A clean slate: pods an earlier run left in the runtime would hold CPUs.
	cluster_teardown_runtime "$RUNTIME"
	cluster_setup_runtime "$RUNTIME"
	cluster_cni_placeholder
	cluster_certs
	cluster_start
	export KUBECONFIG=$CLUSTER_DIR/admin.kubeconfig E2E_KUBECTL=$E2E_KUBE_BIN/kubectl
	export E2E_CLUSTER_NODE=$CLUSTER_NODE E2E_CLUSTER_DIR=$CLUSTER_DIR
	set +e
	go test -tags e2e -count=1 -timeout 20m -v ./test/cluster -ginkgo.v "${color[@]}" \
		-ginkgo.junit-report="$REPORT_DIR/junit-cluster-$RUNTIME.xml" "$@" 9>&-
	rc=$?
	set -e
	[ "$rc" = 0 ] || status=1
	summary+=("$RUNTIME: suite $( [ "$rc" = 0 ] && echo passed || echo FAILED ) in $((SECONDS - t0))s")
	stop_runtime_cluster
done
exit "$status"
