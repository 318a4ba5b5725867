package applier

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// direct is shared_pool_updates = "direct": the daemon writes the shared
// pool into the shared-pool containers' cgroups itself instead of asking
// the runtime to. The runtime applies a plugin's updates one OCI runtime
// update at a time (runc update: ~10 ms each on containerd and CRI-O)
// while containerd holds its NRI lock, so an answer carrying 50 updates
// delays the new container's start by about half a second; one
// cpuset.cpus write is ~20 µs.
//
// When: a pass starts right after the answer that changed the pool (the
// worker is kicked), so it overlaps the OCI runtime's create. A new
// container's StartContainer is the start barrier: it waits until a pass
// has written the state it was admitted in (running one itself if none
// has), so exclusive CPUs are in no shared-pool container's cgroup when
// their container starts.
//
// Containers being created: a shared-pool container answered with an
// older pool may not have its cgroup yet when a pass comes (the write
// finds nothing), or the OCI runtime may write the answered pool after the
// pass did. Its own StartContainer therefore reads its cgroup and writes
// the current pool if it differs; until then only the OCI runtime's init
// runs in it.
//
// The runtime's record: the runtime believes a shared-pool container has
// the cpuset it was last given through NRI (at its creation, or in the
// answer to its last UpdateContainer; what crictl inspect shows).
// containerd re-applies that record with every update of the container's
// resources: a CRI update (a kubelet resize) reaches the plugin's
// UpdateContainer, whose answer carries the current pool, and
// PostUpdateContainer checks the cgroup afterwards. Another NRI plugin's
// update of such a container reaches neither and may carry the old value;
// the reconcile loop restores it within reconcile_period.
type direct struct {
	*updater
	// writeMu serializes every cgroup write (passes, the start check, the
	// reconcile loop): each computes what to write after taking it, so the
	// last write is always of the newest state. It comes before
	// the ledger's lock in the lock order.
	writeMu sync.Mutex
	// mu guards written and done; a leaf, taken under the ledger's lock or alone.
	mu sync.Mutex
	// written is the cpuset.cpus each shared-pool container's cgroup holds
	// as far as the daemon knows (answered at its creation, or written).
	written map[string]string
	// done is the generation (ledger.gen) of the newest state a pass
	// wrote to every shared-pool cgroup there was.
	done uint64
	// files, todo and wrote are the passes' own (writeMu), kept from one
	// to the next: each shared-pool container's cpuset.cpus, resolved
	// once and held open (cgroups.CPUsFile says why; at most maxOpenFiles
	// of them), and the two lists' backing arrays.
	files       map[string]cgroupFile
	open, limit int // files held open; at most limit (maxOpenFiles)
	todo, wrote []target
	// retry is the run of prompt retries after transient systemd
	// failures (settleRetries).
	retry retryRun
}

// newDirect is the direct applier over u: every cgroup it writes goes
// through u's cpusetWriter, the one seam (systemd first on a systemd
// scope, then the file).
func newDirect(u *updater) *direct {
	u.wakeDelay.Store(int64(passDelay))
	return &direct{updater: u, written: map[string]string{}, files: map[string]cgroupFile{}, limit: openLimit()}
}

// openLimit is how many cpuset.cpus files the passes may hold open:
// maxOpenFiles, or a quarter of the process's file limit where that is
// lower, so the held files never starve the daemon's sockets and
// journal.
func openLimit() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	return int(min(uint64(maxOpenFiles), rl.Cur/4))
}

// cgroupFile is a container's cpuset.cpus and the cgroups path it was
// resolved from.
type cgroupFile struct {
	cgroupsPath string
	f           *cgroups.CPUsFile
}

// maxOpenFiles bounds the cpuset.cpus files the passes hold open (a
// runtime's containers usually get a file limit of 524288 or more, to
// which Go raises the soft limit; openLimit takes a lower one into
// account); the containers past it are written by path.
const maxOpenFiles = 4096

// writeTarget writes t's cpus into its cgroup's cpuset.cpus, resolved
// once and kept; writeMu is held.
func (a *direct) writeTarget(t target) error {
	cf, ok := a.files[t.id]
	if !ok || cf.cgroupsPath != t.path {
		a.dropFile(t.id)
		f, err := a.cg.CPUsFile(t.path)
		if err != nil {
			return err
		}
		cf = cgroupFile{cgroupsPath: t.path, f: f}
		a.files[t.id] = cf
	}
	wasOpen := cf.f.Open()
	err := a.writeCPUsAt(t.path, cf.f, t.cpus, a.open < a.limit)
	switch open := cf.f.Open(); {
	case open && !wasOpen:
		a.open++
	case !open && wasOpen:
		a.open--
	}
	return err
}

