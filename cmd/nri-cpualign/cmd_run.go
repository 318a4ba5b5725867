package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/containerd/nri/pkg/api"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/daemon"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// Exit codes of `run`.
const (
	exitOK     = 0
	exitFailed = 1 // the daemon stopped on an error (e.g. lost connection in pre-registered mode)
	exitUsage  = 2 // bad flags or configuration: restarting will not help
)

// cmdRun is `nri-cpualign run`: the NRI plugin daemon. It stops cleanly on
// SIGINT or SIGTERM.
func cmdRun(args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return runDaemon(ctx, args, stdout, stderr)
}

// runFlags are the command-line flags; each one that is set overrides the
// configuration key of the same meaning.
type runFlags struct {
	configFile, importKubelet                                               string
	socketPath, stateDir, sysfsRoot, procfsRoot, cgroupRoot, metricsAddress string
	logLevel, logFormat, reconcilePeriod                                    string
	requireHealthz                                                          bool
}

func runDaemon(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("nri-cpualign run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var f runFlags
	fs.StringVar(&f.configFile, "config", "", "TOML configuration file (keys: see deploy/nri-cpualign.toml); flags below override it")
	fs.StringVar(&f.socketPath, "socket-path", "", "NRI socket (socket_path, default "+config.DefaultSocketPath+")")
	fs.StringVar(&f.stateDir, "state-dir", "", "directory of the checkpoint (state_dir, default "+config.DefaultStateDir+")")
	fs.StringVar(&f.sysfsRoot, "sysfs-root", "", "directory playing /sys for topology discovery (sysfs_root, default /sys)")
	fs.StringVar(&f.procfsRoot, "procfs-root", "", "directory playing /proc for the NVIDIA GPU lookup (procfs_root, default /proc)")
	fs.StringVar(&f.cgroupRoot, "cgroup-root", "", "cgroup mount point for the reconcile loop (cgroup_root, default /sys/fs/cgroup)")
	fs.StringVar(&f.metricsAddress, "metrics-address", "", `host:port for /metrics, /state and /healthz (metrics_address); "off" disables`)
	fs.StringVar(&f.logLevel, "log-level", "", "log level (log_level: debug, info, warn, error)")
	fs.StringVar(&f.logFormat, "log-format", "", "log format (log_format: text or json)")
	fs.StringVar(&f.reconcilePeriod, "reconcile-period", "", `reconcile loop period (reconcile_period, e.g. "10s"; "0" disables)`)
	fs.StringVar(&f.importKubelet, "import-kubelet-state", "", "on a first start (no checkpoint), adopt the assignments of the kubelet's cpu_manager_state FILE")
	fs.BoolVar(&f.requireHealthz, "require-healthz", false, "refuse to start when metrics_address is empty: liveness and readiness probes need /healthz")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: nri-cpualign run [flags]\n\nRuns the NRI plugin (name cpualign, index 90). Flags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "nri-cpualign run: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	cfg, err := loadRunConfig(fs, f)
	if err == nil && f.requireHealthz {
		err = requireHealthz(fs, cfg)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nri-cpualign run: %v\n", err)
		return exitUsage
	}

	log := logrus.New()
	log.SetOutput(stderr)
	logVersion(log, cfg)
	opts := []daemon.Option{daemon.WithLogger(log), daemon.WithKubeletState(f.importKubelet)}
	if os.Getenv(api.PluginSocketEnvVar) != "" && f.configFile == "" {
		// Started by the runtime from its plugin directory: the policy
		// configuration comes with Configure (the plugin's config file in
		// the runtime's plugin config directory).
		opts = append(opts, daemon.WithConfigFromRuntime())
	}
	d, err := daemon.New(cfg, opts...)
	if err != nil {
		fmt.Fprintf(stderr, "nri-cpualign run: %v\n", err)
		return exitUsage
	}
	if err := d.Run(ctx); err != nil {
		log.WithError(err).Error("nri-cpualign stopped")
		return exitFailed
	}
	log.Info("nri-cpualign stopped")
	return exitOK
}

// loadRunConfig reads --config (or the defaults) and applies the flags
// that were set, then validates the result.
func loadRunConfig(fs *flag.FlagSet, f runFlags) (config.Config, error) {
	cfg := config.Default()
	if f.configFile != "" {
		c, err := config.LoadFile(f.configFile)
		if err != nil {
			return cfg, err
		}
		cfg = c
	}
	var errs []error
	fs.Visit(func(fl *flag.Flag) {
		v := fl.Value.String()
		switch fl.Name {
		case "socket-path":
			cfg.SocketPath = v
		case "state-dir":
			cfg.StateDir = v
		case "sysfs-root":
			cfg.SysfsRoot = v
		case "procfs-root":
			cfg.ProcfsRoot = v
		case "cgroup-root":
			cfg.CgroupRoot = v
		case "metrics-address":
			if v == "off" {
				v = ""
			}
			cfg.MetricsAddress = v
		case "log-level":
			cfg.LogLevel = v
		case "log-format":
			cfg.LogFormat = v
		case "reconcile-period":
			p, err := time.ParseDuration(v)
			if err != nil {
				errs = append(errs, fmt.Errorf("flag --reconcile-period: bad value %q: want a duration like \"10s\" or \"0\"", v))
				return
			}
			cfg.ReconcilePeriod = config.Duration(p)
		}
	})
	if err := errors.Join(errs...); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	// --import-kubelet-state is read only on a first start (no checkpoint),
	// so a missing file is an error only then (reported by the daemon).
	return cfg, nil
}
