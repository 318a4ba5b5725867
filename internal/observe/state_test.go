package observe

import (
	"io"
	"testing"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy/policytest"
)

type nopStore struct{}

func (nopStore) Save(ledger.Save) error { return nil }

type nopObserver struct{}

func (nopObserver) CheckpointError() {}
func (nopObserver) PoolEmpty(bool)   {}

// /state shows a container's right cpuset as the ledger answers it: its
// assignment, narrowed by a downsize answered and not committed; the
// shared pool; and an assignment no tracked container holds as held.
func TestStateOfView(t *testing.T) {
	cfg, e := policytest.Engine(t, "ht-1s-4c", "cpu_manager_policy = \"static\"\nreserved_system_cpus = \"0,4\"\n")
	log := logrus.New()
	log.SetOutput(io.Discard)
	l := ledger.New(cfg, e.Topology(), e, nil, ledger.Deps{Store: nopStore{}, Obs: nopObserver{}, Log: log})
	// Queries and commits in an Update, as a handler makes them; View
	// reads in its own.
	rec := commitResizedAndHeld(t, l, e)
	check := func(when, cpus string) {
		t.Helper()
		v := State(l.View(), true)
		if !v.Connected || v.Shared != "0,4" || len(v.Containers) != 1 || v.Containers[0].CPUs != cpus || v.Containers[0].Baseline != "1,5" ||
			len(v.Held) != 1 || v.Held[0].PodUID != "gone" || v.Held[0].CPUs != "3,7" {
			t.Errorf("%s: %+v, want a-c on %s (baseline 1,5), shared 0,4, gone/c held on 3,7", when, v, cpus)
		}
	}
	check("committed", "1-2,5-6")
	var rd policy.ResizeDecision
	err := l.Update(func(tx *ledger.Tx) error {
		from, _ := e.Assignment(tx.State(), "a", "c")
		var err error
		if _, rd, err = e.Resize(tx.State(), guaranteed("a", 2)); err == nil && rd.Kind == policy.ResizeDown {
			_, err = tx.Commit(ledger.Change{Life: ledger.Life{Shrink: map[string]ledger.Shrink{rec.ID: {From: from, Req: guaranteed("a", 2), To: rd.CPUs}}}})
		}
		return err
	})
	if err != nil || rd.Kind != policy.ResizeDown {
		t.Fatalf("downsize: %+v, %v", rd, err)
	}
	check("downsize pending", rd.CPUs.String())
}

// commitResizedAndHeld commits, on ht-1s-4c with 0,4 reserved, pod a's
// container c (record a-c) with 2 exclusive CPUs (1,5) resized to 4
// (1-2,5-6), and 2 CPUs (3,7) assigned to pod gone with no record: held.
// It returns a-c's record.
func commitResizedAndHeld(t *testing.T, l *ledger.Ledger, e *policy.Engine) ledger.Record {
	t.Helper()
	rec := ledger.Record{ID: "a-c", Pod: "a", PodName: "ns/a", Name: "c", Exclusive: true}
	if err := l.Update(func(tx *ledger.Tx) error {
		st, _, err := e.Add(tx.State(), guaranteed("a", 2)) // 1,5
		if err == nil {
			st, _, err = e.Resize(st, guaranteed("a", 4)) // 1-2,5-6
		}
		if err == nil {
			st, _, err = e.Add(st, guaranteed("gone", 2)) // 3,7: no record, held
		}
		if err != nil {
			return err
		}
		_, err = tx.Commit(ledger.Change{Next: &st, Index: ledger.IndexChange{Edit: ledger.Edit{Put: []ledger.Record{rec}}}})
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return rec
}

// guaranteed is a Guaranteed request of container c of pod for cpus CPUs.
func guaranteed(pod string, cpus int64) policy.Request {
	return policy.Request{Pod: pod, Container: "c", QoS: policy.Guaranteed, CPURequestMilli: 1000 * cpus, CPULimitMilli: 1000 * cpus}
}
