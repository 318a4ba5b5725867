#!/usr/bin/env bash
# Builds the nri-cpualign container image without a container engine and
# writes it as an OCI image archive: a static binary (CGO_ENABLED=0, the
# Dockerfile's build flags) packed by tools/mkimage onto an empty base
# (go-containerregistry builds the image and the OCI layout).
#
# Environment (the Makefile's `image` target passes these):
#   IMAGE          image reference      (default ghcr.io/nri-cpualign/nri-cpualign:$VERSION)
#   IMAGE_ARCHIVE  output archive       (default _output/nri-cpualign-image.tar)
#   VERSION        version label/ldflag/tag (default: the Makefile's VERSION)
#   REVISION       commit label/ldflag  (default: git rev-parse HEAD)
#   GOARCH         target architecture  (default: go env GOARCH)
#   SOURCE_DATE_EPOCH  image time       (default: time of the last commit, else 0)
#
# Import on a node:  ctr -n k8s.io images import _output/nri-cpualign-image.tar
# Push to a registry: skopeo copy oci-archive:_output/nri-cpualign-image.tar docker://REGISTRY/nri-cpualign:TAG
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin"

GO=${GO:-go}
VERSION=${VERSION:-$(sed -n 's/^VERSION ?= *//p' Makefile)}
IMAGE=${IMAGE:-ghcr.io/nri-cpualign/nri-cpualign:$VERSION}
IMAGE_ARCHIVE=${IMAGE_ARCHIVE:-_output/nri-cpualign-image.tar}
REVISION=${REVISION:-$(git rev-parse HEAD 2>/dev/null || true)}
GOARCH=${GOARCH:-$($GO env GOARCH)}
SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || echo 0)}
# The binary's build date is the image's: the commit's time, reproducible.
# (empty without a commit: the binary then says "unknown", not 1970).
BUILD_DATE=
if [ "$SOURCE_DATE_EPOCH" != 0 ]; then
	BUILD_DATE=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
fi

bin=_output/image/linux-$GOARCH/nri-cpualign
mkdir -p "$(dirname "$bin")"
# Same flags as the Dockerfile's build stage.
CGO_ENABLED=0 GOOS=linux GOARCH=$GOARCH \
	$GO build -trimpath -ldflags "-s -w -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.version=${VERSION} -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.revision=${REVISION} -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.date=${BUILD_DATE}" -o "$bin" ./cmd/nri-cpualign

# mkimage runs on the build machine, whatever GOARCH the image is for.
GOOS= GOARCH= $GO run ./tools/mkimage \
	-binary "$bin" -arch "$GOARCH" -name "$IMAGE" \
	-version "$VERSION" -revision "$REVISION" -created "$SOURCE_DATE_EPOCH" \
	-o "$IMAGE_ARCHIVE"
