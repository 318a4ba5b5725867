package daemon

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/kubeletstate"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

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
	// Under None the text is what earlier releases hashed.
	if engine.MemoryStatic() {
		fmt.Fprintf(&b, "memory=%s\n", cfg.MemoryManagerPolicy)
		// In bytes: "1Gi" and "1024Mi" are the same reservation.
		for _, r := range cfg.Reservations() {
			fmt.Fprintf(&b, "reserved_memory=%d:%v\n", r.NUMANode, r.Limits)
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:8])
}

// store owns the state on disk (docs/architecture.md): the checkpoint
// snapshot, the journal after it (journal.go) and, on a first start, the
// kubelet's state to import. It takes and returns values; the ledger
// calls Save under its lock, and the daemon calls load under it.
type store struct {
	ckpt        *checkpoint.File
	kubeletFile string
	jnl         journalStore
	enc         payloadEncoder // the snapshot's encoding of the index
	log         *logrus.Logger
	obs         *metrics
	// fp is fingerprint() of fpEngine, kept per engine (configuration
	// and topology change only together with it) since every record
	// carries it.
	fp       string
	fpEngine *policy.Engine
}

var _ ledger.Store = (*store)(nil)

// fingerprint is fingerprint() of a configuration, its engine and topology.
func (s *store) fingerprint(cfg config.Config, engine *policy.Engine, topo *topology.Topology) string {
	if s.fpEngine != engine {
		s.fp, s.fpEngine = fingerprint(cfg, engine, topo.CPUs()), engine
	}
	return s.fp
}

// Save makes v's next state and index durable; the ledger commits them
// only when it succeeds (ledger.Commit).
func (s *store) Save(v ledger.Save) error {
	if s.jnl.mode == StoreSnapshot {
		data, err := s.enc.encode(s.fingerprint(v.Cfg, v.Engine, v.Topo), v.Engine, v.Next, v.Change.Index(v.Index))
		if err != nil {
			return err
		}
		return s.ckpt.SaveCompact(data)
	}
	return s.persistJournal(v)
}

// load reads the state before the first connection: from the checkpoint
// (and its journal); with none, from the kubelet's state file if one was
// given; else empty. A corrupt checkpoint is set aside and the state
// rebuilt from the runtime in Synchronize. Only an unreadable state
// directory (e.g. permissions) is an error. The caller commits the
// result (ledger.Change.Restore); the ledger's lock is held.
func (s *store) load(cfg config.Config, topo *topology.Topology, engine *policy.Engine) (ledger.Restore, error) {
	s.jnl.reset()
	out := ledger.Restore{State: engine.NewState(), Index: map[string]ctrRecord{}}
	var p payload
	err := s.ckpt.Load(&p)
	if err == nil && p.Journal != nil {
		err = s.replayJournal(&p)
	}
	var corrupt *checkpoint.CorruptError
	switch {
	case err == nil:
		if s.kubeletFile != "" {
			s.log.WithFields(logrus.Fields{"file": s.kubeletFile, "checkpoint": s.ckpt.Path()}).
				Info("a checkpoint exists: the kubelet state is imported only on a first start; ignoring it")
		}
		fp := s.fingerprint(cfg, engine, topo)
		st, notes, ferr := engine.FromSnapshot(p.Engine)
		if ferr != nil {
			s.jnl.reset()
			aside, serr := s.ckpt.SetAside()
			s.setAsideJournal(s.log.WithError(ferr).WithFields(logrus.Fields{"file": s.ckpt.Path(), "set_aside_as": aside, "set_aside_error": serr})).
				Error("checkpoint state is unusable; set aside, state will be rebuilt from the runtime")
			return out, nil
		}
		if p.Fingerprint != fp {
			s.log.WithFields(logrus.Fields{"file": s.ckpt.Path(), "checkpoint": p.Fingerprint, "now": fp}).
				Warn("checkpoint was written under another configuration or machine; its assignments were reconciled, not trusted")
		}
		for _, n := range notes {
			s.log.WithField("note", n).Warn("checkpoint entry dropped or changed while reconciling")
		}
		out.State = st
		for id, r := range p.Containers {
			r.ID = id
			out.Index[id] = r
		}
		s.log.WithFields(logrus.Fields{"file": s.ckpt.Path(), "containers": len(out.Index), "shared": engine.SharedMask(st).String()}).
			Info("state restored from checkpoint")
		return out, nil
	case errors.As(err, &corrupt):
		aside, serr := s.ckpt.SetAside()
		entry := s.setAsideJournal(s.log.WithError(err).WithField("file", corrupt.Path))
		if serr != nil {
			entry = entry.WithField("set_aside_error", serr.Error())
		} else {
			entry = entry.WithField("set_aside_as", aside)
		}
		entry.Error("checkpoint is corrupt; set aside, state will be rebuilt from the runtime")
		s.obs.checkpointErrors.Inc()
		return out, nil
	case errors.Is(err, checkpoint.ErrNotFound):
		if s.kubeletFile == "" {
			s.log.WithField("file", s.ckpt.Path()).Info("no checkpoint: first start")
			return out, nil
		}
		st, n, err := importKubeletState(engine, out.State, s.kubeletFile, s.log)
		if err != nil {
			return out, err
		}
		out.State = st
		s.log.WithFields(logrus.Fields{"file": s.kubeletFile, "assignments": n}).Info("imported the kubelet's CPU manager state")
		if engine.MemoryStatic() {
			out.State, err = importKubeletMemory(engine, out.State, kubeletMemoryPath(s.kubeletFile), s.log)
			return out, err
		}
		return out, nil
	default:
		return out, fmt.Errorf("read checkpoint: %w", err)
	}
}

