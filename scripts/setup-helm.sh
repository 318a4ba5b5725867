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

# The module version go install recorded in the binary, e.g. v3.22.0.
installed() {
	[ -x "$helm" ] && $GO version -m "$helm" 2>/dev/null | awk '$1 == "mod" && $2 == "helm.sh/helm/v3" {print $3}'
}

if [ "$(installed || true)" != "$HELM_VERSION" ]; then
	echo "installing helm $HELM_VERSION into bin/ (go install, a few minutes the first time)" >&2
	rm -f "$helm"
	GOBIN=$PWD/bin $GO install "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2
	[ "$(installed || true)" = "$HELM_VERSION" ] || { echo "setup-helm.sh: $helm is not helm $HELM_VERSION after go install" >&2; exit 1; }
fi
echo "$helm"
