package persist

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/memorymanager"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

// TestPayloadEncoderMatchesJSON: through random sequences of admissions
// (exclusive, shared, init containers), removals and record changes, under
// the container and the pod scope, the cached encoding is the bytes
// encoding/json writes for the same payload (so Load and files written
// before the encoder agree), including names JSON must escape.
func TestPayloadEncoderMatchesJSON(t *testing.T) {
	for _, doc := range []string{
		fuzzConfig,
		"cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"restricted\"\ntopology_manager_scope = \"pod\"\n",
		"cpu_manager_policy = \"none\"\n",
		memoryStaticConfig,
	} {
		e := policytest.EngineOf(t, "ht-2s-6c", doc)
		rng := rand.New(rand.NewSource(7))
		names := []string{"app", "side<car>", "init&1", "quote\"d", "ünï", "bad\xffutf8", "tab\there"}
		var enc payloadEncoder
		st := e.NewState()
		ctrs := map[string]ledger.Record{}
		for step := 0; step < 600; step++ {
			// The daemon hands persist a new map for every event.
			next := make(map[string]ledger.Record, len(ctrs)+1)
			for k, v := range ctrs {
				next[k] = v
			}
			pod := fmt.Sprintf("uid-%d", rng.Intn(8))
			name := names[rng.Intn(len(names))]
			st = randomEvent(rng, e, st, next, pod, name, func(id string) string { return "/kubepods/" + id })
			ctrs = next
			got, err := enc.encode("fp", e, st, ctrs)
			if err != nil {
				t.Fatal(err)
			}
			want, err := json.Marshal(payload{Fingerprint: "fp", Engine: e.Snapshot(st), Containers: ctrs})
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Fatalf("%s step %d: encoder wrote\n%s\nencoding/json wrote\n%s", doc, step, got, want)
			}
			if len(enc.ctrs.items) != len(ctrs) || len(enc.assign.items) != len(st.Alloc.Assignments) {
				t.Fatalf("step %d: cache holds %d records, %d pods; state %d, %d", step,
					len(enc.ctrs.items), len(enc.assign.items), len(ctrs), len(st.Alloc.Assignments))
			}
		}
	}
}

// TestSnapshotFieldsKnown guards the hand-written field list of
// payloadEncoder.encode: a new Snapshot or payload field must be added
// there too.
func TestSnapshotFieldsKnown(t *testing.T) {
	for typ, want := range map[reflect.Type]string{
		reflect.TypeOf(policy.Snapshot{}): "shared reserved assignments reusable_pod,omitempty reusable,omitempty pod_affinity,omitempty baseline,omitempty memory,omitempty pod_shared,omitempty",
		reflect.TypeOf(payload{}):         "fingerprint engine containers journal,omitempty", // the journal mark: compact's
	} {
		var tags []string
		for i := 0; i < typ.NumField(); i++ {
			tags = append(tags, typ.Field(i).Tag.Get("json"))
		}
		if got := strings.Join(tags, " "); got != want {
			t.Errorf("%s has JSON fields %q; payloadEncoder writes %q: update it", typ, got, want)
		}
	}
}

