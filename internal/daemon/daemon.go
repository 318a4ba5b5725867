// Package daemon is the nri-cpualign NRI plugin: it joins the pure policy
// engine (pkg/policy) to a container runtime through the NRI stub
// (github.com/containerd/nri/pkg/stub), keeps the engine's state durable in
// a checkpoint (pkg/checkpoint), serves metrics and a /state view, and runs
// the reconcile loop that restores cpusets changed behind its back.
//
// Usage, in a command or in-process in a test:
//
//	d, err := daemon.New(cfg, daemon.WithTopology(topo), daemon.WithLogger(log))
//	err = d.Run(ctx) // returns when ctx is cancelled, or on a fatal error
//
// The layout, the lock order and one CreateContainer's and one
// Synchronize's way through it are in docs/architecture.md. In short: the
// ledger (internal/ledger) owns the engine state, the container index and
// the lifecycle facts under one lock; every NRI event takes it, computes
// the next state with the engine, and hands every fact it learnt to
// ledger.Commit, which applies them only after the store made the state
// durable; the runtime gets its answer after that. The applier, whose
// mode applier.ChooseMode decides at start-up (and once more from the first
// container's cgroups path, seeDriver), brings the shared-pool
// containers along: in the answer or from its worker through the runtime
// (in-answer; never stub.UpdateContainers inside a handler, which
// deadlocks the runtime), or by writing their cgroups (direct).
//
// Connection loss: in the external (DaemonSet) mode the daemon reconnects
// with exponential backoff (1 s doubling to 30 s) and re-synchronizes;
// started by the runtime from its plugin directory (pre-registered mode)
// it cannot redial the inherited socket, so Run returns an error and the
// process exits non-zero for the runtime to start it again. Either way the
// state is in the checkpoint.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/containerd/nri/pkg/stub"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/adapter"
	"github.com/nri-cpualign/nri-cpualign/internal/applier"
	"github.com/nri-cpualign/nri-cpualign/internal/cgroups"
	"github.com/nri-cpualign/nri-cpualign/internal/ledger"
	"github.com/nri-cpualign/nri-cpualign/internal/nrtexport"
	"github.com/nri-cpualign/nri-cpualign/internal/observe"
	"github.com/nri-cpualign/nri-cpualign/internal/persist"
	"github.com/nri-cpualign/nri-cpualign/internal/request"
	"github.com/nri-cpualign/nri-cpualign/internal/systemd"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
	"github.com/nri-cpualign/nri-cpualign/pkg/policy"
	"github.com/nri-cpualign/nri-cpualign/pkg/sysfs"
	"github.com/nri-cpualign/nri-cpualign/pkg/topology"
)

// Plugin registration defaults, used unless the runtime's environment
// (pre-registered mode) names the plugin.
const (
	PluginName = "cpualign"
	PluginIdx  = "90"
	// CheckpointName is the state file's name inside state_dir.
	CheckpointName = persist.CheckpointName
)

// Reconnect backoff in the external mode.
const (
	backoffMin = time.Second
	backoffMax = 30 * time.Second
)

// Option configures New.
type Option func(*options)

type options struct {
	topo        *topology.Topology
	log         *logrus.Logger
	kubeletFile string
	stubOpts    []stub.Option
	fromRuntime bool
	now         func() time.Time
	store       persist.Mode
	sdDial      func(ctx context.Context) (systemd.Manager, error)
	sdAfter     func(d time.Duration, f func())
	// wrapStore, when set, stands between the ledger and the store
	// (tests count and fail saves).
	wrapStore func(ledger.Store) ledger.Store
}

// WithTopology uses topo instead of reading sysfs_root.
func WithTopology(topo *topology.Topology) Option { return func(o *options) { o.topo = topo } }

// WithLogger sets the logger (default: a new logrus logger on stderr at the
// configured level and format).
func WithLogger(l *logrus.Logger) Option { return func(o *options) { o.log = l } }

