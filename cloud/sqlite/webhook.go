package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/cloud/webhook"
)

// WebhookStore is the webhook outbox (webhook.Store) on SQLite.
type WebhookStore struct {
	db                   *DB
	sqlstore.OutboxReads // OrgSecrets, Forwarding, Pending

	mu sync.Mutex // guards the lazily prepared statements below
	st struct{ insert, attempt, update *sql.Stmt }
}

var _ webhook.Store = (*WebhookStore)(nil)

// NewWebhookStore returns the outbox of db.
func NewWebhookStore(db *DB) *WebhookStore {
	return &WebhookStore{db: db, OutboxReads: sqlstore.OutboxReads{Store: &db.Store}}
}

// WriteOutbox inserts deliveries and records attempts with their delivery's
// new state in one transaction, with statements prepared once on the
// writer connection.
func (s *WebhookStore) WriteOutbox(ctx context.Context, inserts []*webhook.Delivery, attempts []webhook.Attempt) error {
	if len(inserts) == 0 && len(attempts) == 0 {
		return nil
	}
	if err := s.prepare(ctx); err != nil {
		return err
	}
	err := s.db.WriteTx(ctx, func(tx *sql.Tx) error {
		if len(inserts) > 0 {
			ins := tx.StmtContext(ctx, s.st.insert)
			for _, d := range inserts {
				state := d.State
				if state == "" {
					state = webhook.StatePending
				}
				if err := ins.QueryRowContext(ctx, d.ID, d.OrgID, d.DeviceID, d.Event, d.URL, d.Body, string(state), d.Attempts,
					d.NextAttemptAt.UnixMilli(), d.CreatedAt.UnixMilli(), d.Kind, d.ChannelID).Scan(&d.Seq); err != nil {
					return err
				}
			}
		}
		if len(attempts) > 0 {
			att, upd := tx.StmtContext(ctx, s.st.attempt), tx.StmtContext(ctx, s.st.update)
			for _, a := range attempts {
				if a.Number > 0 { // 0: a state change without an attempt (a dropped delivery)
					if _, err := att.ExecContext(ctx, a.DeliveryID, a.Number, a.At.UnixMilli(), nullStatus(a.StatusCode), a.Error, a.Duration.Milliseconds()); err != nil {
						return err
					}
				}
				next := a.NextAttemptAt
				var ended sql.NullInt64
				if a.State != webhook.StatePending {
					next = a.At
					ended = sql.NullInt64{Int64: a.At.Add(a.Duration).UnixMilli(), Valid: true}
				}
				if _, err := upd.ExecContext(ctx, string(a.State), a.Number, next.UnixMilli(), nullStatus(a.StatusCode), a.Error, ended, a.DeliveryID); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("sqlite: webhook outbox: %w", err)
	}
	return nil
}

// prepare prepares the outbox statements on the writer connection.
func (s *WebhookStore) prepare(ctx context.Context) error {
	for _, p := range []struct {
		dst **sql.Stmt
		sql string
	}{
		{&s.st.insert, `INSERT INTO webhook_deliveries (id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, created_at, kind, channel_id)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING seq`},
		{&s.st.attempt, `INSERT OR REPLACE INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms) VALUES (?, ?, ?, ?, ?, ?)`},
		{&s.st.update, `UPDATE webhook_deliveries SET state = ?, attempts = MAX(attempts, ?), next_attempt_at = ?, last_status = ?, last_error = ?, ended_at = ?
			WHERE id = ? AND state = 'pending'`},
	} {
		if _, err := s.stmt(ctx, p.dst, s.db.W, p.sql); err != nil {
			return fmt.Errorf("sqlite: webhook outbox: prepare: %w", err)
		}
	}
	return nil
}

// stmt returns *dst, preparing query on pool the first time (a failed
// prepare is tried again on the next call).
func (s *WebhookStore) stmt(ctx context.Context, dst **sql.Stmt, pool *sql.DB, query string) (*sql.Stmt, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if *dst != nil {
		return *dst, nil
	}
	st, err := pool.PrepareContext(context.WithoutCancel(ctx), query)
	if err != nil {
		return nil, err
	}
	*dst = st
	return st, nil
}

func nullStatus(code int) sql.NullInt64 {
	if code == 0 {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: int64(code), Valid: true}
}

// Prune deletes deliveries that ended before t, with their attempts, in
// transactions of at most 2,000 deliveries so that the writer is never held
// for long.
func (s *WebhookStore) Prune(ctx context.Context, before time.Time) (int64, error) {
	const pick = `SELECT id FROM webhook_deliveries WHERE ended_at IS NOT NULL AND ended_at < ? LIMIT 2000`
	total, err := sqlstore.DeleteBatches(2000, func() (n int64, err error) {
		err = s.db.WriteTx(ctx, func(tx *sql.Tx) error {
			if _, err := tx.ExecContext(ctx, `DELETE FROM webhook_attempts WHERE delivery_id IN (`+pick+`)`, before.UnixMilli()); err != nil {
				return err
			}
			res, err := tx.ExecContext(ctx, `DELETE FROM webhook_deliveries WHERE id IN (`+pick+`)`, before.UnixMilli())
			if err != nil {
				return err
			}
			n, err = res.RowsAffected()
			return err
		})
		return n, err
	})
	if err != nil {
		return total, fmt.Errorf("sqlite: prune deliveries: %w", err)
	}
	return total, nil
}
