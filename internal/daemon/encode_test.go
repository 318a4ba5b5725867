package daemon

import (
	"encoding/json"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/allocator"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
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
	} {
		e := engineFor(t, "ht-2s-6c", doc)
		rng := rand.New(rand.NewSource(7))
		names := []string{"app", "side<car>", "init&1", "quote\"d", "ünï", "bad\xffutf8", "tab\there"}
		var enc payloadEncoder
		st := e.NewState()
		ctrs := map[string]ctrRecord{}
		for step := 0; step < 600; step++ {
			// The daemon hands persist a new map for every event.
			next := make(map[string]ctrRecord, len(ctrs)+1)
			for k, v := range ctrs {
				next[k] = v
			}
			pod := fmt.Sprintf("uid-%d", rng.Intn(8))
			name := names[rng.Intn(len(names))]
			id := pod + "/" + name
			switch rng.Intn(4) {
			case 0, 1:
				qos, milli := policy.Guaranteed, int64(1000*(1+rng.Intn(3)))
				if rng.Intn(3) == 0 {
					qos, milli = policy.Burstable, 500
				}
				req := policy.Request{Pod: pod, Container: name, QoS: qos, CPURequestMilli: milli, CPULimitMilli: milli,
					Type: allocator.ContainerType(rng.Intn(2))}
				if ns, dec, err := e.Add(st, req); err == nil {
					st = ns
					next[id] = ctrRecord{ID: id, Pod: pod, PodName: "ns/" + pod, Name: name, CgroupsPath: "/kubepods/" + id,
						Exclusive: dec.Exclusive, Mems: dec.Mems.String()}
				}
			case 2:
				if r, ok := next[id]; ok {
					r.Mems = []string{"", "0", "0-1"}[rng.Intn(3)]
					next[id] = r
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
		reflect.TypeOf(policy.Snapshot{}): "shared reserved assignments reusable_pod,omitempty reusable,omitempty pod_affinity,omitempty",
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
	e := engineFor(b, "epyc-9754", "cpu_manager_policy = \"static\"\nreserved_cpu_count = 2\n")
	st := e.NewState()
	ctrs := map[string]ctrRecord{}
	for i := 0; i < 500; i++ {
		id, pod := fmt.Sprintf("%064x", i*7919), fmt.Sprintf("%036x", i)
		r := ctrRecord{ID: id, Pod: pod, PodName: "default/pod", Name: "c", CgroupsPath: "/kubepods/pod" + pod + "/" + id}
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
