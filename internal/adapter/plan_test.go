package adapter

import (
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"
	"testing"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// The plans below are worked out by hand on the fixture ht-1s-4c: 8 CPUs,
// core k = {k, k+4}, one NUMA node (mems "0"). Under the static policy
// with CPUs 0 and 4 reserved the shared pool starts as 0-7 (the reserved
// CPUs are in it) and an exclusive 2-CPU container takes the lowest free
// whole core: {1,5}, then {2,6}, then {3,7}.
const (
	planStatic     = "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n"
	planNoReserved = "cpu_manager_policy = \"static\"\nreserved_cpu_count = 0\n"
)

func gReq(pod, name string, cpus int64) policy.Request {
	return policy.Request{Pod: pod, Container: name, QoS: policy.Guaranteed,
		CPURequestMilli: cpus * 1000, CPULimitMilli: cpus * 1000, Type: allocator.App}
}

func bReq(pod, name string) policy.Request {
	return policy.Request{Pod: pod, Container: name, QoS: policy.Burstable, CPURequestMilli: 500, CPULimitMilli: 1000, Type: allocator.App}
}

// pods are sandbox "s-<uid>" with key "<uid>" and name "ns/<uid>".
func planPods(uids ...string) []syncPod {
	out := make([]syncPod, len(uids))
	for i, u := range uids {
		out[i] = syncPod{ID: "s-" + u, Key: u, Name: "ns/" + u}
	}
	return out
}

func planCtr(id string, req policy.Request, phase ctrPhase, created int64, cpus string) syncCtr {
	return syncCtr{ID: id, SandboxID: "s-" + req.Pod, Name: req.Container, Phase: phase, CreatedAt: created,
		CPUs: cpus, Mems: "0", CgroupsPath: "/cg/" + id, Request: req}
}

func rec(id, pod, name string, excl bool, mems string) ledger.Record {
	return ledger.Record{ID: id, Pod: pod, PodName: "ns/" + pod, Name: name, CgroupsPath: "/cg/" + id, Exclusive: excl, Mems: mems}
}

// epoch is the Since of a container the fake runtime created a few ns
// after the epoch.
const epoch = "1970-01-01T00:00:00Z"

func sinceAt(r ledger.Record, since string) ledger.Record { r.Since = since; return r }

// planWant is the hand-worked part of a plan.
type planWant struct {
	assignments map[string]string // "pod/name" -> cpus, after the plan
	records     map[string]ledger.Record
	released    []ledger.PodContainer
	kept        map[string]string // id -> cpus
	adopted     []string
	admissions  []string // "id: cpus exclusive" or "id: reason"
	placed      int
	await       []string
	updates     []applier.CPUUpdate
	events      []string // "kind id"
}

var eventNames = map[syncEventKind]string{evKept: "kept", evNoDeviceHint: "no-device-hint", evRefused: "refused", evPlaced: "placed"}

func TestPlanSync(t *testing.T) {
	for _, tc := range []struct {
		name   string
		doc    string
		assign map[string]string // "pod/name" -> cpus in the state before
		in     syncInput
		want   planWant
	}{{
		// The plugin was away while the kubelet restarted a container:
		// the old one is stopped, the new one runs unpinned and takes
		// over the assignment of its pod and name (adopted, mems left
		// to the runtime), which is not released.
		name:   "restart of a container",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "1,5"},
		in: syncInput{
			Records: map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
			Pods:    planPods("p1"),
			Ctrs: []syncCtr{
				planCtr("c1", gReq("p1", "app", 2), phaseStopped, 1, "1,5"),
				planCtr("c2", gReq("p1", "app", 2), phaseRunning, 2, "0-7"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1,5"},
			// Adopted: since its creation, 2 ns after the epoch.
			records: map[string]ledger.Record{"c2": sinceAt(rec("c2", "p1", "app", true, ""), epoch)},
			adopted: []string{"c2"},
			placed:  1,
			updates: []applier.CPUUpdate{{ID: "c2", CPUs: "1,5"}},
		},
	}, {
		// A downsize answered and not committed (its PostUpdateContainer
		// lost with the connection): the container the runtime narrowed
		// to 1,5 stays there (ledger.RightCPUs with the pending shrink),
		// its assignment still 1-2,5-6 until the downsize commits.
		name:   "pending downsize",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "1-2,5-6"},
		in: syncInput{
			Records:   map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
			Pods:      planPods("p1"),
			Ctrs:      []syncCtr{planCtr("c1", gReq("p1", "app", 2), phaseRunning, 1, "1,5")},
			Shrinking: map[string]ledger.Shrink{"c1": {From: cpuset.New(1, 2, 5, 6), Req: gReq("p1", "app", 2), To: cpuset.New(1, 5)}},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1-2,5-6"},
			records:     map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
		},
	}, {
		// The same without the pending downsize: the assignment.
		name:   "narrowed without a downsize",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "1-2,5-6"},
		in: syncInput{
			Records: map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
			Pods:    planPods("p1"),
			Ctrs:    []syncCtr{planCtr("c1", gReq("p1", "app", 2), phaseRunning, 1, "1,5")},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1-2,5-6"},
			records:     map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
			updates:     []applier.CPUUpdate{{ID: "c1", CPUs: "1-2,5-6", Mems: "0"}},
		},
	}, {
		// A corrupt checkpoint was set aside: no state, no index. The
		// Guaranteed container keeps the whole core it runs on (kept,
		// then adopted); the shared one is admitted to the pool it
		// already runs on. Nothing moves.
		name: "lost assignment kept",
		doc:  planStatic,
		in: syncInput{
			Pods: planPods("p1", "p2"),
			Now:  "2026-11-25T11:00:00Z",
			Ctrs: []syncCtr{
				planCtr("c2", bReq("p2", "web"), phaseRunning, 2, "0-1,3-5,7"),
				planCtr("c1", gReq("p1", "app", 2), phaseRunning, 1, "2,6"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "2,6"},
			records: map[string]ledger.Record{
				// c1 adopted (since its creation, 1 ns after the epoch),
				// c2 placed by this sync (since its Now).
				"c1": sinceAt(rec("c1", "p1", "app", true, ""), epoch),
				"c2": sinceAt(rec("c2", "p2", "web", false, ""), "2026-11-25T11:00:00Z"),
			},
			kept:       map[string]string{"c1": "2,6"},
			adopted:    []string{"c1"},
			admissions: []string{"c2: 0-1,3-5,7 shared"},
			placed:     2,
			events:     []string{"kept c1", "placed c2"},
		},
	}, {
		// The index knows the Guaranteed container as exclusive but the
		// reconciled checkpoint dropped its entry, and a shared
		// container runs on the same two CPUs: they are not taken for
		// exclusive. It is admitted again (lowest free core {1,5}, mems
		// set) and the shared container follows the pool.
		name: "lost assignment on CPUs another container shares is admitted again",
		doc:  planStatic,
		in: syncInput{
			Records: map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
			Pods:    planPods("p1", "p2"),
			Ctrs: []syncCtr{
				planCtr("c1", gReq("p1", "app", 2), phaseRunning, 1, "2,6"),
				planCtr("c2", bReq("p2", "web"), phaseRunning, 2, "2,6"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1,5"},
			records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "app", true, "0"),
				"c2": rec("c2", "p2", "web", false, ""),
			},
			admissions: []string{"c1: 1,5 exclusive", "c2: 0,2-4,6-7 shared"},
			placed:     2,
			updates:    []applier.CPUUpdate{{ID: "c1", CPUs: "1,5", Mems: "0"}, {ID: "c2", CPUs: "0,2-4,6-7"}},
			events:     []string{"placed c1", "placed c2"},
		},
	}, {
		// Containers created while the plugin was away run unpinned on
		// the shared pool; they are admitted oldest first: the
		// Guaranteed one gets {2,6} (its device NUMA nodes could not be
		// read: no hint, one warning), the shared one the pool left.
		name:   "created while away",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "1,5"},
		in: syncInput{
			Records: map[string]ledger.Record{"c1": rec("c1", "p1", "app", true, "0")},
			Pods:    planPods("p1", "p2", "p3"),
			Ctrs: []syncCtr{
				planCtr("c3", bReq("p3", "web"), phaseRunning, 3, "0,2-4,6-7"),
				func() syncCtr {
					c := planCtr("c2", gReq("p2", "db", 2), phaseRunning, 2, "0,2-4,6-7")
					c.DeviceErr = errors.New("numa_node: permission denied")
					return c
				}(),
				planCtr("c1", gReq("p1", "app", 2), phaseRunning, 1, "1,5"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1,5", "p2/db": "2,6"},
			records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "app", true, "0"),
				"c2": rec("c2", "p2", "db", true, "0"),
				"c3": rec("c3", "p3", "web", false, ""),
			},
			admissions: []string{"c2: 2,6 exclusive", "c3: 0,3-4,7 shared"},
			placed:     2,
			updates:    []applier.CPUUpdate{{ID: "c2", CPUs: "2,6", Mems: "0"}, {ID: "c3", CPUs: "0,3-4,7"}},
			events:     []string{"no-device-hint c2", "placed c2", "placed c3"},
		},
	}, {
		// The kubelet's state was imported: assignments without an
		// index. The one whose container runs is adopted, the one of a
		// pod that is gone released.
		name:   "imported kubelet state",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "3,7", "p9/gone": "2,6"},
		in: syncInput{
			Pods: planPods("p1"),
			Ctrs: []syncCtr{planCtr("c1", gReq("p1", "app", 2), phaseRunning, 1, "0-7")},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "3,7"},
			records:     map[string]ledger.Record{"c1": sinceAt(rec("c1", "p1", "app", true, ""), epoch)},
			released:    []ledger.PodContainer{{Pod: "p9", Name: "gone"}},
			adopted:     []string{"c1"},
			placed:      1,
			updates:     []applier.CPUUpdate{{ID: "c1", CPUs: "3,7"}},
		},
	}, {
		// Every non-reserved core is taken; a Guaranteed container
		// created while away runs on the reserved CPUs 0,4 (the pool
		// left). It is not kept there (reserved CPUs are never
		// exclusive) and cannot be admitted: it stays in the shared
		// pool, recorded as shared, with no update (it is there).
		name:   "rejection of a running container",
		doc:    planStatic,
		assign: map[string]string{"p1/a": "1,5", "p2/b": "2,6", "p3/c": "3,7"},
		in: syncInput{
			Records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "a", true, "0"),
				"c2": rec("c2", "p2", "b", true, "0"),
				"c3": rec("c3", "p3", "c", true, "0"),
			},
			Pods: planPods("p1", "p2", "p3", "p4"),
			Ctrs: []syncCtr{
				planCtr("c1", gReq("p1", "a", 2), phaseRunning, 1, "1,5"),
				planCtr("c2", gReq("p2", "b", 2), phaseRunning, 2, "2,6"),
				planCtr("c3", gReq("p3", "c", 2), phaseRunning, 3, "3,7"),
				planCtr("c4", gReq("p4", "d", 2), phaseRunning, 4, "0,4"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/a": "1,5", "p2/b": "2,6", "p3/c": "3,7"},
			records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "a", true, "0"),
				"c2": rec("c2", "p2", "b", true, "0"),
				"c3": rec("c3", "p3", "c", true, "0"),
				"c4": rec("c4", "p4", "d", false, ""),
			},
			admissions: []string{"c4: InsufficientCPUs"},
			events:     []string{"refused c4"},
		},
	}, {
		// Containers still created, not started, await their start,
		// known or not; a stopped container's record goes and its CPUs
		// stay held for its pod, which lives (3,7 stays out of the
		// shared pool); a container of a pod the runtime no longer
		// lists is not live.
		name:   "created not started at sync",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "1,5", "p5/old": "3,7"},
		in: syncInput{
			Records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "app", true, "0"),
				"c5": rec("c5", "p5", "old", true, "0"),
			},
			Pods: planPods("p1", "p2", "p5"),
			Ctrs: []syncCtr{
				planCtr("c1", gReq("p1", "app", 2), phaseCreated, 1, "1,5"),
				planCtr("c2", bReq("p2", "web"), phaseCreated, 2, "0-7"),
				planCtr("c5", gReq("p5", "old", 2), phaseStopped, 0, "3,7"),
				planCtr("c6", bReq("p6", "orphan"), phaseRunning, 3, "0-7"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1,5", "p5/old": "3,7"},
			records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "app", true, "0"),
				"c2": rec("c2", "p2", "web", false, ""),
			},
			admissions: []string{"c2: 0,2,4,6 shared"},
			placed:     1,
			await:      []string{"c1", "c2"},
			updates:    []applier.CPUUpdate{{ID: "c2", CPUs: "0,2,4,6"}},
			events:     []string{"placed c2"},
		},
	}, {
		// Pods that are gone release everything they hold: p5's
		// stopped container and p6's assignment without a container
		// (both of any name); p1's stopped container and p2's
		// assignment without a container (imported from the kubelet)
		// stay held for their live pods. The pod-scope affinity of the
		// gone pod is forgotten.
		name:   "pods gone",
		doc:    planStatic,
		assign: map[string]string{"p1/app": "1", "p2/x": "5", "p5/old": "2,6", "p6/gone": "3"},
		in: syncInput{
			Records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "app", true, "0"),
				"c5": rec("c5", "p5", "old", true, "0"),
			},
			Pods: planPods("p1", "p2"),
			Ctrs: []syncCtr{
				planCtr("c1", gReq("p1", "app", 1), phaseStopped, 1, "1"),
				planCtr("c5", gReq("p5", "old", 2), phaseRunning, 2, "2,6"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/app": "1", "p2/x": "5"},
			records:     map[string]ledger.Record{},
			released:    []ledger.PodContainer{{Pod: "p5", Name: "old"}, {Pod: "p6", Name: "gone"}},
		},
	}, {
		// No reserved CPUs: three cores are exclusive and a shared
		// container runs on the last one, 0,4. A Guaranteed container
		// created while away would take it and leave the shared one no
		// CPU: refused (InsufficientCPUs, one shared container), kept in
		// the pool with the other, and moved there.
		name:   "empty shared pool",
		doc:    planNoReserved,
		assign: map[string]string{"p1/a": "1,5", "p2/b": "2,6", "p3/c": "3,7"},
		in: syncInput{
			Records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "a", true, "0"),
				"c2": rec("c2", "p2", "b", true, "0"),
				"c3": rec("c3", "p3", "c", true, "0"),
				"c4": rec("c4", "p4", "web", false, ""),
			},
			Pods: planPods("p1", "p2", "p3", "p4", "p5"),
			Ctrs: []syncCtr{
				planCtr("c1", gReq("p1", "a", 2), phaseRunning, 1, "1,5"),
				planCtr("c2", gReq("p2", "b", 2), phaseRunning, 2, "2,6"),
				planCtr("c3", gReq("p3", "c", 2), phaseRunning, 3, "3,7"),
				planCtr("c4", bReq("p4", "web"), phaseRunning, 4, "0,4"),
				planCtr("c5", gReq("p5", "e", 2), phaseRunning, 5, "0-7"),
			},
		},
		want: planWant{
			assignments: map[string]string{"p1/a": "1,5", "p2/b": "2,6", "p3/c": "3,7"},
			records: map[string]ledger.Record{
				"c1": rec("c1", "p1", "a", true, "0"),
				"c2": rec("c2", "p2", "b", true, "0"),
				"c3": rec("c3", "p3", "c", true, "0"),
				"c4": rec("c4", "p4", "web", false, ""),
				"c5": rec("c5", "p5", "e", false, ""),
			},
			admissions: []string{"c5: InsufficientCPUs stranded 2 CPUs 1 shared"},
			updates:    []applier.CPUUpdate{{ID: "c5", CPUs: "0,4"}},
			events:     []string{"refused c5"},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			e := policytest.EngineOf(t, "ht-1s-4c", tc.doc)
			in := tc.in
			in.Static = true
			in.State = e.NewState()
			for _, k := range slices.Sorted(maps.Keys(tc.assign)) {
				pod, name, _ := strings.Cut(k, "/")
				cpus, err := cpuset.Parse(tc.assign[k])
				if err != nil {
					t.Fatal(err)
				}
				next, err := e.Assign(in.State, pod, name, cpus)
				if err != nil {
					t.Fatal(err)
				}
				in.State = next
			}
			before := maps.Clone(in.Records)
			got := planSync(e, in)
			checkPlan(t, got, tc.want)
			if !reflect.DeepEqual(in.Records, before) {
				t.Errorf("planSync changed its input records")
			}
			if err := e.Validate(got.State); err != nil {
				t.Errorf("planned state invalid: %v", err)
			}
		})
	}
}

