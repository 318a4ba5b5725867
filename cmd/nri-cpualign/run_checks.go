package main

import (
	"flag"
	"fmt"

	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/internal/buildinfo"
	"github.com/nri-cpualign/nri-cpualign/pkg/config"
)

// requireHealthz is run's --require-healthz check: the DaemonSet's probes
// ask /healthz on the metrics address, so with metrics off every probe
// fails and the pod is restarted forever; better to refuse at once and
// say where the empty address came from.
func requireHealthz(fs *flag.FlagSet, cfg config.Config) error {
	if cfg.MetricsAddress != "" {
		return nil
	}
	const why = "metrics are off, so /healthz is not served and the liveness and readiness probes cannot pass; " +
		`set it to host:port (default "` + config.DefaultMetricsAddress + `") or run without --require-healthz`
	fromFlag := false
	fs.Visit(func(fl *flag.Flag) { fromFlag = fromFlag || fl.Name == "metrics-address" })
	if fromFlag {
		return fmt.Errorf("--require-healthz: --metrics-address %q: %s", fs.Lookup("metrics-address").Value.String(), why)
	}
	return fmt.Errorf("--require-healthz: %w", cfg.KeyError(config.KeyMetricsAddress, "", "empty: "+why))
}

// logVersion writes the start-up line naming the build, in the configured
// log format (the daemon applies the rest of the log settings itself).
func logVersion(log *logrus.Logger, cfg config.Config) {
	if cfg.LogFormat == "json" {
		log.SetFormatter(&logrus.JSONFormatter{})
	}
	log.WithFields(logrus.Fields(buildinfo.Read().LogFields())).Info("nri-cpualign starting")
}
