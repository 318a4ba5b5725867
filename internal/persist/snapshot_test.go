package persist

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
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