// dropFile forgets a container's cpuset.cpus, closing it; writeMu is
// held.
func (a *direct) dropFile(id string) {
	if cf, ok := a.files[id]; ok {
		if cf.f.Open() {
			cf.f.Close()
			a.open--
		}
		delete(a.files, id)
	}
}

// closeFiles closes every cpuset.cpus the passes hold (the worker's end).
func (a *direct) closeFiles() {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	for id := range a.files {
		a.dropFile(id)
	}
}

func (a *direct) Mode() string { return config.SharedUpdatesDirect }

// PoolChanged answers nothing: the worker writes the cgroups while the OCI
// runtime creates the container, and its StartContainer waits for that.
func (a *direct) PoolChanged(tx *ledger.Tx, skip string) []*api.ContainerUpdate {
	a.kickIfShared(tx, skip)
	return nil
}

func (a *direct) Created(id, cpus string) { a.note(id, cpus) }

// note records the cpuset a shared-pool container's cgroup holds.
func (a *direct) note(id, cpus string) {
	a.mu.Lock()
	a.written[id] = cpus
	a.mu.Unlock()
}

// forget drops what the daemon knew of the cgroups of ids after a failed
// write: it may have landed in part (the file but not systemd's record),
// so the next pass writes them whatever pool it brings. Kept, a record of
// an older pool could equal the next one, and that pass would skip the
// container. a.mu is held.
func (a *direct) forget(ids ...string) {
	for _, id := range ids {
		delete(a.written, id)
	}
}

// settleRetries keeps the prompt retries of failed shared-pool writes
// going after a pass or a start check: one that wrote everything (ok)
// ends a run of retries; one that failed in systemd for a transient
// reason has the worker pass again after the run's next wait (retryRun)
// unless one is pending already or the run is used up. The retry is a
// kick: the pass runs on the worker, never on the request path of the
// StartContainer whose barrier may have seen the failure, and the
// records forgotten after the failure make it write those cgroups again.
// It returns the wait, 0 when no retry was scheduled.
func (a *direct) settleRetries(ok, transient bool) time.Duration {
	if ok {
		a.retry.end()
		return 0
	}
	if !transient {
		return 0
	}
	wait := a.retry.next()
	if wait > 0 {
		a.sd.later(wait, func() {
			a.retry.ran()
			a.Kick()
		})
	}
	return wait
}

// retryText and retryFields say in a failure's log line who tries again:
// the worker after retry (settleRetries), or, with none scheduled, the
// next pass and the reconcile loop.
func retryText(retry time.Duration) string {
	if retry > 0 {
		return "the worker retries after retry_in"
	}
	return "the next pass and the reconcile loop retry"
}

func retryFields(retry time.Duration) logrus.Fields {
	if retry > 0 {
		return logrus.Fields{"retry_in": retry.String()}
	}
	return nil
}

// Synchronized answers the updates of exclusive containers, and of
// shared-pool ones whose memory the memory manager pinned (a pass writes
// cpuset.cpus only; their update carries the pool of now with their
// mems): other shared-pool containers are written by a pass, and not
// sent to the runtime, whose record of them is stale by design.
func (a *direct) Synchronized(tx *ledger.Tx, planned []CPUUpdate) []*api.ContainerUpdate {
	var exclusive []CPUUpdate
	for _, u := range planned {
		if r, _ := tx.Record(u.ID); r.Exclusive || u.Mems != "" {
			exclusive = append(exclusive, u)
		}
	}
	a.mu.Lock()
	clear(a.written)
	a.mu.Unlock()
	a.Kick()
	return cpusetUpdates(exclusive, ignoreFailure)
}

// SyncReadsCgroups: the runtime's record of a shared-pool container is
// the cpuset it was created with; what it runs on is in its cgroup.
func (a *direct) SyncReadsCgroups() bool { return true }

func (a *direct) Run(ctx context.Context) {
	defer a.closeFiles()
	a.loop(ctx, a.pass, a.Reconcile)
}

