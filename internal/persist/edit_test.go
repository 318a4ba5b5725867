package persist

import (
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
)

// TestEditDeltaMatchesIndexDelta: the journal record of an edit names the
// same containers, with the same values, as the record of the whole index
// the edit leads to (the comparison of every record with the disk's that
// the daemon made before edits), for random edits of a random index:
// records added, replaced by an equal or a different one, removed,
// removed when absent, and removed and put again in one edit.
func TestEditDeltaMatchesIndexDelta(t *testing.T) {
	rng := rand.New(rand.NewSource(5))
	committed := map[string]ledger.Record{}
	rec := func(id string) ledger.Record {
		return ledger.Record{ID: id, Pod: "uid-" + id[:1], PodName: "ns/p", Name: id, Exclusive: rng.Intn(2) == 0,
			Mems: []string{"", "0", "0-1"}[rng.Intn(3)]}
	}
	var kinds [4]int // records added, changed, unchanged, removed in the deltas
	for step := range 2000 {
		var e ledger.Edit
		for range rng.Intn(4) {
			id := fmt.Sprintf("%d%d", rng.Intn(4), rng.Intn(8))
			switch rng.Intn(3) {
			case 0:
				e.Del = append(e.Del, id)
			case 1:
				r, ok := committed[id]
				if !ok || rng.Intn(2) == 0 {
					r = rec(id)
				}
				if !slices.ContainsFunc(e.Put, func(r ledger.Record) bool { return r.ID == id }) {
					e.Put = append(e.Put, r)
				}
			case 2:
				e.Del = append(e.Del, id)
				if !slices.ContainsFunc(e.Put, func(r ledger.Record) bool { return r.ID == id }) {
					e.Put = append(e.Put, rec(id))
				}
			}
		}
		e.Del = dedup(e.Del)
		var byEdit, byIndex []keyDelta[ledger.Record]
		diffEdit(&byEdit, e, committed)
		next := ledger.IndexChange{Edit: e}.Index(committed)
		diffEqual(&byIndex, next, committed)
		if len(byEdit) == 0 && len(byIndex) == 0 {
			byEdit, byIndex = nil, nil
		}
		if !reflect.DeepEqual(byEdit, byIndex) {
			t.Fatalf("step %d: edit %+v on %v:\nfrom the edit %+v\nfrom the index %+v", step, e, committed, byEdit, byIndex)
		}
		for _, kd := range byEdit {
			old, had := committed[kd.key]
			switch {
			case kd.gone:
				kinds[3]++
			case !had:
				kinds[0]++
			case old != kd.v:
				kinds[1]++
			}
		}
		for _, r := range e.Put {
			if committed[r.ID] == r {
				kinds[2]++
			}
		}
		before := len(committed)
		e.ApplyTo(committed)
		if !reflect.DeepEqual(committed, next) {
			t.Fatalf("step %d: applyTo gave %v, the edit's index is %v (%d records before)", step, committed, next, before)
		}
	}
	for i, n := range kinds {
		if n == 0 {
			t.Errorf("no delta of kind %d (added, changed, unchanged, removed): the test missed a case", i)
		}
	}
}

func dedup(ids []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}
