#!/usr/bin/env bash
# kubelet-parity.sh [1.37] [1.38] [bench] - the side-by-side check of the
# allocator against the kubelet's own static policy (test/kubeletparity):
# the module test/kubeletparity/kubelet, one source for both releases: its
# go.mod against k8s.io/kubernetes v1.37.2 with the project's Go, its
# v138.mod (-modfile, build tag kubelet138) against v1.38.0-beta.0 with
# Go 1.27 (GOTOOLCHAIN, set here only; the beta asks for it). Each runs seeded random add/remove
# sequences on every fixture machine and option set and fails on the first
# differing hint, admission, CPU set or shared set, with the seed and step,
# plus its negative check (the other rule set must disagree). With no
# argument: 1.37 then 1.38. "bench" runs the side-by-side benchmark of
# both instead (ours vs the kubelet's code, one decision at 50% occupancy).
# Modules come from the Go module proxy into GOMODCACHE; the first run
# downloads and compiles the kubelet's packages (minutes), later runs take
# under a minute each. PARITY_SEEDS, PARITY_STEPS, PARITY_SEED: see
# test/kubeletparity/run.go. GO127 names the 1.38 toolchain (go1.27.3).
set -euo pipefail
# shellcheck source=scripts/lib-setup.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib-setup.sh"
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
GO127=${GO127:-go1.27.3}

# module_env VERSION: the environment of that module's go commands.
# go_env RELEASE: the toolchain and the go flags that pick its pins.
go_env() {
	case $1 in
	1.37) echo "GOTOOLCHAIN=local" ;;
	1.38) echo "GOTOOLCHAIN=$GO127 -modfile=v138.mod -tags=kubelet138" ;;
	*) die "unknown kubelet version $1 (1.37, 1.38)" ;;
	esac
}

check() {
	local env flags
	read -r env flags < <(go_env "$1")
	log "kubelet $1: parity check (test/kubeletparity/kubelet, $env $flags)"
	# -v for the exclusions and counts; the passing subtests' lines go.
	# shellcheck disable=SC2086 # flags are words
	(cd "$ROOT/test/kubeletparity/kubelet" &&
		env "$env" go test $flags -v -count=1 -timeout 20m ./... 2>&1 |
		grep -Ev '^(=== (RUN|PAUSE|CONT|NAME)|    --- PASS|--- PASS)'
		exit "${PIPESTATUS[0]}") || die "kubelet $1 parity check failed"
}

bench() {
	local env flags
	read -r env flags < <(go_env "$1")
	log "kubelet $1: side-by-side benchmark (test/kubeletparity/kubelet, $env $flags)"
	# shellcheck disable=SC2086 # flags are words
	(cd "$ROOT/test/kubeletparity/kubelet" &&
		env "$env" go test $flags -run '^$' -bench "${PARITY_BENCH:-.}" -benchmem -benchtime "${PARITY_BENCHTIME:-2000x}" -count=1 ./...) ||
		die "kubelet $1 benchmark failed"
}

[ $# -gt 0 ] || set -- 1.37 1.38
case $1 in
bench)
	shift
	[ $# -gt 0 ] || set -- 1.37 1.38
	for v in "$@"; do bench "$v"; done
	;;
*) for v in "$@"; do check "$v"; done ;;
esac
