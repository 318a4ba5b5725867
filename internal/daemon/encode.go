package daemon

import (
	"encoding/json"
	"fmt"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// payloadEncoder writes the checkpoint payload byte for byte as
// json.Marshal(payload{fp, engine.Snapshot(st), ctrs}) would, but keeps
// each container record's and each pod's assignment rendering, and the
// sorted key lists, from one event to the next: every event rewrites the
// checkpoint, and with 500 containers re-encoding (and sorting, through
// reflection) both maps was most of a CreateContainer. Entries are keyed
// by content, so tentative states that are never committed cannot leave a
// stale rendering. Guarded by Daemon.mu.
type payloadEncoder struct {
	ctrs   keyedJSON[ctrRecord]
	assign keyedJSON[map[string]cpuset.CPUSet]
	buf    []byte // valid until the next encode
}

// encode returns the payload's compact JSON; the slice is reused by the
// next call. policy.Snapshot's fields are written here in declaration
// order with encoding/json's omitempty rules (TestPayloadEncoder* hold
// the two together).
func (e *payloadEncoder) encode(fingerprint string, engine *policy.Engine, st policy.State, ctrs map[string]ctrRecord) ([]byte, error) {
	head := engine.SnapshotExceptAssignments(st)
	b := append(e.buf[:0], `{"fingerprint":`...)
	b = appendJSON(b, fingerprint)
	b = append(b, `,"engine":{"shared":`...)
	b = appendJSON(b, head.Shared)
	b = append(b, `,"reserved":`...)
	b = appendJSON(b, head.Reserved)
	b = append(b, `,"assignments":`...)
	assign := st.Alloc.Assignments
	if assign == nil {
		assign = map[string]map[string]cpuset.CPUSet{} // Snapshot never has a nil map
	}
	b, err := e.assign.appendTo(b, assign, sameSets, func(sets map[string]cpuset.CPUSet) ([]byte, error) {
		return json.Marshal(policy.AssignmentTexts(sets))
	})
	if err != nil {
		return nil, fmt.Errorf("encode assignments: %w", err)
	}
	if head.ReusablePod != "" {
		b = append(b, `,"reusable_pod":`...)
		b = appendJSON(b, head.ReusablePod)
	}
	if head.Reusable != "" {
		b = append(b, `,"reusable":`...)
		b = appendJSON(b, head.Reusable)
	}
	if len(head.PodAffinity) > 0 {
		aff, err := json.Marshal(head.PodAffinity)
		if err != nil {
			return nil, fmt.Errorf("encode pod affinities: %w", err)
		}
		b = append(b, `,"pod_affinity":`...)
		b = append(b, aff...)
	}
	b = append(b, `},"containers":`...)
	b, err = e.ctrs.appendTo(b, ctrs, func(a, b ctrRecord) bool { return a == b }, func(r ctrRecord) ([]byte, error) {
		return json.Marshal(r)
	})
	if err != nil {
		return nil, fmt.Errorf("encode containers: %w", err)
	}
	b = append(b, '}')
	e.buf = b
	return b, nil
}

// appendJSON appends s as a JSON string, escaped as encoding/json does.
func appendJSON(b []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always encodes
	return append(b, q...)
}

func sameSets(a, b map[string]cpuset.CPUSet) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		w, ok := b[k]
		if !ok || !v.Equals(w) {
			return false
		}
	}
	return true
}

// keyedJSON renders a map[string]V as encoding/json does (keys in byte
// order), keeping each entry's "key":value rendering and the sorted key
// list between calls, so a call costs a lookup and a comparison per
// unchanged entry.
type keyedJSON[V any] struct {
	keys, spare, fresh []string
	items              map[string]keyedItem[V] // exactly the keys of the last call
}

type keyedItem[V any] struct {
	v    V
	json []byte
}

func (k *keyedJSON[V]) appendTo(b []byte, m map[string]V, same func(a, b V) bool, enc func(V) ([]byte, error)) ([]byte, error) {
	if m == nil {
		return append(b, "null"...), nil
	}
	if k.items == nil {
		k.items = make(map[string]keyedItem[V], len(m))
	}
	// Sorted keys without sorting them all: the last call's keys still
	// present, merged with the new ones (usually one).
	kept := k.keys[:0]
	for _, key := range k.keys {
		if _, ok := m[key]; ok {
			kept = append(kept, key)
		}
	}
	k.fresh = k.fresh[:0]
	if len(kept) < len(m) {
		for key := range m {
			if _, ok := k.items[key]; !ok {
				k.fresh = append(k.fresh, key)
			}
		}
		slices.Sort(k.fresh)
	}
	merged := k.spare[:0]
	i, j := 0, 0
	for i < len(kept) || j < len(k.fresh) {
		if j == len(k.fresh) || (i < len(kept) && kept[i] < k.fresh[j]) {
			merged = append(merged, kept[i])
			i++
		} else {
			merged = append(merged, k.fresh[j])
			j++
		}
	}
	k.keys, k.spare = merged, kept

	b = append(b, '{')
	for n, key := range k.keys {
		v := m[key]
		it, ok := k.items[key]
		if !ok || !same(it.v, v) {
			kj, err := json.Marshal(key)
			var vj []byte
			if err == nil {
				vj, err = enc(v)
			}
			if err != nil {
				// Start afresh next time rather than trust half an update.
				*k = keyedJSON[V]{}
				return b, fmt.Errorf("key %q: %w", key, err)
			}
			it = keyedItem[V]{v: v, json: append(append(kj, ':'), vj...)}
			k.items[key] = it
		}
		if n > 0 {
			b = append(b, ',')
		}
		b = append(b, it.json...)
	}
	if len(k.items) > len(m) {
		for key := range k.items {
			if _, ok := m[key]; !ok {
				delete(k.items, key)
			}
		}
	}
	return append(b, '}'), nil
}
