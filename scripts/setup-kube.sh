#!/usr/bin/env bash
# setup-kube.sh BINARY... - the Kubernetes binaries the real-kubelet and
# real-cluster suites run: kubelet, kube-apiserver, kube-controller-manager,
# kube-scheduler and kubectl (KUBE_VERSION, v1.37.2; v1.36.3 is the
# previous minor the kubelet suite's migration spec also runs) and etcd
# (ETCD_VERSION, by default the one that Kubernetes minor is built against:
# v3.7.0 for 1.37, v3.6.8 for 1.36), all built from the Go module proxy
# with CGO off into $E2E_CACHE/bin/kube-<version>/ and kept there. Starts
# nothing. With no argument it builds the kubelet.
#
# A 1.38 release (KUBE_VERSION=v1.38.0-beta.0, what lib-kube.sh's
# setup_kube_next tries) builds with Go 1.27 (GOTOOLCHAIN=$GO127, go1.27.3,
# set here only). Before building, it checks that the module proxy serves
# the modules that release's commands need beyond the staging ones it
# publishes; when it does not, it prints one line saying which and exits
# 3 (unavailable), without building anything.
#
# stdout: `export E2E_KUBE_BIN=DIR` (every binary is DIR/<name>) and
# `export E2E_KUBE_VERSION=...`; logs on stderr. A cold build takes minutes
# per binary on 2 CPUs (the first one longest: it downloads the modules).
#
#   eval "$(bash scripts/setup-kube.sh kubelet kubectl)"
set -euo pipefail
# shellcheck source=scripts/lib-setup.sh
source "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/lib-setup.sh"

KUBE_VERSION=${KUBE_VERSION:-v1.37.2}
case $KUBE_VERSION in
v1.36.*) ETCD_VERSION=${ETCD_VERSION:-v3.6.8} ;;
*) ETCD_VERSION=${ETCD_VERSION:-v3.7.0} ;;
esac
E2E_CACHE=${E2E_CACHE:-/var/cache/nri-e2e}
# The same layout as the CI machines' cache, so that their binaries are used.
BIN=$E2E_CACHE/bin/kube-$KUBE_VERSION
KUBE_SRC=$E2E_CACHE/src/kubernetes-$KUBE_VERSION
ETCD_SRC=$E2E_CACHE/src/etcd-server-$ETCD_VERSION

command -v go >/dev/null || die "go not found (install Go 1.26 in /usr/local/go, see the README)"
case $KUBE_VERSION in
v1.3[0-7].* | v1.2*) ;;
*) export GOTOOLCHAIN=${GO127:-go1.27.3} ;; # 1.38's go.mod says go 1.27.0
esac
[ $# -gt 0 ] || set -- kubelet
for b in "$@"; do
	case $b in
	kubelet | kube-apiserver | kube-controller-manager | kube-scheduler | kubectl | etcd) ;;
	*) die "unknown binary $b (kubelet, kube-apiserver, kube-controller-manager, kube-scheduler, kubectl, etcd)" ;;
	esac
done

