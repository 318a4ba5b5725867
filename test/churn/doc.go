// Package churn holds the reliability tests of nri-cpualign that drive the
// real plugin (internal/daemon, in-process) over the real NRI protocol with
// NRI's own runtime side (pkg/adaptation): the model-based churn test with
// crashes, corrupt checkpoints and runtime reconnects, the concurrency test
// and the security checks. Every step is checked with internal/invariant.
//
// The tests use internal/daemon's test hooks and build only with the tag
// testhooks (docs/testing.md):
//
//	go test -race -tags testhooks -run 'TestChurn$' ./test/churn
//
// Replay a failure with the seed and op count it prints:
//
//	CHURN_SEED=<seed> CHURN_OPS=<ops> go test -race -tags testhooks -run 'TestChurn/<config>' ./test/churn
//
// `make churn OPS=100000` runs a long one.
package churn