// passDelay is how long after a kick the worker wakes for its pass
// (updater.Kick arms a timer rather than waking it). The kick comes from
// inside the event that changed the pool, before its answer is sent: a
// pass starting at once (hundreds of cgroup writes), or even the worker's
// wake-up alone, competes with the answer's way back to the runtime for
// the node's CPUs, and the runtime waits for that answer. The pass has
// until the new container starts, after the OCI runtime's create (tens
// of milliseconds), and the start barrier writes the pool itself if the
// pass has not yet: the delay costs no start and no exclusivity. Kicks
// that come during the delay (a burst of admissions) are served by one
// pass.
const passDelay = time.Millisecond

// StartBarrier is the start barrier: every state committed so far is written
// before the container starts (a pass runs here if the worker's has not
// yet), and a shared-pool container's own cgroup is checked, since the OCI
// runtime wrote it with the pool of its answer.
func (a *direct) StartBarrier(id string) {
	var (
		gen        uint64
		r          ledger.Record
		known, set bool
	)
	a.l.Read(func(tx *ledger.Tx) {
		if set = tx.Engine() != nil; set {
			gen = tx.Gen()
			r, known = tx.Record(id)
		}
	})
	if !set {
		return
	}
	a.mu.Lock()
	behind := a.done < gen
	a.mu.Unlock()
	if behind {
		a.pass()
	}
	if known && !r.Exclusive && r.CgroupsPath != "" {
		a.check(id)
	}
}

// target is one shared-pool cgroup a pass writes, and the pool it gets:
// the node's, or its pod's private pool (ledger.Pools).
type target struct {
	id, name, pod, path, cpus string
}

// pass writes the shared pool into every shared-pool container's cgroup
// that does not hold it yet, until a pass ends with no newer state
// committed meanwhile. A cgroup that does not exist (yet, or any more) is
// skipped: see the container's start check.
func (a *direct) pass() {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	for {
		var (
			gen    uint64
			shared string
			todo   = a.todo[:0]
			ready  bool
		)
		a.l.Read(func(tx *ledger.Tx) {
			if ready = tx.Engine() != nil && tx.Syncs() > 0; !ready {
				return
			}
			gen = tx.Gen()
			pools := tx.Pools()
			shared = pools.Node
			for id := range a.files {
				if _, ok := tx.Record(id); !ok {
					a.dropFile(id)
				}
			}
			a.mu.Lock()
			defer a.mu.Unlock()
			for id := range a.written {
				if _, ok := tx.Record(id); !ok {
					delete(a.written, id)
				}
			}
			for id, r := range tx.Records() {
				if r.Exclusive || r.CgroupsPath == "" {
					continue
				}
				// never an empty cpuset (the adapter's strandedError)
				if cpus := pools.Of(r); cpus != "" && a.written[id] != cpus {
					todo = append(todo, target{id: id, name: r.Name, pod: r.PodName, path: r.CgroupsPath, cpus: cpus})
				}
			}
		})
		if !ready {
			return
		}

		wrote := a.wrote[:0]
		var unknown []string
		var failed []error
		transient := false
		for _, t := range todo {
			err := a.writeTarget(t)
			switch {
			case err == nil:
				wrote = append(wrote, t)
			case !errors.Is(err, cgroups.ErrGone):
				failed = append(failed, fmt.Errorf("container %s of pod %s: %w", t.name, t.pod, err))
				unknown = append(unknown, t.id)
				transient = transient || systemd.Transient(err)
			}
		}

		var (
			caughtUp bool
			retry    time.Duration
		)
		a.l.Read(func(tx *ledger.Tx) {
			caughtUp = tx.Gen() == gen
			a.mu.Lock()
			defer a.mu.Unlock()
			for _, t := range wrote {
				if _, ok := tx.Record(t.id); ok {
					a.written[t.id] = t.cpus
				}
			}
			a.forget(unknown...)
			if caughtUp && gen > a.done {
				a.done = gen
			}
			retry = a.settleRetries(len(failed) == 0, transient)
		})
		if len(failed) > 0 {
			a.log.WithError(errors.Join(failed...)).WithFields(logrus.Fields{"cpus": shared, "failed": len(failed)}).WithFields(retryFields(retry)).
				Warn("writing the shared pool into cgroups failed; " + retryText(retry))
		}
		if len(wrote) > 0 {
			a.log.WithFields(logrus.Fields{"cpus": shared, "containers": len(wrote)}).Debug("shared pool written into cgroups")
		}
		// emptied: kept, they would hold on to records that are gone
		clear(todo)
		clear(wrote)
		a.todo, a.wrote = todo[:0], wrote[:0]
		if caughtUp {
			return
		}
	}
}

