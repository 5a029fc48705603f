package postgres

import (
	"context"
	"sort"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/cloud/webhook"
)

// WebhookStore is the webhook outbox on PostgreSQL, shared by the relays
// of a cluster (webhook.Shared): each ordering queue (a device's signals,
// a device's alerts) is leased to one relay at a time, which attempts its
// deliveries in order and renews the leases while it lives; claims are
// serialized by an advisory lock and skip rows being written (FOR UPDATE
// SKIP LOCKED). Leases are timed by the database server's clock.
type WebhookStore struct {
	db                   *DB
	sqlstore.OutboxReads // OrgSecrets, Forwarding, Pending
	relay                string
	lease                atomic.Int64 // of inserts claimed, in ms
}

var _ webhook.Shared = (*WebhookStore)(nil)

// NewWebhookStore returns the outbox of db as relay sees it.
func NewWebhookStore(db *DB, relay string) *WebhookStore {
	s := &WebhookStore{db: db, OutboxReads: sqlstore.OutboxReads{Store: &db.Store}, relay: relay}
	s.SetLease(webhook.MaxLease)
	return s
}

// SetLease implements webhook.Shared.
func (s *WebhookStore) SetLease(lease time.Duration) { s.lease.Store(lease.Milliseconds()) }

// lockOutbox serializes claims of the shared outbox.
const lockOutbox int64 = 0x666c656574_0003

// sameQueue is true when webhook_deliveries rows o and d are of one
// ordering queue: one device, and both alerts or both signals.
const sameQueue = `o.device_id = d.device_id AND (o.event LIKE 'alert.%') = (d.event LIKE 'alert.%')`

// WriteOutbox inserts deliveries (setting their Seq) and records attempts
// with their delivery's new state, in one transaction: inserts as one
// multi-row statement, attempts as one per table.
func (s *WebhookStore) WriteOutbox(ctx context.Context, inserts []*webhook.Delivery, attempts []webhook.Attempt) error {
	if len(inserts) == 0 && len(attempts) == 0 {
		return nil
	}
	err := s.db.writeTx(ctx, func(tx pgx.Tx) error {
		if len(inserts) > 0 {
			if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockOutbox); err != nil {
				return err
			}
			n := len(inserts)
			id, org, dev, ev, url, state := make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n), make([]string, n)
			kind, channel := make([]string, n), make([]string, n)
			body := make([][]byte, n)
			att := make([]int32, n)
			next, created := make([]int64, n), make([]int64, n)
			for i, d := range inserts {
				st := d.State
				if st == "" {
					st = webhook.StatePending
				}
				id[i], org[i], dev[i], ev[i], url[i], state[i] = d.ID, d.OrgID, d.DeviceID, d.Event, d.URL, string(st)
				body[i], att[i], next[i], created[i] = d.Body, int32(d.Attempts), d.NextAttemptAt.UnixMilli(), d.CreatedAt.UnixMilli()
				kind[i], channel[i] = d.Kind, d.ChannelID
			}
			// WITH ORDINALITY keeps the slice's order in seq.
			rows, err := tx.Query(ctx, `INSERT INTO webhook_deliveries (id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, created_at, kind, channel_id)
				SELECT id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, created_at, kind, channel_id
				FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[], $8::int[], $9::bigint[], $10::bigint[], $11::text[], $12::text[])
				  WITH ORDINALITY AS v(id, org_id, device_id, event, url, body, state, attempts, next_attempt_at, created_at, kind, channel_id, n)
				ORDER BY n RETURNING id, seq`, id, org, dev, ev, url, body, state, att, next, created, kind, channel)
			if err != nil {
				return err
			}
			seqs := map[string]int64{}
			for rows.Next() {
				var i string
				var q int64
				if err := rows.Scan(&i, &q); err != nil {
					rows.Close()
					return err
				}
				seqs[i] = q
			}
			rows.Close()
			if err := rows.Err(); err != nil {
				return err
			}
			for _, d := range inserts {
				d.Seq = seqs[d.ID]
			}
			if err := s.claimInserted(ctx, tx, inserts, id); err != nil {
				return err
			}
		}
		if len(attempts) > 0 {
			return recordAttempts(ctx, tx, attempts)
		}
		return nil
	})
	if err != nil {
		return storeError("postgres: webhook outbox: %w", err)
	}
	return nil
}

