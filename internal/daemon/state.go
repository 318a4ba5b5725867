package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
)

// ctrRecord is what the daemon remembers about a container it has placed.
// The engine knows containers by pod UID and name; the runtime by ID.
type ctrRecord struct {
	ID          string `json:"id"`
	Pod         string `json:"pod"`      // engine pod key (pod UID)
	PodName     string `json:"pod_name"` // namespace/name, for logs and /state
	Name        string `json:"name"`
	CgroupsPath string `json:"cgroups_path,omitempty"`
	Exclusive   bool   `json:"exclusive"`
	// Mems is the cpuset.mems the daemon set, "" when it leaves mems to
	// the runtime (shared-pool containers, adopted assignments).
	Mems string `json:"mems,omitempty"`
}

// payload is the checkpoint's data.
type payload struct {
	// Fingerprint identifies the configuration and machine the state was
	// written under; a different one means the engine must reconcile.
	Fingerprint string               `json:"fingerprint"`
	Engine      policy.Snapshot      `json:"engine"`
	Containers  map[string]ctrRecord `json:"containers"`
	// Journal names the journal whose later records complete the
	// snapshot (StoreJournal); absent, there are none. Older versions
	// ignore it and read the snapshot alone.
	Journal *journalMark `json:"journal,omitempty"`
}

// fingerprint hashes what makes a state valid: the CPUs of the machine,
// the resolved reserved set, and the policy settings.
func fingerprint(cfg config.Config, engine *policy.Engine, cpus cpuset.CPUSet) string {
	var b strings.Builder
	fmt.Fprintf(&b, "cpus=%s\nreserved=%s\npolicy=%s\ntopology=%s/%s\n", cpus, engine.Reserved(), cfg.CPUManagerPolicy,
		cfg.TopologyManagerPolicy, cfg.TopologyManagerScope)
	for _, m := range []map[string]string{cfg.CPUManagerPolicyOptions, cfg.TopologyManagerPolicyOptions} {
		keys := slices.Sorted(maps.Keys(m))
		for _, k := range keys {
			fmt.Fprintf(&b, "%s=%s\n", k, m[k])
		}
		b.WriteString("--\n")
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// fingerprint is fingerprint of the current configuration. It is kept per
// engine (configuration and topology change only together with it): every
// event writes it, and printing the machine's CPU list was a tenth of a
// CreateContainer without other containers.
func (d *Daemon) fingerprint() string {
	if d.fpEngine != d.engine {
		d.fp, d.fpEngine = fingerprint(d.cfg, d.engine, d.topo.CPUs()), d.engine
	}
	return d.fp
}

// persist writes the checkpoint for (st, ctrs), a whole new index (a
// synchronization). The caller commits them to the daemon only when
// persist succeeds.
func (d *Daemon) persist(st policy.State, ctrs map[string]ctrRecord) error {
	return d.persistIndex(st, indexChange{all: ctrs})
}

// persistEdit writes the checkpoint for st and the committed index with e
// applied; the caller commits them (d.st = st, d.commitEdit(e)) only when
// it succeeds.
func (d *Daemon) persistEdit(st policy.State, e ctrEdit) error {
	return d.persistIndex(st, indexChange{edit: e})
}

func (d *Daemon) persistIndex(st policy.State, c indexChange) error {
	var err error
	if d.jnl.mode == StoreSnapshot {
		var data []byte
		data, err = d.enc.encode(d.fingerprint(), d.engine, st, c.index(d.ctrs))
		if err == nil {
			err = d.ckpt.SaveCompact(data)
		}
	} else {
		err = d.persistJournal(st, c)
	}
	if err != nil {
		d.metrics.checkpointErrors.Inc()
		return fmt.Errorf("PersistError: %w", err)
	}
	return nil
}

// restore loads the state before the first connection: from the
// checkpoint; with none, from the kubelet's state file if one was given;
// else empty. A corrupt checkpoint is set aside and the state rebuilt from
// the runtime in Synchronize. Only an unreadable state directory (e.g.
// permissions) stops the daemon.
func (d *Daemon) restore() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.restoreLocked()
}

// restoreLocked is restore with d.mu held.
func (d *Daemon) restoreLocked() error {
	d.restored = true
	d.jnl.reset()
	var p payload
	err := d.ckpt.Load(&p)
	if err == nil && p.Journal != nil {
		err = d.replayJournal(&p)
	}
	var corrupt *checkpoint.CorruptError
	switch {
	case err == nil:
		if d.kubeletFile != "" {
			d.log.WithFields(logrus.Fields{"file": d.kubeletFile, "checkpoint": d.ckpt.Path()}).
				Info("a checkpoint exists: the kubelet state is imported only on a first start; ignoring it")
		}
		fp := d.fingerprint()
		st, notes, ferr := d.engine.FromSnapshot(p.Engine)
		if ferr != nil {
			d.jnl.reset()
			aside, serr := d.ckpt.SetAside()
			d.setAsideJournal(d.log.WithError(ferr).WithFields(logrus.Fields{"file": d.ckpt.Path(), "set_aside_as": aside, "set_aside_error": serr})).
				Error("checkpoint state is unusable; set aside, state will be rebuilt from the runtime")
			d.st, d.ctrs = d.engine.NewState(), map[string]ctrRecord{}
			return nil
		}
		if p.Fingerprint != fp {
			d.log.WithFields(logrus.Fields{"file": d.ckpt.Path(), "checkpoint": p.Fingerprint, "now": fp}).
				Warn("checkpoint was written under another configuration or machine; its assignments were reconciled, not trusted")
		}
		for _, n := range notes {
			d.log.WithField("note", n).Warn("checkpoint entry dropped or changed while reconciling")
		}
		d.st = st
		d.ctrs = map[string]ctrRecord{}
		for id, r := range p.Containers {
			r.ID = id
			d.ctrs[id] = r
		}
		d.log.WithFields(logrus.Fields{"file": d.ckpt.Path(), "containers": len(d.ctrs), "shared": d.engine.SharedMask(st).String()}).
			Info("state restored from checkpoint")
		return nil
	case errors.As(err, &corrupt):
		aside, serr := d.ckpt.SetAside()
		entry := d.setAsideJournal(d.log.WithError(err).WithField("file", corrupt.Path))
		if serr != nil {
			entry = entry.WithField("set_aside_error", serr.Error())
		} else {
			entry = entry.WithField("set_aside_as", aside)
		}
		entry.Error("checkpoint is corrupt; set aside, state will be rebuilt from the runtime")
		d.metrics.checkpointErrors.Inc()
		d.st, d.ctrs = d.engine.NewState(), map[string]ctrRecord{}
		return nil
	case errors.Is(err, checkpoint.ErrNotFound):
		d.st, d.ctrs = d.engine.NewState(), map[string]ctrRecord{}
		if d.kubeletFile == "" {
			d.log.WithField("file", d.ckpt.Path()).Info("no checkpoint: first start")
			return nil
		}
		st, n, err := importKubeletState(d.engine, d.st, d.kubeletFile, d.log)
		if err != nil {
			return err
		}
		d.st = st
		d.log.WithFields(logrus.Fields{"file": d.kubeletFile, "assignments": n}).Info("imported the kubelet's CPU manager state")
		return nil
	default:
		return fmt.Errorf("read checkpoint: %w", err)
	}
}

// kubeletState is the kubelet's cpu_manager_state file (checkpoint V2).
type kubeletState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
	Checksum      uint64                       `json:"checksum"`
}

