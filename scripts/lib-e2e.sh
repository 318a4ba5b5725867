# shellcheck shell=bash
# Common bits of scripts/e2e*.sh, demo*.sh and bench.sh: the project's own
# runtime setup scripts (scripts/setup-*.sh), where a CRI-O comes from, how
# the runtimes a run asks for are picked, and how to build the plugin.
# Sourced, not run.

REPO_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=scripts/lib-setup.sh
source "$REPO_ROOT/scripts/lib-setup.sh"
SETUP_SCRIPT=$REPO_ROOT/scripts/setup-containerd.sh
TEARDOWN_SCRIPT=$REPO_ROOT/scripts/teardown-containerd.sh
KUBE_SETUP_SCRIPT=$REPO_ROOT/scripts/setup-kube.sh
CRIO_TEARDOWN_SCRIPT=$REPO_ROOT/scripts/teardown-crio.sh
E2E_RUN=${E2E_RUN:-/run/nri-e2e}
CRIO_RUN=${CRIO_RUN:-/run/crio-e2e}
PLUGIN_BIN=$REPO_ROOT/bin/nri-cpualign
export PATH="$PATH:$HOME/go/bin"

# kube_next BINARY...: tries the next Kubernetes release (E2E_KUBE_VERSION_NEXT,
# default v1.38.0-beta.0; empty: no try) beside the suites' one. When the
# module proxy cannot provide it, setup-kube.sh says why in one line (exit
# 3), that line is logged and the suites go on with $E2E_KUBE_VERSION; any
# other failure stops the run. Built binaries are not run by the suites
# yet: the build has never got that far (issue 41), and the one line says
# so if it does.
kube_next() {
	E2E_KUBE_VERSION_NEXT=${E2E_KUBE_VERSION_NEXT-v1.38.0-beta.0}
	[ -n "$E2E_KUBE_VERSION_NEXT" ] || return 0
	local err rc=0
	err=$(KUBE_VERSION=$E2E_KUBE_VERSION_NEXT ETCD_VERSION='' bash "$KUBE_SETUP_SCRIPT" "$@" 2>&1 >/dev/null 9>&-) || rc=$?
	case $rc in
	0) log "Kubernetes $E2E_KUBE_VERSION_NEXT built ($*), but the suites run ${E2E_KUBE_VERSION:-v1.37.2} only: wire it in (issue 41)" ;;
	3) log "${err##*$'\n'}; the suites run ${E2E_KUBE_VERSION:-v1.37.2}" ;;
	*) die "setup-kube.sh $* for $E2E_KUBE_VERSION_NEXT failed: ${err##*$'\n'}" ;;
	esac
}

# Where the CRI-O of the CRI-O passes comes from. CRI-O is not on the Go
# module proxy, so the project cannot build it: it takes the CI machines'
# setup (SHARED_E2E, by default the shared/e2e/ directory beside the
# repository, whose setup-crio.sh unpacks a CRI-O build it ships), else a
# crio in PATH with scripts/setup-crio.sh. Without either, CRIO_SETUP_SCRIPT
# is empty and CRIO_MISSING says why.
SHARED_E2E=${SHARED_E2E:-$(dirname "$REPO_ROOT")/shared/e2e}
CRIO_SETUP_SCRIPT=
CRIO_MISSING=
if [ -f "$SHARED_E2E/setup-crio.sh" ]; then
	CRIO_SETUP_SCRIPT=$SHARED_E2E/setup-crio.sh
elif [ -n "${CRIO_BIN:-}" ] || command -v crio >/dev/null 2>&1; then
	CRIO_SETUP_SCRIPT=$REPO_ROOT/scripts/setup-crio.sh
else
	CRIO_MISSING="no CRI-O on this machine: no crio in PATH and no $SHARED_E2E/setup-crio.sh (CRI-O cannot be built from the Go module proxy; install one or set SHARED_E2E)"
fi

check_prereqs() {
	need_root "containerd, runc and cgroups need it"
	command -v go >/dev/null || die "go not found (looked in PATH and /usr/local/go/bin; the README says how to install Go 1.26)"
}

# pick_runtimes VAR LIST: the runtimes of LIST (containerd, crio) this run
# can use, into RUNTIMES. CRI-O is dropped when there is none: with the
# reason in CRIO_SKIPPED (the run prints it once, with its summary) when
# LIST is the default, as an error when the caller named it in VAR.
CRIO_SKIPPED=
pick_runtimes() {
	local var=$1 rt
	RUNTIMES=
	for rt in ${!var:-containerd crio}; do
		case $rt in
		containerd) RUNTIMES+=" $rt" ;;
		crio)
			if [ -n "$CRIO_SETUP_SCRIPT" ]; then
				RUNTIMES+=" $rt"
			elif [ -n "${!var:-}" ]; then
				die "$var names crio, but $CRIO_MISSING"
			else
				CRIO_SKIPPED="CRI-O: not run, $CRIO_MISSING"
			fi
			;;
		*) die "$var: unknown runtime $rt (want containerd and/or crio)" ;;
		esac
	done
	RUNTIMES=${RUNTIMES# }
}

# setup_containerd starts (or finds running) the test containerd and loads
# its environment. A cold machine builds containerd and runc first (minutes).
setup_containerd() {
	local t0=$SECONDS
	log "setting up containerd ($SETUP_SCRIPT)"
	# 9>&-: containerd must not inherit the caller's lock fd, or it would
	# hold /tmp/nri-cpualign-e2e.lock for as long as it runs.
	bash "$SETUP_SCRIPT" >/dev/null 9>&- || die "containerd setup failed"
	# shellcheck disable=SC1091
	source "$E2E_RUN/env"
	log "containerd ${CONTAINERD_VERSION:-} ready in $((SECONDS - t0))s (pid $E2E_CONTAINERD_PID, NRI socket $NRI_SOCKET)"
}

