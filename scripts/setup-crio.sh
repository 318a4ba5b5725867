#!/usr/bin/env bash
# setup-crio.sh - a CRI-O for the real-runtime suites, from a crio already on
# the machine (CRIO_BIN, else `crio` in PATH): CRI-O is not on the Go module
# proxy, so this project cannot build it. (Where the shared CI setup
# ../shared/e2e/setup-crio.sh exists, scripts/lib-e2e.sh uses that instead.)
# Idempotent, root. Beside the containerd of setup-containerd.sh, never
# instead of it: own sockets and directories, NRI on a socket of its own.
#
# It installs conmon, skopeo and curl when missing, takes runc and the two
# busybox image archives from setup-containerd.sh --artifacts (built on
# first use), imports the images into CRI-O's storage with skopeo, writes a
# crio.conf (cgroupfs or systemd, runc, no infra container, NRI on) and starts crio.
#
# stdout: `export NAME=value` lines, also written to $CRIO_RUN/env:
# CRI_RUNTIME_ENDPOINT, NRI_SOCKET, E2E_RUNTIME=crio, E2E_TEST_IMAGE,
# E2E_PAUSE_IMAGE, E2E_RUNC, E2E_CRIO_PID, E2E_CRIO_LOG, E2E_CRIO_CONFIG,
# E2E_RUN (= $CRIO_RUN). Logs: stderr. Stop with teardown-crio.sh.
#
# Environment: CRIO_BIN, PINNS_BIN (pinns beside crio, in PATH or
# /usr/libexec/crio), E2E_CACHE (/var/cache/nri-e2e), CRIO_ROOT
# (/var/lib/crio-e2e), CRIO_RUN (/run/crio-e2e), CRIO_LOG_LEVEL (info),
# E2E_NRI_REGISTRATION_TIMEOUT (5s), E2E_NRI_REQUEST_TIMEOUT (2s),
# E2E_CGROUP_DRIVER (cgroupfs, or systemd: cgroup_manager = "systemd", as on
# a kubeadm node), E2E_SKIP_APT=1.
set -euo pipefail
SELF=$(readlink -f "${BASH_SOURCE[0]}")
HERE=$(dirname "$SELF")
# shellcheck source=scripts/lib-setup.sh
source "$HERE/lib-setup.sh"

E2E_CACHE=${E2E_CACHE:-/var/cache/nri-e2e}
CRIO_ROOT=${CRIO_ROOT:-/var/lib/crio-e2e}
CRIO_RUN=${CRIO_RUN:-/run/crio-e2e}
CRIO_LOG_LEVEL=${CRIO_LOG_LEVEL:-info}
E2E_NRI_REGISTRATION_TIMEOUT=${E2E_NRI_REGISTRATION_TIMEOUT:-5s}
E2E_NRI_REQUEST_TIMEOUT=${E2E_NRI_REQUEST_TIMEOUT:-2s}
SOCKET=$CRIO_RUN/crio.sock
NRI_SOCKET=$CRIO_RUN/nri.sock
CONFIG=$CRIO_RUN/crio.conf
PIDFILE=$CRIO_RUN/crio.pid
LOGFILE=$CRIO_RUN/crio.log
STORE="overlay@$CRIO_ROOT/storage+$CRIO_RUN/storage"
E2E_CGROUP_DRIVER=${E2E_CGROUP_DRIVER:-cgroupfs}
case $E2E_CGROUP_DRIVER in
cgroupfs | systemd) ;;
*) echo "E2E_CGROUP_DRIVER=$E2E_CGROUP_DRIVER: want cgroupfs or systemd" >&2; exit 1 ;;
esac

need_root
START=$SECONDS
CRIO_BIN=${CRIO_BIN:-$(command -v crio || true)}
[ -n "$CRIO_BIN" ] && [ -x "$CRIO_BIN" ] ||
	die "no crio: CRI-O is not on the Go module proxy; put a crio in PATH or set CRIO_BIN"
CRIO_BIN=$(readlink -f "$CRIO_BIN")
if [ -z "${PINNS_BIN:-}" ]; then
	for p in "$(dirname "$CRIO_BIN")/pinns" "$(command -v pinns || true)" /usr/libexec/crio/pinns; do
		[ -n "$p" ] && [ -x "$p" ] && { PINNS_BIN=$p; break; }
	done
fi
[ -n "${PINNS_BIN:-}" ] || die "no pinns beside $CRIO_BIN, in PATH or in /usr/libexec/crio (set PINNS_BIN)"
"$CRIO_BIN" --version >/dev/null 2>&1 || die "$CRIO_BIN --version fails (missing libraries?)"
log "$("$CRIO_BIN" --version 2>/dev/null | head -n 1) ($CRIO_BIN)"

want_cmd conmon conmon
want_cmd skopeo skopeo
want_cmd curl curl
install_wanted

# runc and the image archives, shared with the containerd setup's cache.
eval "$(bash "$HERE/setup-containerd.sh" --artifacts)"

mkdir -p "$CRIO_ROOT" "$CRIO_RUN/nri-plugins" "$CRIO_RUN/nri-conf.d" "$CRIO_RUN/cni-net.d" \
	"$CRIO_RUN/hooks.d" "$CRIO_RUN/policies" "$CRIO_RUN/conf.d" /var/log/crio-e2e
