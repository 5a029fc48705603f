package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

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