// WithKubeletState imports the kubelet's cpu_manager_state file on a first
// start (no checkpoint yet), adopting its exclusive assignments.
func WithKubeletState(path string) Option { return func(o *options) { o.kubeletFile = path } }

// WithConfigFromRuntime is for a plugin the runtime starts from its plugin
// directory with no --config: the policy configuration then arrives with
// the runtime's Configure, so New accepts a configuration the engine
// refuses (e.g. the default static policy without a reservation) and the
// engine is built, and the state restored, when Configure brings a valid
// one. Configure fails if it brings none.
func WithConfigFromRuntime() Option { return func(o *options) { o.fromRuntime = true } }

// WithStore chooses how the state is made durable (default persist.Journal;
// the benchmarks compare both). Either mode reads what the other wrote.
func WithStore(m persist.Mode) Option { return func(o *options) { o.store = m } }

// WithStubOptions adds NRI stub options (tests use it, e.g. for a dialer).
func WithStubOptions(opts ...stub.Option) Option {
	return func(o *options) { o.stubOpts = append(o.stubOpts, opts...) }
}

// Daemon is the NRI plugin. Create it with New and start it with Run.
// It holds the wiring (docs/architecture.md): the ledger owns the policy
// state, its store the disk, the applier the way the shared pool reaches
// the cgroups, the metrics what is observed; the NRI adapter (plugin)
// translates events into their calls.
type Daemon struct {
	led       *ledger.Ledger
	store     *persist.Store // the ledger's Store; used under the ledger's lock
	app       applying
	conn      applier.Connection
	obs       *metrics
	log       *logrus.Logger
	stubOpts  []stub.Option
	fixedTopo bool // the topology came from WithTopology, not sysfs_root
	connected atomic.Bool
	syncedC   chan struct{} // closed after the first Synchronize
	run       runState      // under the ledger's lock

	// kube is what the daemon exchanges with Kubernetes.
	kube kubeLinks
}

// kubeLinks are the daemon's links to Kubernetes beside the runtime.
type kubeLinks struct {
	// nrt publishes the NodeResourceTopology (nil when off); started with
	// the worker.
	nrt *nrtexport.Exporter
	// podres asks the kubelet's PodResources API for devices
	// (internal/request request.go).
	podres request.PodResources
}

// runState is what Run sets, under the ledger's lock, for what starts
// once the configuration is final (startLocked).
type runState struct {
	ctx         context.Context
	wg          *sync.WaitGroup
	unlockState func() error
	workerOn    bool
	cancel      context.CancelFunc // stops the running applier's worker (swapApplier)
	stopped     chan struct{}      // closed when that worker has returned
}

// applying is how the shared pool reaches the cgroups: the applier of the
// mode applier.ChooseMode decided, replaced by the first Configure of a
// pre-registered plugin or when the first container's cgroups path
// changes the mode (seeDriver); the way to systemd its writes take on a
// systemd node; and whether that first path was seen.
type applying struct {
	ref        atomic.Pointer[applier.Ref]
	sd         *applier.SysLink
	driverSeen bool // under the ledger's lock
}

// applier is the way the shared pool is applied.
func (d *Daemon) applier() applier.Applier { return d.app.ref.Load().Applier }

// handlers is the NRI adapter over this daemon: what the NRI stub calls.
func (d *Daemon) handlers() adapter.Handlers {
	return adapter.New(adapter.Deps{Ledger: d.led, Applier: &d.app.ref, Conn: &d.conn, Log: d.log, Metrics: d.obs.events,
		PodResources: &d.kube.podres, SeeDriver: d.seeDriver, Configure: d.configure, Synced: d.syncedC, Connected: &d.connected})
}

