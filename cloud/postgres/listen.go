package postgres

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgxlisten"

	"github.com/fleet/fleet/cloud"
)

// What one relay changes, the others hear through LISTEN/NOTIFY: the store
// sends a notification in the transaction that makes the change, so it is
// delivered at commit (and never for a rollback), to every relay listening.
const (
	channelPresence = "fleet_presence" // payload "<device id> <session>": the session took the device
	channelRevoked  = "fleet_revoked"  // payload: the device whose token was revoked
	channelOutbox   = "fleet_outbox"   // webhook deliveries this relay did not take were queued
	channelConfig   = "fleet_config"   // payload: the device whose desired serial configuration changed
	channelRules    = "fleet_rules"    // payload: the organization whose rules, silences or notification channels changed
	// channelDeviceTags: payload "<org id> <device id>", whose tags changed.
	channelDeviceTags = "fleet_device_tags"
)

// Handlers are what a relay does with the cluster's notifications.
type Handlers = cloud.ClusterHandlers

// ListenReconnect is how long the listener waits before it connects again
// after losing its connection.
var ListenReconnect = time.Second

// Listen listens on a connection of its own (not the pool's) until ctx
// ends, reconnecting after ListenReconnect when the connection is lost,
// and calls h.
func (db *DB) Listen(ctx context.Context, h Handlers, log *slog.Logger) error {
	l := &pgxlisten.Listener{
		Connect: func(ctx context.Context) (*pgx.Conn, error) {
			cfg := db.Pool.Config().ConnConfig.Copy()
			c, err := pgx.ConnectConfig(ctx, cfg)
			return c, redact(err, db.password)
		},
		LogError: func(ctx context.Context, err error) {
			if ctx.Err() == nil {
				log.Warn("cluster listener", "err", redact(err, db.password))
			}
		},
		ReconnectDelay: ListenReconnect,
	}
	call := func(f func(string)) pgxlisten.HandlerFunc {
		return func(_ context.Context, n *pgconn.Notification, _ *pgx.Conn) error {
			if f != nil {
				f(n.Payload)
			}
			return nil
		}
	}
	l.Handle(channelConfig, resync{call(h.Config), h.Resync,
		[]string{channelPresence, channelRevoked, channelOutbox, channelConfig, channelRules, channelDeviceTags}})
	l.Handle(channelPresence, call(func(p string) {
		if id, session, ok := strings.Cut(p, " "); ok && h.Presence != nil {
			h.Presence(id, session)
		}
	}))
	l.Handle(channelRevoked, call(h.Revoked))
	l.Handle(channelRules, call(h.Rules))
	l.Handle(channelDeviceTags, call(func(p string) {
		if org, id, ok := strings.Cut(p, " "); ok && h.DeviceTags != nil {
			h.DeviceTags(org, id)
		}
	}))
	l.Handle(channelOutbox, call(func(string) {
		if h.Outbox != nil {
			h.Outbox()
		}
	}))
	err := l.Listen(ctx)
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// resync is the config channel's handler: its backlog (what was missed
// while not listening) is h.Resync. pgxlisten runs a channel's backlog
// right after it LISTENs on that channel, the channels in a map's order,
// so some channels may not be listened to yet: resync LISTENs on every
// channel first (LISTEN twice is harmless), so that Resync runs once the
// relay hears everything and nothing sent after it is lost.
type resync struct {
	pgxlisten.HandlerFunc
	fn       func(ctx context.Context) error
	channels []string
}

func (r resync) HandleBacklog(ctx context.Context, _ string, conn *pgx.Conn) error {
	for _, c := range r.channels {
		if _, err := conn.Exec(ctx, "LISTEN "+pgx.Identifier{c}.Sanitize()); err != nil {
			return fmt.Errorf("listen %s: %w", c, err)
		}
	}
	if r.fn == nil {
		return nil
	}
	return r.fn(ctx)
}

// notify sends a notification on channel in tx.
func notify(ctx context.Context, tx pgx.Tx, channel, payload string) error {
	if _, err := tx.Exec(ctx, `SELECT pg_notify($1, $2)`, channel, payload); err != nil {
		return storeError("postgres: notify %s: %w", channel, err)
	}
	return nil
}
