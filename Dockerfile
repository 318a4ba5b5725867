# syntax=docker/dockerfile:1
#
# The nri-cpualign image: one static binary on an empty base.
#
#   docker build --build-arg VERSION=$(git describe --tags --always) \
#                --build-arg REVISION=$(git rev-parse HEAD) \
#                --build-arg BUILD_DATE=$(date -u -d @$(git log -1 --format=%ct) +%Y-%m-%dT%H:%M:%SZ) \
#                -t ghcr.io/nri-cpualign/nri-cpualign:latest .
#
# `make image` builds the same image without a container engine
# (scripts/image.sh + tools/mkimage); tools/mkimage/dockerfile_test.go checks
# that this file's final stage and that tool describe the same image.

ARG GO_VERSION=1.26

FROM --platform=$BUILDPLATFORM golang:${GO_VERSION} AS build
ARG TARGETOS=linux
ARG TARGETARCH
ARG VERSION=dev
ARG REVISION=
ARG BUILD_DATE=
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: the final image has no libc and no dynamic loader.
RUN CGO_ENABLED=0 GOOS=${TARGETOS} GOARCH=${TARGETARCH} \
    go build -trimpath -ldflags "-s -w -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.version=${VERSION} -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.revision=${REVISION} -X github.com/nri-cpualign/nri-cpualign/internal/buildinfo.date=${BUILD_DATE}" \
    -o /out/nri-cpualign ./cmd/nri-cpualign

# scratch, not distroless: the plugin reads no CA certificates, time zones or
# /etc/passwd, so a base would only add files to patch. There is no shell,
# by design; use `kubectl debug` for a shell next to it.
FROM scratch
ARG VERSION=dev
ARG REVISION=
LABEL org.opencontainers.image.title="nri-cpualign" \
      org.opencontainers.image.description="NRI plugin giving Kubernetes containers exclusive, topology-aligned CPUs (the kubelet's static CPU manager and topology manager, for containerd and CRI-O)" \
      org.opencontainers.image.source="https://github.com/nri-cpualign/nri-cpualign" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}"
COPY --from=build /out/nri-cpualign /usr/bin/nri-cpualign
# Root (not distroless's nonroot 65532): the plugin connects to the runtime's
# NRI socket, which lives in a root-only directory (/var/run/nri), and writes
# its checkpoint under /var/lib/nri-cpualign on the host. The DaemonSet drops
# every capability and makes the root filesystem read-only instead.
USER 0:0
ENTRYPOINT ["/usr/bin/nri-cpualign"]
CMD ["run"]
