#!/usr/bin/env bash
# e2e-kubelet.sh - the real-kubelet suite (test/kubelet, `make e2e-kubelet`,
# part of `make test`): a standalone kubelet v1.37 with the plugin, on
# containerd and then on CRI-O; the migration spec runs on the previous
# minor's kubelet too (v1.36). Builds bin/nri-cpualign and the kubelets
# (scripts/setup-kube.sh, cached after the first build), and for each
# runtime starts it, runs the suite (which starts and stops the kubelet and
# the plugin itself) and tears the runtime down. One run at a time per
# machine: the whole run holds /tmp/nri-cpualign-e2e.lock.
#
# E2E_KUBELET_RUNTIMES="containerd crio" picks the runtimes (default both;
# without a CRI-O on the machine the CRI-O pass says why in one line);
# E2E_KUBE_BIN=DIR uses DIR/kubelet instead of setup-kube.sh's;
# E2E_KUBE_VERSION_PREV (v1.36.3) is the previous kubelet, empty for none;
# E2E_KUBE_VERSION_NEXT (v1.38.0-beta.0) is tried, and when the module proxy
# cannot provide it one line says why and the run goes on (kube_next);
# extra arguments go to the test binary, e.g.
#   scripts/e2e-kubelet.sh -ginkgo.focus='migrat'
# The work dir (kubelet and plugin logs, configs, state, one junit report
# per run) is kept with E2E_KEEP=1 and when the suite fails;
# E2E_REPORT_DIR puts the junit reports there instead (make test-stress
# reads them).
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
# shellcheck source=scripts/lib-kube.sh
source "$(dirname "$0")/lib-kube.sh"
check_prereqs
pick_runtimes E2E_KUBELET_RUNTIMES

take_machine

T0=$SECONDS
WORK=$(mktemp -d /tmp/nri-cpualign-kubelet.XXXXXX)
REPORT_DIR=${E2E_REPORT_DIR:-$WORK}
mkdir -p "$REPORT_DIR"
REPORT_DIR=$(cd "$REPORT_DIR" && pwd)
PIDFILE=$WORK/pids
status=1
current=""
summary=()
cleanup() {
	# Survivors of a crashed test binary: the kubelet first (it would
	# recreate what the teardown removes), then the plugin.
	[ -n "${E2E_KUBE_BIN:-}" ] && kill_pids_of_bin "$PIDFILE" "$E2E_KUBE_BIN/kubelet"
	[ -n "${E2E_KUBE_BIN_PREV:-}" ] && kill_pids_of_bin "$PIDFILE" "$E2E_KUBE_BIN_PREV/kubelet"
	kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
	[ -n "$current" ] && runtime_teardown "$current"
	hugetlb_umount
	unmount_under "$WORK"
	if [ "$status" = 0 ] && [ "${E2E_KEEP:-0}" != 1 ]; then
		rm -rf "$WORK"
	else
		log "kubelet and plugin logs, configs and state kept in $WORK"
	fi
	for s in "${summary[@]}"; do log "$s"; done
	[ -z "$CRIO_SKIPPED" ] || log "$CRIO_SKIPPED"
	log "e2e-kubelet finished in $((SECONDS - T0))s, status $status"
}
trap cleanup EXIT

build_plugin
if [ -n "${E2E_KUBE_BIN:-}" ] && [ -x "$E2E_KUBE_BIN/kubelet" ]; then
	log "using the kubelet in E2E_KUBE_BIN=$E2E_KUBE_BIN"
else
	setup_kube kubelet
fi
setup_kube_prev
kube_next kubelet
log "building the suite"
(cd "$REPO_ROOT" && go test -tags e2e -c -o "$WORK/kubelet.test" ./test/kubelet) || die "building test/kubelet failed"

color=()
[ -t 1 ] || color=(-ginkgo.no-color)
# containerd runs twice, on the oldest and the newest of the versions
# make e2e covers (E2E_KUBELET_CONTAINERD_VERSIONS, default v2.4.2
# v2.2.9; docs/runtimes.md): RUNS names each pass, runtime@version.
E2E_KUBELET_CONTAINERD_VERSIONS=${E2E_KUBELET_CONTAINERD_VERSIONS:-v2.4.2 v2.2.9}
RUNS=
for rt in $RUNTIMES; do
	if [ "$rt" = containerd ]; then
		for v in $E2E_KUBELET_CONTAINERD_VERSIONS; do RUNS+=" containerd@$v"; done
	else
		RUNS+=" $rt"
	fi
done
status=0
for run in $RUNS; do
	t0=$SECONDS
	rt=${run%@*}
	if [ "$rt" = containerd ]; then export CONTAINERD_VERSION=${run#*@}; fi
	current=$rt
	[ "$rt" = crio ] && hugetlb_mount
	envfile=$(runtime_setup "$rt")
	set +e
	(
		# shellcheck disable=SC1090
		source "$envfile"
		export E2E_KUBE_BIN NRI_CPUALIGN_BIN=$PLUGIN_BIN E2E_WORK_DIR=$WORK NRI_CPUALIGN_E2E_PIDFILE=$PIDFILE
		[ "$rt" = crio ] && export E2E_RUNTIME=crio
		cd "$REPO_ROOT/test/kubelet" &&
			"$WORK/kubelet.test" -test.v -test.count=1 -test.timeout 30m -ginkgo.v "${color[@]}" \
				-ginkgo.junit-report="$REPORT_DIR/junit-kubelet-${run/@/-}.xml" "$@" 9>&-
	)
	rc=$?
	set -e
	kill_pids_of_bin "$PIDFILE" "$E2E_KUBE_BIN/kubelet"
	[ -z "${E2E_KUBE_BIN_PREV:-}" ] || kill_pids_of_bin "$PIDFILE" "$E2E_KUBE_BIN_PREV/kubelet"
	kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
	runtime_teardown "$rt"
	hugetlb_umount
	current=""
	summary+=("$run: status $rc in $((SECONDS - t0))s")
	[ "$rc" = 0 ] || status=$rc
done
exit "$status"
