# shellcheck shell=bash
# Helpers of the runtime setup and teardown scripts (setup-containerd.sh,
# setup-crio.sh, setup-kube.sh and their teardowns) and of lib-e2e.sh:
# logging, root check, installing missing Debian packages, and processes
# found through pid files. Sourced, not run.

# The project's scripts need Go; the README installs it in /usr/local/go.
case ":$PATH:" in *:/usr/local/go/bin:*) ;; *) PATH=$PATH:/usr/local/go/bin ;; esac
export PATH

log() { printf '[%s %(%T)T] %s\n' "$(basename "$0" .sh)" -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

need_root() {
	[ "$(id -u)" = 0 ] || die "must run as root (${1:-runtimes, runc and cgroups need it})"
}

# Packages to install, collected by want_cmd/want_pkg/want_file and
# installed by install_wanted.
WANTED_PKGS=()

# want_cmd CMD PKG: PKG is needed when CMD is not in PATH.
want_cmd() { command -v "$1" >/dev/null 2>&1 || WANTED_PKGS+=("$2"); }
# want_file FILE PKG: PKG is needed when FILE does not exist.
want_file() { [ -e "$1" ] || WANTED_PKGS+=("$2"); }
# want_pkg PKG: PKG is needed when dpkg does not list it as installed.
want_pkg() {
	dpkg-query -W -f='${db:Status-Abbrev}' "$1" 2>/dev/null | grep -q '^ii' || WANTED_PKGS+=("$1")
}

# install_wanted installs the collected packages, if any. The package lists
# are refreshed first only when there are none (a fresh machine), and once
# more when the install fails (lists too old for the mirror).
# E2E_SKIP_APT=1 turns a missing package into an error instead.
install_wanted() {
	[ ${#WANTED_PKGS[@]} -gt 0 ] || return 0
	local pkgs
	pkgs=$(printf '%s\n' "${WANTED_PKGS[@]}" | sort -u | tr '\n' ' ')
	pkgs=${pkgs% }
	WANTED_PKGS=()
	[ "${E2E_SKIP_APT:-0}" != 1 ] || die "missing Debian packages: $pkgs (E2E_SKIP_APT=1: not installing them)"
	command -v apt-get >/dev/null || die "missing packages $pkgs and no apt-get (the scripts are written for Debian 12)"
	log "installing Debian packages: $pkgs"
	if ! compgen -G '/var/lib/apt/lists/*_Packages' >/dev/null; then
		apt_quiet update || die "apt-get update failed"
	fi
	# shellcheck disable=SC2086 # one word per package
	if ! apt_quiet install -y --no-install-recommends $pkgs; then
		log "apt-get install failed: refreshing the package lists and trying again"
		apt_quiet update || die "apt-get update failed"
		# shellcheck disable=SC2086
		apt_quiet install -y --no-install-recommends $pkgs || die "apt-get install $pkgs failed"
	fi
}

# apt_quiet ARGS...: apt-get ARGS, its output shown only when it fails.
apt_quiet() {
	local out rc=0
	out=$(DEBIAN_FRONTEND=noninteractive apt-get -q "$@" 2>&1) || rc=$?
	[ "$rc" = 0 ] || printf '%s\n' "$out" | tail -n 20 >&2
	return "$rc"
}

# pid_running PID: the process exists and is not a zombie (this VM's PID 1
# reaps exited processes late, and kill -0 succeeds on a zombie).
pid_running() {
	local state
	[ -n "${1:-}" ] || return 1
	state=$(sed -n 's/^State:[[:space:]]*\([A-Z]\).*/\1/p' "/proc/$1/status" 2>/dev/null) || return 1
	[ -n "$state" ] && [ "$state" != Z ] && [ "$state" != X ]
}

# stop_pid NAME PID [SECONDS]: SIGTERM, then SIGKILL after SECONDS (10).
stop_pid() {
	local name=$1 pid=$2 limit=$((${3:-10} * 10)) i
	pid_running "$pid" || return 0
	log "stopping $name (pid $pid)"
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < limit; i++)); do
		pid_running "$pid" || return 0
		sleep 0.1
	done
	log "$name (pid $pid) still runs after SIGTERM: SIGKILL"
	kill -KILL "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		pid_running "$pid" || return 0
		sleep 0.1
	done
	log "$name (pid $pid) did not exit"
}

# unmount_below DIR: unmounts everything mounted at or below DIR, deepest
# first (lazily when a plain unmount is refused).
unmount_below() {
	local dir m
	[ -d "$1" ] || return 0
	dir=$(readlink -f "$1")
	awk -v d="$dir" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r |
		while read -r m; do
			umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "cannot unmount $m"
		done
}

# remove_empty_pod_cgroups: the pod cgroups runc leaves behind (the kubelet
# would remove them) in every hierarchy; rmdir only takes empty ones, so a
# cgroup that still has processes is left alone.
remove_empty_pod_cgroups() {
	local h
	for h in /sys/fs/cgroup/*/kubepods /sys/fs/cgroup/kubepods; do
		[ -d "$h" ] || continue
		find "$h" -mindepth 1 -depth -type d -exec rmdir {} \; 2>/dev/null
		rmdir "$h" 2>/dev/null || true
	done
}
