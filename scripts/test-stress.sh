#!/usr/bin/env bash
# test-stress.sh - `make test-stress` (not part of `make test`): the
# real-partner suites (make e2e, e2e-kubelet, e2e-cluster; not the VM) run
# STRESS_PASSES times in a row, on each runtime, under CPU load from
# stress-ng (installed with apt-get when missing). A spec that leans on
# wall-clock luck where a controller, the kubelet or a runtime acts
# asynchronously loses that race here sooner than on a quiet machine.
#
# It does not stop at the first failure: every pass runs, and the end
# prints one line per failed spec,
#   FAIL pass=N runtime=R suite=S spec="..."
# (read from the junit report each suite writes into E2E_REPORT_DIR), then
# a summary line; the exit status is non-zero when anything failed.
#
#   STRESS_PASSES=3                  passes (default 3: what the issue's
#                                    "three times in a row" asks)
#   STRESS_SUITES="e2e e2e-kubelet e2e-cluster"   the suites, in this order
#   STRESS_RUNTIMES="containerd crio"  the runtimes; a suite's own variable
#                                    (E2E_RUNTIMES, E2E_KUBELET_RUNTIMES,
#                                    E2E_CLUSTER_RUNTIMES) wins for it
#   STRESS_LOAD="--cpu N --cpu-load 50"  stress-ng's arguments (N = nproc)
#   STRESS_DIR=DIR                   where the outputs and reports go
#                                    (default a new /tmp/nri-cpualign-stress.*)
# Extra arguments go to every suite's test binary, as with the scripts:
#   scripts/test-stress.sh -ginkgo.focus='refuses'
# The containerd passes run on E2E_CONTAINERD_VERSIONS and
# E2E_KUBELET_CONTAINERD_VERSIONS, v2.4.2 only unless set: the races under
# test are the suites' and their partners', not a containerd version's.
#
# Each run (one suite, one runtime, one pass) starts the load once the e2e
# lock (/tmp/nri-cpualign-e2e.lock) is free, so that the load does not sit
# on the machine while the run queues behind another, and stops it when the
# run ends; the load is stopped on any exit (trap).
set -uo pipefail
# shellcheck source=scripts/lib-e2e.sh
source "$(dirname "$0")/lib-e2e.sh"
need_root "the suites start runtimes, kubelets and cgroups"

STRESS_PASSES=${STRESS_PASSES:-3}
[[ $STRESS_PASSES =~ ^[1-9][0-9]*$ ]] || die "STRESS_PASSES=$STRESS_PASSES: want a count of 1 or more"
STRESS_SUITES=${STRESS_SUITES:-e2e e2e-kubelet e2e-cluster}
for s in $STRESS_SUITES; do
	case $s in
	e2e | e2e-kubelet | e2e-cluster) ;;
	*) die "STRESS_SUITES: unknown suite $s (want e2e, e2e-kubelet and/or e2e-cluster; the VM is not part of it)" ;;
	esac
done
STRESS_LOAD=${STRESS_LOAD:---cpu $(nproc) --cpu-load 50}
STRESS_DIR=${STRESS_DIR:-$(mktemp -d /tmp/nri-cpualign-stress.XXXXXX)}
mkdir -p "$STRESS_DIR" && STRESS_DIR=$(cd "$STRESS_DIR" && pwd) || die "cannot make $STRESS_DIR"
export E2E_CONTAINERD_VERSIONS=${E2E_CONTAINERD_VERSIONS:-v2.4.2}
export E2E_KUBELET_CONTAINERD_VERSIONS=${E2E_KUBELET_CONTAINERD_VERSIONS:-v2.4.2}

want_cmd stress-ng stress-ng
install_wanted

# runtimes_of SUITE: the suite's own runtime variable, else STRESS_RUNTIMES;
# CRI-O is dropped (with a note) when the machine has none and the caller
# did not name it.
runtime_var() {
	case $1 in
	e2e) echo E2E_RUNTIMES ;;
	e2e-kubelet) echo E2E_KUBELET_RUNTIMES ;;
	e2e-cluster) echo E2E_CLUSTER_RUNTIMES ;;
	esac
}
NOTES=()
runtimes_of() {
	local var list rt out=
	var=$(runtime_var "$1")
	list=${!var:-${STRESS_RUNTIMES:-containerd crio}}
	for rt in $list; do
		case $rt in
		containerd) out+=" $rt" ;;
		crio)
			if [ -n "$CRIO_SETUP_SCRIPT" ]; then
				out+=" $rt"
			elif [ -n "${!var:-}${STRESS_RUNTIMES:-}" ]; then
				die "$1: crio named, but $CRIO_MISSING"
			fi
			;;
		*) die "$1: unknown runtime $rt (want containerd and/or crio)" ;;
		esac
	done
	echo "${out# }"
}
[ -n "$CRIO_SETUP_SCRIPT" ] || NOTES+=("CRI-O: not run, $CRIO_MISSING")
for s in $STRESS_SUITES; do
	runtimes_of "$s" >/dev/null || exit 1
done

