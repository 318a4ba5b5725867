package ledger

import (
	"testing"

	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
)

// A downsize answered and not committed narrows the container's right
// cpuset wherever it is asked (RightCPUs with the ledger's shrinking, the
// ledger's query, a View) while its assignment is the one the downsize
// started from; without it, or once done, the assignment is the answer.
func TestRightCPUsPendingShrink(t *testing.T) {
	f := newFixture(t)
	l := &f.l.tx // one goroutine: no lock needed
	// Admitted with 2 CPUs and resized to 4 (committed): back to 2 is a
	// downsize above the baseline.
	next, rec := admit(t, l, "p", "c", 2)
	if _, err := l.Commit(Change{Next: &next, Index: IndexChange{Edit: Edit{Put: []Record{rec}}}}); err != nil {
		t.Fatal(err)
	}
	req := policy.Request{Pod: "p", Container: "c", QoS: policy.Guaranteed, CPURequestMilli: 4000, CPULimitMilli: 4000}
	up, rd, err := l.Engine().Resize(l.State(), req)
	if err != nil || rd.Kind != policy.ResizeUp {
		t.Fatalf("upsize: %+v, %v", rd, err)
	}
	if _, err := l.Commit(Change{Next: &up}); err != nil {
		t.Fatal(err)
	}
	from, _ := l.Engine().Assignment(l.State(), "p", "c")
	req.CPURequestMilli, req.CPULimitMilli = 2000, 2000
	_, rd, err = l.Engine().Resize(l.State(), req)
	if err != nil || rd.Kind != policy.ResizeDown {
		t.Fatalf("resize: %+v, %v", rd, err)
	}
	to := rd.CPUs
	if _, err := l.Commit(Change{Life: Life{Shrink: map[string]Shrink{rec.ID: {From: from, Req: req, To: to}}}}); err != nil {
		t.Fatal(err)
	}
	e, st := l.Engine(), l.State()
	for what, got := range map[string]string{
		"RightCPUs(shrinking)": RightCPUs(e, st, rec, l.Shrinks()).String(),
		"Tx.RightCPUs":         l.RightCPUs(rec).String(),
		"View.RightCPUs":       f.l.View().RightCPUs(rec).String(),
	} {
		if got != to.String() {
			t.Errorf("pending shrink: %s = %s, want %s (answered)", what, got, to)
		}
	}
	if got := RightCPUs(e, st, rec, nil); !got.Equals(from) {
		t.Errorf("no shrink given: %s, want the assignment %s", got, from)
	}
	stale := map[string]Shrink{rec.ID: {From: to, To: to}}
	if got := RightCPUs(e, st, rec, stale); !got.Equals(from) {
		t.Errorf("shrink from other CPUs: %s, want the assignment %s", got, from)
	}
	shared := rec
	shared.Exclusive = false
	if got := RightCPUs(e, st, shared, l.Shrinks()); !got.Equals(e.SharedCPUs(st)) || got.String() != l.Pools().Of(shared) {
		t.Errorf("shared record: %s, want the pool %s (Pools.Of %s)", got, e.SharedCPUs(st), l.Pools().Of(shared))
	}
	if _, err := l.Commit(Change{Life: Life{ShrinkDone: rec.ID}}); err != nil {
		t.Fatal(err)
	}
	if got := l.RightCPUs(rec); !got.Equals(from) {
		t.Errorf("shrink forgotten: %s, want %s", got, from)
	}
}