// recordAttempts stores attempts and their deliveries' new states with
// one statement per table (unnest), not two round trips per attempt: the
// dispatcher records every attempt, so at a few thousand deliveries a
// second the round trips were most of the outbox's cost in the database.
// A batch holding two attempts of one delivery (a retry recorded with its
// failed predecessor) keeps the later one's state, as one statement per
// attempt in order did.
func recordAttempts(ctx context.Context, tx pgx.Tx, attempts []webhook.Attempt) error {
	var aID []string
	var aNum, aDur []int64
	var aAt []int64
	var aStatus []*int32
	var aErr []string
	last := map[string]int{} // delivery id -> index of its last attempt in attempts
	for i, a := range attempts {
		last[a.DeliveryID] = i
		if a.Number > 0 { // 0: a state change without an attempt (a dropped delivery)
			aID, aNum, aAt = append(aID, a.DeliveryID), append(aNum, int64(a.Number)), append(aAt, a.At.UnixMilli())
			aStatus, aErr, aDur = append(aStatus, nullStatus(a.StatusCode)), append(aErr, a.Error), append(aDur, a.Duration.Milliseconds())
		}
	}
	if len(aID) > 0 {
		// DISTINCT ON keeps one row per (delivery, attempt), the last given.
		if _, err := tx.Exec(ctx, `INSERT INTO webhook_attempts (delivery_id, attempt, at, status_code, error, duration_ms)
			SELECT DISTINCT ON (id, num) id, num, at, status, err, dur
			FROM unnest($1::text[], $2::int[], $3::bigint[], $4::int[], $5::text[], $6::bigint[]) WITH ORDINALITY AS v(id, num, at, status, err, dur, n)
			ORDER BY id, num, n DESC
			ON CONFLICT (delivery_id, attempt) DO UPDATE SET at = excluded.at, status_code = excluded.status_code, error = excluded.error, duration_ms = excluded.duration_ms`,
			aID, aNum, aAt, aStatus, aErr, aDur); err != nil {
			return err
		}
	}
	n := len(last)
	dID, dState, dErr := make([]string, 0, n), make([]string, 0, n), make([]string, 0, n)
	dNum, dNext := make([]int64, 0, n), make([]int64, 0, n)
	dStatus, dEnded := make([]*int32, 0, n), make([]*int64, 0, n)
	for i, a := range attempts {
		if last[a.DeliveryID] != i {
			continue
		}
		next := a.NextAttemptAt
		var ended *int64
		if a.State != webhook.StatePending {
			next = a.At
			ended = timeMs(a.At.Add(a.Duration))
		}
		dID, dState, dErr = append(dID, a.DeliveryID), append(dState, string(a.State)), append(dErr, a.Error)
		dNum, dNext = append(dNum, int64(a.Number)), append(dNext, next.UnixMilli())
		dStatus, dEnded = append(dStatus, nullStatus(a.StatusCode)), append(dEnded, ended)
	}
	_, err := tx.Exec(ctx, `UPDATE webhook_deliveries d SET state = v.state, attempts = GREATEST(d.attempts, v.num), next_attempt_at = v.next,
		last_status = v.status, last_error = v.err, ended_at = v.ended,
		lease_owner = CASE WHEN v.state = 'pending' THEN d.lease_owner END, lease_until = CASE WHEN v.state = 'pending' THEN d.lease_until END
		FROM unnest($1::text[], $2::text[], $3::int[], $4::bigint[], $5::int[], $6::text[], $7::bigint[]) AS v(id, state, num, next, status, err, ended)
		WHERE d.id = v.id AND d.state = 'pending'`, dID, dState, dNum, dNext, dStatus, dErr, dEnded)
	return err
}

// claimInserted leases to this relay the inserted deliveries whose queue
// holds no other pending delivery that this relay does not hold (another
// relay's, or one nobody took yet), marking them Claimed; when some stay
// unclaimed it tells the other relays (NOTIFY), one of which holds or takes
// their queue.
func (s *WebhookStore) claimInserted(ctx context.Context, tx pgx.Tx, inserts []*webhook.Delivery, ids []string) error {
	rows, err := tx.Query(ctx, `UPDATE webhook_deliveries d SET lease_owner = $1, lease_until = `+serverMs+` + $2
		WHERE d.id = ANY($3) AND NOT EXISTS (SELECT 1 FROM webhook_deliveries o WHERE o.state = 'pending' AND `+sameQueue+`
		  AND NOT (o.id = ANY($3)) AND (o.lease_owner IS DISTINCT FROM $1 OR o.lease_until < `+serverMs+`))
		RETURNING d.id`, s.relay, s.lease.Load(), ids)
	if err != nil {
		return err
	}
	claimed, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return err
	}
	set := make(map[string]bool, len(claimed))
	for _, id := range claimed {
		set[id] = true
	}
	for _, d := range inserts {
		d.Claimed = set[d.ID]
	}
	if len(claimed) < len(inserts) {
		return notify(ctx, tx, channelOutbox, "")
	}
	return nil
}