// New validates cfg, reads the topology (unless WithTopology), builds the
// engine and returns the daemon. It refuses the static policy without a
// CPU reservation, as the kubelet does, unless cfg writes
// reserved_cpu_count = 0 (accepted with a warning, as the kubelet's policy
// code accepts it). Configuration errors name the key
// (and line, for a loaded file).
func New(cfg config.Config, opts ...Option) (*Daemon, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if o.log == nil {
		o.log = logrus.New()
		o.log.SetOutput(os.Stderr)
	}
	applyLogSettings(o.log, cfg)
	topo := o.topo
	if topo == nil {
		t, warns, err := sysfs.ReadWithWarnings(cfg.SysfsRoot)
		if err != nil {
			return nil, fmt.Errorf("read topology from %s: %w", cfg.SysfsRoot, err)
		}
		logDiscoveryWarnings(o.log, warns)
		topo = t
	}
	_, explicitZero := zeroReservation(cfg)
	engine, err := buildEngine(topo, cfg, explicitZero)
	var pendingErr error
	if err != nil {
		if !o.fromRuntime {
			return nil, err
		}
		pendingErr = err
	}
	d := &Daemon{
		log:       o.log,
		fixedTopo: o.topo != nil,
		stubOpts:  o.stubOpts,
		obs:       newMetrics(),
		syncedC:   make(chan struct{}),
	}
	d.obs.registerConnected(&d.connected)
	d.store = persist.New(persist.Options{Dir: cfg.StateDir, KubeletFile: o.kubeletFile, Mode: o.store, Log: o.log,
		Corrupt: d.obs.CheckpointError})
	if o.sdDial == nil {
		o.sdDial = dialSystemd
	}
	d.app.sd = applier.NewSysLink(o.sdDial, o.sdAfter)
	root := cgroups.New(cfg.CgroupRoot)
	if err := applier.ChooseMode(&cfg, root, d.app.sd, "", o.log); err != nil {
		return nil, err
	}
	var store ledger.Store = d.store
	if o.wrapStore != nil {
		store = o.wrapStore(store)
	}
	l := ledger.New(cfg, topo, engine, pendingErr, ledger.Deps{Store: store, Obs: d.obs, Log: o.log, Now: o.now})
	d.led = l
	d.obs.reg.MustRegister(observe.NewPoolCollector(l.View), observe.NewHeldGauge(l.View), observe.NewMemoryCollector(l.View))
	d.app.ref.Store(&applier.Ref{Applier: applier.New(cfg.SharedPoolUpdates, l, d.obs, &d.conn, root, d.app.sd, o.log)})
	if d.kube.nrt, err = observe.NewNRTExporter(cfg, l.View, o.log); err != nil {
		return nil, err
	}
	if d.kube.nrt != nil {
		d.obs.reg.MustRegister(d.kube.nrt.Collectors()...)
	}
	warnZeroReservation(engine, cfg, d.log)
	return d, nil
}

// buildEngine checks the daemon's own rule (the static policy takes no
// reserved CPUs only when told so explicitly: explicitZero, from
// reserved_cpu_count = 0 written in the configuration) and builds the
// engine, reporting engine errors with the configuration key and line.
func buildEngine(topo *topology.Topology, cfg config.Config, explicitZero bool) (*policy.Engine, error) {
	if cfg.CPUManagerPolicy == policy.CPUPolicyStatic && !cfg.HasReservation() && !explicitZero {
		return nil, cfg.KeyError(config.KeyCPUManagerPolicy, cfg.CPUManagerPolicy,
			"the static policy needs a CPU reservation: set reserved_system_cpus or reserved_cpu_count "+
				"(the kubelet refuses the static policy without one too); write reserved_cpu_count = 0 to run with none, "+
				"which leaves shared-pool containers no CPU once exclusive containers take them all")
	}
	pc, err := cfg.Policy()
	if err != nil {
		return nil, err
	}
	if pc.MemoryPolicy == policy.MemoryPolicyStatic {
		nodes, err := sysfs.ReadMemory(cfg.SysfsRoot)
		if err != nil {
			return nil, fmt.Errorf("%w (memory_manager_policy Static reads every NUMA node's memory and hugepage pools)", err)
		}
		pc.MachineMemory = sysfs.Capacities(nodes)
	}
	engine, err := policy.New(topo, pc)
	if err != nil {
		var ce *policy.ConfigError
		if errors.As(err, &ce) {
			return nil, fmt.Errorf("%w (%v)", cfg.KeyError(ce.Key, "", ce.Err.Error()), ce.Reason())
		}
		return nil, fmt.Errorf("policy: %w", err)
	}
	return engine, nil
}

