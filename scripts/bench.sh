#!/usr/bin/env bash
# bench.sh - the performance figures of issue 9 (`make bench`):
#   1. one admission decision through the policy engine on every fixture
#      machine and on generated 16-1024 CPU machines, at 0/50/90% occupancy,
#      for four option sets (test/bench BenchmarkDecision, BenchmarkScaling),
#      next to a fixed loop that shows the machine's own timing noise
#      (BenchmarkNoiseFloor);
#   2. the CreateContainer round trip over NRI in-process, checkpoint
#      included, with 0/100/500 existing containers, both settings of
#      shared_pool_updates (BenchmarkCreateContainer);
#   3. the daemon's RSS after start and with 500 containers (test/bench/cmd/rss,
#      the real binary against an in-process NRI runtime);
# and prints them as the README's tables (test/bench/cmd/benchtable).
#
#   scripts/bench.sh           the above (no root needed)
#   scripts/bench.sh --cri     also 4., the latency the plugin adds to
#                              CreateContainer+StartContainer on the real
#                              containerd of ../shared/e2e (root; holds
#                              /tmp/nri-cpualign-e2e.lock; tears containerd
#                              down at the end, as scripts/e2e.sh does)
#   scripts/bench.sh --cri-only  only 4.
#
# Settings (environment): BENCHTIME (decision benchmarks, default 2000x),
# RT_BENCHTIME (round trips, default 200x), BENCH_FILTER (a -bench regexp
# replacing the default), CRI_N (containers per mode, 40), BENCH_OUT
# (output directory, _output/bench: raw output and table.md).
# Nothing here asserts a time: compare the figures with the targets the
# table's last lines restate. The machine should be otherwise idle.
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"

mode=all
case "${1:-}" in
"") ;;
--cri) mode=cri ;;
--cri-only) mode=cri-only ;;
*) die "unknown argument $1 (want --cri or --cri-only)" ;;
esac

BENCHTIME=${BENCHTIME:-2000x}
RT_BENCHTIME=${RT_BENCHTIME:-200x}
OUT=${BENCH_OUT:-$REPO_ROOT/_output/bench}
mkdir -p "$OUT"
cd "$REPO_ROOT"

log "load before the run: $(uptime)"
if [ "$mode" != cri-only ]; then
	raw=$OUT/bench.txt
	: >"$raw"
	if [ -n "${BENCH_FILTER:-}" ]; then
		go test -run '^$' -bench "$BENCH_FILTER" -benchmem -benchtime "$BENCHTIME" -timeout 60m ./test/bench | tee -a "$raw"
	else
		log "decision benchmarks (-benchtime $BENCHTIME)"
		go test -run '^$' -bench '^Benchmark(NoiseFloor|Decision|Scaling)$' -benchmem -benchtime "$BENCHTIME" -timeout 60m ./test/bench | tee -a "$raw"
		log "CreateContainer round trips (-benchtime $RT_BENCHTIME)"
		go test -run '^$' -bench '^BenchmarkCreateContainer$' -benchmem -benchtime "$RT_BENCHTIME" -timeout 60m ./test/bench | tee -a "$raw"
	fi
	go run ./test/bench/cmd/benchtable <"$raw" >"$OUT/table.md"
	log "daemon memory (real binary, in-process NRI runtime)"
	# Its own copy: bin/nri-cpualign may be running under an e2e suite.
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$OUT/nri-cpualign" ./cmd/nri-cpualign
	go run ./test/bench/cmd/rss -bin "$OUT/nri-cpualign" -containers 500 | tee "$OUT/rss.txt"
	{
		echo
		echo "Daemon memory (nri-cpualign run on the epyc-9754 fixture, containers created over NRI):"
		echo
		grep -E '^(rss|target|created)' "$OUT/rss.txt" | sed 's/^/    /'
	} >>"$OUT/table.md"
fi

if [ "$mode" != all ]; then
	[ "$mode" = cri-only ] && : >"$OUT/table.md"
	check_prereqs
	exec 9>/tmp/nri-cpualign-e2e.lock
	if ! flock -n 9; then
		log "another e2e run holds /tmp/nri-cpualign-e2e.lock, waiting"
		flock 9
	fi
	trap teardown_containerd EXIT
	setup_containerd
	build_plugin
	log "plugin latency on the real containerd (${CRI_N:-40} containers per mode)"
	go run ./test/bench/cmd/crilatency -bin "$PLUGIN_BIN" -n "${CRI_N:-40}" | tee "$OUT/cri.txt"
	{
		echo
		echo "Real containerd (added latency of the plugin):"
		echo
		grep -v '^raw ' "$OUT/cri.txt"
	} >>"$OUT/table.md"
fi

log "load after the run: $(uptime)"
echo
cat "$OUT/table.md"