// check writes the current pool (the node's, or its pod's private one)
// into a starting shared-pool container's cgroup if it holds something
// else.
func (a *direct) check(id string) {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	var (
		r      ledger.Record
		shared string
	)
	a.l.Read(func(tx *ledger.Tx) {
		var ok bool
		if r, ok = tx.Record(id); ok && !r.Exclusive {
			// one container: RightCPUs, not every pool (Pools)
			shared = tx.RightCPUs(r).String()
		}
	})
	if shared == "" { // unknown, exclusive, or no CPU (never an empty cpuset)
		return
	}
	have, _, err := a.cg.Read(r.CgroupsPath)
	if err != nil {
		if !errors.Is(err, cgroups.ErrGone) {
			a.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name}).Warn("cannot read the cgroup of a starting container")
		}
		return
	}
	if have.String() != shared {
		if err := a.writeCPUSet(r.CgroupsPath, shared, ""); err != nil {
			a.mu.Lock()
			a.forget(id)
			retry := a.settleRetries(false, systemd.Transient(err))
			a.mu.Unlock()
			a.log.WithError(err).WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "cpus": shared}).WithFields(retryFields(retry)).
				Warn("cannot write the shared pool into a starting container's cgroup; " + retryText(retry))
			return
		}
		a.log.WithFields(logrus.Fields{"pod": r.PodName, "container": r.Name, "cpus": shared, "found_cpus": have.String()}).
			Debug("starting container created with an older shared pool: written")
	}
	a.noteIfKnown(id, shared)
}

// Updated is PostUpdateContainer's check: the runtime wrote the cpuset of
// the update's answer, and a pass may have written a newer pool into the
// cgroup before that write landed; the container's cgroup is read and
// written back if it differs from the current state.
func (a *direct) Updated(id string) {
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	found, _ := a.checkUpdated(id)
	a.restore(found, nil, 0)
}

// noteIfKnown records what a container's cgroup holds unless the
// container went away meanwhile.
func (a *direct) noteIfKnown(id, cpus string) {
	a.l.Read(func(tx *ledger.Tx) {
		if _, ok := tx.Record(id); ok {
			a.note(id, cpus)
		}
	})
}

// Reconcile first redoes the writes a pass could not finish (their
// record forgotten): a write that reached the file but not systemd shows
// no drift in the files, and would wait for the next pool change while a
// daemon-reload could put systemd's stale cpuset back. Then it reads and
// restores with no pass in between.
func (a *direct) Reconcile() int {
	a.pass()
	a.writeMu.Lock()
	defer a.writeMu.Unlock()
	return a.findDrift(a.restore)
}

// restore writes the drifted cgroups back; writeMu is held.
func (a *direct) restore(found []drifted, _ stub.Stub, _ uint64) {
	var failed []error
	for _, dr := range found {
		mems := ""
		if dr.updateMems {
			mems = dr.wantMems
		}
		if err := a.writeCPUSet(dr.rec.CgroupsPath, dr.wantCPUs.String(), mems); err != nil {
			if !errors.Is(err, cgroups.ErrGone) {
				failed = append(failed, fmt.Errorf("container %s of pod %s: %w", dr.rec.Name, dr.rec.PodName, err))
				a.mu.Lock()
				a.forget(dr.rec.ID)
				a.mu.Unlock()
			}
			continue
		}
		if !dr.rec.Exclusive {
			a.noteIfKnown(dr.rec.ID, dr.wantCPUs.String())
		}
	}
	if len(failed) > 0 {
		a.log.WithError(errors.Join(failed...)).Warn("reconcile: restoring cpusets failed; retrying next period")
	}
}

// Owed is nothing: direct never defers updates (it
// writes the cgroups itself); inAnswer's defers them to the next answer.
func (a *direct) Owed(*ledger.Tx, string, []*api.ContainerUpdate) []*api.ContainerUpdate { return nil }

// Freed kicks only when a shared-pool container must follow the grown
// pool: direct's pass writes nothing else, and its start barrier catches
// up with every generation anyway.
func (a *direct) Freed(tx *ledger.Tx) { a.kickIfShared(tx, "") }

// kickIfShared kicks when some shared-pool container but skip must
// follow the pool: a kick for nothing would still arm a wake-up and a
// pass.
func (u *updater) kickIfShared(tx *ledger.Tx, skip string) {
	if tx.SharedOthers(skip) > 0 {
		u.Kick()
	}
}
