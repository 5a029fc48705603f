package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/resource"
)

// AlertPage implements sqlstore.AlertTables.
func (t tables) AlertPage(ctx context.Context, k sqlstore.Keyset[resource.Alert]) (resource.List[resource.Alert], error) {
	return listPage(ctx, t.db, k)
}

const alertSQL = `SELECT ` + sqlstore.AlertColumns + ` FROM alerts WHERE id = ? AND org_id = ?`

// Alert implements sqlstore.AlertTables.
func (t tables) Alert(ctx context.Context, orgID, id string) (resource.Alert, error) {
	a, err := sqlstore.ScanAlert(t.db.R.QueryRowContext(ctx, alertSQL, id, orgID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, alertNotFound(id)
	}
	if err != nil {
		return a, fmt.Errorf("sqlite: alert: %w", err)
	}
	return a, nil
}

var alertNotFound = sqlstore.AlertNotFound

// AlertTx implements sqlstore.AlertTables: an immediate transaction on the
// writer, so concurrent calls serialize.
func (t tables) AlertTx(ctx context.Context, eventsAt int64, what string, fn func(sqlstore.Querier) error) error {
	return wrapErr(what, t.db.WriteTx(ctx, func(tx *sql.Tx) error { return fn(sqlConn{tx}) }))
}
