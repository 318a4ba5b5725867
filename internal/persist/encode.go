package persist

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/jsonstr"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/hints"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// payloadEncoder writes the checkpoint payload byte for byte as
// json.Marshal(payload{fp, engine.Snapshot(st), ctrs}) would, but keeps
// each container record's and each pod's assignment rendering, and the
// sorted key lists, from one call to the next: the snapshot-only store
// writes it on every event and the journal at every compaction, where
// re-encoding (and sorting, through reflection) 500 records costs more
// than the rest of the event. Entries are keyed by content, so tentative
// states that are never committed cannot leave a stale rendering. Used
// under the ledger's lock.
type payloadEncoder struct {
	ctrs   keyedJSON[ledger.Record]
	assign keyedJSON[map[string]cpuset.CPUSet]
	buf    []byte // valid until the next encode
}

// encode returns the payload's compact JSON; the slice is reused by the
// next call. policy.Snapshot's fields are written here in declaration
// order with encoding/json's omitempty rules (TestPayloadEncoder* hold
// the two together).
func (e *payloadEncoder) encode(fingerprint string, engine *policy.Engine, st policy.State, ctrs map[string]ledger.Record) ([]byte, error) {
	head := engine.SnapshotExceptAssignments(st)
	b := append(e.buf[:0], `{"fingerprint":`...)
	b = jsonstr.Append(b, fingerprint)
	b = append(b, `,"engine":{"shared":`...)
	b = jsonstr.Append(b, head.Shared)
	b = append(b, `,"reserved":`...)
	b = jsonstr.Append(b, head.Reserved)
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
		b = jsonstr.Append(b, head.ReusablePod)
	}
	if head.Reusable != "" {
		b = append(b, `,"reusable":`...)
		b = jsonstr.Append(b, head.Reusable)
	}
	if len(head.PodAffinity) > 0 {
		aff, err := json.Marshal(head.PodAffinity)
		if err != nil {
			return nil, fmt.Errorf("encode pod affinities: %w", err)
		}
		b = append(b, `,"pod_affinity":`...)
		b = append(b, aff...)
	}
	if len(head.Baseline) > 0 {
		base, err := json.Marshal(head.Baseline)
		if err != nil {
			return nil, fmt.Errorf("encode baselines: %w", err)
		}
		b = append(b, `,"baseline":`...)
		b = append(b, base...)
	}
	if len(head.Memory) > 0 {
		b = append(b, `,"memory":`...)
		b = append(b, head.Memory...)
	}
	if len(head.PodShared) > 0 {
		ps, err := json.Marshal(head.PodShared)
		if err != nil {
			return nil, fmt.Errorf("encode pod-pool containers: %w", err)
		}
		b = append(b, `,"pod_shared":`...)
		b = append(b, ps...)
	}
	b = append(b, `},"containers":`...)
	b, err = e.ctrs.appendTo(b, ctrs, func(a, b ledger.Record) bool { return a == b }, func(r ledger.Record) ([]byte, error) {
		return json.Marshal(r)
	})
	if err != nil {
		return nil, fmt.Errorf("encode containers: %w", err)
	}
	b = append(b, '}')
	e.buf = b
	return b, nil
}

// appendTo appends the record as json.Marshal would write the
// journalRecord it stands for (TestRecordDeltaMatchesJSON), without
// reflection or maps: every decision encodes one, under the lock.
func (r *recordDelta) appendTo(b []byte) []byte {
	h := r.head
	b = append(b, `{"shared":`...)
	b = jsonstr.Append(b, h.shared)
	b = append(b, `,"reserved":`...)
	b = jsonstr.Append(b, h.reserved)
	if h.reusablePod != "" {
		b = append(b, `,"reusable_pod":`...)
		b = jsonstr.Append(b, h.reusablePod)
	}
	if h.reusable != "" {
		b = append(b, `,"reusable":`...)
		b = jsonstr.Append(b, h.reusable)
	}
	b = appendDelta(b, `,"assign":{`, r.assign, appendAssignment)
	b = appendDelta(b, `,"affinity":{`, r.aff, appendHint)
	b = appendDelta(b, `,"containers":{`, r.ctrs, appendRecord)
	b = appendDelta(b, `,"baseline":{`, r.base, appendAssignment)
	if len(r.mem) > 0 {
		b = append(b, `,"memory":`...)
		b = append(b, r.mem...)
	}
	b = appendDelta(b, `,"pod_shared":{`, r.podPool, appendNames)
	return append(b, '}')
}

// appendDelta appends one of the record's maps (sorted keys, null for a
// key gone), or nothing when it is empty (omitempty).
func appendDelta[V any](b []byte, open string, d []keyDelta[V], enc func([]byte, V) []byte) []byte {
	if len(d) == 0 {
		return b
	}
	b = append(b, open...)
	for i, kd := range d {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, kd.key)
		b = append(b, ':')
		if kd.gone {
			b = append(b, "null"...)
		} else {
			b = enc(b, kd.v)
		}
	}
	return append(b, '}')
}

// appendAssignment is policy.AssignmentTexts(sets) as JSON.
func appendAssignment(b []byte, sets map[string]cpuset.CPUSet) []byte {
	names := make([]string, 0, len(sets))
	for name := range sets {
		names = append(names, name)
	}
	slices.Sort(names)
	b = append(b, '{')
	for i, name := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, name)
		b = append(b, ':')
		b = jsonstr.Append(b, sets[name].String())
	}
	return append(b, '}')
}

// appendNames is a list of container names as JSON.
func appendNames(b []byte, names []string) []byte {
	b = append(b, '[')
	for i, n := range names {
		if i > 0 {
			b = append(b, ',')
		}
		b = jsonstr.Append(b, n)
	}
	return append(b, ']')
}

// appendHint is policy.HintOf(h) as JSON.
func appendHint(b []byte, h hints.Hint) []byte {
	sh := policy.HintOf(h)
	b = append(b, `{"numa":`...)
	if sh.NUMA == nil {
		b = append(b, "null"...)
	} else {
		b = append(b, '[')
		for i, n := range sh.NUMA {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, int64(n), 10)
		}
		b = append(b, ']')
	}
	b = append(b, `,"preferred":`...)
	b = strconv.AppendBool(b, sh.Preferred)
	return append(b, '}')
}

// appendRecord is a ledger.Record as JSON, its struct tags' rules included.
func appendRecord(b []byte, r ledger.Record) []byte {
	b = append(b, `{"id":`...)
	b = jsonstr.Append(b, r.ID)
	b = append(b, `,"pod":`...)
	b = jsonstr.Append(b, r.Pod)
	b = append(b, `,"pod_name":`...)
	b = jsonstr.Append(b, r.PodName)
	b = append(b, `,"name":`...)
	b = jsonstr.Append(b, r.Name)
	if r.CgroupsPath != "" {
		b = append(b, `,"cgroups_path":`...)
		b = jsonstr.Append(b, r.CgroupsPath)
	}
	b = append(b, `,"exclusive":`...)
	b = strconv.AppendBool(b, r.Exclusive)
	if r.Mems != "" {
		b = append(b, `,"mems":`...)
		b = jsonstr.Append(b, r.Mems)
	}
	if r.Since != "" {
		b = append(b, `,"since":`...)
		b = jsonstr.Append(b, r.Since)
	}
	return append(b, '}')
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
