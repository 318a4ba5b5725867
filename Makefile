# nri-cpualign — `make test` runs everything CI runs; `make demo` runs the plugin
# against a real containerd with demo pods.
SHELL := /bin/bash
export PATH := $(PATH):/usr/local/go/bin:$(HOME)/go/bin
GO ?= go
BIN := bin/nri-cpualign
# The release: the image tag, deploy/kustomization.yaml's newTag and the
# chart's appVersion (deploy's tests check that they agree); also what
# nri-cpualign version, the start-up log line and nri_cpualign_build_info say.
VERSION ?= 0.1.0
# The commit and build date. The date is the commit's (SOURCE_DATE_EPOCH),
# so one commit always builds the same binary. Outside a git checkout
# REVISION and BUILD_DATE stay empty: the binary then says "unknown" rather
# than a wrong commit or 1970.
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
BUILD_DATE ?= $(shell [ "$(SOURCE_DATE_EPOCH)" != 0 ] && date -u -d @$(SOURCE_DATE_EPOCH) +%Y-%m-%dT%H:%M:%SZ)
BUILDINFO := github.com/nri-cpualign/nri-cpualign/internal/buildinfo
LDFLAGS := -s -w -X $(BUILDINFO).version=$(VERSION) -X $(BUILDINFO).revision=$(REVISION) -X $(BUILDINFO).date=$(BUILD_DATE)

.PHONY: all build test vet unit e2e fmt-check tidy-check staticcheck
all: build

build:
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN) ./cmd/nri-cpualign

## test: everything — gofmt, tidy modules, vet, staticcheck, unit tests with
## -race (the churn test's 9000 operations included), brief fuzzing of every
## target, the Helm chart's checks, the e2e suite, the real-kubelet suite and
## the DaemonSet on a real control plane (each on containerd and CRI-O), and
## the VM pass: the subset labelled "vm" of the e2e and kubelet suites on a
## production-shaped node (cgroup v2, systemd driver, 2-socket SMT NUMA) in
## QEMU (make e2e-vm); and the allocator side by side with the kubelet's own
## code, v1.37.2 and v1.38.0-beta.0 (make kubelet-parity).
## scripts/test-all.sh runs these stages in order, times each and prints the
## times at the end; meanwhile it builds the later suites' Kubernetes
## binaries in the background (scripts/prewarm.sh). TEST_STAGES="unit e2e"
## runs a subset.
test:
	bash scripts/test-all.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

# go.mod/go.sum must be what go mod tidy makes of the imports (direct
# dependencies listed as such, nothing unused); -diff prints what is missing.
tidy-check:
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum not tidy: run go mod tidy"; exit 1; }

# testhooks: the build tag of internal/daemon's test hooks and of the tests
# that use them (test/churn, test/bench's round trip; docs/testing.md). Every
# target that tests, vets or checks those packages passes it; vet also runs
# without it, so the build without the hooks keeps compiling.
TESTTAGS := testhooks

vet:
	$(GO) vet ./...
	$(GO) vet -tags $(TESTTAGS) ./...
	$(GO) vet -tags e2e ./test/e2e/...
	$(GO) vet -tags e2e ./test/kubelet/...
	$(GO) vet -tags e2e ./test/cluster/...

# staticcheck is pinned and installed into bin/ (git-ignored) by go install
# from the module proxy when it is missing or at another version, so every
# machine checks with the same rules: its default checks over ./... and, with
# -tags e2e, over the real-runtime suites.
STATICCHECK_VERSION := v0.8.2
STATICCHECK := $(CURDIR)/bin/staticcheck
.PHONY: staticcheck-install
staticcheck-install:
	@$(STATICCHECK) -version 2>/dev/null | grep -qF '($(STATICCHECK_VERSION:v%=%))' || { \
		echo "installing staticcheck $(STATICCHECK_VERSION) into bin/"; \
		rm -f $(STATICCHECK); GOBIN=$(CURDIR)/bin $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION); }

staticcheck: staticcheck-install
	$(STATICCHECK) -tags $(TESTTAGS) ./...
	$(STATICCHECK) -tags e2e ./test/e2e/... ./test/kubelet/... ./test/cluster/...

# The churn test's seed is fixed in make test so CI is repeatable; make churn
# (and CHURN_SEED=0 here) draws a new one from the clock.
CHURN_SEED ?= 20261121
unit:
	CHURN_SEED=$(CHURN_SEED) $(GO) test -race -count=1 -tags $(TESTTAGS) ./...

## chart-check: helm lint and helm template of the chart
## (deploy/helm/nri-cpualign), then deploy's tests with that helm: the chart
## renders deploy/'s objects for its default values, follows every value,
## refuses probes without a metrics address. helm is pinned and built into
## bin/ from the module proxy on first use (scripts/setup-helm.sh).
CHART := deploy/helm/nri-cpualign
.PHONY: chart-check helm-install
helm-install:
	@bash scripts/setup-helm.sh >/dev/null