func applyLogSettings(l *logrus.Logger, cfg config.Config) {
	if lvl, err := logrus.ParseLevel(cfg.LogLevel); err == nil {
		l.SetLevel(lvl)
	}
	if cfg.LogFormat == "json" {
		l.SetFormatter(&logrus.JSONFormatter{})
	} else {
		l.SetFormatter(&logrus.TextFormatter{FullTimestamp: true})
	}
}

// Config returns the effective configuration.
func (d *Daemon) Config() config.Config { return d.led.Config() }

// Synchronized is closed once the runtime's first Synchronize is handled.
func (d *Daemon) Synchronized() <-chan struct{} { return d.syncedC }

// Connected reports whether the daemon is connected to the runtime.
func (d *Daemon) Connected() bool { return d.connected.Load() }

// preRegistered reports whether the runtime started this process from its
// plugin directory and handed it a connected socket.
func preRegistered() bool { return os.Getenv(api.PluginSocketEnvVar) != "" }

// Run locks the state directory, restores the state (checkpoint, or the
// kubelet's state on a first start), starts the metrics server and the
// applier's worker, and serves the runtime until ctx is cancelled. It
// returns nil on cancellation and an error when it cannot go on (state
// directory locked, unreadable checkpoint, lost connection in
// pre-registered mode). With WithConfigFromRuntime and a start-up
// configuration the engine refused, the state directory, restore, metrics
// server and worker wait for the runtime's Configure.
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	defer d.releaseStateDir()
	defer d.kube.podres.Close()

	var (
		configured bool
		pendingErr error
	)
	_ = d.led.Update(func(l *ledger.Tx) error {
		d.run.ctx, d.run.wg = ctx, &wg
		configured, pendingErr = l.Engine() != nil, l.PendingErr()
		return nil
	})
	d.logStartup()
	d.kube.podres.Warm(d.led.Config())
	if configured {
		if err := d.led.Update(func(l *ledger.Tx) error { return d.startLocked(l, nil) }); err != nil {
			return err
		}
	} else {
		d.log.WithField("start_up_config_error", pendingErr.Error()).
			Info("waiting for the configuration from the runtime (pre-registered plugin)")
	}
	return d.serve(ctx)
}

// startLocked takes the state directory, restores the state and starts
// the metrics server and the applier's worker: what needs the final
// configuration, the ledger's or, at a pre-registered plugin's first
// Configure, re's, committed with the state restored. Inside an Update.
func (d *Daemon) startLocked(l *ledger.Tx, re *ledger.Reconfigure) error {
	cfg := l.Settings()
	if re != nil {
		cfg = re.Cfg
	}
	unlock, err := d.store.LockDir(cfg.StateDir)
	if err != nil {
		return err
	}
	d.run.unlockState = unlock
	if err := d.store.RemoveStaleTemps(); err != nil {
		d.log.WithError(err).Warn("could not remove stale temporary checkpoint files")
	}
	if err := d.restoreLocked(l, re); err != nil {
		return err
	}
	ctx, wg := d.run.ctx, d.run.wg
	if !d.run.workerOn {
		d.run.workerOn = true
		d.startWorker(d.applier())
		if exp := d.kube.nrt; exp != nil {
			wg.Add(2)
			go func() {
				defer wg.Done()
				exp.Run(ctx)
			}()
			// The exporter follows the ledger's commits: a signal pending
			// from the restore just committed kicks it at once.
			go func() {
				defer wg.Done()
				forwardChanged(ctx, d.led.Changed(), exp.Kick)
			}()
		}
	}
	addr := cfg.MetricsAddress
	if addr == "" {
		return nil
	}
	srv, err := listen(addr, d.Handler())
	if err != nil {
		return fmt.Errorf("metrics: %w", err)
	}
	d.log.WithField("address", srv.Addr).Info("serving /metrics, /state and /healthz")
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		shutdownCtx, c := context.WithTimeout(context.Background(), 2*time.Second)
		defer c()
		_ = srv.Shutdown(shutdownCtx)
	}()
	return nil
}

