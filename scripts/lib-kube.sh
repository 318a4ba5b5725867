# shellcheck shell=bash
# Bits of scripts/e2e-kubelet.sh: the Kubernetes binaries and both
# runtimes, through the project's setup scripts (CRI-O: see lib-e2e.sh).
# Sourced after lib-e2e.sh (REPO_ROOT, KUBE_SETUP_SCRIPT, log, die), not run.

# setup_kube BINARY...: builds (first time: minutes) or finds the named
# Kubernetes binaries and exports E2E_KUBE_BIN / E2E_KUBE_VERSION.
setup_kube() {
	local t0=$SECONDS out
	log "setting up Kubernetes binaries: $* ($KUBE_SETUP_SCRIPT)"
	out=$(bash "$KUBE_SETUP_SCRIPT" "$@" 9>&-) || die "setup-kube.sh $* failed"
	eval "$out"
	[ -n "${E2E_KUBE_BIN:-}" ] || die "setup-kube.sh printed no E2E_KUBE_BIN"
	log "Kubernetes ${E2E_KUBE_VERSION:-?} binaries in $E2E_KUBE_BIN ($((SECONDS - t0))s)"
}

# setup_kube_prev: the previous minor's kubelet (E2E_KUBE_VERSION_PREV,
# default v1.36.3; empty: none), for the kubelet suite's spec that migrates
# from the state files it writes; exports E2E_KUBE_BIN_PREV. Cached like
# the others (the first build takes minutes).
setup_kube_prev() {
	local t0=$SECONDS out
	E2E_KUBE_VERSION_PREV=${E2E_KUBE_VERSION_PREV-v1.36.3}
	if [ -z "$E2E_KUBE_VERSION_PREV" ]; then
		log "E2E_KUBE_VERSION_PREV is empty: no previous kubelet, its migration spec is skipped"
		return 0
	fi
	out=$(KUBE_VERSION=$E2E_KUBE_VERSION_PREV ETCD_VERSION='' bash "$KUBE_SETUP_SCRIPT" kubelet 9>&-) ||
		die "setup-kube.sh kubelet for $E2E_KUBE_VERSION_PREV failed"
	E2E_KUBE_BIN_PREV=$(sed -n 's/^export E2E_KUBE_BIN=//p' <<<"$out")
	[ -n "$E2E_KUBE_BIN_PREV" ] || die "setup-kube.sh printed no E2E_KUBE_BIN for $E2E_KUBE_VERSION_PREV"
	export E2E_KUBE_BIN_PREV E2E_KUBE_VERSION_PREV
	log "previous kubelet $E2E_KUBE_VERSION_PREV in $E2E_KUBE_BIN_PREV ($((SECONDS - t0))s)"
}

# runtime_setup RUNTIME: starts containerd or CRI-O (clean slate: whatever an
# earlier run left is torn down first) and prints the path of its env file.
runtime_setup() {
	local rt=$1 t0=$SECONDS
	runtime_teardown "$rt"
	case $rt in
	containerd)
		bash "$SETUP_SCRIPT" >/dev/null 9>&- || die "containerd setup failed"
		echo "$E2E_RUN/env" ;;
	crio)
		check_crio_prereqs
		bash "$CRIO_SETUP_SCRIPT" >/dev/null 9>&- || die "CRI-O setup failed"
		echo "$CRIO_RUN/env" ;;
	*) die "unknown runtime $rt (containerd or crio)" ;;
	esac
	log "$rt ready in $((SECONDS - t0))s"
}

# runtime_teardown RUNTIME: stops it and removes its containers and the
# empty pod cgroups.
runtime_teardown() {
	case $1 in
	containerd) teardown_containerd ;;
	crio) teardown_crio ;;
	esac
}

# CRI-O applies the kubelet's hugepage limits whenever the kernel lists the
# hugetlb controller in /proc/cgroups, mounted or not; runc then fails every
# container ("cannot set hugetlb limit: container could not join or create
# cgroup"; containerd ignores the limits: tolerate_missing_hugetlb_controller).
# This VM has the controller but no hierarchy for it, so the CRI-O run mounts
# one, as systemd does on a real node, and unmounts it afterwards.
HUGETLB_MNT=/sys/fs/cgroup/hugetlb
HUGETLB_MOUNTED=0

hugetlb_mount() {
	mountpoint -q "$HUGETLB_MNT" 2>/dev/null && return 0
	# cgroup v2: the controller is in the unified tree.
	[ -e /sys/fs/cgroup/cgroup.controllers ] && return 0
	# Enabled (4th column); the hierarchy id may be set from an earlier
	# mount, as the kernel keeps an unmounted v1 hierarchy around.
	awk '$1 == "hugetlb" && $4 == 1 {found = 1} END {exit !found}' /proc/cgroups || return 0
	log "mounting the hugetlb cgroup hierarchy at $HUGETLB_MNT for CRI-O (unmounted at the end)"
	mkdir -p "$HUGETLB_MNT" && mount -t cgroup -o hugetlb hugetlb "$HUGETLB_MNT" || die "cannot mount the hugetlb cgroup hierarchy"
	HUGETLB_MOUNTED=1
}

# hugetlb_umount removes the (empty) pod cgroups left in the hierarchy
# hugetlb_mount made and unmounts it.
hugetlb_umount() {
	[ "$HUGETLB_MOUNTED" = 1 ] || return 0
	if [ -d "$HUGETLB_MNT/kubepods" ]; then
		find "$HUGETLB_MNT/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || log "some hugetlb cgroups are still in use"
	fi
	umount "$HUGETLB_MNT" && rmdir "$HUGETLB_MNT" || log "cannot unmount $HUGETLB_MNT"
	HUGETLB_MOUNTED=0
}

# unmount_under DIR: unmounts everything mounted below DIR, deepest first
# (the kubelet makes its --root-dir a shared bind mount of itself).
unmount_under() {
	local dir m
	dir=$(readlink -f "$1")
	awk -v d="$dir" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r | while read -r m; do
		umount -l "$m" || log "cannot unmount $m"
	done
}
