// Package nrtexport keeps the node's NodeResourceTopology object (see
// pkg/nrt) up to date on the API server: after every change of the
// exclusive assignments (Kick, coalesced, at most one write per
// MinInterval), on start, and again with backoff while the API server is
// unreachable. It never blocks its caller: Kick only marks the object
// stale, and the writes happen on the exporter's own goroutine.
package nrtexport

import (
	"bytes"
	"context"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sirupsen/logrus"

	"github.com/nri-cpualign/nri-cpualign/pkg/nrt"
)

// Applier writes the object (Client, or a fake in tests).
type Applier interface {
	Apply(ctx context.Context, obj nrt.Object) error
}

// Defaults of the exporter's timing.
const (
	// DefaultMinInterval bounds the write rate: changes within it are
	// coalesced into one write.
	DefaultMinInterval = time.Second
	// DefaultBackoffMin and DefaultBackoffMax bound the retry delay after
	// a failed write (doubling).
	DefaultBackoffMin = time.Second
	DefaultBackoffMax = 30 * time.Second
	// DefaultResync rewrites an unchanged object, restoring one deleted or
	// edited behind the plugin's back.
	DefaultResync = 5 * time.Minute
)

// Exporter writes the object Build returns whenever it may have changed.
type Exporter struct {
	client Applier
	build  func() (nrt.Object, error)
	log    logrus.FieldLogger
	kick   chan struct{}

	MinInterval, BackoffMin, BackoffMax, Resync time.Duration
	// after is time.After; tests replace it to step the loop.
	after func(time.Duration) <-chan time.Time
	now   func() time.Time

	updates, failures prometheus.Counter
	lastSuccess       prometheus.Gauge
}

// New returns an exporter that writes build's object through client.
func New(client Applier, build func() (nrt.Object, error), log logrus.FieldLogger) *Exporter {
	return &Exporter{
		client: client, build: build, log: log, kick: make(chan struct{}, 1),
		MinInterval: DefaultMinInterval, BackoffMin: DefaultBackoffMin, BackoffMax: DefaultBackoffMax, Resync: DefaultResync,
		after: time.After, now: time.Now,
		updates: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_nrt_updates_total",
			Help: "NodeResourceTopology writes the API server accepted."}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{Name: "nri_cpualign_nrt_update_failures_total",
			Help: "NodeResourceTopology writes that failed (each is retried with backoff)."}),
		lastSuccess: prometheus.NewGauge(prometheus.GaugeOpts{Name: "nri_cpualign_nrt_last_success_timestamp_seconds",
			Help: "Unix time of the last NodeResourceTopology write the API server accepted (0: none yet)."}),
	}
}

// Collectors are the exporter's metrics, for the daemon's registry.
func (e *Exporter) Collectors() []prometheus.Collector {
	return []prometheus.Collector{e.updates, e.failures, e.lastSuccess}
}

// Kick marks the object stale; it never blocks.
func (e *Exporter) Kick() {
	select {
	case e.kick <- struct{}{}:
	default:
	}
}

// Run writes the object now and then after every Kick, until ctx ends.
func (e *Exporter) Run(ctx context.Context) {
	var last []byte // the body of the last accepted write
	backoff := time.Duration(0)
	stale, force := true, true
	for {
		if stale {
			stale = false
			wait, retry := e.write(ctx, &last, force, &backoff)
			if ctx.Err() != nil {
				return
			}
			if retry {
				stale = true // force stays: the retry must write
			} else {
				force = false
			}
			if wait > 0 {
				select {
				case <-ctx.Done():
					return
				case <-e.after(wait):
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-e.kick:
			stale = true
		case <-e.after(e.Resync):
			stale, force = true, true
		}
	}
}

// write builds and writes the object once; it returns how long to wait
// before the next write and whether this one must be retried.
func (e *Exporter) write(ctx context.Context, last *[]byte, force bool, backoff *time.Duration) (time.Duration, bool) {
	obj, err := e.build()
	if err != nil {
		// The state itself is wrong (or not there yet): the next change
		// builds again.
		e.failures.Inc()
		e.log.WithError(err).Warn("NodeResourceTopology not built")
		return 0, false
	}
	body, err := json.Marshal(obj)
	if err != nil {
		e.failures.Inc()
		e.log.WithError(err).Warn("NodeResourceTopology not encoded")
		return 0, false
	}
	if !force && bytes.Equal(body, *last) {
		return 0, false
	}
	if err := e.client.Apply(ctx, obj); err != nil {
		if ctx.Err() != nil {
			return 0, false
		}
		e.failures.Inc()
		*backoff = min(max(2**backoff, e.BackoffMin), e.BackoffMax)
		e.log.WithError(err).WithFields(logrus.Fields{"node": obj.Metadata.Name, "retry_in": backoff.String()}).
			Warn("NodeResourceTopology update failed; retrying")
		return *backoff, true
	}
	if *backoff > 0 || *last == nil {
		e.log.WithField("node", obj.Metadata.Name).Info("NodeResourceTopology written")
	}
	*backoff = 0
	*last = body
	e.updates.Inc()
	e.lastSuccess.Set(float64(e.now().UnixNano()) / 1e9)
	return e.MinInterval, false
}
