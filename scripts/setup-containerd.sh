#!/usr/bin/env bash
# setup-containerd.sh - the containerd that make demo and the real-runtime
# suites run against: containerd with NRI on a socket of its own, runc as
# the OCI runtime, two local busybox images and no registry or CNI. It lives
# beside any containerd of the machine (own sockets, directories and
# config) and must run as root. Idempotent: a second run only does what is
# missing, and restarts containerd when its config changed.
#
# It installs the Debian packages it needs that are missing (busybox-static,
# libseccomp-dev, pkg-config, gcc), builds containerd, ctr and
# containerd-shim-runc-v2 (CONTAINERD_VERSION, v2.4.2) and runc with seccomp
# (RUNC_VERSION, v1.5.2) from the Go module proxy into
# $E2E_CACHE/bin/containerd-<version>-runc-<version>/ (kept across runs),
# makes the test and pause images from /bin/busybox, writes the config,
# starts containerd, imports the images and waits until CRI knows them.
#
# stdout: `export NAME=value` lines (also written to $E2E_RUN/env) for the
# suites: CONTAINERD_ADDRESS, CONTAINERD_NAMESPACE, CRI_RUNTIME_ENDPOINT,
# NRI_SOCKET, E2E_TEST_IMAGE, E2E_PAUSE_IMAGE, E2E_CTR, E2E_RUNC,
# E2E_CONTAINERD_PID, E2E_CONTAINERD_LOG, E2E_RUN, E2E_SETUP_SCRIPT (this
# script: a suite restarts containerd by running it again). Logs: stderr.
#
#   eval "$(bash scripts/setup-containerd.sh)"      start, load the env
#   bash scripts/setup-containerd.sh --artifacts    build runc and the image
#                                                   archives only, print where
#   bash scripts/teardown-containerd.sh             stop, clean up
#
# Environment: E2E_CACHE (/var/cache/nri-e2e), E2E_ROOT (/var/lib/nri-e2e),
# E2E_RUN (/run/nri-e2e), CONTAINERD_VERSION, RUNC_VERSION, E2E_LOG_LEVEL
# (info), E2E_NRI_REGISTRATION_TIMEOUT (5s), E2E_NRI_REQUEST_TIMEOUT (2s),
# RESTRICT_OOM (true|false, detected), E2E_START_TIMEOUT (60 s),
# E2E_CONTAINERD_GOMAXPROCS (8), E2E_CGROUP_DRIVER (cgroupfs, or systemd: runc's systemd driver,
# SystemdCgroup = true, as on a kubeadm node), E2E_SKIP_APT=1 (fail instead
# of installing packages). Go and the build packages are needed only for
# what is not in the cache yet (the VM test node gets a filled cache).
set -euo pipefail
SELF=$(readlink -f "${BASH_SOURCE[0]}")
# shellcheck source=scripts/lib-setup.sh
source "$(dirname "$SELF")/lib-setup.sh"

CONTAINERD_VERSION=${CONTAINERD_VERSION:-v2.4.2}
RUNC_VERSION=${RUNC_VERSION:-v1.5.2}
E2E_CACHE=${E2E_CACHE:-/var/cache/nri-e2e}
E2E_ROOT=${E2E_ROOT:-/var/lib/nri-e2e}
E2E_RUN=${E2E_RUN:-/run/nri-e2e}
E2E_LOG_LEVEL=${E2E_LOG_LEVEL:-info}
E2E_NRI_REGISTRATION_TIMEOUT=${E2E_NRI_REGISTRATION_TIMEOUT:-5s}
E2E_NRI_REQUEST_TIMEOUT=${E2E_NRI_REQUEST_TIMEOUT:-2s}
E2E_CGROUP_DRIVER=${E2E_CGROUP_DRIVER:-cgroupfs}
E2E_CONTAINERD_GOMAXPROCS=${E2E_CONTAINERD_GOMAXPROCS:-8}
case $E2E_CGROUP_DRIVER in
cgroupfs) SYSTEMD_CGROUP=false ;;
systemd) SYSTEMD_CGROUP=true ;;
*) echo "E2E_CGROUP_DRIVER=$E2E_CGROUP_DRIVER: want cgroupfs or systemd" >&2; exit 1 ;;
esac

