#!/usr/bin/env bash
# test-all.sh - `make test`: every stage of the project's tests in order,
# each a Makefile target, timed; the first stage that fails ends the run.
# At the end it prints one line per stage with its time and result, so a
# log shows where a run's minutes went (docs/testing.md has the figures).
#
# While the early stages run, a background prewarm (scripts/prewarm.sh,
# at the lowest CPU and I/O priority) builds the Kubernetes binaries the
# later suites need into the e2e cache, so that on a fresh machine the
# kubelet and cluster stages find them built instead of waiting minutes for
# each. setup-kube.sh takes a lock per binary, so a stage that reaches a
# binary the prewarm is building waits for that one build. On a warm cache
# the prewarm finds everything and ends within a second.
#
#   TEST_STAGES="unit e2e" make test    a subset, in the given order
#   TEST_PREWARM=0 make test            no background builds
set -euo pipefail
cd "$(dirname "$0")/.."

STAGES=${TEST_STAGES:-fmt-check tidy-check vet staticcheck unit fuzz-short chart-check e2e e2e-kubelet e2e-cluster e2e-vm}
MAKE=${MAKE:-make}

times=()
prewarm_pid=
finish() {
	local rc=$? l
	if [ -n "$prewarm_pid" ] && kill -0 "$prewarm_pid" 2>/dev/null; then
		# Its process group: the go builds under it too.
		kill -TERM -- "-$prewarm_pid" 2>/dev/null || true
		wait "$prewarm_pid" 2>/dev/null || true
	fi
	echo
	echo "make test: stage times"
	for l in "${times[@]}"; do echo "  $l"; done
	echo "make test: $((SECONDS / 60)) min $((SECONDS % 60)) s in all, exit $rc"
	exit "$rc"
}
trap finish EXIT

needs_kube=0
case " $STAGES " in *" e2e-kubelet "* | *" e2e-cluster "* | *" e2e-vm "*) needs_kube=1 ;; esac
if [ "${TEST_PREWARM:-1}" = 1 ] && [ "$needs_kube" = 1 ] && [ "$(id -u)" = 0 ]; then
	mkdir -p "${E2E_CACHE:-/var/cache/nri-e2e}"
	# setsid: its own process group, so that finish stops every build it started.
	setsid bash scripts/prewarm.sh >"${E2E_CACHE:-/var/cache/nri-e2e}/prewarm.log" 2>&1 </dev/null &
	prewarm_pid=$!
	echo "make test: prewarm (pid $prewarm_pid) builds the Kubernetes binaries in the background; log: ${E2E_CACHE:-/var/cache/nri-e2e}/prewarm.log"
fi

for s in $STAGES; do
	t0=$SECONDS
	echo "==== make test: stage $s ($(date -u +%H:%M:%S))"
	if $MAKE --no-print-directory "$s"; then
		times+=("$(printf '%-15s %5d s  ok' "$s" $((SECONDS - t0)))")
	else
		rc=$?
		times+=("$(printf '%-15s %5d s  FAILED (exit %d)' "$s" $((SECONDS - t0)) "$rc")")
		exit "$rc"
	fi
done
