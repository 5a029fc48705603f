package relay

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
)

// clusterHandlers are what the relay's parts do with the changes other
// relays make on a store several relays share (PostgreSQL): parts append
// to Main.Cluster as they start, and the cluster listener, started after
// them, calls them. On SQLite (one relay) nothing calls them.
type clusterHandlers struct {
	// Config: a device's desired serial configuration changed.
	Config []func(deviceID string)
	// Presence: session took the device, on some relay.
	Presence []func(deviceID, session string)
	// Revoked: a device token was revoked.
	Revoked []func(deviceID string)
	// Outbox: webhook deliveries were queued for another relay to take.
	Outbox []func()
	// Rules: an organization's rules, silences or notification channels
	// changed.
	Rules []func(orgID string)
	// DeviceTags: a device's tags changed.
	DeviceTags []func(orgID, deviceID string)
	// Resync: the listener (re)connected; catch up on what it may have
	// missed while it was not listening.
	Resync []func(ctx context.Context) error
}

// handlers turns h into the store's cluster handlers.
func (h *clusterHandlers) handlers() cloud.ClusterHandlers {
	return cloud.ClusterHandlers{
		Config: func(id string) {
			for _, f := range h.Config {
				f(id)
			}
		},
		Presence: func(id, session string) {
			for _, f := range h.Presence {
				f(id, session)
			}
		},
		Revoked: func(id string) {
			for _, f := range h.Revoked {
				f(id)
			}
		},
		Outbox: func() {
			for _, f := range h.Outbox {
				f()
			}
		},
		Rules: func(orgID string) {
			for _, f := range h.Rules {
				f(orgID)
			}
		},
		DeviceTags: func(orgID, deviceID string) {
			for _, f := range h.DeviceTags {
				f(orgID, deviceID)
			}
		},
		Resync: func(ctx context.Context) error {
			for _, f := range h.Resync {
				if err := f(ctx); err != nil {
					return err
				}
			}
			return nil
		},
	}
}

// startClusterListener hears what other relays change on a shared store
// (PostgreSQL LISTEN) and hands it to Main.Cluster, reconnecting when its
// connection drops; on SQLite there is nothing to hear.
func (m *Main) startClusterListener(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	if m.DB.Cluster == nil {
		return nil, nil
	}
	log := m.Logger.With("component", "cluster")
	return background(ctx, func(ctx context.Context) {
		if err := m.DB.Cluster.Listen(ctx, m.Cluster.handlers(), log); err != nil && ctx.Err() == nil {
			log.Error("cluster listener stopped", "err", err)
		}
	}), nil
}

// leaseHolder returns a test of whether this relay holds the cluster-wide
// lease name (taking or renewing it for ttl), so that one relay at a time
// runs a job and another takes over within ttl when it dies; on a store
// without leases (one relay) the answer is always yes.
func leaseHolder(st *cloud.Stores, name string, ttl time.Duration, log *slog.Logger) func(ctx context.Context) bool {
	if st.Cluster == nil {
		return func(context.Context) bool { return true }
	}
	return func(ctx context.Context) bool {
		ok, err := st.Cluster.Lease(ctx, name, ttl)
		if err != nil && ctx.Err() == nil {
			log.Warn("lease not taken", "lease", name, "err", err)
		}
		return ok
	}
}
