package policy_test

import (
	"errors"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// besteffort is a shared-pool container.
func besteffort(pod, ctr string) policy.Request {
	return policy.Request{Pod: pod, Container: ctr, QoS: policy.BestEffort}
}

// Under strict-cpu-reservation the kubelet hands out every non-reserved
// CPU; the shared pool is then empty and shared-pool containers run on the
// reserved CPUs until exclusive CPUs come back.
func TestSharedPoolEmptyStrict(t *testing.T) {
	cfg := static("none", "0,4")
	cfg.CPUOptions = map[string]string{allocator.OptStrictCPUReservation: "true"}
	e := newEngine(t, "ht-1s-4c", cfg) // cores {0,4} {1,5} {2,6} {3,7}
	st := e.NewState()
	if got := e.SharedCPUs(st).String(); got != "1-3,5-7" {
		t.Fatalf("idle: shared-pool containers on %q, want 1-3,5-7", got)
	}
	st, d := add(t, e, st, guaranteed("p", "a", 2))
	check(t, d, want{cpus: "1,5", mems: "0", exclusive: true})
	// The 4 CPUs left are the pool's last: the kubelet takes them.
	st, d = add(t, e, st, guaranteed("p", "b", 4))
	check(t, d, want{cpus: "2-3,6-7", mems: "0", exclusive: true})
	if !e.SharedPoolEmpty(st) || e.SharedPool(st).String() != "" {
		t.Fatalf("pool %q, want empty", e.SharedPool(st))
	}
	if got := e.SharedCPUs(st).String(); got != "0,4" {
		t.Fatalf("empty pool: shared-pool containers on %q, want the reserved 0,4", got)
	}
	st, d = add(t, e, st, besteffort("q", "c"))
	check(t, d, want{cpus: "0,4", mems: "0"})
	if _, _, err := e.Add(st, guaranteed("q", "d", 1)); err == nil || err.Error() != "InsufficientCPUs: not enough cpus available to satisfy request: requested=1, available=0" {
		t.Fatalf("one more exclusive CPU: got %v", err)
	}
	// The checkpoint keeps the empty pool; restoring it notes nothing.
	snap := e.Snapshot(st)
	if snap.Shared != "" {
		t.Errorf("snapshot shared %q, want empty", snap.Shared)
	}
	back, notes, err := e.FromSnapshot(snap)
	if err != nil || len(notes) > 0 || !e.SharedPoolEmpty(back) {
		t.Errorf("restore: notes %q, err %v, pool %q", notes, err, e.SharedPool(back))
	}
	st = e.Remove(st, "p", "a")
	if got := e.SharedCPUs(st).String(); got != "1,5" {
		t.Errorf("after releasing a: shared-pool containers on %q, want 1,5", got)
	}
}

// With no CPU reserved the kubelet's policy also empties the pool. A
// shared-pool container has nowhere to run then that is not exclusive: it
// is refused instead of getting an empty cpuset.
func TestSharedPoolEmptyNoReservation(t *testing.T) {
	e := newEngine(t, "ht-1s-4c", static("none", ""))
	st, d := add(t, e, e.NewState(), guaranteed("p", "a", 8))
	check(t, d, want{cpus: "0-7", mems: "0", exclusive: true})
	if !e.SharedCPUs(st).IsEmpty() {
		t.Fatalf("shared-pool containers on %q, want nowhere", e.SharedCPUs(st))
	}
	_, _, err := e.Add(st, besteffort("q", "c"))
	var ns *policy.NoSharedCPUsError
	if !errors.As(err, &ns) || ns.Reason() != "InsufficientCPUs" {
		t.Fatalf("shared container with no CPU: got %v, want NoSharedCPUsError", err)
	}
	st = e.Remove(st, "p", "a")
	_, d = add(t, e, st, besteffort("q", "c"))
	check(t, d, want{cpus: "0-7", mems: "0"})
}
