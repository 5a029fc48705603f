package sqlite

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
)

// InsertKey stores k as given (its hash already made).
func (db *DB) InsertKey(ctx context.Context, k *cloud.APIKey) error {
	return wrapErr("insert key", sqlstore.InsertKey(ctx, sqlConn{db.W}, k, ""))
}