chart-check: helm-install
	bin/helm lint --strict $(CHART)
	bin/helm lint --strict $(CHART) --set prometheusRule.enabled=true
	bin/helm template nri-cpualign $(CHART) >/dev/null
	HELM=$(CURDIR)/bin/helm $(GO) test -count=1 ./deploy

## kubelet-parity: the allocator side by side with the kubelet's own static
## policy (test/kubeletparity, one module per release): seeded add/remove
## sequences of Guaranteed pods on every fixture machine and option set,
## hints, admissions and CPU sets compared, against k8s.io/kubernetes
## v1.37.2 (the 1.37 rules, project Go) and v1.38.0-beta.0 (the 1.38 rules,
## GOTOOLCHAIN=go1.27.3), each with its negative check; the first run
## downloads and compiles the kubelet's packages. kubelet-parity-bench: the
## side-by-side benchmark (not part of make test)
.PHONY: kubelet-parity kubelet-parity-bench
kubelet-parity:
	bash scripts/kubelet-parity.sh

kubelet-parity-bench:
	bash scripts/kubelet-parity.sh bench

## e2e: the real-runtime suite (test/e2e), run on containerd
## (scripts/setup-containerd.sh) and then CRI-O where the machine has one
## (E2E_RUNTIMES=containerd|crio for one); root, builds containerd and runc
## on first use, one run at a time (flock)
e2e:
	bash scripts/e2e.sh

## e2e-kubelet: a real standalone kubelet v1.37 with the plugin (test/kubelet),
## on containerd and then CRI-O; root, builds the kubelet on first use, flock
.PHONY: e2e-kubelet
e2e-kubelet:
	bash scripts/e2e-kubelet.sh

## e2e-cluster: the DaemonSet installed as the README says on a real one-node
## cluster (test/cluster): etcd, kube-apiserver, kube-controller-manager,
## kube-scheduler and a kubelet v1.37 on 127.0.0.1 against the test
## containerd; root, one run at a time (flock), builds the Kubernetes
## binaries into the e2e cache on first use
.PHONY: e2e-cluster
e2e-cluster:
	bash scripts/e2e-cluster.sh

## test-stress: not part of make test: the real-partner suites (e2e,
## e2e-kubelet, e2e-cluster; not the VM) STRESS_PASSES times (3) on
## containerd and CRI-O under CPU load from stress-ng (apt-get installs it),
## every pass run; one line per failed spec at the end, then a summary.
## STRESS_SUITES, STRESS_RUNTIMES, STRESS_LOAD; STRESS_ARGS go to every
## suite's test binary (-ginkgo.focus=...). scripts/test-stress.sh
.PHONY: test-stress
test-stress:
	bash scripts/test-stress.sh $(STRESS_ARGS)

## e2e-vm: the e2e and kubelet suites in a QEMU VM of the production shape:
## Debian 12 with systemd, cgroup v2, containerd (SystemdCgroup = true) and
## CRI-O (cgroup_manager = "systemd") with NRI, a kubelet with cgroupDriver:
## systemd, 8 vCPUs in 2 sockets x 2 cores x 2 threads with 2 NUMA nodes.
## Builds and caches the guest image (scripts/vm/build-image.sh), installs
## QEMU and mmdebstrap when missing; root, flock. VM_SUITES=subset (default:
## the specs labelled "vm", listed when it starts) or full; VM_RUNTIMES.
.PHONY: e2e-vm
e2e-vm:
	VM_SUITES=$(VM_SUITES) bash scripts/e2e-vm.sh

VM_SUITES ?= subset

## bench-vm: on demand, not part of make test: the start-latency benchmark
## (test/bench/cmd/crilatency) in the VM of make e2e-vm, on containerd and
## CRI-O with the systemd driver: 20 shared containers, a Guaranteed start
## with the plugin off, under shared_pool_updates = "direct" and
## "in-answer", interleaved per round (VM_BENCH_ARGS, VM_RUNTIMES); the run
## dir is kept (results/bench-RUNTIME.txt); root, flock
.PHONY: bench-vm
bench-vm:
	VM_TESTS=bench VM_KEEP=1 bash scripts/e2e-vm.sh

## demo: containerd + nri-cpualign + three demo pods, left running; demo-down stops it all
.PHONY: demo demo-down
demo:
	bash scripts/demo.sh

demo-down:
	bash scripts/demo-down.sh