// importKubeletState adopts the exclusive assignments of the kubelet's
// static policy: entries (pod UID -> container name -> cpuset) become
// engine assignments, matched to running containers by pod UID and name in
// Synchronize. The kubelet's checksum (FNV over a Go-specific dump) is not
// verified; every entry is checked by the engine instead, and an entry the
// engine refuses (reserved, offline or overlapping CPUs) is skipped with a
// warning. A policyName other than "static" has nothing to adopt.
func importKubeletState(engine *policy.Engine, st policy.State, path string, log *logrus.Logger) (policy.State, int, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		// A node that never ran the kubelet's static policy has no file;
		// the flag can then stay in a DaemonSet shared by all nodes.
		log.WithField("file", path).Warn("no kubelet CPU manager state to import")
		return st, 0, nil
	}
	if err != nil {
		return st, 0, fmt.Errorf("import kubelet state: %w", err)
	}
	var ks kubeletState
	if err := json.Unmarshal(raw, &ks); err != nil {
		return st, 0, fmt.Errorf("import kubelet state %s: not a cpu_manager_state file: %w", path, err)
	}
	if ks.PolicyName != "static" {
		log.WithFields(logrus.Fields{"file": path, "policyName": ks.PolicyName}).Info("kubelet state has no static assignments to import")
		return st, 0, nil
	}
	if ks.DefaultCPUSet != "" {
		if _, err := sysfs.ParseList(ks.DefaultCPUSet); err != nil { // bounded: a huge range must not hang
			return st, 0, fmt.Errorf("import kubelet state %s: defaultCpuSet %q: %w", path, ks.DefaultCPUSet, err)
		}
	}
	pods := slices.Sorted(maps.Keys(ks.Entries))
	n := 0
	for _, pod := range pods {
		names := slices.Sorted(maps.Keys(ks.Entries[pod]))
		for _, name := range names {
			s := ks.Entries[pod][name]
			cpus, err := sysfs.ParseList(s)
			if err != nil || cpus.IsEmpty() {
				log.WithFields(logrus.Fields{"file": path, "pod": pod, "container": name, "cpus": s}).Warn("kubelet state entry is not a CPU list; skipped")
				continue
			}
			next, err := engine.Assign(st, pod, name, cpus)
			if err != nil {
				log.WithError(err).WithFields(logrus.Fields{"file": path, "pod": pod, "container": name, "cpus": s}).Warn("kubelet state entry refused; skipped")
				continue
			}
			st = next
			n++
		}
	}
	return st, n, nil
}

