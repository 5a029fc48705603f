package postgres

import (
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// PanelStore implements cloud.PanelStore on PostgreSQL
// (sqlstore.PanelStore, written once for both stores), for any number of
// relays.
type PanelStore = sqlstore.PanelStore

// NewPanelStore returns the panel's store of db.
func NewPanelStore(db *DB) *PanelStore { return &PanelStore{Store: &db.Store} }
