package sqlite

import "github.com/fleet/fleet/cloud/internal/sqlstore"

// PanelStore implements cloud.PanelStore on the store (sqlstore.PanelStore,
// written once for both stores).
type PanelStore = sqlstore.PanelStore

// NewPanelStore returns the panel's store of db.
func NewPanelStore(db *DB) *PanelStore { return &PanelStore{Store: &db.Store} }

// wrapErr passes nil and domain errors through and wraps the others as
// internal.
var wrapErr = dialect.Wrap
