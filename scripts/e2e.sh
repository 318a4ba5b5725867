#!/usr/bin/env bash
# e2e.sh - the real-runtime end-to-end suite (`make e2e`, part of
# `make test`): the ginkgo suite in test/e2e runs once per runtime, first
# against containerd (scripts/setup-containerd.sh, built on a machine that
# never ran it), then against CRI-O (see lib-e2e.sh for where it comes
# from; without one, that pass says why in one line and the run goes on),
# each runtime torn down after its run. Builds bin/nri-cpualign first. One
# run at a time per machine: the whole run holds /tmp/nri-cpualign-e2e.lock.
#
# Extra arguments go to the test binary (every run), e.g.
#   scripts/e2e.sh -ginkgo.focus='SIGKILL'
# E2E_RUNTIMES="containerd" (or "crio") runs one runtime only.
# The containerd pass runs once per version of E2E_CONTAINERD_VERSIONS
# (default: v2.4.2 v2.3.7 v2.2.9, the newest patch of each minor users run:
# their NRI versions differ, docs/runtimes.md), each built from the Go
# module proxy on first use and cached; the whole suite on each (about a
# minute per version warm). The in-process fixture machines run on the
# first only.
# Keep the work dir (plugin logs, configs, state, one directory and one
# junit report per runtime) with E2E_KEEP=1; it is also kept when a run
# fails. E2E_REPORT_DIR puts the junit reports there instead (make
# test-stress reads them).
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
check_prereqs
pick_runtimes E2E_RUNTIMES

take_machine

T0=$SECONDS
WORK=$(mktemp -d /tmp/nri-cpualign-e2e.XXXXXX)
REPORT_DIR=${E2E_REPORT_DIR:-$WORK}
mkdir -p "$REPORT_DIR"
REPORT_DIR=$(cd "$REPORT_DIR" && pwd)
PIDFILE=$WORK/plugin.pids
status=0
summary=()
cleanup() {
	local rc=$?
	[ "$rc" = 0 ] || status=$rc
	kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
	teardown_containerd
	case " $RUNTIMES " in *" crio "*) teardown_crio ;; esac
	if [ "$status" = 0 ] && [ "${E2E_KEEP:-0}" != 1 ]; then
		rm -rf "$WORK"
	else
		log "plugin logs, configs, state and junit reports kept in $WORK"
	fi
	local l
	for l in "${summary[@]}"; do log "$l"; done
	[ -z "$CRIO_SKIPPED" ] || log "$CRIO_SKIPPED"
	log "e2e finished in $((SECONDS - T0))s, status $status"
	exit "$status"
}
trap cleanup EXIT

build_plugin
export NRI_CPUALIGN_BIN=$PLUGIN_BIN NRI_CPUALIGN_E2E_PIDFILE=$PIDFILE
color=()
[ -t 1 ] || color=(-ginkgo.no-color)

E2E_CONTAINERD_VERSIONS=${E2E_CONTAINERD_VERSIONS:-v2.4.2 v2.3.7 v2.2.9}

# run_suite NAME: the suite against the runtime whose environment is
# loaded; its result goes into status and summary.
run_suite() {
	local rt=$1 t0=$SECONDS rc out
	shift
	out=$WORK/$rt.out
	mkdir -p "$WORK/$rt"
	log "running the e2e suite on $rt"
	set +e
	# 9>&-: the suite restarts the runtime, which must not inherit the lock fd.
	(cd "$REPO_ROOT" && E2E_WORK_DIR=$WORK/$rt go test -tags e2e -count=1 -timeout 20m -v ./test/e2e \
		-ginkgo.v "${color[@]}" -ginkgo.junit-report="$REPORT_DIR/junit-$rt.xml" "$@") 9>&- 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	set -e
	[ "$rc" = 0 ] || status=$rc
	summary+=("$rt: $(grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$out" | tail -1 || true) $(grep -E '^(SUCCESS|FAIL)! .*Passed' "$out" | tail -1 || true) ($((SECONDS - t0))s, exit $rc)")
	grep -E '\[SKIPPED\]' "$out" | sed "s/^/[$rt] /" >&2 || true
}

for rt in $RUNTIMES; do
	case $rt in
	containerd)
		first=1
		for CONTAINERD_VERSION in $E2E_CONTAINERD_VERSIONS; do
			# Exported: the suite restarts containerd with the setup
			# script, which must bring back the same version.
			export CONTAINERD_VERSION
			name=containerd-$CONTAINERD_VERSION
			# A clean slate: whatever an earlier run, a demo or a crash
			# left in the test containerd (pods holding CPUs) would change
			# what the suite sees.
			teardown_containerd
			setup_containerd
			(
				export E2E_RUNTIME=containerd
				# The in-process fixture machines do not depend on the
				# runtime: once per make e2e is enough.
				[ "$first" = 1 ] || export E2E_FIXTURES=0
				run_suite "$name" "$@"
				declare -p status summary >"$WORK/$name.result"
			)
			# shellcheck disable=SC1090
			source "$WORK/$name.result"
			kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
			cp "$E2E_RUN/containerd.log" "$WORK/$name/" 2>/dev/null || true
			teardown_containerd
			first=0
		done
		unset CONTAINERD_VERSION
		;;
	crio)
		teardown_crio
		setup_crio
		(
			# CRI-O's environment replaces containerd's names (NRI_SOCKET,
			# E2E_RUN, the CRI endpoint); E2E_RUNTIME=crio comes with it.
			unset CONTAINERD_ADDRESS E2E_CTR E2E_CONTAINERD_PID E2E_CONTAINERD_LOG
			# shellcheck disable=SC1091
			source "$CRIO_RUN/env"
			export E2E_CRIO_SETUP_SCRIPT=$CRIO_SETUP_SCRIPT
			# The in-process fixture machines do not depend on the runtime:
			# once per make e2e is enough.
			case " $RUNTIMES " in *" containerd "*) export E2E_FIXTURES=0 ;; esac
			run_suite crio "$@"
			declare -p status summary >"$WORK/crio.result"
		)
		# shellcheck disable=SC1091
		source "$WORK/crio.result"
		kill_pids_of_bin "$PIDFILE" "$PLUGIN_BIN"
		cp "$CRIO_RUN/crio.log" "$WORK/crio/" 2>/dev/null || true
		teardown_crio
		;;
	esac
done
