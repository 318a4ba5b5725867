// Package invariant is the one checker of the CPU pool invariants, shared by
// unit tests, the churn test (test/churn) and the end-to-end suites. It
// looks at the engine's state through policy.Engine's accessors and at what
// the runtime side actually applied to each container, and reports every
// violation of:
//
//   - the shared pool holds only online CPUs; it may be empty (as in the
//     kubelet) only where no reserved CPU is in it: under
//     strict-cpu-reservation or with no reserved CPUs;
//   - exclusive sets are non-empty, online, disjoint from the shared pool and
//     pairwise disjoint, except that containers of one pod may overlap (the
//     kubelet's init-container reuse, kubelet-rules §6; Options.NoPodOverlap
//     forbids that too where no init containers exist, as under NRI);
//   - shared ∪ exclusive = online CPUs;
//   - reserved ⊆ shared, or under strict-cpu-reservation reserved CPUs used
//     by nobody (neither shared nor exclusive) and shared ∪ exclusive ∪
//     reserved = online CPUs;
//   - under cpu_manager_policy none: no exclusive CPUs, shared = online;
//   - the reusable init-container CPUs are held by the pod they belong to;
//   - shared-pool containers run on the shared pool, or on the reserved
//     CPUs while it is empty, never on an exclusive CPU and never on an
//     empty cpuset: every shared-pool container's applied cpuset equals
//     that, and every exclusive container's equals its assignment.
//     A pod-level pod's shared container (State.PodShared) runs on its
//     pod's private pool, the pod's block less its exclusive slices.
//
// The checker recomputes everything from the raw sets; it does not call the
// engine's own Validate, so it also checks that code.
package invariant

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// Key names a container the way the engine knows it: pod UID and container
// name.
type Key struct {
	Pod, Container string
}

func (k Key) String() string { return k.Pod + "/" + k.Container }

// Options tunes the checker.
type Options struct {
	// NoPodOverlap refuses overlapping exclusive sets inside one pod too.
	// The kubelet allows them (an app container may reuse its init
	// containers' CPUs); a runtime path that never creates init containers
	// (NRI reports every container as an app container) never produces one.
	NoPodOverlap bool
}

// Error lists every violation found, one per line.
type Error struct {
	Violations []string
}

func (e *Error) Error() string {
	return fmt.Sprintf("InvariantViolation: %d violation(s):\n  %s", len(e.Violations), strings.Join(e.Violations, "\n  "))
}

// Check is Options{}.Check.
func Check(e *policy.Engine, st policy.State, applied map[Key]cpuset.CPUSet) error {
	return Options{}.Check(e, st, applied)
}

