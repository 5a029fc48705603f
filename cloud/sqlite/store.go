package sqlite

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

var _ cloud.Store = (*DB)(nil)

// tables are db's tables in SQLite's dialect, under the services of
// cloud/internal/sqlstore.
type tables struct{ db *DB }

var (
	_ sqlstore.DeviceTables = tables{}
	_ sqlstore.SerialTables = tables{}
)

// Devices returns the device service of db.
func (db *DB) Devices() cloud.DeviceService { return db.devices }

// Serial returns the serial service of db.
func (db *DB) Serial() cloud.SerialService { return db.serial }

// Alerts returns the alert service of db.
func (db *DB) Alerts() cloud.AlertService { return db.alerts }

// Keys returns db, whose KeyByID finds API keys.
func (db *DB) Keys() cloud.KeyService { return db }

// Observe sets the observers of the services returned by Serial and
// Alerts.
func (db *DB) Observe(config cloud.DesiredConfigObserver, alerts cloud.AlertObserver) {
	db.serial.Observer = config
	db.alerts.Observer = alerts
}

// Versioner returns db: DataVersion follows the WAL index (version.go).
func (db *DB) Versioner() cloud.Versioner { return db }

// Ready reports whether the database file answers a read.
func (db *DB) Ready(ctx context.Context) error {
	var one int
	return db.R.QueryRowContext(ctx, `SELECT 1`).Scan(&one)
}
