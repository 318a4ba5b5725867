# shellcheck shell=bash
# Bits of scripts/e2e-kubelet.sh (and later kubelet/control-plane scripts):
# the shared setup scripts of both runtimes and of the Kubernetes binaries.
# Sourced after lib-e2e.sh (REPO_ROOT, SHARED_E2E, log, die), not run.

KUBE_SETUP_SCRIPT=$SHARED_E2E/setup-kube.sh
CRIO_RUN=${CRIO_RUN:-/run/crio-e2e}

# setup_kube BINARY...: builds (first time: minutes) or finds the named
# Kubernetes binaries and exports E2E_KUBE_BIN / E2E_KUBE_VERSION.
setup_kube() {
	local t0=$SECONDS out
	[ -f "$KUBE_SETUP_SCRIPT" ] || die "not found: $KUBE_SETUP_SCRIPT (set SHARED_E2E)"
	log "setting up Kubernetes binaries: $* ($KUBE_SETUP_SCRIPT)"
	out=$(bash "$KUBE_SETUP_SCRIPT" "$@" 9>&-) || die "setup-kube.sh $* failed"
	eval "$out"
	[ -n "${E2E_KUBE_BIN:-}" ] || die "setup-kube.sh printed no E2E_KUBE_BIN"
	log "Kubernetes ${E2E_KUBE_VERSION:-?} binaries in $E2E_KUBE_BIN ($((SECONDS - t0))s)"
}

# runtime_setup RUNTIME: starts containerd or CRI-O (clean slate: whatever an
# earlier run left is torn down first) and prints the path of its env file.
runtime_setup() {
	local rt=$1 t0=$SECONDS
	runtime_teardown "$rt"
	case $rt in
	containerd)
		bash "$SHARED_E2E/setup-containerd.sh" >/dev/null 9>&- || die "containerd setup failed"
		echo "$E2E_RUN/env" ;;
	crio)
		bash "$SHARED_E2E/setup-crio.sh" >/dev/null 9>&- || die "CRI-O setup failed"
		echo "$CRIO_RUN/env" ;;
	*) die "unknown runtime $rt (containerd or crio)" ;;
	esac
	log "$rt ready in $((SECONDS - t0))s"
}

# runtime_teardown RUNTIME: stops it and removes its containers and the
# empty pod cgroups (shared teardown scripts).
runtime_teardown() {
	case $1 in
	containerd) bash "$SHARED_E2E/teardown-containerd.sh" >&2 9>&- || log "containerd teardown reported errors" ;;
	crio) bash "$SHARED_E2E/teardown-crio.sh" >&2 9>&- || log "CRI-O teardown reported errors" ;;
	esac
}