// Claim implements webhook.Shared.
func (s *WebhookStore) Claim(ctx context.Context, limit int, lease time.Duration) ([]*webhook.Delivery, error) {
	var out []*webhook.Delivery
	err := s.db.writeTx(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, lockOutbox); err != nil {
			return err
		}
		// The queues other relays hold are found once (not once per
		// pending delivery: with a backlog of thousands that was most of
		// the outbox's cost), with the clock read once.
		rows, err := tx.Query(ctx, `WITH now AS (SELECT `+serverMs+` AS ms),
			held AS (SELECT DISTINCT o.device_id, o.event LIKE 'alert.%' AS alert FROM webhook_deliveries o, now
			  WHERE o.state = 'pending' AND o.lease_owner <> $1 AND o.lease_until >= now.ms),
			free AS (
			SELECT d.seq FROM webhook_deliveries d, now
			WHERE d.state = 'pending' AND (d.lease_owner IS NULL OR d.lease_until < now.ms)
			  AND NOT EXISTS (SELECT 1 FROM held h WHERE h.device_id = d.device_id AND h.alert = (d.event LIKE 'alert.%'))
			ORDER BY d.seq LIMIT $3 FOR UPDATE OF d SKIP LOCKED)
			UPDATE webhook_deliveries d SET lease_owner = $1, lease_until = `+serverMs+` + $2
			FROM free WHERE d.seq = free.seq
			RETURNING d.seq, d.id, d.org_id, d.device_id, d.event, d.url, d.body, d.state, d.attempts, d.next_attempt_at, d.created_at, d.kind, d.channel_id`,
			s.relay, lease.Milliseconds(), limit)
		if err != nil {
			return err
		}
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (*webhook.Delivery, error) { return sqlstore.ScanDelivery(r) })
		return err
	})
	if err != nil {
		return nil, storeError("postgres: claim deliveries: %w", err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Seq < out[j].Seq })
	for _, d := range out {
		d.Claimed = true
	}
	return out, nil
}

// Renew implements webhook.Shared.
func (s *WebhookStore) Renew(ctx context.Context, lease time.Duration) ([]string, error) {
	rows, err := s.db.Pool.Query(ctx, `UPDATE webhook_deliveries SET lease_until = `+serverMs+` + $2
		WHERE lease_owner = $1 AND state = 'pending' RETURNING id`, s.relay, lease.Milliseconds())
	if err != nil {
		return nil, storeError("postgres: renew leases: %w", err)
	}
	held, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, storeError("postgres: renew leases: %w", err)
	}
	return held, nil
}

func nullStatus(code int) *int32 {
	if code == 0 {
		return nil
	}
	c := int32(code)
	return &c
}

// Prune deletes deliveries that ended before t, with their attempts, 2,000
// at a time.
func (s *WebhookStore) Prune(ctx context.Context, before time.Time) (int64, error) {
	total, err := sqlstore.DeleteBatches(2000, func() (n int64, err error) {
		err = s.db.writeTx(ctx, func(tx pgx.Tx) error {
			rows, err := tx.Query(ctx, `DELETE FROM webhook_deliveries WHERE seq IN
				(SELECT seq FROM webhook_deliveries WHERE ended_at IS NOT NULL AND ended_at < $1 LIMIT 2000) RETURNING id`, before.UnixMilli())
			if err != nil {
				return err
			}
			gone, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return err
			}
			n = int64(len(gone))
			_, err = tx.Exec(ctx, `DELETE FROM webhook_attempts WHERE delivery_id = ANY($1)`, gone)
			return err
		})
		return n, err
	})
	if err != nil {
		return total, storeError("postgres: prune deliveries: %w", err)
	}
	return total, nil
}
