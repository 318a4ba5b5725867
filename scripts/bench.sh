#!/usr/bin/env bash
# bench.sh - the performance figures of issue 9 (`make bench`):
#   1. one admission decision through the policy engine on every fixture
#      machine and on generated 16-1024 CPU machines, at 0/50/90% occupancy,
#      for four option sets (test/bench BenchmarkDecision, BenchmarkScaling),
#      next to a fixed loop that shows the machine's own timing noise
#      (BenchmarkNoiseFloor);
#   2. the CreateContainer round trip over NRI in-process, checkpoint
#      included, with 0/100/500 existing containers, each setting of
#      shared_pool_updates (BenchmarkCreateContainer);
#      and both stores (journal: one record fdatasynced; snapshot: the whole
#      checkpoint rewritten);
#   3. `nri-cpualign simulate` on a 4,000-line add/remove trace
#      (cmd/nri-cpualign BenchmarkSimulate);
#   4. the daemon's RSS after start and with 500 containers (test/bench/cmd/rss,
#      the real binary against an in-process NRI runtime);
# prints them as tables with a met/missed verdict per target
# (test/bench/cmd/benchtable) and writes docs/performance.md from its
# template docs/performance.md.in (the prose; @@...@@ lines are replaced by
# the run's figures).
#
#   scripts/bench.sh           the above (no root needed)
#   scripts/bench.sh --cri     also 5., the latency the plugin adds to
#                              CreateContainer+StartContainer on the real
#                              containerd and CRI-O of ../shared/e2e with
#                              0/20/50 shared containers running, for each
#                              shared_pool_updates mode (CRI_MODES, CRI_SHARED
#                              and CRI_N narrow it) (root; holds
#                              /tmp/nri-cpualign-e2e.lock; tears each runtime
#                              down after its run, as scripts/e2e.sh does)
#   scripts/bench.sh --cri-only  only 5. (replaces the real-runtime part of
#                              docs/performance.md)
#   scripts/bench.sh --docs-only  measures nothing: writes docs/performance.md
#                              again from the template and the last run's
#                              output in BENCH_OUT (after a prose change)
#
# Settings (environment): BENCHTIME (decision benchmarks, default 2000x),
# RT_BENCHTIME (round trips, default 200x), SIM_BENCHTIME (simulate runs,
# default 20x), BENCH_FILTER (a -bench regexp over ./test/bench replacing
# the default; docs/performance.md is then left alone), CRI_N (samples
# per mode and cell, 30), CRI_SHARED (running shared containers per cell,
# 0,20,50), BENCH_OUT (output directory, _output/bench: raw output and
# table.md). Nothing here fails on a time: the "Targets" lines give a
# met/missed verdict per target. The machine should be otherwise idle.
set -euo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"

mode=all
case "${1:-}" in
"") ;;
--cri) mode=cri ;;
--cri-only) mode=cri-only ;;
--docs-only) mode=docs-only ;;
*) die "unknown argument $1 (want --cri, --cri-only or --docs-only)" ;;
esac

BENCHTIME=${BENCHTIME:-2000x}
RT_BENCHTIME=${RT_BENCHTIME:-200x}
OUT=${BENCH_OUT:-$REPO_ROOT/_output/bench}
mkdir -p "$OUT"
cd "$REPO_ROOT"

DOC=$REPO_ROOT/docs/performance.md
TEMPLATE=$REPO_ROOT/docs/performance.md.in
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
if [ "$mode" = docs-only ]; then
	for f in run tables-only memory cri details; do
		[ -f "$OUT/$f.md" ] || die "$OUT/$f.md missing: run scripts/bench.sh first"
	done
fi
log "load before the run: $(uptime)"
if [ "$mode" != cri-only ] && [ "$mode" != docs-only ]; then
	raw=$OUT/bench.txt
	: >"$raw"
	if [ -n "${BENCH_FILTER:-}" ]; then
		go test -tags testhooks -run '^$' -bench "$BENCH_FILTER" -benchmem -benchtime "$BENCHTIME" -timeout 60m ./test/bench | tee -a "$raw"
	else
		log "decision benchmarks (-benchtime $BENCHTIME)"
		go test -tags testhooks -run '^$' -bench '^Benchmark(NoiseFloor|Decision|Scaling)$' -benchmem -benchtime "$BENCHTIME" -timeout 60m ./test/bench | tee -a "$raw"
		log "CreateContainer round trips (-benchtime $RT_BENCHTIME)"
		go test -tags testhooks -run '^$' -bench '^BenchmarkCreateContainer$' -benchmem -benchtime "$RT_BENCHTIME" -timeout 60m ./test/bench | tee -a "$raw"
		log "simulate (-benchtime ${SIM_BENCHTIME:-20x})"
		go test -run '^$' -bench '^BenchmarkSimulate$' -benchmem -benchtime "${SIM_BENCHTIME:-20x}" -timeout 30m ./cmd/nri-cpualign | tee -a "$raw"
	fi
	go run ./test/bench/cmd/benchtable <"$raw" >"$OUT/table.md"
	go run ./test/bench/cmd/benchtable -details <"$raw" >"$OUT/details.md"
	cp "$OUT/table.md" "$OUT/tables-only.md"
	log "daemon memory (real binary, in-process NRI runtime)"
	# Its own copy: bin/nri-cpualign may be running under an e2e suite.
	CGO_ENABLED=0 go build -ldflags "-s -w" -o "$OUT/nri-cpualign" ./cmd/nri-cpualign
	go run ./test/bench/cmd/rss -bin "$OUT/nri-cpualign" -containers 500 | tee "$OUT/rss.txt"
	{
		echo "Daemon memory (nri-cpualign run on the epyc-9754 fixture, containers created over NRI):"
		echo
		grep -E '^(rss|target|created)' "$OUT/rss.txt" | sed 's/^/    /'
	} >"$OUT/memory.md"
	{
		echo
		cat "$OUT/memory.md"
	} >>"$OUT/table.md"