// Check verifies the pool invariants of st under e and, for every container
// in applied (what the runtime applied as cpuset.cpus), that it runs where
// the state says. applied may be nil to check the state alone. It returns
// nil or an *Error listing every violation.
func (o Options) Check(e *policy.Engine, st policy.State, applied map[Key]cpuset.CPUSet) error {
	var v []string
	add := func(format string, args ...any) { v = append(v, fmt.Sprintf(format, args...)) }

	cfg := e.Config()
	online := e.Topology().CPUs()
	shared := e.SharedPool(st).CPUSet()
	runsOn := e.SharedCPUs(st) // where shared-pool containers run
	reserved := e.Reserved()
	strict := false
	if cfg.CPUManagerPolicy == policy.CPUPolicyStatic {
		opts, err := allocator.ParseOptions(cfg.CPUOptions)
		if err != nil {
			add("engine options do not parse: %v", err)
		}
		strict = opts.StrictCPUReservation
	}

	if shared.IsEmpty() && !runsOn.Equals(reserved) {
		add("shared pool is empty and shared-pool containers run on %s, not the reserved CPUs %s", runsOn, reserved)
	}
	if !shared.IsEmpty() && !runsOn.Equals(shared) {
		add("shared-pool containers run on %s, not the shared pool %s", runsOn, shared)
	}
	if off := shared.Difference(online); !off.IsEmpty() {
		add("shared pool %s holds CPUs %s that are not online", shared, off)
	}

	keys := assignedKeys(st)
	if cfg.CPUManagerPolicy == policy.CPUPolicyNone {
		if len(keys) > 0 {
			add("cpu_manager_policy none has exclusive assignments: %v", keys)
		}
		if !equal(shared, online) {
			add("cpu_manager_policy none: shared pool %s, want every online CPU %s", shared, online)
		}
	}

	exclusive := cpuset.New()
	// Overlaps are found through one owner per CPU (linear, not pairwise:
	// the churn test checks hundreds of containers after every step).
	owners := map[int][]Key{}
	for _, k := range keys {
		set := st.Alloc.Assignments[k.Pod][k.Container]
		if set.IsEmpty() {
			add("%s has an empty exclusive set", k)
		}
		if off := set.Difference(online); !off.IsEmpty() {
			add("%s holds CPUs %s that are not online", k, off)
		}
		if both := set.Intersection(shared); !both.IsEmpty() {
			add("%s holds CPUs %s that are also in the shared pool %s", k, both, shared)
		}
		if both := set.Intersection(runsOn); !both.IsEmpty() && shared.IsEmpty() {
			add("%s holds CPUs %s that shared-pool containers run on (%s)", k, both, runsOn)
		}
		if r := set.Intersection(reserved); !r.IsEmpty() {
			add("%s holds reserved CPUs %s", k, r)
		}
		for _, cpu := range set.UnsortedList() {
			owners[cpu] = append(owners[cpu], k)
		}
		exclusive = exclusive.Union(set)
	}
	type pair struct{ a, b Key }
	overlaps := map[pair][]int{}
	for cpu, ks := range owners {
		for i, a := range ks {
			for _, b := range ks[i+1:] {
				if a.Pod == b.Pod && !o.NoPodOverlap {
					continue // init-container reuse inside one pod
				}
				overlaps[pair{a, b}] = append(overlaps[pair{a, b}], cpu)
			}
		}
	}
	pairs := make([]pair, 0, len(overlaps))
	for p := range overlaps {
		pairs = append(pairs, p)
	}
	sort.Slice(pairs, func(i, j int) bool {
		if pairs[i].a != pairs[j].a {
			return less(pairs[i].a, pairs[j].a)
		}
		return less(pairs[i].b, pairs[j].b)
	})
	for _, p := range pairs {
		add("%s and %s both hold CPUs %s", p.a, p.b, cpuset.New(overlaps[p]...))
	}

	union := shared.Union(exclusive)
	if strict {
		if r := shared.Intersection(reserved); !r.IsEmpty() {
			add("strict-cpu-reservation: reserved CPUs %s are in the shared pool %s", r, shared)
		}
		union = union.Union(reserved)
	} else if miss := reserved.Difference(shared); !miss.IsEmpty() {
		add("reserved CPUs %s are not in the shared pool %s", miss, shared)
	}
	if !equal(union, online) {
		what := "shared ∪ exclusive"
		if strict {
			what += " ∪ reserved"
		}
		add("%s = %s, want the online CPUs %s (missing %s, extra %s)", what, union, online,
			online.Difference(union), union.Difference(online))
	}

	if !st.Alloc.Reusable.IsEmpty() {
		held := cpuset.New()
		for _, set := range st.Alloc.Assignments[st.Alloc.ReusablePod] {
			held = held.Union(set)
		}
		if extra := st.Alloc.Reusable.Difference(held); !extra.IsEmpty() {
			add("reusable CPUs %s of pod %q are not held by that pod", extra, st.Alloc.ReusablePod)
		}
	}

	appliedKeys := make([]Key, 0, len(applied))
	for k := range applied {
		appliedKeys = append(appliedKeys, k)
	}
	sortKeys(appliedKeys)
	for _, k := range appliedKeys {
		have := applied[k]
		if want, ok := e.Assignment(st, k.Pod, k.Container); ok {
			if !equal(have, want) {
				add("exclusive container %s runs on %q, its assignment is %q", k, have, want)
			}
			continue
		}
		if pool, ok := e.PodPoolOf(st, k.Pod, k.Container); ok {
			// A pod-level pod's shared container: its pod's private pool.
			if have.IsEmpty() || !equal(have, pool) {
				add("pod-pool container %s runs on %q, its pod's pool is %q", k, have, pool)
			}
			continue
		}
		if have.IsEmpty() || !equal(have, runsOn) {
			add("shared-pool container %s runs on %q, shared-pool containers run on %q (shared pool %q)", k, have, runsOn, shared)
		}
	}

	if len(v) == 0 {
		return nil
	}
	return &Error{Violations: v}
}

func assignedKeys(st policy.State) []Key {
	var keys []Key
	for pod, byName := range st.Alloc.Assignments {
		for name := range byName {
			keys = append(keys, Key{pod, name})
		}
	}
	sortKeys(keys)
	return keys
}

func sortKeys(keys []Key) {
	sort.Slice(keys, func(i, j int) bool { return less(keys[i], keys[j]) })
}

func less(a, b Key) bool {
	if a.Pod != b.Pod {
		return a.Pod < b.Pod
	}
	return a.Container < b.Container
}

// equal is CPUSet.Equals without its reflect.DeepEqual.
func equal(a, b cpuset.CPUSet) bool { return a.Size() == b.Size() && a.IsSubsetOf(b) }
