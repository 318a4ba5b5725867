#!/usr/bin/env bash
# prewarm.sh - builds into the e2e cache, at the lowest CPU and I/O
# priority, the Kubernetes binaries that make test's later stages need, in
# the order they need them: the kubelet (e2e-kubelet, e2e-vm), the previous
# minor's kubelet (the migration spec), then the control plane and etcd
# (e2e-cluster). scripts/test-all.sh starts it in the background; each
# binary is built under setup-kube.sh's lock for it, so a suite that asks
# for one meanwhile waits for this build rather than doing its own. Only
# what needs nothing but Go: the runtimes' builds (cgo, apt packages) stay
# with their setup scripts, since two apt-get runs cannot share dpkg's lock.
set -uo pipefail
HERE=$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")
renice -n 19 -p $$ >/dev/null 2>&1 || true
ionice -c 3 -p $$ >/dev/null 2>&1 || true
command -v go >/dev/null || export PATH=$PATH:/usr/local/go/bin
T0=$SECONDS
step() {
	local t0=$SECONDS
	if "$@" >/dev/null; then
		echo "prewarm: $* ready after $((SECONDS - t0)) s"
	else
		# Not fatal: the stage that needs it builds it and reports the error.
		echo "prewarm: $* failed after $((SECONDS - t0)) s (the stage that needs it will build it)"
	fi
}
step bash "$HERE/setup-kube.sh" kubelet
step env KUBE_VERSION="${E2E_KUBE_VERSION_PREV-v1.36.3}" ETCD_VERSION= bash "$HERE/setup-kube.sh" kubelet
step bash "$HERE/setup-kube.sh" kubectl kube-apiserver kube-controller-manager kube-scheduler etcd
echo "prewarm: done in $((SECONDS - T0)) s"
