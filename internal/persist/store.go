// Package persist keeps the daemon's policy state on disk: the checkpoint
// snapshot, the journal after it, their encodings, and the import of the
// kubelet's state on a first start. It implements ledger.Store and knows
// nothing of the daemon: it takes values and returns them.
//
// Its files follow the flows: journal.go is everything one journal
// append runs (Save, the record's delta and its encoding), replay.go
// reads the journal back, snapshot.go writes the snapshot (the snapshot
// store's save and the journal's compaction), and store.go is the store
// itself, its options and Load.
package persist

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"
	"k8s.io/utils/cpuset"

	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/pkg/checkpoint"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

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

// CheckpointName is the state file's name inside state_dir.
const CheckpointName = "cpualign_state.json"

// Options configure New.
type Options struct {
	Dir         string // state_dir
	KubeletFile string // a kubelet cpu_manager_state to import on a first start
	Mode        Mode
	Log         *logrus.Logger
	// Corrupt is told of every checkpoint found corrupt and set aside
	// (the checkpoint error counter).
	Corrupt func()
}

// Store owns the state on disk (docs/architecture.md): the checkpoint
// snapshot (snapshot.go), the journal after it (journal.go, read back by
// replay.go) and, on a first start, the kubelet's state to import
// (kubelet.go). It takes and returns values; the ledger calls Save under
// its lock, and the daemon calls Load under it.
type Store struct {
	ckpt        *checkpoint.File
	kubeletFile string
	jnl         journalStore
	enc         payloadEncoder // the snapshot's encoding of the index
	log         *logrus.Logger
	corrupt     func()
	// fp is fingerprint() of fpEngine, kept per engine (configuration
	// and topology change only together with it) since every snapshot
	// carries it; a journal append needs none (persistJournal).
	fp       string
	fpEngine *policy.Engine
}

var _ ledger.Store = (*Store)(nil)

// New is a store on o.Dir; nothing is read or written before Load or Save.
func New(o Options) *Store {
	return &Store{ckpt: checkpoint.New(o.Dir, CheckpointName), kubeletFile: o.KubeletFile,
		jnl: journalStore{mode: o.Mode}, log: o.Log, corrupt: o.Corrupt}
}

// LockDir points the store at dir (a Configure may have moved state_dir)
// and takes the directory's lock: one daemon per state directory.
func (s *Store) LockDir(dir string) (unlock func() error, err error) {
	s.ckpt = checkpoint.New(dir, CheckpointName)
	return s.ckpt.Lock()
}

// RemoveStaleTemps removes the temporary files of writes cut short.
func (s *Store) RemoveStaleTemps() error { return s.ckpt.RemoveStaleTemps() }

// Reset forgets the state on disk and closes the journal: the next Load
// reads them again, and the next Save writes a fresh snapshot.
func (s *Store) Reset() { s.jnl.reset() }

// fingerprint is fingerprint() of a configuration, its engine and topology.
func (s *Store) fingerprint(cfg config.Config, engine *policy.Engine, topo *topology.Topology) string {
	if s.fpEngine != engine {
		s.fp, s.fpEngine = fingerprint(cfg, engine, topo.CPUs()), engine
	}
	return s.fp
}

// Load reads the state before the first connection: from the checkpoint
// (and its journal); with none, from the kubelet's state file if one was
// given; else empty. A corrupt checkpoint is set aside and the state
// rebuilt from the runtime in Synchronize. Only an unreadable state
// directory (e.g. permissions) is an error. The caller commits the
// result (ledger.Change.Restore); the ledger's lock is held.
func (s *Store) Load(cfg config.Config, topo *topology.Topology, engine *policy.Engine) (ledger.Restore, error) {
	s.jnl.reset()
	out := ledger.Restore{State: engine.NewState(), Index: map[string]ledger.Record{}}
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
		if s.corrupt != nil {
			s.corrupt()
		}
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
