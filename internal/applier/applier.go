// Package applier is how the shared pool reaches the shared-pool
// containers' cgroups (docs/architecture.md, the applier box): through the
// runtime's answers and pushes (in-answer) or written by the plugin itself
// (direct), the worker and its kicks, the reconcile loop, the pod quota
// lifts and the one seam to the cgroups and systemd it writes
// (cpusetWriter). It reads the ledger only through its queries, under its
// lock, and knows the daemon only as the Counts it reports.
package applier

import (
	"context"
	"fmt"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// Applier is how the shared pool reaches the shared-pool containers'
// cgroups, of the mode ChooseMode decides (at start-up, and once more
// from the first container's cgroups path, the daemon's seeDriver):
// through the runtime (inAnswer) or written by the plugin (direct,
// direct.go). It owns the update worker, its kicks and the reconcile
// loop. Only this package implements it (base).
type Applier interface {
	// Mode is the shared_pool_updates value it implements.
	Mode() string
	// PoolChanged is what the answer to skip's event (CreateContainer,
	// StopContainer) carries after a commit that changed the shared pool,
	// inside the event's Update.
	PoolChanged(tx *ledger.Tx, skip string) []*api.ContainerUpdate
	// Created notes the cpuset a shared-pool container was answered with.
	// Inside the event's Update.
	Created(id, cpus string)
	// Synchronized turns the Synchronize plan's updates into its answer,
	// inside the event's Update.
	Synchronized(tx *ledger.Tx, planned []CPUUpdate) []*api.ContainerUpdate
	// SyncReadsCgroups tells Synchronize to take a running container's
	// cpuset from its cgroup rather than from the runtime's record.
	SyncReadsCgroups() bool
	// StartBarrier is StartContainer's part, after the ledger's: it returns
	// when the container may start. Outside any Update.
	StartBarrier(id string)
	// Updated is PostUpdateContainer's check of the container's cgroup
	// after a runtime update: what is wrong is put right (written, or
	// pushed by the worker). Outside any Update.
	Updated(id string)
	// Owed is what the answer to skip's event (CreateContainer,
	// StopContainer, UpdateContainer) must carry besides answer, its own
	// updates: what the worker and the reconcile loop deferred because
	// the runtime takes no unsolicited update (inAnswer). Inside the
	// event's Update.
	Owed(tx *ledger.Tx, skip string, answer []*api.ContainerUpdate) []*api.ContainerUpdate
	// Kick wakes the worker after a change no answer carries.
	Kick()
	// Freed is the applier's part of an event that grew the shared pool
	// and answers nothing (a removal, a pod's end, a shrink), inside the
	// event's Update: the worker is woken for the shared-pool containers.
	Freed(tx *ledger.Tx)
	// Run is the worker; it returns when ctx ends.
	Run(ctx context.Context)
	// Reconcile restores every cgroup that drifted from its assignment
	// and returns how many it found.
	Reconcile() int
	// ReconcileQuota is the reconcile loop's other half: it lifts the
	// quota of every exclusive container's pod where one came back.
	ReconcileQuota()
	// Kicks is the worker's kick counter (what the test hooks wait on).
	Kicks() *KickCounter
	// CgroupRoot is the cgroup root it reads and writes.
	CgroupRoot() cgroups.Root
	// LiftPodQuota removes the CFS quota of rec's pod, through the
	// cpusetWriter (writer.go), and logs it with why; a transient
	// systemd failure has it tried again off the request path.
	LiftPodQuota(rec ledger.Record, why string)
	// base is the updater it runs on (For keeps it).
	base() *updater
}

// Ref boxes the current applier for an atomic.Pointer: the daemon swaps
// it (its seeDriver), the adapter loads it at each use.
type Ref struct{ Applier }

// Counts is what the applier counts, for the daemon's metrics.
type Counts interface {
	// Drifted counts cgroups the reconcile loop found off their assignment.
	Drifted(n int)
	// RepairedAfterUpdate counts cgroups found wrong after a runtime update.
	RepairedAfterUpdate(n int)
	// Deferred counts pushes and repairs deferred to the next answer.
	Deferred(n int)
}

// ChooseMode decides how the shared pool is applied, the one place the
// mode is decided; cfg.SharedPoolUpdates is set to the mode chosen, and
// the decision is logged with its reason. It decides at start-up from
// the cgroup root (ctrPath ""), and once more from the first container's
// cgroups path, the sure sign of the runtime's cgroup driver, where that
// path says otherwise than the root did (seeDriver).
//
//   - "in-answer" asked for is kept.
//   - A cgroup_root whose cpuset hierarchy cannot be written (a read-only
//     mount): under the default "direct", "in-answer" with a warning, so
//     that a deployment mounting the cgroups read-only keeps working;
//     "direct" in so many words is refused.
//   - systemd manages the container cgroups (cgroup v2 with systemd under
//     the root, cgroups.SystemdManaged, or a container cgroups path in the
//     systemd driver's form "slice:prefix:name"): systemd keeps each
//     scope's AllowedCPUs and writes them back when it re-applies the
//     unit (daemon-reload). "direct" goes through systemd's D-Bus API
//     first (cpusetWriter, writer.go) when systemd answers; when it does
//     not (no bus socket mounted), the default falls back to "in-answer",
//     whose OCI runtime goes through systemd, and "direct" in so many
//     words is kept with a warning.
//   - Otherwise "direct"; where the root showed systemd but the first
//     container's path is a cgroupfs one, with an info line saying so.
func ChooseMode(cfg *config.Config, root cgroups.Root, sd *SysLink, ctrPath string, log *logrus.Logger) error {
	if cfg.SharedPoolUpdates != config.SharedUpdatesDirect {
		return nil
	}
	fields := logrus.Fields{"key": config.KeySharedPoolUpdates, "cgroup_root": cfg.CgroupRoot}
	asked := cfg.Line(config.KeySharedPoolUpdates) > 0
	err := root.Writable()
	if err != nil {
		if asked {
			return cfg.KeyError(config.KeySharedPoolUpdates, cfg.SharedPoolUpdates,
				fmt.Sprintf("the plugin writes the shared-pool containers' cgroups itself and cannot write %s (%v): "+
					"mount the host's cgroups read-write at cgroup_root, or set shared_pool_updates = %q",
					root.CpusetRoot(), err, config.SharedUpdatesInAnswer))
		}
		fields["error"], fields["using"] = err.Error(), config.SharedUpdatesInAnswer
		log.WithFields(fields).
			Warn("cannot write the cgroups for the default shared_pool_updates = \"direct\"; the runtime applies the shared pool instead " +
				"(each exclusive admission then waits for one OCI runtime update per shared-pool container); mount cgroup_root read-write")
		cfg.SharedPoolUpdates = config.SharedUpdatesInAnswer
		return nil
	}
	onSystemd, evidence := root.SystemdManaged(), "systemd runs the cgroup hierarchy"
	if ctrPath != "" && root.Unified() {
		scope, isScope := systemd.ScopeUnit(ctrPath)
		if !isScope && onSystemd {
			fields["cgroups_path"], fields["using"] = ctrPath, config.SharedUpdatesDirect
			log.WithFields(fields).Info("the runtime uses the cgroupfs driver (container cgroups are no systemd scopes): " +
				"the plugin writes the shared pool into the cgroups itself")
		}
		onSystemd, evidence = isScope, "container cgroup "+scope
	}
	if !onSystemd {
		return nil
	}
	fields["evidence"] = evidence
	m, err := sd.get()
	if err == nil {
		fields["using"], fields["systemd_version"] = config.SharedUpdatesDirect, m.Version()
		log.WithFields(fields).Info("systemd manages the container cgroups (cgroup v2, systemd cgroup driver): the plugin changes cpusets " +
			"and pod quotas through systemd's D-Bus API (a scope's AllowedCPUs, a pod slice's CPUQuota), then in the cgroup files, " +
			"as runc's systemd driver does, so that systemd's re-apply (daemon-reload) keeps them")
		return nil
	}
	fields["error"] = err.Error()
	if asked {
		fields["using"] = config.SharedUpdatesDirect
		log.WithFields(fields).Warn("systemd manages the container cgroups (cgroup v2, systemd cgroup driver) but cannot be reached on D-Bus: " +
			"the plugin writes cpusets into the cgroup files only, and systemd writes a scope's AllowedCPUs back when it re-applies " +
			"the unit (daemon-reload) until the reconcile loop restores them; mount the host's /run/dbus/system_bus_socket " +
			"read-write, or leave shared_pool_updates unset to have the runtime apply the pool through systemd")
		return nil
	}
	fields["using"] = config.SharedUpdatesInAnswer
	log.WithFields(fields).Warn("systemd manages the container cgroups (cgroup v2, systemd cgroup driver) but cannot be reached on D-Bus: " +
		"the runtime applies the shared pool instead, through systemd (each exclusive admission then waits for one OCI runtime update " +
		"per shared-pool container); mount the host's /run/dbus/system_bus_socket read-write for the faster \"direct\"")
	cfg.SharedPoolUpdates = config.SharedUpdatesInAnswer
	return nil
}

// New is the applier of a mode ChooseMode chose. Its cgroup reads
// go through root (cgroups.Root), its writes through the updater's
// cpusetWriter (systemd first on a systemd scope, then root): the one
// seam between the appliers and the cgroups they write.
func New(mode string, l *ledger.Ledger, obs Counts, conn *Connection, root cgroups.Root, sd *SysLink, log *logrus.Logger) Applier {
	u := newUpdater(l, obs, conn, root, log)
	u.sd = sd
	return newOf(mode, u)
}

// For is the applier of mode over the updater of a: the daemon's
// seeDriver swap keeps the updater, its worker's kicks and its way to
// systemd.
func For(mode string, a Applier) Applier { return newOf(mode, a.base()) }

// newOf is the applier of mode over u.
func newOf(mode string, u *updater) Applier {
	if mode == config.SharedUpdatesDirect {
		return newDirect(u)
	}
	return newInAnswer(u)
}