// forwardChanged kicks for every signal of changed (the ledger's
// Changed, coalesced as the exporter's kicks are) until ctx ends.
func forwardChanged(ctx context.Context, changed <-chan struct{}, kick func()) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-changed:
			kick()
		}
	}
}

// restoreLocked reads the state on disk and commits it: the pool check,
// the generation and Changed (the exporter) follow it as any commit. With
// re (a pre-registered plugin's first Configure) the state is read for
// re's configuration and engine, and both are one change: one commit.
// Inside an Update.
func (d *Daemon) restoreLocked(l *ledger.Tx, re *ledger.Reconfigure) error {
	cfg, topo, engine := l.Settings(), l.Topology(), l.Engine()
	if re != nil {
		cfg, topo, engine = re.Cfg, re.Topo, re.Engine
	}
	r, err := d.store.Load(cfg, topo, engine)
	if err != nil {
		return err
	}
	_, err = l.Commit(ledger.Change{Reconfigure: re, Restore: &r})
	return err
}

// releaseStateDir drops the state directory lock taken by startLocked.
func (d *Daemon) releaseStateDir() {
	var unlock func() error
	_ = d.led.Update(func(*ledger.Tx) error {
		unlock, d.run.unlockState = d.run.unlockState, nil
		d.store.Reset()
		return nil
	})
	if unlock != nil {
		_ = unlock()
	}
}

// serve connects to the runtime and keeps reconnecting (external mode).
func (d *Daemon) serve(ctx context.Context) error {
	backoff := backoffMin
	for {
		s, err := d.newStub()
		if err != nil {
			return err
		}
		started := time.Now()
		err = s.Run(ctx)
		d.setStub(nil)
		if ctx.Err() != nil {
			s.Stop()
			return nil
		}
		if preRegistered() {
			return fmt.Errorf("NRI connection lost (%v); the runtime restarts pre-registered plugins, exiting", err)
		}
		if time.Since(started) > backoffMax {
			backoff = backoffMin // it was a working connection, not a retry storm
		}
		d.log.WithError(err).WithField("retry_in", backoff.String()).Warn("NRI connection lost or refused; reconnecting")
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, backoffMax)
	}
}

func (d *Daemon) newStub() (stub.Stub, error) {
	cfg := d.Config()
	opts := []stub.Option{
		stub.WithLogger(nriLogger{d.log.WithField("component", "nri-stub")}),
		stub.WithSocketPath(cfg.SocketPath),
		stub.WithOnClose(func() {
			d.connected.Store(false)
			d.log.Warn("NRI connection closed by the runtime")
		}),
	}
	// In pre-registered mode the runtime names the plugin through the
	// environment, and the stub refuses a second index.
	if os.Getenv(api.PluginNameEnvVar) == "" {
		opts = append(opts, stub.WithPluginName(PluginName))
	}
	if os.Getenv(api.PluginIdxEnvVar) == "" {
		opts = append(opts, stub.WithPluginIdx(PluginIdx))
	}
	opts = append(opts, d.stubOpts...)
	s, err := stub.New(d.handlers(), opts...)
	if err != nil {
		return nil, fmt.Errorf("NRI stub: %w", err)
	}
	d.setStub(s)
	return s, nil
}

// nriLogger routes the NRI stub's own messages through the daemon's
// logger, so that they share its format and level.
type nriLogger struct{ e *logrus.Entry }

// Debugf, Infof, Warnf and Errorf implement the NRI log.Logger interface.
func (l nriLogger) Debugf(_ context.Context, format string, args ...any) { l.e.Debugf(format, args...) }
func (l nriLogger) Infof(_ context.Context, format string, args ...any)  { l.e.Infof(format, args...) }
func (l nriLogger) Warnf(_ context.Context, format string, args ...any)  { l.e.Warnf(format, args...) }
func (l nriLogger) Errorf(_ context.Context, format string, args ...any) { l.e.Errorf(format, args...) }