// rightCPUs is the cpuset a known container should have now.
func (d *Daemon) rightCPUs(r ctrRecord) cpuset.CPUSet {
	if r.Exclusive {
		if cpus, ok := d.engine.Assignment(d.st, r.Pod, r.Name); ok {
			return cpus
		}
	}
	return d.engine.SharedCPUs(d.st)
}

// ctrEdit is what an event changes in the container index: records put
// (new or replaced) and IDs removed. Events persist and commit an edit
// rather than a new index: copying 500 records and comparing them all
// with the store's on every event was a good part of a decision.
type ctrEdit struct {
	put []ctrRecord
	del []string
}

// applyTo applies e to m in place: the removals, then the records put.
func (e ctrEdit) applyTo(m map[string]ctrRecord) {
	for _, id := range e.del {
		delete(m, id)
	}
	for _, r := range e.put {
		m[r.ID] = r
	}
}

// commitEdit applies e to the committed index. d.mu is held.
func (d *Daemon) commitEdit(e ctrEdit) {
	if d.ctrs == nil {
		d.ctrs = map[string]ctrRecord{}
	}
	e.applyTo(d.ctrs)
}

// indexChange is the index a checkpoint write is for: a whole new one
// (all), or the committed one with an edit.
type indexChange struct {
	all  map[string]ctrRecord
	edit ctrEdit
}

// index is the whole index the change leads to from committed (a copy
// when it is an edit: committed stays as it is until the commit).
func (c indexChange) index(committed map[string]ctrRecord) map[string]ctrRecord {
	if c.all != nil {
		return c.all
	}
	m := cloneRecords(committed)
	c.edit.applyTo(m)
	return m
}

// cloneRecords copies the container index for a tentative change.
func cloneRecords(m map[string]ctrRecord) map[string]ctrRecord {
	// maps.Clone copies the table wholesale: several times faster than
	// re-inserting 500 records on every event.
	if out := maps.Clone(m); out != nil {
		return out
	}
	return map[string]ctrRecord{}
}

// sharedUpdates are the updates moving every shared-pool container except
// skip to the current shared pool. Failures are ignored by the runtime (a
// container may be stopping); the reconcile loop repairs what is left.
func (d *Daemon) sharedUpdates(skip string) []*api.ContainerUpdate {
	if d.engine.SharedMask(d.st).IsEmpty() {
		return nil // no CPU for them (nothing reserved): never an empty cpuset
	}
	shared := d.engine.SharedMask(d.st).String()
	ids := make([]string, 0, len(d.ctrs))
	for id, r := range d.ctrs {
		if id != skip && !r.Exclusive {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	// Every update carries the same cpuset: one Linux part serves them all
	// (they are only marshalled), and one block holds the updates, instead
	// of five allocations per container.
	lin := &api.LinuxContainerUpdate{Resources: &api.LinuxResources{Cpu: &api.LinuxCPU{Cpus: shared}}}
	block := make([]api.ContainerUpdate, len(ids))
	out := make([]*api.ContainerUpdate, len(ids))
	for i, id := range ids {
		u := &block[i]
		u.SetContainerId(id)
		u.Linux = lin
		u.SetIgnoreFailure()
		out[i] = u
	}
	return out
}
