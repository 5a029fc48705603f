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
// a cluster at a time) it also opens device_offline for devices silent
// for three heartbeat intervals. It starts before the agent endpoint, so
// that it stops after it: no report reaches a stopped engine.
func (m *Main) startAlerts(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	log := m.Logger.With("component", "alert")
	m.alerts = alert.New(alert.Config{Store: m.DB.Engine, Observer: &m.AlertObservers, Logger: log, Now: m.DB.Now,
		Leader: leaseHolder(m.DB, "alert-sweep", 15*time.Second, log)})
	return background(ctx, m.alerts.Run), nil
}