func (d *Daemon) setStub(s stub.Stub) {
	d.conn.Set(s)
	if s == nil {
		d.connected.Store(false)
	}
}

func (d *Daemon) logStartup() {
	var (
		t      *topology.Topology
		cfg    config.Config
		engine *policy.Engine
	)
	d.led.Read(func(l *ledger.Tx) { t, cfg, engine = l.Topology(), l.Settings(), l.Engine() })
	d.log.WithFields(logrus.Fields{
		"cpus":             t.CPUs().String(),
		"num_cpus":         t.NumCPUs(),
		"cores":            t.NumCores(),
		"sockets":          t.NumSockets(),
		"numa_nodes":       t.NumNUMANodes(),
		"l3_groups":        t.NumL3(),
		"threads_per_core": t.CPUsPerCore(),
		"memory_nodes":     fmt.Sprint(t.MemoryNodes()),
		"isolated":         t.Isolated().String(),
	}).Info("detected CPU topology")
	warnIgnoredKeys(d.log, cfg, cfg.Source())
	if engine == nil {
		return
	}
	if strings.TrimSpace(cfg.ReservedSystemCPUs) != "" && cfg.ReservedCPUCount > 0 {
		d.log.WithFields(logrus.Fields{"reserved_system_cpus": cfg.ReservedSystemCPUs, "reserved_cpu_count": cfg.ReservedCPUCount}).
			Warn("both reserved_system_cpus and reserved_cpu_count are set; reserved_system_cpus wins, as the kubelet's reservedSystemCPUs does")
	}
	d.log.WithFields(logrus.Fields{
		"config":   cfg.Summary(),
		"source":   cfg.Source(),
		"reserved": engine.Reserved().String(),
	}).Info("effective configuration")
}

// warnIgnoredKeys warns about each key of a configuration that is no
// longer used (it loaded: an operator's old file must not stop the
// daemon).
func warnIgnoredKeys(log *logrus.Logger, cfg config.Config, source string) {
	for _, k := range cfg.Ignored {
		log.WithFields(logrus.Fields{"key": k.Key, "line": k.Line, "source": source, "reason": k.Why}).
			Warn("configuration key is no longer used and is ignored; remove it")
	}
}

// configure applies a configuration handed over by the runtime (the
// pre-registered plugin's config file): policy keys, log settings and the
// reconcile period take effect; process-level keys (state_dir,
// socket_path, sysfs_root, procfs_root, cgroup_root, metrics_address) are fixed at
// start-up and only logged when they differ. shared_pool_updates is fixed
// once the plugin runs: a configuration asking for another value is
// refused, since the way the pool reaches the cgroups is chosen by the
// plugin (applier.ChooseMode: at start-up, and from the first container's cgroups
// path) and silently keeping the old one would leave the operator
// believing in a mode that is not running.
func (d *Daemon) configure(doc string) error {
	if strings.TrimSpace(doc) == "" {
		var err error
		d.led.Read(func(l *ledger.Tx) {
			if l.Engine() == nil {
				err = fmt.Errorf("the runtime sent no plugin configuration and the start-up one is refused: %w", l.PendingErr())
			}
		})
		return err
	}
	in, err := config.Load([]byte(doc))
	if err != nil {
		return fmt.Errorf("configuration from the runtime: %w", err)
	}
	warnIgnoredKeys(d.log, in, "runtime")
	return d.led.Update(func(l *ledger.Tx) error { return d.reconfigure(l, in) })
}

