package persist

// The snapshot: the checkpoint payload (cpualign_state.json), its
// encoding, the snapshot store's save (Snapshot mode) and the journal's
// compaction, which writes a snapshot naming the journal.

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/jsonstr"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// payload is the checkpoint's data.
type payload struct {
	// Fingerprint identifies the configuration and machine the state was
	// written under; a different one means the engine must reconcile.
	Fingerprint string                   `json:"fingerprint"`
	Engine      policy.Snapshot          `json:"engine"`
	Containers  map[string]ledger.Record `json:"containers"`
	// Journal names the journal whose later records complete the
	// snapshot (Journal mode); absent, there are none. Older versions
	// ignore it and read the snapshot alone.
	Journal *journalMark `json:"journal,omitempty"`
}

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

// saveSnapshot is Save under Snapshot: the whole payload, rewritten.
func (s *Store) saveSnapshot(v ledger.Save) error {
	data, err := s.enc.encode(s.fingerprint(v.Cfg, v.Engine, v.Topo), v.Engine, v.Next, v.Change.Index(v.Index))
	if err != nil {
		return err
	}
	return s.ckpt.SaveCompact(data)
}

// compact writes the snapshot of (st, ctrs), naming the journal and its
// last record, and starts the journal again at its first slot. A journal
// file is created first when there is none to reuse.
func (sto *Store) compact(v ledger.Save, ctrs map[string]ledger.Record) error {
	s := &sto.jnl
	st := v.Next
	s.engine = nil // until the snapshot is known to be on disk
	fp := sto.fingerprint(v.Cfg, v.Engine, v.Topo)
	if s.j == nil {
		// A journal file there may hold records the snapshot on disk
		// needs (after a failed append): the committed state goes into a
		// snapshot of its own before the new journal replaces that file.
		if _, err := os.Lstat(checkpoint.JournalPath(sto.ckpt.Dir(), CheckpointName)); err == nil {
			data, err := sto.enc.encode(fp, v.Engine, v.State, v.Index)
			if err == nil {
				err = sto.ckpt.SaveCompact(data)
			}
			if err != nil {
				return err
			}
		}
		size := s.size
		if size == 0 {
			size = checkpoint.DefaultJournalSize
		}
		j, err := checkpoint.CreateJournal(sto.ckpt.Dir(), CheckpointName, size, 1)
		if err != nil {
			return err
		}
		s.j = j
	}
	data, err := sto.enc.encode(fp, v.Engine, st, ctrs)
	if err != nil {
		return err
	}
	mark, err := json.Marshal(journalMark{ID: s.j.ID(), Seq: s.j.Next() - 1})
	if err != nil {
		return err
	}
	// data ends with the payload's closing brace; the mark goes before it.
	data = append(append(append(data[:len(data)-1], `,"journal":`...), mark...), '}')
	sto.enc.buf = data
	if err := sto.ckpt.SaveCompactVersion(data, checkpoint.VersionJournal); err != nil {
		return err
	}
	s.j.Rewind()
	s.head, s.pool = s.headFor(v.Engine, st) // s.engine is nil: every text printed
	s.engine, s.reusable = v.Engine, st.Alloc.Reusable
	s.assign, s.aff, s.base, s.podPool = st.Alloc.Assignments, st.PodAffinity, st.Baseline, st.PodShared
	s.mem, s.memText = st.Memory, v.Engine.MemorySnapshot(st)
	s.ctrs = ledger.CloneRecords(ctrs)
	return nil
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
