// Package framework drives a real containerd or CRI-O the way the kubelet
// does, for the nri-cpualign end-to-end suite (test/e2e) and the demo
// (test/e2e/cmd/demo).
//
// It holds no test assertions: every call returns an error, so the ginkgo
// suite, the demo program and helper tests can all use it. The runtime it
// talks to is the one started by ../shared/e2e/setup-containerd.sh or
// setup-crio.sh, described by the environment that script writes (see
// LoadEnv).
package framework