# module_dir MODULE@VERSION: downloads the module through the proxy and
# prints the directory of its (read-only) source in the module cache.
module_dir() {
	local dir
	dir=$(cd / && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[ -n "$dir" ] && [ -d "$dir" ] || die "go mod download $1 failed"
	echo "$dir"
}

# writable_copy SRC DEST: DEST becomes a writable copy of SRC.
writable_copy() {
	rm -rf "$2"
	mkdir -p "$2"
	cp -r "$1/." "$2/"
	chmod -R u+w "$2"
}

# kube_source prepares (once) a copy of k8s.io/kubernetes that builds on its
# own: its go.mod points the staging modules (k8s.io/api, client-go, ...) at
# ./staging, which go install refuses; the copy takes the published
# v0.<minor>.<patch> of each instead.
kube_source() {
	[ -f "$KUBE_SRC/.ready" ] && return 0
	# Two callers building different binaries share the copy.
	mkdir -p "$(dirname "$KUBE_SRC")"
	exec 6>"$KUBE_SRC.lock"
	flock 6
	if [ -f "$KUBE_SRC/.ready" ]; then
		exec 6>&-
		return 0
	fi
	log "fetching k8s.io/kubernetes@$KUBE_VERSION from the module proxy"
	writable_copy "$(module_dir "k8s.io/kubernetes@$KUBE_VERSION")" "$KUBE_SRC"
	rm -f "$KUBE_SRC/go.work" "$KUBE_SRC/go.work.sum"
	local staged=v0.${KUBE_VERSION#v1.} m edits=()
	for m in $(sed -n 's|^[[:space:]]*\(k8s\.io/[a-z0-9-]*\) => \./staging/.*|\1|p' "$KUBE_SRC/go.mod"); do
		edits+=("-dropreplace=$m" "-replace=$m=$m@$staged")
	done
	[ ${#edits[@]} -gt 0 ] || die "no staging replace directives in k8s.io/kubernetes@$KUBE_VERSION's go.mod"
	(cd "$KUBE_SRC" && go mod edit "${edits[@]}")
	touch "$KUBE_SRC/.ready"
	exec 6>&-
}

# build_kube NAME: one Kubernetes command, stamped with its version (the
# kubelet reports it to the API server and kubectl version shows it).
build_kube() {
	local name=$1 minor
	kube_source
	minor=$(cut -d. -f2 <<<"$KUBE_VERSION")
	log "building $name $KUBE_VERSION into $BIN"
	(cd "$KUBE_SRC" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -o "$BIN/$name.part" \
		-ldflags "-s -w -X k8s.io/component-base/version.gitVersion=$KUBE_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" \
		"./cmd/$name") >&2 || die "building $name failed"
	mv -f "$BIN/$name.part" "$BIN/$name"
}

# build_etcd: go.etcd.io/etcd/server/v3 replaces its sibling modules with
# ../ paths as well; a copy without those replaces builds against their
# published versions.
build_etcd() {
	local m drops=()
	log "building etcd $ETCD_VERSION into $BIN"
	writable_copy "$(module_dir "go.etcd.io/etcd/server/v3@$ETCD_VERSION")" "$ETCD_SRC"
	for m in $(sed -n 's|^\(replace[[:space:]]\{1,\}\)\{0,1\}[[:space:]]*\(go\.etcd\.io/[^[:space:]]*\) => \.\..*|\2|p' "$ETCD_SRC/go.mod"); do
		drops+=("-dropreplace=$m")
	done
	[ ${#drops[@]} -eq 0 ] || (cd "$ETCD_SRC" && go mod edit "${drops[@]}")
	(cd "$ETCD_SRC" && CGO_ENABLED=0 GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$BIN/etcd.part" .) >&2 ||
		die "building etcd failed"
	mv -f "$BIN/etcd.part" "$BIN/etcd"
}

# unavailable BINARY...: for the binaries to build, the modules their
# packages need that the release publishes nowhere but its own tree (and
# the module proxy does not serve), as "module@version (why)" words; empty
# when everything is there. Known for 1.38: cmd/kubelet imports
# sigs.k8s.io/iptables-wrappers (pkg/kubelet/kubelet_network_linux.go),
# which the proxy still refuses (403 for v1.0.0). cmd/kube-apiserver needs
# the clientset of the new staging module k8s.io/apiextensions-api, which
# the proxy serves since 2026-12 (with k8s.io/ktesting and
# structured-merge-diff v7.0.1): iptables-wrappers is the only one missing.
unavailable() {
	local b m want=()
	for b in "$@"; do
		[ -x "$BIN/$b" ] && continue
		case $KUBE_VERSION:$b in
		v1.38.*:kubelet) want+=("sigs.k8s.io/iptables-wrappers@$(go_mod_version sigs.k8s.io/iptables-wrappers)=cmd/kubelet") ;;
		v1.38.*:kube-apiserver) want+=("k8s.io/apiextensions-api@v0.${KUBE_VERSION#v1.}=cmd/kube-apiserver") ;;
		esac
	done
	for m in "${want[@]}"; do
		(cd / && GOFLAGS=-mod=mod go mod download "${m%%=*}" >/dev/null 2>&1) || printf '%s (%s), ' "${m%%=*}" "${m#*=}"
	done
}

# go_mod_version MODULE: the version k8s.io/kubernetes@$KUBE_VERSION's
# go.mod requires.
go_mod_version() {
	local dir
	dir=$(cd / && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$KUBE_VERSION" 2>/dev/null |
		sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p') || true
	if [ -f "$dir/go.mod" ]; then
		awk -v m="$1" '$1 == m && $2 ~ /^v/ {print $2; exit}' "$dir/go.mod"
	else
		echo "(k8s.io/kubernetes@$KUBE_VERSION not downloadable)"
	fi
}

missing=$(unavailable "$@")
if [ -n "$missing" ]; then
	echo "Kubernetes $KUBE_VERSION cannot be built here: the Go module proxy does not provide ${missing%, }" >&2
	exit 3
fi
mkdir -p "$BIN"

# One build of a binary at a time: make test's prewarm (scripts/test-all.sh)
# may be building it in the background when a suite asks for it; the suite
# then waits for that build instead of starting a second one.
for b in "$@"; do
	[ -x "$BIN/$b" ] && continue
	exec 7>"$BIN/.$b.lock"
	flock 7
	if ! [ -x "$BIN/$b" ]; then
		if [ "$b" = etcd ]; then build_etcd; else build_kube "$b"; fi
	fi
	exec 7>&-
done
log "ready in $BIN: $*"
echo "export E2E_KUBE_BIN=$BIN"
echo "export E2E_KUBE_VERSION=$KUBE_VERSION"
