package postgres

import (
	"context"
	"errors"

	"github.com/fleet/fleet/cloud"
)

var _ cloud.Store = (*DB)(nil)

// Devices returns the device service of db.
func (db *DB) Devices() cloud.DeviceService { return db.devices }

// Serial returns the serial service of db.
func (db *DB) Serial() cloud.SerialService { return db.serial }

// Alerts returns the alert service of db.
func (db *DB) Alerts() cloud.AlertService { return db.alerts }

// Keys returns db, whose KeyByID finds API keys: read on every request, so
// that a revocation by any relay or the admin CLI shows at once (db offers
// no data version; see Versioner).
func (db *DB) Keys() cloud.KeyService { return db }

// Observe sets the observers of the services returned by Serial and
// Alerts.
func (db *DB) Observe(config cloud.DesiredConfigObserver, alerts cloud.AlertObserver) {
	db.serial.Observer = config
	db.alerts.Observer = alerts
}

// Versioner returns nil: PostgreSQL has no cheap, exact "nothing was
// committed by anyone since" that could spare a request its queries (a
// change feed over LISTEN/NOTIFY arrives after the commit, so a cache fed by
// it could answer a request on another relay with a revoked key), so the
// request-path caches are off on this store and each request reads its key
// row and its page.
func (db *DB) Versioner() cloud.Versioner { return nil }

// Ready reports whether the database answers and holds every migration
// this relay knows.
func (db *DB) Ready(ctx context.Context) error {
	pending, err := db.migrationsPending(ctx)
	if err != nil {
		return err
	}
	if pending {
		return errors.New("postgres: database migrations pending (a newer relay's schema is not applied yet)")
	}
	return nil
}
