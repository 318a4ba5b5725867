package applier

import (
	"context"
	"errors"
	"sort"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/cpumask"
)

// updater is what both appliers share: the worker's wake-ups, the kick
// ledger, and finding drift.
type updater struct {
	l            *ledger.Ledger
	obs          Counts
	conn         *Connection
	cpusetWriter // cg: the cgroup root read; sd: nil when systemd is never asked (tests)
	log          *logrus.Logger
	kickC        chan struct{}
	kicks        KickCounter
	quotaRetry   retryRun // pod quota lifts that failed in systemd (writer.go)
	// wakeDelay is how long after a kick the worker wakes (direct's
	// passDelay; 0: at once), wakePending whether a delayed wake-up is
	// armed, after how it is armed (time.AfterFunc; tests fire it).
	wakeDelay   atomic.Int64
	wakePending atomic.Bool
	after       func(d time.Duration, f func())
}

// newUpdater is an updater reading and writing cg; its writes tell
// systemd first once u.sd is set (New).
func newUpdater(l *ledger.Ledger, obs Counts, conn *Connection, cg cgroups.Root, log *logrus.Logger) *updater {
	return &updater{l: l, obs: obs, conn: conn, cpusetWriter: cpusetWriter{cg: cg}, log: log, kickC: make(chan struct{}, 1),
		after: afterFunc}
}

func (u *updater) Kicks() *KickCounter { return &u.kicks }

func (u *updater) CgroupRoot() cgroups.Root { return u.cg }

func (u *updater) base() *updater { return u }

