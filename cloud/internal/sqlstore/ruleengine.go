package sqlstore

import (
	"context"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// DeviceAlerts implements cloud.AlertEngineStore: the device's tags and
// status, and per rule id its open alert and when its last alert resolved
// (two reads); ENOTFOUND unless the device is the organization's.
func (s AlertEngineStore) DeviceAlerts(ctx context.Context, orgID, deviceID string) (cloud.DeviceAlertState, error) {
	var status, tags string
	err := s.R.QueryRow(ctx, `SELECT status, tags FROM devices WHERE id = ? AND org_id = ?`, deviceID, orgID).Scan(&status, &tags)
	if err = noRows(err, DeviceNotFound(deviceID)); err != nil {
		return cloud.DeviceAlertState{}, s.Wrap("device alerts", err)
	}
	out := cloud.DeviceAlertState{Tags: decodeTags(tags), Status: resource.DeviceStatus(status), Rules: map[string]cloud.AlertRuleState{}}
	err = Each(ctx, s.R, RuleStatesSQL, []any{orgID, deviceID}, func(r Row) error {
		rule, st, err := ScanRuleState(r)
		out.Rules[rule] = st
		return err
	})
	return out, s.Wrap("rule states", err)
}
