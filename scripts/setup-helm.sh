#!/usr/bin/env bash
# setup-helm.sh - installs the pinned helm into the repository's bin/ (go
# install from the Go module proxy, like staticcheck) unless it is there at
# that version, and prints its path. `make chart-check` and
# scripts/e2e-cluster.sh use it. Helm v3.22.0 builds with Go 1.26.
#
#   HELM_VERSION=v3.x.y scripts/setup-helm.sh    # another version
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"
GO=${GO:-go}
HELM_VERSION=${HELM_VERSION:-v3.22.0}
helm=$PWD/bin/helm

# The Kubernetes version `helm template` and `helm lint` assume without a
# cluster: helm's release builds stamp the minor of its k8s.io modules
# (v0.37 for v3.22); unstamped, go install leaves 1.20, which the chart's
# kubeVersion (>= 1.30) refuses.
KUBE_MINOR=${HELM_KUBE_MINOR:-37}
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$KUBE_MINOR"
done

# The version the binary reports (stamped by the build below).
installed() {
	[ -x "$helm" ] && "$helm" version --template '{{.Version}}' 2>/dev/null
}

if [ "$(installed || true)" != "$HELM_VERSION" ]; then
	echo "installing helm $HELM_VERSION into bin/ (go install, minutes the first time)" >&2
	rm -f "$helm"
	GOBIN=$PWD/bin $GO install -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
	[ "$(installed || true)" = "$HELM_VERSION" ] || { echo "setup-helm.sh: $helm is not helm $HELM_VERSION after go install" >&2; exit 1; }
fi
echo "$helm"