// BenchmarkPayloadEncoder is one checkpoint encoding on epyc-9754 with
// 500 containers (100 with 2 exclusive CPUs, as the round-trip benchmark
// populates) of which one record changed, against encoding/json.
func BenchmarkPayloadEncoder(b *testing.B) {
	e := policytest.EngineOf(b, "epyc-9754", "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\n")
	st := e.NewState()
	ctrs := map[string]ledger.Record{}
	for i := 0; i < 500; i++ {
		id, pod := fmt.Sprintf("%064x", i*7919), fmt.Sprintf("%036x", i)
		r := ledger.Record{ID: id, Pod: pod, PodName: "default/pod", Name: "c", CgroupsPath: "/kubepods/pod" + pod + "/" + id}
		if i%5 == 0 {
			next, dec, err := e.Add(st, policy.Request{Pod: pod, Container: "c", QoS: policy.Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 2000})
			if err != nil {
				b.Fatal(err)
			}
			st, r.Exclusive, r.Mems = next, true, dec.Mems.String()
		}
		ctrs[id] = r
	}
	for _, mode := range []string{"cached", "encoding-json"} {
		b.Run(mode, func(b *testing.B) {
			var enc payloadEncoder
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				id := fmt.Sprintf("%064x", 7919*(i%500))
				r := ctrs[id]
				r.PodName = []string{"default/pod", "default/pod2"}[i%2]
				ctrs[id] = r
				var err error
				if mode == "cached" {
					_, err = enc.encode("fp", e, st, ctrs)
				} else {
					_, err = json.Marshal(payload{Fingerprint: "fp", Engine: e.Snapshot(st), Containers: ctrs})
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// randomEvent applies one random event for container name of pod to st
// and the index next, and returns the new state: an admission (Guaranteed
// with 1-3 CPUs or Burstable, an init or a regular container; the record
// gets cgroupsPath(id)), a record's mems changed, an in-place resize of
// its exclusive CPUs (to 1-4, refusals change nothing), the container
// removed, or its whole pod.
func randomEvent(rng *rand.Rand, e *policy.Engine, st policy.State, next map[string]ledger.Record, pod, name string, cgroupsPath func(id string) string) policy.State {
	id := pod + "/" + name
	switch rng.Intn(5) {
	case 0, 1:
		qos, milli := policy.Guaranteed, int64(1000*(1+rng.Intn(3)))
		if rng.Intn(3) == 0 {
			qos, milli = policy.Burstable, 500
		}
		req := policy.Request{Pod: pod, Container: name, QoS: qos, CPURequestMilli: milli, CPULimitMilli: milli,
			Type:   allocator.ContainerType(rng.Intn(2)),
			Memory: memorymanager.Request{memorymanager.Memory: uint64(milli) << 20}} // 1000 MiB per CPU
		if e.Config().PodLevelResourceManagers {
			// Every pod a pod-level pod of 4 CPUs: whole-CPU containers
			// take slices, the 500m ones its pool.
			req.QoS, req.PodCPURequestMilli, req.PodCPULimitMilli = policy.Guaranteed, 4000, 4000
		}
		if ns, dec, err := e.Add(st, req); err == nil {
			st = ns
			next[id] = ledger.Record{ID: id, Pod: pod, PodName: "ns/" + pod, Name: name, CgroupsPath: cgroupsPath(id),
				Exclusive: dec.Exclusive, Mems: dec.Mems.String(), Since: []string{"", "2026-11-25T10:00:00Z"}[rng.Intn(2)]}
		}
	case 2:
		if r, ok := next[id]; ok {
			r.Mems = []string{"", "0", "0-1"}[rng.Intn(3)]
			next[id] = r
		}
	case 4:
		if r, ok := next[id]; ok && r.Exclusive {
			milli := int64(1000 * (1 + rng.Intn(4)))
			req := policy.Request{Pod: pod, Container: name, QoS: policy.Guaranteed, CPURequestMilli: milli, CPULimitMilli: milli}
			if ns, dec, err := e.Resize(st, req); err == nil {
				st = ns
				r.Mems = dec.Mems.String()
				next[id] = r
			}
		}
	case 3:
		if rng.Intn(4) == 0 {
			st = e.RemovePod(st, pod)
			for k, r := range next {
				if r.Pod == pod {
					delete(next, k)
				}
			}
		} else {
			st = e.Remove(st, pod, name)
			delete(next, id)
		}
	}
	return st
}

// TestRecordDeltaMatchesJSON: through random admissions, removals and
// record changes, under the container and the pod scope (pod affinities),
// a journal record written by recordDelta.appendTo is the bytes
// encoding/json writes for the journalRecord it stands for, so replay
// (json.Unmarshal) reads it as before, names JSON must escape included.
func TestRecordDeltaMatchesJSON(t *testing.T) {
	for _, doc := range []string{
		fuzzConfig,
		"cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\ntopology_manager_policy = \"restricted\"\ntopology_manager_scope = \"pod\"\n",
		memoryStaticConfig,
		podLevelTOML,
	} {
		e := policytest.EngineOf(t, "ht-2s-6c", doc)
		rng := rand.New(rand.NewSource(11))
		names := []string{"app", "side<car>", "init&1", "quote\"d", "ünï", "bad\xffutf8", "tab\there", "back\\slash"}
		var s journalStore
		st, ctrs := e.NewState(), map[string]ledger.Record{}
		var seen [5]int                   // deltas of each map
		s.head, s.pool = s.headFor(e, st) // before s.engine is set: every text printed
		s.engine, s.assign, s.aff, s.base, s.ctrs = e, st.Alloc.Assignments, st.PodAffinity, st.Baseline, ledger.CloneRecords(ctrs)
		s.podPool = st.PodShared
		s.mem, s.memText = st.Memory, e.MemorySnapshot(st)
		memChanges := 0
		for step := 0; step < 800; step++ {
			next := ledger.CloneRecords(ctrs)
			for range 1 + rng.Intn(3) {
				pod := fmt.Sprintf("uid-%d", rng.Intn(6))
				name := names[rng.Intn(len(names))]
				st = randomEvent(rng, e, st, next, pod, name, func(id string) string { return []string{"", "/kubepods/" + id}[rng.Intn(2)] })
			}
			ctrs = next

			head, pool := s.deltaFor(e, st, ledger.IndexChange{All: ctrs})
			r := &s.delta
			got := string(r.appendTo(nil))
			seen[0] += len(r.assign)
			seen[1] += len(r.aff)
			seen[2] += len(r.ctrs)
			seen[3] += len(r.base)
			seen[4] += len(r.podPool)

			snap := e.Snapshot(st)
			want := journalRecord{Shared: snap.Shared, Reserved: snap.Reserved, ReusablePod: snap.ReusablePod, Reusable: snap.Reusable}
			for _, kd := range r.assign {
				want.Assign = putKey(want.Assign, kd.key, (*map[string]string)(nil))
				if !kd.gone {
					texts := snap.Assignments[kd.key]
					want.Assign[kd.key] = &texts
				}
			}
			for _, kd := range r.aff {
				want.Affinity = putKey(want.Affinity, kd.key, (*policy.SnapshotHint)(nil))
				if !kd.gone {
					sh := snap.PodAffinity[kd.key]
					want.Affinity[kd.key] = &sh
				}
			}
			for _, kd := range r.ctrs {
				want.Ctrs = putKey(want.Ctrs, kd.key, (*ledger.Record)(nil))
				if !kd.gone {
					c := ctrs[kd.key]
					want.Ctrs[kd.key] = &c
				}
			}
			for _, kd := range r.base {
				want.Baseline = putKey(want.Baseline, kd.key, (*map[string]string)(nil))
				if !kd.gone {
					texts := snap.Baseline[kd.key]
					want.Baseline[kd.key] = &texts
				}
			}
			for _, kd := range r.podPool {
				want.PodShared = putKey(want.PodShared, kd.key, (*[]string)(nil))
				if !kd.gone {
					names := snap.PodShared[kd.key]
					want.PodShared[kd.key] = &names
				}
			}
			if !bytes.Equal(snap.Memory, s.memText) {
				want.Memory = snap.Memory
				memChanges++
			}
			wantJSON, err := json.Marshal(&want)
			if err != nil {
				t.Fatal(err)
			}
			if got != string(wantJSON) {
				t.Fatalf("step %d: appendTo wrote\n%s\nencoding/json wrote\n%s", step, got, wantJSON)
			}
			// Applied to the state on disk, the record gives st (both
			// through JSON, which replaces invalid UTF-8).
			p := roundTrip(t, payload{Engine: e.Snapshot(policy.State{Alloc: allocator.State{Assignments: s.assign}, PodAffinity: s.aff, Baseline: s.base, Memory: s.mem,
				PodShared: s.podPool}),
				Containers: s.ctrs})
			var dec journalRecord
			if err := json.Unmarshal([]byte(got), &dec); err != nil {
				t.Fatal(err)
			}
			applyRecord(&p, &dec)
			w := roundTrip(t, payload{Engine: snap, Containers: ctrs})
			if len(p.Engine.Assignments) == 0 {
				p.Engine.Assignments = nil
			}
			if len(w.Engine.Assignments) == 0 {
				w.Engine.Assignments = nil
			}
			if len(p.Engine.Baseline) == 0 {
				p.Engine.Baseline = nil // a record removing the last baseline leaves an empty map
			}
			if len(p.Engine.PodShared) == 0 {
				p.Engine.PodShared = nil // likewise the last pod-level pod's pool
			}
			if !reflect.DeepEqual(p.Engine, w.Engine) || !reflect.DeepEqual(p.Containers, w.Containers) {
				t.Fatalf("step %d: the record applied gives\n%+v %v\nwant\n%+v %v", step, p.Engine, p.Containers, w.Engine, w.Containers)
			}
			s.head, s.pool, s.reusable = head, pool, st.Alloc.Reusable
			s.assign, s.aff, s.base, s.ctrs = st.Alloc.Assignments, st.PodAffinity, st.Baseline, ledger.CloneRecords(ctrs)
			s.podPool = st.PodShared
			s.mem, s.memText = st.Memory, snap.Memory
		}
		if doc == memoryStaticConfig && memChanges == 0 {
			t.Errorf("no record changed the memory manager's state: the test missed it")
		}
		if doc == podLevelTOML && seen[4] == 0 {
			t.Errorf("no record changed the pod pools' containers: the test missed them")
		}
		// A slice is not resized (RulePodLevelSlice): no baselines there.
		if seen[0] == 0 || seen[2] == 0 || (seen[3] == 0 && doc != podLevelTOML) || (strings.Contains(doc, "pod") && seen[1] == 0) {
			t.Errorf("%s: records with %d assignments, %d affinities, %d containers, %d baselines: the test missed a kind", doc, seen[0], seen[1], seen[2], seen[3])
		}
	}
}

// TestRecordFieldsKnown guards the hand-written field lists of
// recordDelta.appendTo: a new field of a journal record or a container
// record must be written there too.
func TestRecordFieldsKnown(t *testing.T) {
	for typ, want := range map[reflect.Type]string{
		reflect.TypeOf(journalRecord{}):       "shared reserved reusable_pod,omitempty reusable,omitempty assign,omitempty affinity,omitempty containers,omitempty baseline,omitempty memory,omitempty pod_shared,omitempty",
		reflect.TypeOf(ledger.Record{}):       "id pod pod_name name cgroups_path,omitempty exclusive mems,omitempty since,omitempty",
		reflect.TypeOf(policy.SnapshotHint{}): "numa preferred",
	} {
		var tags []string
		for i := 0; i < typ.NumField(); i++ {
			tags = append(tags, typ.Field(i).Tag.Get("json"))
		}
		if got := strings.Join(tags, " "); got != want {
			t.Errorf("%s has JSON fields %q; recordDelta.appendTo writes %q: update it", typ, got, want)
		}
	}
}

func putKey[V any](m map[string]*V, k string, v *V) map[string]*V {
	if m == nil {
		m = map[string]*V{}
	}
	m[k] = v
	return m
}

func roundTrip(t *testing.T, p payload) payload {
	t.Helper()
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out payload
	if err := json.Unmarshal(raw, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestPayloadEncoderPodShared: a pod-level pod's pod-pool containers
// (pod_shared) are written as encoding/json writes them, and read back.
func TestPayloadEncoderPodShared(t *testing.T) {
	e := policytest.EngineOf(t, "ht-2s-6c", "reserved_cpu_count = 2\ntopology_manager_scope = \"pod\"\npod_level_resource_managers = true\n")
	st := e.NewState()
	for _, req := range []policy.Request{
		{Pod: "p", Container: "a", QoS: policy.Guaranteed, CPURequestMilli: 2000, CPULimitMilli: 2000, PodCPURequestMilli: 4000, PodCPULimitMilli: 4000},
		{Pod: "p", Container: "b", QoS: policy.Guaranteed, CPURequestMilli: 500, CPULimitMilli: 1000, PodCPURequestMilli: 4000, PodCPULimitMilli: 4000},
	} {
		next, _, err := e.Add(st, req)
		if err != nil {
			t.Fatal(err)
		}
		st = next
	}
	var enc payloadEncoder
	got, err := enc.encode("fp", e, st, map[string]ledger.Record{})
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.Marshal(payload{Fingerprint: "fp", Engine: e.Snapshot(st), Containers: map[string]ledger.Record{}})
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) || !strings.Contains(string(got), `"pod_shared":{"p":["b"]}`) {
		t.Fatalf("encoder wrote\n%s\nencoding/json wrote\n%s\nwant pod_shared p=[b] in both", got, want)
	}
	var back payload
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatal(err)
	}
	restored, notes, err := e.FromSnapshot(back.Engine)
	if err != nil || len(notes) != 0 || len(restored.PodShared["p"]) != 1 {
		t.Fatalf("FromSnapshot: %v, notes %v, pod shared %v", err, notes, restored.PodShared)
	}
}