teardown_containerd() {
	bash "$TEARDOWN_SCRIPT" >&2 9>&- || log "teardown reported errors"
}

# check_crio_prereqs: for callers that need CRI-O (bench.sh --cri).
check_crio_prereqs() {
	[ -n "$CRIO_SETUP_SCRIPT" ] || die "$CRIO_MISSING"
}

# setup_crio starts (or finds running) the test CRI-O. Its environment is
# left in $CRIO_RUN/env, not loaded: it names NRI_SOCKET, E2E_RUN and the
# CRI endpoint too, which would hide containerd's.
setup_crio() {
	local t0=$SECONDS
	check_crio_prereqs
	log "setting up CRI-O ($CRIO_SETUP_SCRIPT)"
	# GOMAXPROCS as setup-containerd.sh gives containerd (a node of 8
	# CPUs or more), inherited by crio.
	GOMAXPROCS=${E2E_CONTAINERD_GOMAXPROCS:-8} bash "$CRIO_SETUP_SCRIPT" >/dev/null 9>&- || die "CRI-O setup failed"
	log "CRI-O ready in $((SECONDS - t0))s (pid $(sed -n 's/^export E2E_CRIO_PID=//p' "$CRIO_RUN/env"))"
}

teardown_crio() {
	bash "$CRIO_TEARDOWN_SCRIPT" >&2 9>&- || log "CRI-O teardown reported errors"
}

build_plugin() {
	log "building $PLUGIN_BIN"
	(cd "$REPO_ROOT" && CGO_ENABLED=0 go build -o "$PLUGIN_BIN" ./cmd/nri-cpualign) || die "build failed"
}

# kill_pids_of_bin FILE BIN: SIGKILL every pid listed in FILE that still runs
# BIN (checked through /proc/PID/exe, so a reused pid is left alone).
kill_pids_of_bin() {
	local file=$1 bin pid exe killed=()
	bin=$(readlink -f "$2")
	[ -s "$file" ] || return 0
	while read -r pid; do
		[ -n "$pid" ] || continue
		exe=$(readlink -f "/proc/$pid/exe" 2>/dev/null) || continue
		if [ "$exe" = "$bin" ]; then
			log "killing leftover $(basename "$bin") pid $pid"
			kill -KILL "$pid" 2>/dev/null || true
			killed+=("$pid")
		fi
	done <"$file"
	# SIGKILL is delivered asynchronously: until a process has exited it
	# holds its ports (a kubelet's) and its runtime connection (a
	# plugin's), which the next run takes again. 5 s at most for each.
	for pid in "${killed[@]}"; do
		for _ in $(seq 50); do pid_running "$pid" || break; sleep 0.1; done
		pid_running "$pid" && log "pid $pid still runs 5 s after SIGKILL"
	done
	return 0
}

# take_machine: one real-runtime run at a time per machine (fd 9 holds
# /tmp/nri-cpualign-e2e.lock until the script exits; children that outlive
# a step, like a runtime, must be started with 9>&-), and no demo beside it:
# its plugin has the suites' NRI name and its pods would hold CPUs, so it is
# stopped as make demo-down would.
take_machine() {
	exec 9>/tmp/nri-cpualign-e2e.lock
	if ! flock -n 9; then
		log "another e2e run holds /tmp/nri-cpualign-e2e.lock, waiting"
		flock 9
	fi
	if demo_plugin_running || [ -d "$DEMO_RUN" ]; then
		log "a demo is running: stopping it first (as make demo-down would)"
		stop_demo_plugin
		rm -rf "$DEMO_RUN"
	fi
}

# The demo's plugin: run directory with its pid file, log, config and state.
DEMO_RUN=${DEMO_RUN:-/run/nri-cpualign-demo}
DEMO_PIDFILE=$DEMO_RUN/plugin.pid
DEMO_TOOL=$REPO_ROOT/bin/e2e-demo

# demo_plugin_running: true when the demo's plugin process is alive.
demo_plugin_running() {
	local pid
	[ -s "$DEMO_PIDFILE" ] || return 1
	pid=$(cat "$DEMO_PIDFILE")
	[ "$(readlink -f "/proc/$pid/exe" 2>/dev/null)" = "$(readlink -f "$PLUGIN_BIN")" ] &&
		! grep -q '^State:[[:space:]]*Z' "/proc/$pid/status" 2>/dev/null
}

# stop_demo_plugin: SIGTERM the demo's plugin (by its pid file, checked
# against the binary), SIGKILL after 5 s; returns once it has exited (5 s
# more at most).
stop_demo_plugin() {
	local pid i
	demo_plugin_running || { rm -f "$DEMO_PIDFILE"; return 0; }
	pid=$(cat "$DEMO_PIDFILE")
	log "stopping the demo plugin (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for i in $(seq 50); do demo_plugin_running || break; sleep 0.1; done
	if demo_plugin_running; then
		kill -KILL "$pid" 2>/dev/null
		# Until it has exited it stays connected to the runtime under the
		# suites' plugin name.
		for i in $(seq 50); do demo_plugin_running || break; sleep 0.1; done
		demo_plugin_running && log "the demo plugin (pid $pid) still runs 5 s after SIGKILL"
	fi
	rm -f "$DEMO_PIDFILE"
}