// importKubeletState adopts the exclusive assignments of the kubelet's
// static policy: entries (pod UID -> container name -> cpuset) become
// engine assignments, matched to running containers by pod UID and name in
// Synchronize. The file is read by kubeletstate.ParseCPU (V2/V3 of kubelet
// 1.36, V4 of 1.37; checksums verified as the kubelet verifies them); every
// entry is checked by the engine, and an entry the
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
	ks, err := kubeletstate.ParseCPU(raw)
	if err != nil {
		return st, 0, fmt.Errorf("import kubelet state %s: %w", path, err)
	}
	if len(ks.PodLevelPods) > 0 {
		log.WithFields(logrus.Fields{"file": path, "pods": ks.PodLevelPods}).Warn("kubelet state has pod-level CPU sets (podEntries); only their containers' entries are imported")
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

// KubeletMemoryState is the kubelet's memory manager state file, next to
// its cpu_manager_state.
const KubeletMemoryState = "memory_manager_state"

// kubeletMemoryPath is the memory manager state beside the CPU manager
// state file cpuFile: its name with cpu_manager_state replaced (the
// migration's copy kubelet-cpu_manager_state goes with
// kubelet-memory_manager_state), else memory_manager_state.
func kubeletMemoryPath(cpuFile string) string {
	dir, base := filepath.Split(cpuFile)
	if strings.Contains(base, "cpu_manager_state") {
		return filepath.Join(dir, strings.Replace(base, "cpu_manager_state", KubeletMemoryState, 1))
	}
	return filepath.Join(dir, KubeletMemoryState)
}

// importKubeletMemory adopts the kubelet's memory manager state under
// memory_manager_policy Static. A missing file is a warning (a node that
// never ran the kubelet's Static policy); one that does not parse is an
// error, as for the CPU manager's; one that does not match this machine
// and reserved_memory is set aside with a warning: the state starts
// empty, as the kubelet would refuse to start on it.
func importKubeletMemory(engine *policy.Engine, st policy.State, path string, log *logrus.Logger) (policy.State, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		log.WithField("file", path).Warn("no kubelet memory manager state to import")
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("import kubelet memory state: %w", err)
	}
	next, n, err := engine.ImportMemory(st, raw)
	var mismatch *policy.MemoryMismatchError
	if errors.As(err, &mismatch) {
		log.WithError(err).WithField("file", path).Warn("kubelet memory manager state does not match this machine and reserved_memory; not imported")
		return st, nil
	}
	if err != nil {
		return st, fmt.Errorf("import %s: %w", path, err)
	}
	log.WithFields(logrus.Fields{"file": path, "assignments": n}).Info("imported the kubelet's memory manager state")
	return next, nil
}
