package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// NewAlert is what InsertAlert needs. RuleID or RuleName (of the device's
// organization) names the rule.
type NewAlert struct {
	ID        string // "" for a fresh id
	DeviceID  string
	RuleID    string
	RuleName  string
	State     resource.AlertState // "" for ACTIVE
	Severity  resource.Severity   // "" for the rule's severity
	Message   string
	Payload   json.RawMessage // nil for {}
	CreatedAt time.Time       // zero for now
}

// InsertAlert stores an alert of the device. A second open alert (ACTIVE or
// ACKNOWLEDGED) for the same device and rule is ECONFLICT.
func (db *DB) InsertAlert(ctx context.Context, na NewAlert) (resource.Alert, error) {
	if na.ID == "" {
		na.ID = ids.New()
	}
	if na.State == "" {
		na.State = resource.AlertActive
	}
	if len(na.Payload) == 0 || string(na.Payload) == "null" {
		na.Payload = json.RawMessage(`{}`)
	}
	if na.CreatedAt.IsZero() {
		na.CreatedAt = db.Now()
	}
	created := na.CreatedAt.UnixMilli()
	var a resource.Alert
	err := db.WriteTx(ctx, func(tx *sql.Tx) error {
		var orgID string
		if err := tx.QueryRowContext(ctx, `SELECT org_id FROM devices WHERE id = ?`, na.DeviceID).Scan(&orgID); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return deviceNotFound(na.DeviceID)
			}
			return err
		}
		var ruleSev string
		q, arg := `SELECT id, severity FROM alert_rules WHERE org_id = ? AND id = ?`, na.RuleID
		if na.RuleID == "" {
			q, arg = `SELECT id, severity FROM alert_rules WHERE org_id = ? AND name = ?`, na.RuleName
		}
		if err := tx.QueryRowContext(ctx, q, orgID, arg).Scan(&na.RuleID, &ruleSev); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return cloud.Errorf(cloud.ENOTFOUND, "alert rule %q not found", arg)
			}
			return err
		}
		if na.Severity == "" {
			na.Severity = resource.Severity(ruleSev)
		}
		var acked, resolved sql.NullInt64
		if na.State != resource.AlertActive {
			acked = sql.NullInt64{Int64: created, Valid: na.State == resource.AlertAcknowledged}
		}
		if na.State == resource.AlertResolved {
			resolved = sql.NullInt64{Int64: created, Valid: true}
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO alerts (id, org_id, device_id, rule_id, state, severity, message, payload, acknowledged_at, resolved_at, created_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			na.ID, orgID, na.DeviceID, na.RuleID, string(na.State), string(na.Severity), na.Message, string(na.Payload), acked, resolved, created)
		if err != nil {
			if strings.Contains(err.Error(), "UNIQUE constraint failed: alerts.device_id") {
				return cloud.Errorf(cloud.ECONFLICT, "an open alert of this rule already exists for the device")
			}
			return err
		}
		a, err = sqlstore.ScanAlert(tx.QueryRowContext(ctx, `SELECT `+sqlstore.AlertColumns+` FROM alerts WHERE id = ?`, na.ID))
		return err
	})
	if err != nil {
		return resource.Alert{}, wrapErr("insert alert", err)
	}
	return a, nil
}