// loop is the worker: on a kick, pass; every reconcile_period,
// reconcile. The runtime's Configure may change the period; it kicks the
// worker, which picks the new one up.
func (u *updater) loop(ctx context.Context, pass func(), reconcile func() int) {
	var (
		ticker *time.Ticker
		tick   <-chan time.Time
		period time.Duration
	)
	defer func() {
		if ticker != nil {
			ticker.Stop()
		}
	}()
	for {
		if p := time.Duration(u.l.Config().ReconcilePeriod); p != period {
			if ticker != nil {
				ticker.Stop()
				ticker, tick = nil, nil
			}
			if period = p; p > 0 {
				ticker = time.NewTicker(p)
				tick = ticker.C
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-u.kickC:
			// A wake-up whose kicks an earlier pass already served (a
			// kick that came between that pass's wake-up and its upTo)
			// asks for nothing: a pass for it would run with no kick to
			// account for it, so a caller that waited for the ledger
			// could see its updates land after an event it made next.
			upTo := u.kicks.Asked()
			if u.kicks.servedUpTo(upTo) {
				continue
			}
			pass()
			u.kicks.serve(upTo)
		case <-tick:
			reconcile()
			u.ReconcileQuota()
		}
	}
}

// drifted is one container whose cgroup differs from its assignment.
type drifted struct {
	rec                ledger.Record
	wantCPUs, haveCPUs cpuset.CPUSet
	wantMems, haveMems string
	updateMems         bool
}

// wantedCPUs is a known container and the cpuset it should have.
type wantedCPUs struct {
	rec  ledger.Record
	cpus cpuset.CPUSet
}

// findDrift compares every known container's cgroup with its assignment
// and calls repair with those that differ (logged and counted first).
// Nothing is repaired while disconnected or before the first Synchronize,
// nor when a commit came while the cgroups were read (what was read may
// predate it: the next round sees it). It returns how many it found.
func (u *updater) findDrift(repair func(found []drifted, s stub.Stub, gen uint64)) int {
	l := u.l
	s := u.conn.Get()
	var (
		gen   uint64
		items []wantedCPUs
	)
	l.Read(func(tx *ledger.Tx) {
		if s == nil || tx.Syncs() == 0 {
			return
		}
		gen = tx.Gen()
		items = make([]wantedCPUs, 0, tx.Len())
		for _, r := range tx.Records() {
			items = append(items, wantedCPUs{r, tx.RightCPUs(r)})
		}
	})
	if items == nil {
		return 0
	}
	sort.Slice(items, func(i, j int) bool { return items[i].rec.ID < items[j].rec.ID })

	found := u.readDrift(items)
	if len(found) == 0 {
		return 0
	}
	if l.Gen() != gen || u.conn.Get() != s {
		return 0
	}
	u.logDrift(found)
	u.obs.Drifted(len(found))
	repair(found, s, gen)
	return len(found)
}

// readDrift reads the cgroups of items and returns those that differ
// from what they should have. A cgroup that is gone is skipped.
func (u *updater) readDrift(items []wantedCPUs) []drifted {
	var found []drifted
	for _, it := range items {
		if it.rec.CgroupsPath == "" || it.cpus.IsEmpty() {
			continue // an empty cpuset is never applied (the adapter's strandedError)
		}
		cpus, mems, err := u.cg.Read(it.rec.CgroupsPath)
		if errors.Is(err, cgroups.ErrGone) {
			continue
		}
		if err != nil {
			u.log.WithError(err).WithField("container", it.rec.Name).Debug("reconcile: cannot read the cgroup")
			continue
		}
		dr := drifted{rec: it.rec, wantCPUs: it.cpus, haveCPUs: cpus, wantMems: it.rec.Mems, haveMems: mems.String()}
		if it.rec.Mems != "" && !cpumask.SameList(it.rec.Mems, mems.String()) {
			dr.updateMems = true
		}
		if cpus.Equals(it.cpus) && !dr.updateMems {
			continue
		}
		found = append(found, dr)
	}
	return found
}

// checkUpdated reads the cgroup of a container the runtime just updated
// and returns it when it differs from the container's assignment (logged
// and counted), with the generation it was compared at. Nothing is found
// for an unknown container, before the first Synchronize, or when a
// commit came while the cgroup was read (whoever made it brings the
// container along).
func (u *updater) checkUpdated(id string) (found []drifted, gen uint64) {
	l := u.l
	var (
		r    ledger.Record
		want cpuset.CPUSet
		ok   bool
	)
	l.Read(func(tx *ledger.Tx) {
		if r, ok = tx.Record(id); !ok || tx.Engine() == nil || tx.Syncs() == 0 {
			ok = false
			return
		}
		gen, want = tx.Gen(), tx.RightCPUs(r)
	})
	if !ok {
		return nil, 0
	}
	found = u.readDrift([]wantedCPUs{{r, want}})
	if len(found) == 0 {
		return nil, gen
	}
	if l.Gen() != gen {
		return nil, gen
	}
	for _, dr := range found {
		u.log.WithFields(logrus.Fields{
			"pod": dr.rec.PodName, "container": dr.rec.Name, "id": dr.rec.ID,
			"cpus": dr.wantCPUs.String(), "found_cpus": dr.haveCPUs.String(), "mems": dr.wantMems, "found_mems": dr.haveMems,
		}).Warn("cpuset wrong after the runtime updated the container; restoring it")
	}
	u.obs.RepairedAfterUpdate(len(found))
	return found, gen
}

// logDrift logs each drifted container.
func (u *updater) logDrift(found []drifted) {
	for _, dr := range found {
		u.log.WithFields(logrus.Fields{
			"pod": dr.rec.PodName, "container": dr.rec.Name, "id": dr.rec.ID,
			"cpus": dr.wantCPUs.String(), "found_cpus": dr.haveCPUs.String(), "mems": dr.wantMems, "found_mems": dr.haveMems,
		}).Warn("cpuset drifted from the assignment; restoring it")
	}
}

// send pushes updates computed at generation gen, warning with failure when
// some did not apply. A commit since gen may have made them stale: the
// worker then pushes the shared pool again from the new state. Only
// where the connection's runtime takes unsolicited updates (inAnswer
// checks before it calls).
func (u *updater) send(s stub.Stub, updates []*api.ContainerUpdate, gen uint64, failure string) {
	if failed, err := s.UpdateContainers(updates); err != nil || len(failed) > 0 {
		u.log.WithError(err).WithField("failed", len(failed)).Warn(failure)
	}
	if u.l.Gen() != gen {
		u.Kick()
	}
}