ARTIFACTS_ONLY=0
case ${1:-} in
--artifacts) ARTIFACTS_ONLY=1 ;;
"") ;;
*) die "unknown argument $1 (usage: setup-containerd.sh [--artifacts])" ;;
esac

# The cache layout (bin/containerd-<v>-runc-<v>/, images/<name>-<busybox
# hash>.tar) is the one CI machines already hold: a warm cache is used as is.
BIN=$E2E_CACHE/bin/containerd-$CONTAINERD_VERSION-runc-$RUNC_VERSION
IMAGES=$E2E_CACHE/images
SOCKET=$E2E_RUN/containerd.sock
NRI_SOCKET=$E2E_RUN/nri.sock
CONFIG=$E2E_RUN/config.toml
PIDFILE=$E2E_RUN/containerd.pid
LOGFILE=$E2E_RUN/containerd.log
NAMESPACE=k8s.io
TEST_IMAGE=localhost/nri-e2e/busybox:latest
PAUSE_IMAGE=localhost/nri-e2e/pause:latest

need_root
START=$SECONDS

# The cache layout's image archives (see below), named by busybox's hash.
busybox_id=$(sha256sum /bin/busybox 2>/dev/null | cut -c1-12) || busybox_id=none

# ------------------------------------------------------------ packages
# The images hold a static busybox (they have no libc); runc's seccomp
# support is cgo against libseccomp. Only what a missing build needs.
need_build=0
for f in containerd ctr containerd-shim-runc-v2 runc; do [ -x "$BIN/$f" ] || need_build=1; done
if [ "$need_build" = 1 ]; then
	command -v go >/dev/null || die "go not found (install Go 1.26 in /usr/local/go, see the README)"
	want_file /usr/include/seccomp.h libseccomp-dev
	want_cmd pkg-config pkg-config
	want_cmd gcc gcc
fi
[ -s "$IMAGES/busybox-$busybox_id.tar" ] && [ -s "$IMAGES/pause-$busybox_id.tar" ] || want_pkg busybox-static
want_cmd findmnt util-linux
install_wanted
busybox_id=$(sha256sum /bin/busybox | cut -c1-12)