# No registry is reachable and every image is local: accept any image, never
# expand short names.
echo '{"default": [{"type": "insecureAcceptAnything"}]}' >"$CRIO_RUN/policy.json"
echo 'unqualified-search-registries = []' >"$CRIO_RUN/registries.conf"
conmon=$(command -v conmon)
cat >"$CONFIG" <<EOF
# CRI-O for nri-cpualign's tests (scripts/setup-crio.sh)
[crio]
root = "$CRIO_ROOT/storage"
runroot = "$CRIO_RUN/storage"
storage_driver = "overlay"
log_dir = "/var/log/crio-e2e/pods"
version_file = "$CRIO_RUN/version"
version_file_persist = "$CRIO_ROOT/version"
clean_shutdown_file = "$CRIO_ROOT/clean.shutdown"

[crio.api]
listen = "$SOCKET"
stream_address = "127.0.0.1"
stream_port = "0"

[crio.runtime]
default_runtime = "runc"
cgroup_manager = "$E2E_CGROUP_DRIVER"
conmon = "$conmon"
conmon_cgroup = "pod"
selinux = false
apparmor_profile = ""
# Pods get no pause process; one that shares no PID namespace needs none.
drop_infra_ctr = true
pinns_path = "$PINNS_BIN"
namespaces_dir = "$CRIO_RUN/ns"
container_exits_dir = "$CRIO_RUN/exits"
container_attach_socket_dir = "$CRIO_RUN/attach"
hooks_dir = ["$CRIO_RUN/hooks.d"]
log_level = "$CRIO_LOG_LEVEL"

# Debian 12's crun is too old for these containers: the runc of the
# containerd setup runs them.
[crio.runtime.runtimes.runc]
runtime_path = "$E2E_RUNC"
runtime_type = "oci"
runtime_root = "$CRIO_RUN/runc"
monitor_path = "$conmon"
monitor_cgroup = "pod"

[crio.image]
pause_image = "$E2E_PAUSE_IMAGE"
pause_command = ""
pinned_images = ["$E2E_PAUSE_IMAGE", "$E2E_TEST_IMAGE"]
signature_policy = "$CRIO_RUN/policy.json"
signature_policy_dir = "$CRIO_RUN/policies"
short_name_mode = "disabled"

[crio.network]
network_dir = "$CRIO_RUN/cni-net.d"
plugin_dirs = ["/usr/lib/cni"]

[crio.metrics]
enable_metrics = false

[crio.nri]
enable_nri = true
nri_listen = "$NRI_SOCKET"
nri_plugin_dir = "$CRIO_RUN/nri-plugins"
nri_plugin_config_dir = "$CRIO_RUN/nri-conf.d"
nri_plugin_registration_timeout = "$E2E_NRI_REGISTRATION_TIMEOUT"
nri_plugin_request_timeout = "$E2E_NRI_REQUEST_TIMEOUT"
EOF

for image in "$E2E_TEST_IMAGE=$E2E_TEST_IMAGE_ARCHIVE" "$E2E_PAUSE_IMAGE=$E2E_PAUSE_IMAGE_ARCHIVE"; do
	skopeo inspect --raw "containers-storage:[$STORE]${image%%=*}" >/dev/null 2>&1 && continue
	log "importing ${image%%=*} into CRI-O's storage"
	skopeo copy -q "oci-archive:${image#*=}" "containers-storage:[$STORE]${image%%=*}" >&2 ||
		die "skopeo copy ${image#*=} failed"
done

answers() { curl -sf --max-time 2 --unix-socket "$SOCKET" http://localhost/info >/dev/null 2>&1; }
pid=
[ -s "$PIDFILE" ] && pid=$(cat "$PIDFILE")
if pid_running "$pid" && answers; then
	log "crio already runs (pid $pid)"
else
	rm -f "$SOCKET" "$NRI_SOCKET"
	log "starting crio (log $LOGFILE)"
	CONTAINERS_REGISTRIES_CONF=$CRIO_RUN/registries.conf setsid "$CRIO_BIN" --config "$CONFIG" \
		--config-dir "$CRIO_RUN/conf.d" </dev/null >>"$LOGFILE" 2>&1 &
	pid=$!
	echo "$pid" >"$PIDFILE"
	deadline=$((SECONDS + 60))
	until answers && [ -S "$NRI_SOCKET" ]; do
		pid_running "$pid" || { tail -n 20 "$LOGFILE" >&2; die "crio exited"; }
		[ "$SECONDS" -lt "$deadline" ] || { tail -n 20 "$LOGFILE" >&2; die "crio not ready within 60s"; }
		sleep 0.1
	done
fi

cat >"$CRIO_RUN/env.next" <<EOF
export CRI_RUNTIME_ENDPOINT=unix://$SOCKET
export NRI_SOCKET=$NRI_SOCKET
export E2E_RUNTIME=crio
export E2E_TEST_IMAGE=$E2E_TEST_IMAGE
export E2E_PAUSE_IMAGE=$E2E_PAUSE_IMAGE
export E2E_RUNC=$E2E_RUNC
export E2E_CRIO_PID=$pid
export E2E_CRIO_LOG=$LOGFILE
export E2E_CRIO_CONFIG=$CONFIG
export E2E_RUN=$CRIO_RUN
EOF
mv -f "$CRIO_RUN/env.next" "$CRIO_RUN/env"
log "crio ready in $((SECONDS - START))s: pid $pid, CRI $SOCKET, NRI $NRI_SOCKET; environment in $CRIO_RUN/env"
cat "$CRIO_RUN/env"