fi
[ "$mode" = docs-only ] || : >"$OUT/cri.md"

if [ "$mode" = cri ] || [ "$mode" = cri-only ]; then
	[ "$mode" = cri-only ] && : >"$OUT/table.md"
	check_prereqs
	take_machine
	check_crio_prereqs
	trap 'teardown_containerd; teardown_crio' EXIT
	build_plugin
	shared=${CRI_SHARED:-0,20,50}
	modes=${CRI_MODES:-direct,in-answer}
	log "plugin latency on the real containerd (${CRI_N:-30} samples per mode, $shared shared containers)"
	setup_containerd
	go run ./test/bench/cmd/crilatency -bin "$PLUGIN_BIN" -n "${CRI_N:-30}" -shared "$shared" -modes "$modes" | tee "$OUT/cri-containerd.txt"
	teardown_containerd
	log "plugin latency on the real CRI-O (${CRI_N:-30} samples per mode, $shared shared containers)"
	setup_crio
	# A subshell: CRI-O's env names NRI_SOCKET and E2E_RUN too.
	(
		# shellcheck disable=SC1091
		source "$CRIO_RUN/env"
		go run ./test/bench/cmd/crilatency -bin "$PLUGIN_BIN" -n "${CRI_N:-30}" -shared "$shared" -modes "$modes"
	) | tee "$OUT/cri-crio.txt"
	teardown_crio
	{
		echo "Real runtimes (added latency of the plugin on a busy node; \`make bench-cri\`, $(date -u +%Y-%m-%d), load before the run $load_before):"
		for rt in containerd crio; do
			echo
			grep -v -e '^raw ' -e '^Targets:' -e '^- ' "$OUT/cri-$rt.txt" | cat -s
		done
		echo
		echo "Targets (issue 15, real runtimes, 50 shared containers):"
		echo
		grep -h '^- ' "$OUT/cri-containerd.txt" "$OUT/cri-crio.txt" ||
			echo "none: no cell of this run had 50 shared containers (CRI_SHARED)"
	} >"$OUT/cri.md"
	{
		echo
		cat "$OUT/cri.md"
	} >>"$OUT/table.md"
fi

if [ "$mode" != docs-only ]; then
	log "load after the run: $(uptime)"
	echo
	cat "$OUT/table.md"
fi

# cri_block prints the real-runtime part of the current docs/performance.md
# (between the cri markers), for a run that did not measure it.
cri_block() {
	[ -f "$DOC" ] || return 0
	awk '/^<!-- \/cri -->/ { inside = 0 } inside { print } /^<!-- cri:/ { inside = 1 }' "$DOC"
}

# fill_template writes the template with each @@NAME@@ line replaced by
# the file given as NAME=FILE.
fill_template() {
	awk -v spec="$*" '
		BEGIN { n = split(spec, kv, " "); for (i = 1; i <= n; i++) { split(kv[i], p, "="); file["@@" p[1] "@@"] = p[2] } }
		($0 in file) { f = file[$0]; while ((getline l < f) > 0) print l; close(f); next }
		{ print }' "$TEMPLATE"
}

if [ -n "${BENCH_FILTER:-}" ]; then
	log "BENCH_FILTER set: a partial run; $DOC left alone"
	exit 0
fi
if [ "$mode" = cri-only ]; then
	[ -f "$DOC" ] || die "$DOC missing: run scripts/bench.sh first"
	awk -v cri="$OUT/cri.md" '
		/^<!-- \/cri -->/ { while ((getline l < cri) > 0) print l; inside = 0 }
		inside { next }
		{ print }
		/^<!-- cri:/ { inside = 1 }' "$DOC" >"$DOC.tmp" && mv "$DOC.tmp" "$DOC"
	log "wrote the real-runtime part of $DOC"
	exit 0
fi
if [ ! -s "$OUT/cri.md" ]; then
	cri_block >"$OUT/cri.md"
fi
if [ ! -s "$OUT/cri.md" ]; then
	echo "No real-runtime figures yet: \`make bench-cri\` (root) measures them." >"$OUT/cri.md"
fi
cpu_model=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
state_fs=$(df -T "${TMPDIR:-/tmp}" | awk 'NR == 2 { print $2 " (" $1 ")" }')
[ "$mode" = docs-only ] || echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'): $(nproc) CPUs ($cpu_model), load average before the run $load_before, after $(cut -d' ' -f1-3 /proc/loadavg); round-trip state \"on disk\" is ${TMPDIR:-/tmp} on $state_fs. Wall-clock figures on a shared machine include other processes; the CPU-time columns leave preemption out." >"$OUT/run.md"
fill_template RUN="$OUT/run.md" TABLES="$OUT/tables-only.md" MEMORY="$OUT/memory.md" CRI="$OUT/cri.md" DETAILS="$OUT/details.md" >"$DOC.tmp"
mv "$DOC.tmp" "$DOC"
log "wrote $DOC"
