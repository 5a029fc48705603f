package relay

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/tick"
)

// part is a piece of the relay beside the public API. Run starts the
// parts in order once the store is open and before the API serves: start
// may mount handlers on mux and start goroutines bound to ctx. The stop it
// returns (nil: nothing to stop) runs at Close after the HTTP server
// drained and before the store closes; stops run in the reverse order of
// the starts.
type part struct {
	name  string
	start func(ctx context.Context, mux *http.ServeMux) (stop func(context.Context) error, err error)
}

// relayParts lists the relay's parts in the order they start. The order
// matters at shutdown: the agent endpoint stops before the alert engine
// and the webhook sender it feeds, and the alert engine before the webhook
// sender it tells, so that no report reaches a stopped engine and no alert
// a closed dispatcher; the rollout engine stops before the agent endpoint
// it tells. The cluster listener starts once every part said
// what it does with other relays' changes (Main.Cluster).
func (m *Main) relayParts() []part {
	return []part{
		{"metrics", m.startMetrics},
		{"rate limits", m.startRateLimits},
		{"webhook sender", m.startWebhooks},
		{"alert engine", m.startAlerts},
		{"agent endpoint", m.startAgentLink},
		{"rollout engine", m.startRollouts},
		{"panel", m.startPanel},
		{"cluster listener", m.startClusterListener},
		{"retention sweep", m.startRetention},
		{"point compactor", m.startPointCompactor},
	}
}

// startParts starts m.parts in order; Close calls the stops they return
// in reverse order.
func (m *Main) startParts(ctx context.Context, mux *http.ServeMux) error {
	for _, p := range m.parts {
		stop, err := p.start(ctx, mux)
		if err != nil {
			return fmt.Errorf("start %s: %w", p.name, err)
		}
		if stop == nil {
			continue
		}
		name := p.name
		m.stops = append(m.stops, func(ctx context.Context) error {
			if err := stop(ctx); err != nil {
				return fmt.Errorf("stop %s: %w", name, err)
			}
			return nil
		})
	}
	return nil
}

// background runs run in a goroutine until ctx ends or the stop it
// returns is called; stop waits for run to return.
func background(ctx context.Context, run func(ctx context.Context)) func(context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		run(ctx)
	}()
	return func(context.Context) error {
		cancel()
		<-done
		return nil
	}
}

// startRetention sweeps metrics and events older than --retention, point
// history older than --point-retention and audit records older than
// --audit-retention, every
// --retention-interval while this relay holds the "retention" lease (one
// relay of a cluster at a time), logging what it removed and any failure.
func (m *Main) startRetention(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	keep := m.Config.Retention
	log := m.Logger.With("component", "retention")
	return m.whileLeader(ctx, "retention", m.Config.RetentionInterval, log, func(ctx context.Context) {
		metrics, events, err := m.DB.SweepRetention(ctx, keep)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("retention sweep failed", "err", err)
		case metrics+events > 0:
			log.Info("retention sweep", "metrics_deleted", metrics, "events_deleted", events)
		}
		points, err := m.DB.PointHistory.SweepPoints(ctx, m.Config.PointRetention)
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("point retention sweep failed", "err", err)
		case points > 0:
			log.Info("point retention sweep", "point_samples_deleted", points)
		}
		m.sweepAudit(ctx, log)
	}), nil
}

// whileLeader runs job in the background now and every interval while
// this relay holds the cluster-wide lease name (renewed for twice the
// interval and a minute; always on a store without leases), until ctx
// ends; the function returned waits for it to stop.
func (m *Main) whileLeader(ctx context.Context, name string, interval time.Duration, log *slog.Logger, job func(ctx context.Context)) func(context.Context) error {
	leader := leaseHolder(m.DB, name, 2*interval+time.Minute, log)
	return background(ctx, func(ctx context.Context) {
		tick.NowAndEvery(ctx, interval, func() {
			if leader(ctx) {
				job(ctx)
			}
		})
	})
}

// pointCompactEvery is how often the point compactor runs.
const pointCompactEvery = 30 * time.Second

// startPointCompactor folds point history's head samples into compressed
// chunks (cloud.PointHistory.CompactPoints) every 30 s while this relay
// holds the "points" lease (one relay of a cluster at a time).
func (m *Main) startPointCompactor(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	log := m.Logger.With("component", "points")
	return m.whileLeader(ctx, "points", pointCompactEvery, log, func(ctx context.Context) {
		start := time.Now()
		n, err := m.DB.PointHistory.CompactPoints(ctx, cloud.DefaultPointCompaction(m.DB.Now()))
		switch {
		case err != nil && ctx.Err() == nil:
			log.Error("point compaction failed", "err", err)
		case n > 0:
			log.Debug("point compaction", "samples", n, "took", time.Since(start))
		}
	}), nil
}
