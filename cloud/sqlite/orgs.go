package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"

	"github.com/fleet/fleet/cloud"
)

// RuleID returns the id of the organization's alert rule named name, or
// ENOTFOUND.
func (db *DB) RuleID(ctx context.Context, orgID, name string) (string, error) {
	var id string
	err := db.R.QueryRowContext(ctx, `SELECT id FROM alert_rules WHERE org_id = ? AND name = ?`, orgID, name).Scan(&id)
	if errors.Is(err, sql.ErrNoRows) {
		return "", cloud.Errorf(cloud.ENOTFOUND, "alert rule %q not found", name)
	}
	if err != nil {
		return "", fmt.Errorf("sqlite: rule id: %w", err)
	}
	return id, nil
}
