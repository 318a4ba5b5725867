#!/usr/bin/env bash
# e2e.sh - the real-containerd end-to-end suite (`make e2e`, part of
# `make test`). Starts the test containerd with ../shared/e2e/setup-containerd.sh
# (building it on a machine that never ran it), builds bin/nri-cpualign, runs
# the ginkgo suite in test/e2e and tears containerd down at exit. One run at a
# time per machine: the whole run holds /tmp/nri-cpualign-e2e.lock.
#
# Extra arguments go to the test binary, e.g.
#   scripts/e2e.sh -ginkgo.focus='SIGKILL'
# Keep the work dir (plugin logs, configs, state) with E2E_KEEP=1; it is also
# kept when the suite fails.
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
check_prereqs

exec 9>/tmp/nri-cpualign-e2e.lock
if ! flock -n 9; then
	log "another e2e run holds /tmp/nri-cpualign-e2e.lock, waiting"
	flock 9
fi

# The demo's plugin would clash with the suite's (same NRI name), and its
# pods would hold CPUs: stop it, as make demo-down would.
if demo_plugin_running || [ -d "$DEMO_RUN" ]; then
	log "a demo is running: stopping it first (as make demo-down would)"
	stop_demo_plugin
	rm -rf "$DEMO_RUN"
fi

T0=$SECONDS
WORK=$(mktemp -d /tmp/nri-cpualign-e2e.XXXXXX)
PIDFILE=$WORK/plugin.pids
status=1
cleanup() {
	kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
	teardown_containerd
	if [ "$status" = 0 ] && [ "${E2E_KEEP:-0}" != 1 ]; then
		rm -rf "$WORK"
	else
		log "plugin logs, configs and state kept in $WORK"
	fi
	log "e2e finished in $((SECONDS - T0))s, status $status"
}
trap cleanup EXIT

# A clean slate: whatever an earlier run, a demo or a crash left in the test
# containerd (pods holding CPUs) would change what the suite sees.
teardown_containerd
setup_containerd
build_plugin

export NRI_CPUALIGN_BIN=$PLUGIN_BIN E2E_WORK_DIR=$WORK NRI_CPUALIGN_E2E_PIDFILE=$PIDFILE
cd "$REPO_ROOT"
color=()
[ -t 1 ] || color=(-ginkgo.no-color)
set +e
# 9>&-: the suite restarts containerd, which must not inherit the lock fd.
go test -tags e2e -count=1 -timeout 20m -v ./test/e2e -ginkgo.v "${color[@]}" "$@" 9>&-
status=$?
set -e
exit "$status"