func checkPlan(t *testing.T, got syncPlan, want planWant) {
	t.Helper()
	assignments := map[string]string{}
	for pod, byName := range got.State.Alloc.Assignments {
		for name, cpus := range byName {
			assignments[pod+"/"+name] = cpus.String()
		}
	}
	kept := map[string]string{}
	for _, k := range got.Kept {
		kept[k.ID] = k.CPUs.String()
	}
	var admissions []string
	for _, a := range got.Admissions {
		var se *strandedError
		switch {
		case errors.As(a.Err, &se):
			admissions = append(admissions, fmt.Sprintf("%s: %s stranded %d CPUs %d shared", a.ID, reasonOf(a.Err), se.CPUs, se.Shared))
		case a.Err != nil:
			admissions = append(admissions, a.ID+": "+reasonOf(a.Err))
		case a.Decision.Exclusive:
			admissions = append(admissions, a.ID+": "+a.Decision.CPUs.String()+" exclusive")
		default:
			admissions = append(admissions, a.ID+": "+a.Decision.CPUs.String()+" shared")
		}
	}
	var events []string
	for _, ev := range got.Events {
		events = append(events, eventNames[ev.Kind]+" "+ev.ID)
	}
	for _, c := range []struct {
		what      string
		got, want any
	}{
		{"assignments", assignments, want.assignments},
		{"records", got.Records, orEmpty(want.records)},
		{"released", got.Released, want.released},
		{"kept", kept, orEmptyS(want.kept)},
		{"adopted", got.Adopted, want.adopted},
		{"admissions", admissions, want.admissions},
		{"placed", got.Placed, want.placed},
		{"await", got.AwaitStart, want.await},
		{"updates", got.Updates, want.updates},
		{"events", events, want.events},
	} {
		if !reflect.DeepEqual(c.got, c.want) {
			t.Errorf("%s = %v, want %v", c.what, c.got, c.want)
		}
	}
}

func orEmpty(m map[string]ledger.Record) map[string]ledger.Record {
	if m == nil {
		return map[string]ledger.Record{}
	}
	return m
}

func orEmptyS(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
