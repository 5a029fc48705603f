package sqlite

import "github.com/fleet/fleet/cloud/internal/sqlstore"

// AlertEngineStore is what the alert engine (alert.Store) needs, on SQLite
// (sqlstore.AlertEngineStore, written once for both stores).
type AlertEngineStore = sqlstore.AlertEngineStore

// NewAlertEngineStore returns the alert engine's store on db.
func NewAlertEngineStore(db *DB) *AlertEngineStore {
	return &AlertEngineStore{Store: &db.Store}
}