# ------------------------------------------------------------ binaries
# go_install DEST ARGS...: go install into a scratch directory next to DEST,
# moved into DEST when the build succeeded, so that an interrupted build
# never leaves a partial binary where the next run would take it as done.
go_install() {
	local dest=$1
	shift
	SCRATCH=$(mktemp -d "$dest.build.XXXXXX")
	trap 'rm -rf "$SCRATCH"' EXIT
	(cd / && GOBIN=$SCRATCH GOFLAGS=-buildvcs=false go install "$@") >&2 || die "go install $* failed"
	mv -f "$SCRATCH"/* "$dest"/
	rmdir "$SCRATCH"
	trap - EXIT
}

mkdir -p "$BIN"
# Scratch dirs of builds that were killed; a build of this moment (another
# caller) is younger than that.
find "$(dirname "$BIN")" -maxdepth 1 -name "$(basename "$BIN").build.*" -mmin +180 -exec rm -rf {} +
if ! [ -x "$BIN/containerd" ] || ! [ -x "$BIN/ctr" ] || ! [ -x "$BIN/containerd-shim-runc-v2" ]; then
	log "building containerd $CONTAINERD_VERSION from the Go module proxy (a few minutes, once) into $BIN"
	mod=github.com/containerd/containerd/v2/cmd
	go_install "$BIN" "$mod/containerd@$CONTAINERD_VERSION" "$mod/ctr@$CONTAINERD_VERSION" \
		"$mod/containerd-shim-runc-v2@$CONTAINERD_VERSION"
fi
if ! [ -x "$BIN/runc" ]; then
	log "building runc $RUNC_VERSION with seccomp into $BIN"
	CGO_ENABLED=1 go_install "$BIN" -tags seccomp "github.com/opencontainers/runc@$RUNC_VERSION"
fi

# ------------------------------------------------------------ images
# add_blob DIR FILE: moves FILE into DIR's OCI blob store under its digest
# and prints "sha256:<hex> <size>".
add_blob() {
	local dir=$1 file=$2 hex size
	hex=$(sha256sum "$file" | cut -d' ' -f1)
	size=$(stat -c %s "$file")
	mv "$file" "$dir/blobs/sha256/$hex"
	echo "sha256:$hex $size"
}

# make_image ARCHIVE NAME ENTRYPOINT CMD: an OCI image-layout tar of one
# uncompressed layer (busybox, a symlink per applet, passwd and group
# files); ENTRYPOINT and CMD are JSON. Timestamps and owners are fixed, so
# the same busybox always gives the same digests.
make_image() {
	local archive=$1 name=$2 entrypoint=$3 cmd=$4 work root applet layer config manifest arch
	arch=$(go env GOARCH 2>/dev/null || dpkg --print-architecture)
	work=$(mktemp -d)
	root=$work/rootfs
	mkdir -p "$work/blobs/sha256" "$root/bin" "$root/etc" "$root/dev" "$root/proc" "$root/sys" \
		"$root/tmp" "$root/root" "$root/run" "$root/var"
	chmod 1777 "$root/tmp"
	cp /bin/busybox "$root/bin/busybox"
	for applet in $(/bin/busybox --list); do
		[ "$applet" = busybox ] || ln -s busybox "$root/bin/$applet"
	done
	printf '%s\n' 'root:x:0:0:root:/root:/bin/sh' 'nobody:x:65534:65534:nobody:/nonexistent:/bin/false' >"$root/etc/passwd"
	printf '%s\n' 'root:x:0:' 'nogroup:x:65534:' >"$root/etc/group"
	tar -C "$root" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$work/layer" .
	read -r layer layer_size < <(add_blob "$work" "$work/layer")
	cat >"$work/config" <<-EOF
		{"architecture":"$arch","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"],"Entrypoint":$entrypoint,"Cmd":$cmd,"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["$layer"]},"history":[{"created_by":"nri-cpualign scripts/setup-containerd.sh"}]}
	EOF
	read -r config config_size < <(add_blob "$work" "$work/config")
	cat >"$work/manifest" <<-EOF
		{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"$config","size":$config_size},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"$layer","size":$layer_size}]}
	EOF
	read -r manifest manifest_size < <(add_blob "$work" "$work/manifest")
	cat >"$work/index.json" <<-EOF
		{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"$manifest","size":$manifest_size,"platform":{"architecture":"$arch","os":"linux"},"annotations":{"io.containerd.image.name":"$name","org.opencontainers.image.ref.name":"${name##*:}"}}]}
	EOF
	echo '{"imageLayoutVersion":"1.0.0"}' >"$work/oci-layout"
	tar -C "$work" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner -cf "$archive.part" oci-layout index.json blobs
	mv "$archive.part" "$archive"
	rm -rf "$work"
}

mkdir -p "$IMAGES"
TEST_ARCHIVE=$IMAGES/busybox-$busybox_id.tar
PAUSE_ARCHIVE=$IMAGES/pause-$busybox_id.tar
if ! [ -s "$TEST_ARCHIVE" ]; then
	log "making the test image $TEST_IMAGE ($TEST_ARCHIVE)"
	# Sleeps until SIGTERM or SIGINT and then exits 0, so stopping it is quick.
	make_image "$TEST_ARCHIVE" "$TEST_IMAGE" null \
		'["/bin/sh","-c","trap \"exit 0\" TERM INT; while :; do sleep 1; done"]'
fi
if ! [ -s "$PAUSE_ARCHIVE" ]; then
	log "making the sandbox image $PAUSE_IMAGE ($PAUSE_ARCHIVE)"
	make_image "$PAUSE_ARCHIVE" "$PAUSE_IMAGE" '["/bin/sleep"]' '["inf"]'
fi

if [ "$ARTIFACTS_ONLY" = 1 ]; then
	cat <<-EOF
		export E2E_RUNC=$BIN/runc
		export E2E_TEST_IMAGE=$TEST_IMAGE
		export E2E_PAUSE_IMAGE=$PAUSE_IMAGE
		export E2E_TEST_IMAGE_ARCHIVE=$TEST_ARCHIVE
		export E2E_PAUSE_IMAGE_ARCHIVE=$PAUSE_ARCHIVE
	EOF
	exit 0
fi

# ------------------------------------------------------------ config
# Without CAP_SYS_RESOURCE (this project's VMs drop it even for root) runc
# cannot lower a container's oom_score_adj below its own and every sandbox
# fails; containerd then has to clamp the kubelet's negative scores.
if [ -z "${RESTRICT_OOM:-}" ]; then
	if (echo -999 >/proc/self/oom_score_adj) 2>/dev/null; then RESTRICT_OOM=false; else RESTRICT_OOM=true; fi
fi
mkdir -p "$E2E_RUN/nri/plugins" "$E2E_RUN/nri/conf.d" "$E2E_RUN/cni/net.d" "$E2E_ROOT"
# Shims put their sockets under /run/containerd/s whatever the config says;
# teardown removes that directory only if this setup made it.
[ -e /run/containerd ] || touch "$E2E_RUN/.created-run-containerd"
cat >"$CONFIG.next" <<EOF
# containerd $CONTAINERD_VERSION for nri-cpualign's tests (scripts/setup-containerd.sh)
version = 3
root = "$E2E_ROOT/root"
state = "$E2E_RUN/state"
# Snapshotters and tracing the tests never use, left out of the start-up.
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "$SOCKET"

[ttrpc]
  address = "$SOCKET.ttrpc"

[debug]
  address = "$E2E_RUN/debug.sock"
  level = "$E2E_LOG_LEVEL"

[metrics]
  address = ""

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = "$E2E_ROOT/opt"

  [plugins.'io.containerd.nri.v1.nri']
    disable = false
    disable_connections = false
    socket_path = "$NRI_SOCKET"
    plugin_path = "$E2E_RUN/nri/plugins"
    plugin_config_path = "$E2E_RUN/nri/conf.d"
    plugin_registration_timeout = "$E2E_NRI_REGISTRATION_TIMEOUT"
    plugin_request_timeout = "$E2E_NRI_REQUEST_TIMEOUT"

  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = "$PAUSE_IMAGE"

  [plugins.'io.containerd.cri.v1.runtime']
    enable_selinux = false
    restrict_oom_score_adj = $RESTRICT_OOM
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = "$BIN/runc"
          Root = "$E2E_RUN/runc"
          SystemdCgroup = $SYSTEMD_CGROUP
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = ["$E2E_RUN/cni/bin"]
      conf_dir = "$E2E_RUN/cni/net.d"

  [plugins.'io.containerd.grpc.v1.cri']
    disable_tcp_service = true
    stream_server_address = "127.0.0.1"
    stream_server_port = "0"
EOF

ctr() { "$BIN/ctr" --address "$SOCKET" "$@"; }
containerd_pid() { [ -s "$PIDFILE" ] && cat "$PIDFILE"; }

if cmp -s "$CONFIG.next" "$CONFIG"; then
	rm -f "$CONFIG.next"
else
	mv -f "$CONFIG.next" "$CONFIG"
	# Containers keep running in their shims while containerd restarts.
	if pid=$(containerd_pid) && pid_running "$pid"; then
		log "the config changed: restarting containerd"
		stop_pid containerd "$pid" 10
	fi
fi

# ------------------------------------------------------------ start
if pid=$(containerd_pid) && pid_running "$pid" && ctr version >/dev/null 2>&1; then
	log "containerd already runs (pid $pid)"
else
	rm -f "$PIDFILE" "$SOCKET" "$SOCKET.ttrpc" "$NRI_SOCKET" "$E2E_RUN/debug.sock"
	log "starting containerd $CONTAINERD_VERSION (log $LOGFILE)"
	# A session of its own: it outlives this script and its caller's job
	# control; the shims find runc through PATH.
	# GOMAXPROCS as on a node of 8 CPUs or more (E2E_CONTAINERD_GOMAXPROCS,
	# 8): on these 2-CPU machines Go's default would run containerd's
	# goroutines on two threads, and races between CRI calls and a
	# plugin's updates (containerd#13733) would rarely show.
	PATH=$BIN:$PATH GOMAXPROCS=$E2E_CONTAINERD_GOMAXPROCS setsid "$BIN/containerd" --config "$CONFIG" </dev/null >>"$LOGFILE" 2>&1 &
	echo $! >"$PIDFILE"
fi
pid=$(containerd_pid)

deadline=$((SECONDS + ${E2E_START_TIMEOUT:-60}))
# wait_until WHAT CMD...: polls CMD until it succeeds; gives up with the
# log's tail when containerd exits or the start-up time is over.
wait_until() {
	local what=$1
	shift
	until "$@" >/dev/null 2>&1; do
		pid_running "$pid" || { tail -n 30 "$LOGFILE" >&2; die "containerd exited before $what"; }
		[ "$SECONDS" -lt "$deadline" ] || { tail -n 30 "$LOGFILE" >&2; die "containerd: no $what within ${E2E_START_TIMEOUT:-60}s"; }
		sleep 0.2
	done
}
cri_ready() { ctr plugins ls | grep -Eq '^io\.containerd\.grpc\.v1[[:space:]]+cri[[:space:]].*[[:space:]]ok[[:space:]]*$'; }
wait_until "API" ctr version
wait_until "CRI plugin" cri_ready
wait_until "NRI socket" test -S "$NRI_SOCKET"

# ------------------------------------------------------------ images
images=$(ctr -n "$NAMESPACE" images ls -q 2>/dev/null || true)
for image in "$TEST_IMAGE=$TEST_ARCHIVE" "$PAUSE_IMAGE=$PAUSE_ARCHIVE"; do
	grep -qxF "${image%%=*}" <<<"$images" && continue
	log "importing ${image%%=*}"
	out=$(ctr -n "$NAMESPACE" images import "${image#*=}" 2>&1) || { echo "$out" >&2; die "importing ${image#*=} failed"; }
done
# CRI learns of imported images asynchronously and labels them when it has;
# a sandbox created before that would try to pull the pause image.
cri_knows() {
	ctr -n "$NAMESPACE" images ls | awk -v ref="$1" '$1 == ref && /io\.cri-containerd\.image=managed/ {found = 1} END {exit !found}'
}
wait_until "$TEST_IMAGE in CRI" cri_knows "$TEST_IMAGE"
wait_until "$PAUSE_IMAGE in CRI" cri_knows "$PAUSE_IMAGE"

# ------------------------------------------------------------ environment
cat >"$E2E_RUN/env.next" <<EOF
export CONTAINERD_ADDRESS=$SOCKET
export CONTAINERD_NAMESPACE=$NAMESPACE
export CRI_RUNTIME_ENDPOINT=unix://$SOCKET
export NRI_SOCKET=$NRI_SOCKET
export E2E_TEST_IMAGE=$TEST_IMAGE
export E2E_PAUSE_IMAGE=$PAUSE_IMAGE
export E2E_CTR=$BIN/ctr
export E2E_RUNC=$BIN/runc
export E2E_CONTAINERD_PID=$pid
export E2E_CONTAINERD_LOG=$LOGFILE
export E2E_RUN=$E2E_RUN
export E2E_SETUP_SCRIPT=$SELF
EOF
mv -f "$E2E_RUN/env.next" "$E2E_RUN/env"
log "containerd ready in $((SECONDS - START))s: pid $pid, CRI $SOCKET, NRI $NRI_SOCKET; environment in $E2E_RUN/env"
cat "$E2E_RUN/env"