// reconfigure is configure's Update: in, loaded, becomes the running
// configuration.
func (d *Daemon) reconfigure(l *ledger.Tx, in config.Config) error {
	cur := l.Settings()
	next := withRuntimeKeys(cur, in)
	topo, err := d.processKeys(l, &next, in)
	if err != nil {
		return err
	}
	engine, err := buildEngine(topo, next, in.Line(config.KeyReservedCPUCount) > 0 || cur.Line(config.KeyReservedCPUCount) > 0)
	if err != nil {
		return fmt.Errorf("configuration from the runtime: %w", err)
	}
	if l.Engine() == nil {
		// First configuration (pre-registered plugin): the applier is
		// chosen now, and everything starts.
		root := cgroups.New(next.CgroupRoot)
		if err := applier.ChooseMode(&next, root, d.app.sd, "", d.log); err != nil {
			return fmt.Errorf("configuration from the runtime: %w", err)
		}
		d.app.ref.Store(&applier.Ref{Applier: applier.New(next.SharedPoolUpdates, d.led, d.obs, &d.conn, root, d.app.sd, d.log)})
		// Committed with the state restored from disk: one change.
		re := &ledger.Reconfigure{Cfg: next, Topo: topo, Engine: engine, State: engine.NewState()}
		applyLogSettings(d.log, next)
		d.log.WithFields(logrus.Fields{"config": next.Summary(), "reserved": engine.Reserved().String(), "cpus": topo.CPUs().String()}).
			Info("effective configuration (from the runtime)")
		warnZeroReservation(engine, next, d.log)
		if d.run.ctx == nil {
			// Not running (tests call configure directly): restore only.
			return d.restoreLocked(l, re)
		}
		return d.startLocked(l, re)
	}
	if mode := d.applier().Mode(); in.Line(config.KeySharedPoolUpdates) > 0 && in.SharedPoolUpdates != mode {
		return fmt.Errorf("configuration from the runtime: %w", in.KeyError(config.KeySharedPoolUpdates, in.SharedPoolUpdates,
			fmt.Sprintf("the plugin runs with shared_pool_updates = %q, chosen at start-up; it cannot change while the plugin runs: "+
				"change it in the plugin's configuration and restart the plugin", mode)))
	}
	next.SharedPoolUpdates = cur.SharedPoolUpdates
	// The state built under the old engine is carried over through a
	// snapshot, which the new engine reconciles (reserved set, options).
	st, notes, err := engine.FromSnapshot(l.Engine().Snapshot(l.State()))
	if err != nil {
		return fmt.Errorf("configuration from the runtime: rebuild state: %w", err)
	}
	for _, n := range notes {
		d.log.WithField("note", n).Warn("state reconciled with the runtime's configuration")
	}
	// Through Commit: the pool check, the generation and Changed (the
	// NodeResourceTopology exporter) follow the new configuration at once,
	// and the gauges read it at the next scrape.
	if _, err := l.Commit(ledger.Change{Reconfigure: &ledger.Reconfigure{Cfg: next, Topo: topo, Engine: engine, State: st}}); err != nil {
		return err
	}
	d.applier().Kick() // the worker picks up a new reconcile_period
	applyLogSettings(d.log, next)
	d.log.WithFields(logrus.Fields{"config": next.Summary(), "reserved": engine.Reserved().String()}).
		Info("configuration from the runtime applied")
	warnZeroReservation(engine, next, d.log)
	return nil
}

