package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/webhook"
)

// relayStore is the store named by --db, of either dialect, with the
// stores of the relay's parts made from it. serve and every admin
// subcommand open it with openStore; nothing else in the relay knows the
// dialect.
type relayStore struct {
	cloud.Store
	// Now is the store's clock.
	Now cloud.Now
	// NewAgentStore makes the agent endpoint's store; close it before
	// the store.
	NewAgentStore func(log *slog.Logger) (agentStore, error)
	// Engine is the alert engine's store, Outbox the webhook outbox.
	Engine alert.Store
	Outbox webhook.Store

	// Set when several relays may share the store (PostgreSQL), nil on
	// SQLite: Listen hears what other relays change until ctx ends,
	// StaleConfigs lists the devices connected here whose agent has not
	// applied their desired configuration, Lease takes or renews a
	// cluster-wide lease for this relay.
	Listen       func(ctx context.Context, h *clusterHandlers, log *slog.Logger) error
	StaleConfigs func(ctx context.Context) ([]string, error)
	Lease        func(ctx context.Context, name string, ttl time.Duration) (bool, error)
	// Relay names this relay process in the cluster.
	Relay string
	// Panel is the panel's and the user subcommands' store.
	Panel cloud.PanelStore
}

// agentStore is an agent endpoint store that holds resources of its own.
type agentStore interface {
	agentlink.Store
	Close() error
}

// storeOptions are how openStore treats a missing database.
type storeOptions struct {
	// Create lets a missing SQLite file be created (serve, org create);
	// otherwise a missing file is an error, so that a mistyped --db does
	// not silently start an empty database.
	Create bool
}

// isPostgresURL reports whether --db names a PostgreSQL database
// (postgres:// or postgresql://) rather than a SQLite file.
func isPostgresURL(db string) bool {
	l := strings.ToLower(db)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// openStore opens the store named by db (a PostgreSQL URL or a SQLite file
// path), applying pending migrations.
func openStore(ctx context.Context, db string, o storeOptions) (*relayStore, error) {
	if isPostgresURL(db) {
		return openPostgres(ctx, db)
	}
	if !o.Create {
		if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("database %s does not exist (create an organization first, or check --db / FLEET_DB)", db)
		}
	}
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	return &relayStore{
		Store: s,
		Now:   s.Now,
		NewAgentStore: func(log *slog.Logger) (agentStore, error) {
			return sqlite.NewAgentStore(s, log)
		},
		Engine: sqlite.NewAlertEngineStore(s),
		Outbox: sqlite.NewWebhookStore(s),
		Panel:  sqlite.NewPanelStore(s),
	}, nil
}

// openPostgres opens a PostgreSQL store (migrating an empty database).
func openPostgres(ctx context.Context, url string) (*relayStore, error) {
	s, err := postgres.Open(ctx, url)
	if err != nil {
		return nil, err
	}
	relay := relayID()
	return &relayStore{
		Store: s,
		Now:   func() time.Time { return s.Now() },
		NewAgentStore: func(log *slog.Logger) (agentStore, error) {
			return postgres.NewAgentStore(s, log, relay), nil
		},
		Engine: postgres.NewAlertEngineStore(s),
		Outbox: postgres.NewWebhookStore(s, relay),
		Listen: func(ctx context.Context, h *clusterHandlers, log *slog.Logger) error {
			return s.Listen(ctx, h.postgresHandlers(), log)
		},
		StaleConfigs: func(ctx context.Context) ([]string, error) { return s.StaleConfigs(ctx, relay) },
		Lease: func(ctx context.Context, name string, ttl time.Duration) (bool, error) {
			return s.TryLease(ctx, name, relay, ttl)
		},
		Relay: relay,
		Panel: postgres.NewPanelStore(s),
	}, nil
}

// relayID names this relay process in the cluster (the devices' presence,
// webhook leases): host name, process id and a random suffix.
func relayID() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// redactDB returns --db as it may be logged: a PostgreSQL URL without its
// password.
func redactDB(db string) string {
	if !isPostgresURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
