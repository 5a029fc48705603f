package cloud

import (
	"context"
	"log/slog"
	"time"
)

// Stores is one open store as the relay uses it: the services and the
// administration (Store), and the stores of the relay's parts made from it,
// whichever dialect holds it. sqlite.DB.Stores and postgres.DB.Stores
// return it; the relay (cloud/cmd/fleet-relay) and the shared store suite
// (cloud/storetest) take it, and nothing else knows the dialect.
//
// The parts' store interfaces (AgentStore, AlertEngineStore, Outbox) are
// declared here rather than in cloud/agentlink, cloud/alert and
// cloud/webhook, which import cloud: those packages keep their names for
// them as aliases (agentlink.Store, alert.Store, webhook.Store).
type Stores struct {
	Store
	// Now is the store's clock.
	Now Now
	// Panel is the panel's and the user subcommands' store.
	Panel PanelStore
	// NewAgentStore makes the agent endpoint's store; close it before the
	// Store.
	NewAgentStore func(log *slog.Logger) (AgentStoreCloser, error)
	// Engine is the alert engine's store, Outbox the webhook outbox (a
	// SharedOutbox when Cluster is set).
	Engine AlertEngineStore
	Outbox Outbox
	// Commands is the agent endpoint's and the rollout engine's store of
	// device commands.
	Commands CommandStore
	// PointHistory compacts and sweeps point history.
	PointHistory PointHistory
	// StaleConfigs lists the devices connected to this relay whose agent
	// has not applied their desired configuration. The relay asks it when
	// a change may have reached the store without reaching it: on
	// PostgreSQL after its cluster listener reconnects, on SQLite whenever
	// the data version (Versioner) moved, since another process (the admin
	// CLI) may have changed a desired configuration.
	StaleConfigs func(ctx context.Context) ([]string, error)
	// Cluster is set when several relays may share the store
	// (PostgreSQL), nil on SQLite.
	Cluster *Cluster
}

// AgentStoreCloser is an agent endpoint store that holds resources of its
// own (a writer goroutine).
type AgentStoreCloser interface {
	AgentStore
	Close() error
}

// Cluster is what a store shared by several relays adds to Stores.
type Cluster struct {
	// Relay names this relay process in the cluster.
	Relay string
	// Listen hears what other relays change until ctx ends.
	Listen func(ctx context.Context, h ClusterHandlers, log *slog.Logger) error
	// Lease takes or renews a cluster-wide lease for this relay.
	Lease func(ctx context.Context, name string, ttl time.Duration) (bool, error)
}

// ClusterHandlers are what a relay does with the cluster's notifications;
// nil fields are ignored. Each is called on the listener's goroutine and
// must not block for long.
type ClusterHandlers struct {
	// Config: the device's desired serial configuration changed.
	Config func(deviceID string)
	// Presence: session took the device (on any relay).
	Presence func(deviceID, session string)
	// Revoked: the device's token was revoked.
	Revoked func(deviceID string)
	// Outbox: webhook deliveries were queued for another relay to take.
	Outbox func()
	// Rules: the organization's rules (or silences, or notification
	// channels) changed.
	Rules func(orgID string)
	// DeviceTags: a device's tags changed.
	DeviceTags func(orgID, deviceID string)
	// Resync runs after every (re)connection of the listener, once it
	// listens: notifications sent while it was not listening are lost, so
	// it catches up on what they would have said.
	Resync func(ctx context.Context) error
}
