package relay

import (
	"context"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud/alert"
)

// startAlerts runs the alert engine (cloud/alert). The agent endpoint hands
// it what agents report; it opens and resolves alerts by the
// organizations' rules and tells Main.AlertObservers (the webhook
// notifier). While this relay holds the "alert-sweep" lease (one relay of
// a cluster at a time) it also sweeps for devices offline or held in a
// status, and reminds of unacknowledged alerts. It starts before the agent
// endpoint, so that it stops after it: no report reaches a stopped engine.
//
// The engine caches each organization's rules: the store tells it of
// changes made through this relay (ObserveRules), the cluster listener of
// those made through another relay (PostgreSQL), and on SQLite a move of
// the data version of those another process (the admin CLI) may have made.
func (m *Main) startAlerts(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	log := m.Logger.With("component", "alert")
	m.alerts = alert.New(alert.Config{Store: m.DB.Engine, Points: m.DB.Points(), Observer: &m.AlertObservers, Logger: log, Now: m.DB.Now,
		Leader: leaseHolder(m.DB, "alert-sweep", 15*time.Second, log)})
	m.DB.ObserveRules(m.alerts)
	forget := func(context.Context) error { m.alerts.ForgetRules(); return nil }
	stopWatch := func(context.Context) error { return nil }
	m.Cluster.Rules = append(m.Cluster.Rules, m.alerts.RulesChanged)
	m.Cluster.DeviceTags = append(m.Cluster.DeviceTags, m.alerts.DeviceTagsChanged)
	if m.DB.Cluster != nil {
		m.Cluster.Resync = append(m.Cluster.Resync, forget)
	} else if v := m.DB.Versioner(); v != nil {
		stopWatch = background(ctx, func(ctx context.Context) { watchVersion(ctx, v, rulesPoll, forget, log) })
	}
	stopRun := background(ctx, m.alerts.Run)
	return func(sctx context.Context) error {
		stopWatch(sctx)
		return stopRun(sctx)
	}, nil
}

// rulesPoll is how often a relay without cluster notifications (SQLite)
// reads the store's data version to find rules another process changed.
const rulesPoll = time.Second