LOAD_PID=
# start_load: stress-ng in its own session (its workers in its process
# group), so that stop_load ends exactly what it started.
start_load() {
	# shellcheck disable=SC2086
	setsid stress-ng $STRESS_LOAD --quiet </dev/null >>"$STRESS_DIR/stress-ng.log" 2>&1 9>&- &
	LOAD_PID=$!
}
stop_load() {
	[ -n "$LOAD_PID" ] || return 0
	kill -TERM -- "-$LOAD_PID" 2>/dev/null || kill -TERM "$LOAD_PID" 2>/dev/null || true
	wait "$LOAD_PID" 2>/dev/null || true
	LOAD_PID=
}
trap stop_load EXIT
trap 'exit 130' INT TERM

# wait_machine returns once no other real-runtime run holds the e2e lock
# (the run itself then takes it).
wait_machine() {
	exec 8>/tmp/nri-cpualign-e2e.lock
	if ! flock -n 8; then
		log "another e2e run holds /tmp/nri-cpualign-e2e.lock: waiting before starting the load"
		flock 8
	fi
	flock -u 8
	exec 8>&-
}

# failed_specs DIR: "STATE<TAB>SPEC" for every spec of the junit reports in
# DIR that did not pass or skip.
failed_specs() {
	local f
	for f in "$1"/junit-*.xml; do
		[ -e "$f" ] || continue
		awk '/<testcase / {
			name = ""; st = ""
			if (match($0, / name="[^"]*"/)) name = substr($0, RSTART + 7, RLENGTH - 8)
			if (match($0, / status="[^"]*"/)) st = substr($0, RSTART + 9, RLENGTH - 10)
			if (st !~ /^(failed|panicked|timedout|interrupted|aborted)$/) next
			gsub(/&#34;|&quot;/, "\"", name); gsub(/&#39;|&apos;/, "'"'"'", name)
			gsub(/&lt;/, "<", name); gsub(/&gt;/, ">", name); gsub(/&#xA;|&#xD;|&#x9;/, " ", name)
			gsub(/&amp;/, "\\&", name)
			print st "\t" name
		}' "$f"
	done
}

FAILS=()
RUNS=0
FAILED_RUNS=0
SPECS=0
T0=$SECONDS
log "stress: $STRESS_PASSES passes of [$STRESS_SUITES] under stress-ng $STRESS_LOAD; outputs and junit reports in $STRESS_DIR"
for ((pass = 1; pass <= STRESS_PASSES; pass++)); do
	for suite in $STRESS_SUITES; do
		var=$(runtime_var "$suite")
		for rt in $(runtimes_of "$suite"); do
			dir=$STRESS_DIR/pass-$pass/$suite-$rt
			mkdir -p "$dir"
			wait_machine
			start_load
			t0=$SECONDS
			log "pass $pass/$STRESS_PASSES: $suite on $rt (output $dir/output.log)"
			extra=()
			# The e2e suite's in-process fixture machines do not depend on
			# the runtime: once per pass, on containerd, when both run.
			if [ "$suite" = e2e ] && [ "$rt" = crio ] && [ -z "${E2E_FIXTURES:-}" ] &&
				[[ " $(runtimes_of e2e) " == *" containerd "* ]]; then
				extra=(E2E_FIXTURES=0)
			fi
			env "$var=$rt" E2E_REPORT_DIR="$dir" "${extra[@]}" bash "$REPO_ROOT/scripts/$suite.sh" "$@" >"$dir/output.log" 2>&1
			rc=$?
			stop_load
			RUNS=$((RUNS + 1))
			# Specs only ("[It] ..."), not the suite's set-up and clean-up nodes.
			n=$(cat "$dir"/junit-*.xml 2>/dev/null | grep -c '<testcase name="\[It\] .*status="passed"')
			SPECS=$((SPECS + n))
			found=0
			while IFS=$'\t' read -r st spec; do
				[ -n "$spec" ] || continue
				found=$((found + 1))
				FAILS+=("FAIL pass=$pass runtime=$rt suite=$suite spec=\"${spec//\"/\\\"}\" ($st)")
			done < <(failed_specs "$dir")
			if [ "$rc" != 0 ] && [ "$found" = 0 ]; then
				found=1
				FAILS+=("FAIL pass=$pass runtime=$rt suite=$suite spec=\"(no failed spec in its junit report: $suite.sh exited $rc; see $dir/output.log)\"")
			fi
			if [ "$found" = 0 ]; then
				log "pass $pass/$STRESS_PASSES: $suite on $rt passed ($n specs) in $((SECONDS - t0)) s"
			else
				FAILED_RUNS=$((FAILED_RUNS + 1))
				log "pass $pass/$STRESS_PASSES: $suite on $rt FAILED ($found failed, $n passed, exit $rc) in $((SECONDS - t0)) s"
			fi
		done
	done
done

for n in "${NOTES[@]}"; do log "$n"; done
for f in "${FAILS[@]}"; do echo "$f"; done
summary="stress: $STRESS_PASSES passes, $RUNS runs, $SPECS specs passed, ${#FAILS[@]} failures in $FAILED_RUNS runs, under stress-ng $STRESS_LOAD, in $((SECONDS - T0)) s; outputs in $STRESS_DIR"
if [ ${#FAILS[@]} -gt 0 ]; then
	echo "FAILED $summary"
	exit 1
fi
echo "PASSED $summary"
