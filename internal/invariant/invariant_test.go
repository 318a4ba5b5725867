package invariant

import (
	"errors"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs/sysfstest"
)

// The machine is the fixture ht-1s-4c: CPUs 0-7, core k = {k, k+4}.
// Reserved is core 0 = {0,4} everywhere below.

func engine(t *testing.T, cfg policy.Config) *policy.Engine {
	t.Helper()
	e, err := policy.New(sysfstest.Load(t, "ht-1s-4c"), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func set(t *testing.T, s string) cpuset.CPUSet {
	t.Helper()
	c, err := cpuset.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// state builds a State by hand: shared pool and "pod/ctr=cpus" entries.
func state(t *testing.T, shared string, entries ...string) policy.State {
	t.Helper()
	def, err := cpumask.FromCPUSet(set(t, shared))
	if err != nil {
		t.Fatal(err)
	}
	st := policy.State{Alloc: allocator.State{Default: def, Assignments: map[string]map[string]cpuset.CPUSet{}}}
	for _, e := range entries {
		k, cpus, _ := strings.Cut(e, "=")
		pod, name, _ := strings.Cut(k, "/")
		if st.Alloc.Assignments[pod] == nil {
			st.Alloc.Assignments[pod] = map[string]cpuset.CPUSet{}
		}
		st.Alloc.Assignments[pod][name] = set(t, cpus)
	}
	return st
}

func applied(t *testing.T, entries ...string) map[Key]cpuset.CPUSet {
	t.Helper()
	m := map[Key]cpuset.CPUSet{}
	for _, e := range entries {
		k, cpus, _ := strings.Cut(e, "=")
		pod, name, _ := strings.Cut(k, "/")
		m[Key{pod, name}] = set(t, cpus)
	}
	return m
}

func TestCheck(t *testing.T) {
	static := policy.Config{CPUManagerPolicy: policy.CPUPolicyStatic, ReservedCPUs: cpuset.New(0, 4)}
	strict := static
	strict.CPUOptions = map[string]string{allocator.OptStrictCPUReservation: "true"}
	none := policy.Config{CPUManagerPolicy: policy.CPUPolicyNone}

	for _, tc := range []struct {
		name    string
		cfg     policy.Config
		opts    Options
		st      func(t *testing.T) policy.State
		applied []string
		want    []string // substrings of violations; none = valid
	}{
		{
			name:    "valid: core 1 exclusive, the rest shared",
			cfg:     static,
			st:      func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/c=1,5") },
			applied: []string{"a/c=1,5", "b/x=0,2-4,6-7"},
		},
		{
			name: "shared pool empty",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "", "a/c=1-3,5-7") },
			// Reserved 0,4 are then neither shared nor exclusive.
			want: []string{"reserved CPUs 0,4 are not in the shared pool", "missing 0,4"},
		},
		{
			name:    "strict: pool empty, shared containers on the reserved CPUs",
			cfg:     strict,
			st:      func(t *testing.T) policy.State { return state(t, "", "a/c=1-3,5-7") },
			applied: []string{"a/c=1-3,5-7", "b/x=0,4"},
		},
		{
			name:    "strict: pool empty, shared container left on exclusive CPUs",
			cfg:     strict,
			st:      func(t *testing.T) policy.State { return state(t, "", "a/c=1-3,5-7") },
			applied: []string{"a/c=1-3,5-7", "b/x=3,7"},
			want:    []string{`shared-pool container b/x runs on "3,7", shared-pool containers run on "0,4" (shared pool "")`},
		},
		{
			name:    "nothing reserved: pool empty, a shared container has no CPU",
			cfg:     policy.Config{CPUManagerPolicy: policy.CPUPolicyStatic},
			st:      func(t *testing.T) policy.State { return state(t, "", "a/c=0-7") },
			applied: []string{"a/c=0-7", "b/x="},
			want:    []string{`shared-pool container b/x runs on "", shared-pool containers run on ""`},
		},
		{
			name: "two pods hold one CPU",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/c=1,5", "b/d=1") },
			want: []string{"a/c and b/d both hold CPUs 1"},
		},
		{
			name: "one pod's containers overlap (init reuse) is allowed",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/init=1,5", "a/app=1,5") },
		},
		{
			name: "one pod's containers overlap refused with NoPodOverlap",
			cfg:  static,
			opts: Options{NoPodOverlap: true},
			st:   func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/init=1,5", "a/app=1,5") },
			want: []string{"a/app and a/init both hold CPUs 1,5"},
		},
		{
			name: "exclusive CPUs also shared",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "0-7", "a/c=1,5") },
			want: []string{"a/c holds CPUs 1,5 that are also in the shared pool"},
		},
		{
			name: "CPUs lost: neither shared nor exclusive",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "0,4", "a/c=1,5") },
			want: []string{"missing 2-3,6-7"},
		},
		{
			name: "reserved CPUs handed out exclusively",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "2-3,6-7", "a/c=0-1,4-5") },
			want: []string{"a/c holds reserved CPUs 0,4", "reserved CPUs 0,4 are not in the shared pool"},
		},
		{
			name: "offline CPU in the shared pool and in an assignment",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "0,2-4,6-8", "a/c=1,5,9") },
			want: []string{"shared pool 0,2-4,6-8 holds CPUs 8 that are not online", "a/c holds CPUs 9 that are not online", "extra 8-9"},
		},
		{
			name: "empty assignment",
			cfg:  static,
			st:   func(t *testing.T) policy.State { return state(t, "0-7", "a/c=") },
			want: []string{"a/c has an empty exclusive set"},
		},
		{
			name: "strict reservation: valid when reserved is used by nobody",
			cfg:  strict,
			st:   func(t *testing.T) policy.State { return state(t, "2-3,6-7", "a/c=1,5") },
		},
		{
			name: "strict reservation: reserved CPU in the shared pool",
			cfg:  strict,
			st:   func(t *testing.T) policy.State { return state(t, "0,2-3,6-7", "a/c=1,5") },
			want: []string{"strict-cpu-reservation: reserved CPUs 0 are in the shared pool"},
		},
		{
			name: "strict reservation: reserved CPU exclusive",
			cfg:  strict,
			st:   func(t *testing.T) policy.State { return state(t, "2-3,6-7", "a/c=1,4-5") },
			want: []string{"a/c holds reserved CPUs 4"},
		},
		{
			name: "none policy: exclusive assignment and a partial shared pool",
			cfg:  none,
			st:   func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/c=1,5") },
			// Under none the engine reports every CPU as shared, whatever
			// the state's pool says; the assignment is what is wrong.
			want: []string{"cpu_manager_policy none has exclusive assignments: [a/c]", "a/c holds CPUs 1,5 that are also in the shared pool"},
		},
		{
			name:    "none policy: every container on every CPU",
			cfg:     none,
			st:      func(t *testing.T) policy.State { return state(t, "0-7") },
			applied: []string{"a/c=0-7", "b/d=0-7"},
		},
		{
			name:    "shared container not moved with the pool",
			cfg:     static,
			st:      func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/c=1,5") },
			applied: []string{"a/c=1,5", "b/x=0-7"},
			want:    []string{`shared-pool container b/x runs on "0-7", shared-pool containers run on "0,2-4,6-7"`},
		},
		{
			name:    "exclusive container not on its assignment",
			cfg:     static,
			st:      func(t *testing.T) policy.State { return state(t, "0,2-4,6-7", "a/c=1,5") },
			applied: []string{"a/c=1", "b/x=0,2-4,6-7"},
			want:    []string{`exclusive container a/c runs on "1", its assignment is "1,5"`},
		},
		{
			name: "reusable CPUs not held by their pod",
			cfg:  static,
			st: func(t *testing.T) policy.State {
				st := state(t, "0,2-4,6-7", "a/init=1,5")
				st.Alloc.ReusablePod, st.Alloc.Reusable = "a", cpuset.New(1, 2)
				return st
			},
			want: []string{`reusable CPUs 2 of pod "a" are not held by that pod`},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := engine(t, tc.cfg)
			err := tc.opts.Check(e, tc.st(t), applied(t, tc.applied...))
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("valid state reported: %v", err)
				}
				return
			}
			var ie *Error
			if !errors.As(err, &ie) {
				t.Fatalf("Check = %v, want *Error", err)
			}
			if !strings.HasPrefix(err.Error(), "InvariantViolation") {
				t.Errorf("error text %q does not start with the reason word", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("violations lack %q:\n%v", w, err)
				}
			}
		})
	}
}