## image: the container image as an OCI archive, built without a container
## engine (same image as the Dockerfile; import with ctr -n k8s.io images import)
IMAGE ?= ghcr.io/nri-cpualign/nri-cpualign:$(VERSION)
IMAGE_ARCHIVE ?= _output/nri-cpualign-image.tar
.PHONY: image
image:
	IMAGE=$(IMAGE) IMAGE_ARCHIVE=$(IMAGE_ARCHIVE) VERSION=$(VERSION) REVISION=$(REVISION) \
		SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) bash scripts/image.sh

## bench: the performance figures (decision latency on every fixture and on
## 16-1024 CPU machines, CreateContainer round trip, daemon RSS) as one table;
## bench-cri adds the plugin's latency on the real containerd (root, flock)
.PHONY: bench bench-cri
bench:
	bash scripts/bench.sh

bench-cri:
	bash scripts/bench.sh --cri

## churn: the long model-based churn test (test/churn) under -race, OPS
## operations split over its fourteen machine/option setups; CHURN_SEED=n replays
## a run (a failure prints the seed and the op list)
OPS ?= 100000
.PHONY: churn
churn:
	CHURN_OPS=$(OPS) $(GO) test -race -count=1 -tags $(TESTTAGS) -timeout 0 -v -run 'TestChurn$$' ./test/churn

## churn-cover: the statement coverage of the daemon's packages (the
## boxes of docs/architecture.md: internal/daemon, adapter, applier,
## request, ledger, persist, observe, those that exist) reached by the
## churn tests alone (test/churn, make test's seed), as one percentage; the
## profile is left in CHURN_COVER for go tool cover -func or -html
CHURN_COVER ?= _output/churn.cov
CHURN_COVER_PKGS := daemon adapter applier request ledger persist observe
.PHONY: churn-cover
churn-cover:
	@mkdir -p $(dir $(CHURN_COVER)); pkgs=; \
	for p in $(CHURN_COVER_PKGS); do [ -d internal/$$p ] && pkgs=$${pkgs:+$$pkgs,}./internal/$$p/...; done; \
	CHURN_SEED=$(CHURN_SEED) $(GO) test -tags $(TESTTAGS) -count=1 -coverpkg=$$pkgs -coverprofile=$(CHURN_COVER) ./test/churn/ >/dev/null && \
	$(GO) tool cover -func=$(CHURN_COVER) | tail -1

## fuzz: every fuzz target for FUZZTIME each (default 30s), one at a time
## (fuzzing uses every core). fuzz-short (part of make test) gives each target
## a number of executions instead of a duration, about 4 s on a 2-CPU VM: with
## a duration, Go 1.26's fuzz coordinator can report "context deadline
## exceeded" as a failure when the time runs out while a worker is mid-call
## (go.dev/issue/75804, fixed in Go 1.27); with a count there is no deadline,
## so a loaded machine only makes the run slower. Entries: package:Target:count.
FUZZTIME ?= 30s
FUZZ_TARGETS := pkg/config:FuzzLoad:20000 pkg/checkpoint:FuzzLoad:2000 \
	pkg/checkpoint:FuzzReplayJournal:100 \
	pkg/sysfs:FuzzParseList:200000 pkg/sysfs:FuzzParseInt:200000 pkg/sysfs:FuzzParseMemTotal:200000 \
	pkg/sysfs:FuzzParseDistances:200000 pkg/sysfs:FuzzReadFS:10000 pkg/sysfs:FuzzDeviceNUMANode:200000 pkg/sysfs:FuzzDeviceNodesPCI:100000 \
	pkg/sysfs:FuzzParseNVIDIAInformation:100000 pkg/sysfs:FuzzParseDRAMetadata:30000 \
	internal/persist:FuzzKubeletState:3000 internal/request:FuzzRequestFor:15000 internal/daemon:FuzzRestore:3000 \
	cmd/nri-cpualign:FuzzSimulate:400 cmd/nri-cpualign:FuzzFastRequest:30000 \
	cmd/nri-cpualign:FuzzAppendAnswer:20000 internal/jsonstr:FuzzAppend:100000
.PHONY: fuzz fuzz-short
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=./$${t%%:*}; rest=$${t#*:}; fn=$${rest%%:*}; budget=$(FUZZTIME); \
		if [ "$(FUZZ_COUNTS)" = 1 ]; then budget=$${rest##*:}x; fi; \
		echo "== $$fn ($$pkg, $$budget)"; \
		$(GO) test -tags $(TESTTAGS) -run='^$$' -fuzz="^$$fn\$$" -fuzztime=$$budget $$pkg 2>&1 | \
			awk '/^fuzz: elapsed: [0-9]+s, execs/ {last = $$0; next} {print} END {if (last != "") print "last progress: " last}'; \
		test $${PIPESTATUS[0]} -eq 0; \
	done

fuzz-short:
	@$(MAKE) --no-print-directory fuzz FUZZ_COUNTS=1