// withRuntimeKeys is cfg with the keys the runtime's configuration in
// sets that take effect at any time: policy, reconcile, log settings.
func withRuntimeKeys(cfg config.Config, in config.Config) config.Config {
	set := func(key string) bool { return in.Line(key) > 0 }
	if set(config.KeyCPUManagerPolicy) {
		cfg.CPUManagerPolicy = in.CPUManagerPolicy
	}
	if set(config.KeyCPUManagerPolicyOptions) {
		cfg.CPUManagerPolicyOptions = in.CPUManagerPolicyOptions
	}
	if set(config.KeyReservedSystemCPUs) {
		cfg.ReservedSystemCPUs = in.ReservedSystemCPUs
	}
	if set(config.KeyReservedCPUCount) {
		cfg.ReservedCPUCount = in.ReservedCPUCount
	}
	if set(config.KeyTopologyManagerPolicy) {
		cfg.TopologyManagerPolicy = in.TopologyManagerPolicy
	}
	if set(config.KeyTopologyManagerScope) {
		cfg.TopologyManagerScope = in.TopologyManagerScope
	}
	if set(config.KeyTopologyManagerPolicyOptions) {
		cfg.TopologyManagerPolicyOptions = in.TopologyManagerPolicyOptions
	}
	if set(config.KeyReconcilePeriod) {
		cfg.ReconcilePeriod = in.ReconcilePeriod
	}
	if set(config.KeySharedPoolUpdates) {
		cfg.SharedPoolUpdates = in.SharedPoolUpdates
	}
	if set(config.KeyLogLevel) {
		cfg.LogLevel = in.LogLevel
	}
	if set(config.KeyLogFormat) {
		cfg.LogFormat = in.LogFormat
	}
	return cfg
}

// processKeys handles the process-level keys of the runtime's
// configuration in: before anything started they complete next (a new
// sysfs_root gives the topology returned), afterwards they are fixed and
// only logged when they differ. Inside configure's Update.
func (d *Daemon) processKeys(l *ledger.Tx, next *config.Config, in config.Config) (*topology.Topology, error) {
	cur := l.Settings()
	set := func(key string) bool { return in.Line(key) > 0 }
	if l.Engine() != nil {
		for _, k := range []struct{ key, got, have string }{
			{config.KeyStateDir, in.StateDir, cur.StateDir},
			{config.KeySocketPath, in.SocketPath, cur.SocketPath},
			{config.KeySysfsRoot, in.SysfsRoot, cur.SysfsRoot},
			{config.KeyProcfsRoot, in.ProcfsRoot, cur.ProcfsRoot},
			{config.KeyCgroupRoot, in.CgroupRoot, cur.CgroupRoot},
			{config.KeyMetricsAddress, in.MetricsAddress, cur.MetricsAddress},
		} {
			if set(k.key) && k.got != k.have {
				d.log.WithFields(logrus.Fields{"key": k.key, "runtime_value": k.got, "value": k.have}).
					Warn("ignoring a process-level key from the runtime's configuration; set it with a flag or --config")
			}
		}
		return l.Topology(), nil
	}
	// Nothing has started yet (pre-registered plugin without --config):
	// the runtime's configuration is the whole one.
	for _, k := range []struct {
		key      string
		dst, src *string
	}{
		{config.KeyStateDir, &next.StateDir, &in.StateDir},
		{config.KeySysfsRoot, &next.SysfsRoot, &in.SysfsRoot},
		{config.KeyProcfsRoot, &next.ProcfsRoot, &in.ProcfsRoot},
		{config.KeyCgroupRoot, &next.CgroupRoot, &in.CgroupRoot},
		{config.KeyMetricsAddress, &next.MetricsAddress, &in.MetricsAddress},
	} {
		if set(k.key) {
			*k.dst = *k.src
		}
	}
	if next.SysfsRoot == cur.SysfsRoot || d.fixedTopo {
		return l.Topology(), nil
	}
	t, warns, err := sysfs.ReadWithWarnings(next.SysfsRoot)
	if err != nil {
		return nil, fmt.Errorf("configuration from the runtime: read topology from %s: %w", next.SysfsRoot, err)
	}
	logDiscoveryWarnings(d.log, warns)
	return t, nil
}

// ReconcileNow compares every known container's cgroup cpuset with its
// assignment and restores the ones that differ (through the runtime under
// in-answer, by writing the cgroup under direct). A container whose cgroup
// is gone is skipped. It returns how many containers drifted. The daemon
// runs it every reconcile_period; it is exported for tests and tools.
func (d *Daemon) ReconcileNow() int { return d.applier().Reconcile() }

// WithNow replaces the wall clock that stamps when a container got its
// CPUs (/state's since; test hook).
func WithNow(now func() time.Time) Option { return func(o *options) { o.now = now } }