// States the engine itself produces pass: a series of admissions and
// releases on a two-socket machine, checked after each step (a checker that
// reports false positives would be useless in the churn test).
func TestEngineStatesPass(t *testing.T) {
	topo := sysfstest.Load(t, "ht-2s-6c")
	for _, opts := range []map[string]string{nil, {allocator.OptStrictCPUReservation: "true"}, {allocator.OptFullPCPUsOnly: "true"}} {
		e, err := policy.New(topo, policy.Config{CPUManagerPolicy: policy.CPUPolicyStatic, ReservedCount: 2, CPUOptions: opts, TopologyPolicy: "best-effort"})
		if err != nil {
			t.Fatal(err)
		}
		st := e.NewState()
		app := map[Key]cpuset.CPUSet{}
		check := func(step string) {
			t.Helper()
			// The shared containers follow the pool, as the daemon's updates
			// make them.
			for k := range app {
				if cpus, ok := e.Assignment(st, k.Pod, k.Container); ok {
					app[k] = cpus
				} else {
					app[k] = e.SharedCPUs(st)
				}
			}
			if err := (Options{NoPodOverlap: true}).Check(e, st, app); err != nil {
				t.Fatalf("%v after %s: %v", opts, step, err)
			}
		}
		for i, milli := range []int64{2000, 4000, 500, 6000, 2000} {
			req := policy.Request{Pod: string(rune('a' + i)), Container: "c", QoS: policy.Guaranteed, CPURequestMilli: milli, CPULimitMilli: milli}
			next, _, err := e.Add(st, req)
			if err != nil {
				t.Fatalf("%v: add %d: %v", opts, milli, err)
			}
			st = next
			app[Key{req.Pod, req.Container}] = cpuset.New()
			check("add")
		}
		st = e.Remove(st, "b", "c")
		check("remove b")
		st = e.RemovePod(st, "d")
		check("remove pod d")
	}
}
