package postgres

import (
	"context"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// insertEvents stores relay-made events (fresh ids) of one device in tx.
// The caller made sure of their partitions (ensureDays) before it began tx:
// creating one takes a lock on the table that a transaction which already
// wrote to it would wait for.
func (db *DB) insertEvents(ctx context.Context, tx pgx.Tx, orgID, deviceID string, evs []resource.Event) error {
	_, err := insertEventRows(ctx, tx, repeat(orgID, len(evs)), repeat(deviceID, len(evs)), evs)
	return err
}

// repeat returns n copies of s.
func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// AlertEngineStore is what the alert engine (alert.Store) needs
// (sqlstore.AlertEngineStore, written once for both stores), its Window in
// one round trip.
type AlertEngineStore struct {
	sqlstore.AlertEngineStore
	db *DB
}

// NewAlertEngineStore returns the alert engine's store on db.
func NewAlertEngineStore(db *DB) *AlertEngineStore {
	return &AlertEngineStore{AlertEngineStore: sqlstore.AlertEngineStore{Store: &db.Store}, db: db}
}

// Window implements alert.Store: the two reads of sqlstore's Window sent
// together in one round trip (a pgx batch) and read in turn.
func (s *AlertEngineStore) Window(ctx context.Context, orgID, deviceID string, until time.Time, n int) ([]resource.MetricSample, map[string]alert.RuleState, error) {
	var ms []resource.MetricSample
	states := map[string]alert.RuleState{}
	b := &pgx.Batch{}
	b.Queue(numbered(sqlstore.WindowSamplesSQL), deviceID, until.UnixMilli(), n).
		Query(func(rows pgx.Rows) (err error) {
			ms, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (resource.MetricSample, error) { return sqlstore.ScanSample(r) })
			return err
		})
	b.Queue(numbered(sqlstore.WindowStatesSQL), orgID, deviceID).
		Query(func(rows pgx.Rows) error {
			return sqlstore.EachRow(rows, func(r sqlstore.Row) error {
				rule, st, err := sqlstore.ScanRuleState(r)
				states[rule] = st
				return err
			})
		})
	if err := s.db.Pool.SendBatch(ctx, b).Close(); err != nil {
		return nil, nil, storeError("postgres: alert window of %s: %w", deviceID, err)
	}
	slices.Reverse(ms)
	return ms, states, nil
}
