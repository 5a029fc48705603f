package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Device status changes as events, device tags, and the alert engine's
// reads of devices by status (issue 27), written once for both stores.
//
// Every status change stores a device.status_changed event in the
// transaction that changes the status, and sets devices.status_since;
// moving to REBOOTING or UPDATING also sets devices.planned_at (planned
// work holds offline alerts for cloud.PlannedWorkHold).

// StatusEvent returns the device.status_changed event of a change from
// from to to at at, or nil when the status stays: data {"from", "to"},
// WARNING when to is ERROR or OFFLINE, else INFO.
func StatusEvent(from, to resource.DeviceStatus, at time.Time) *resource.Event {
	if from == to {
		return nil
	}
	sev := resource.SeverityInfo
	if to == resource.StatusError || to == resource.StatusOffline {
		sev = resource.SeverityWarning
	}
	return agentlink.NewEvent(protocol.EventDeviceStatusChanged, sev, "status changed from "+string(from)+" to "+string(to),
		map[string]string{"from": string(from), "to": string(to)}, at)
}

// PlannedAt is the devices.planned_at argument of a change to status at
// at: at for REBOOTING and UPDATING (planned work), else nil (kept).
func PlannedAt(to resource.DeviceStatus, at time.Time) any {
	if to == resource.StatusRebooting || to == resource.StatusUpdating {
		return at.UnixMilli()
	}
	return nil
}

// HeartbeatStatusSQL stores a heartbeat that changes the device's status
// (HeartbeatStatusArgs), with its deadline, last seen time and address, if
// its session still owns the device (the heartbeats that keep the status
// go in bulk).
const HeartbeatStatusSQL = `UPDATE devices SET last_seen = ?, ip_address = ?, agent_deadline = ?, status = ?, status_since = ?,
	planned_at = COALESCE(?, planned_at) WHERE id = ? AND agent_session = ?`

// HeartbeatStatusArgs are the arguments of HeartbeatStatusSQL for in.
func HeartbeatStatusArgs(in *agentlink.HeartbeatIn) []any {
	at := in.At.UnixMilli()
	return []any{at, in.IPAddress, in.Deadline.UnixMilli(), string(in.Status), at, PlannedAt(in.Status, in.At), in.Device.ID, in.Session}
}

// ConnectSQL gives the device to a new session (ConnectArgs): CONNECTING
// (since the connection's time unless it was), with the handshake's
// deadline, unless the session it has was opened later (then it changes
// no row: agentlink.ErrSuperseded).
const ConnectSQL = `UPDATE devices SET status = 'CONNECTING', status_since = CASE WHEN status = 'CONNECTING' THEN status_since ELSE ? END,
	agent_session = ?, agent_deadline = ?, agent_session_at = ? WHERE id = ? AND COALESCE(agent_session_at, 0) <= ?`

// ConnectArgs are the arguments of ConnectSQL.
func ConnectArgs(session string, at, deadline time.Time, id string) []any {
	return []any{at.UnixMilli(), session, deadline.UnixMilli(), at.UnixMilli(), id, at.UnixMilli()}
}

// sinceSQL is the SET clause that makes at (an argument) the device's
// status_since unless it already is in status.
func sinceSQL(status resource.DeviceStatus) string {
	return `status_since = CASE WHEN status = '` + string(status) + `' THEN status_since ELSE ? END`
}

// SetDeviceTags implements cloud.Admin: the device's tags replaced by
// tags (cloud.CheckDeviceTags), as a JSON array.
func (s *Store) SetDeviceTags(ctx context.Context, deviceID string, tags []string) error {
	tags, err := cloud.CheckDeviceTags(tags)
	if err != nil {
		return err
	}
	b, err := json.Marshal(tags)
	if err != nil {
		return s.Wrap("device tags", err)
	}
	err = s.Tx(ctx, func(tx Querier) error {
		var orgID, was string
		if err := tx.QueryRow(ctx, `SELECT org_id, tags FROM devices WHERE id = ?`+s.LockRows, deviceID).Scan(&orgID, &was); err != nil {
			if errors.Is(err, sql.ErrNoRows) {
				return DeviceNotFound(deviceID)
			}
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE devices SET tags = ? WHERE id = ?`, string(b), deviceID); err != nil {
			return err
		}
		if err := s.changed(ctx, tx, ChangeDeviceTags, orgID+" "+deviceID); err != nil {
			return err
		}
		return s.auditDeviceUpdate(ctx, tx, orgID, deviceID, deviceFields{tags: was}.changes(cloud.DevicePatch{Tags: &tags}))
	})
	return s.Wrap("device tags", err)
}

// DecodeTags reads a devices.tags value (a JSON array of strings); text
// that does not decode is no tags.
func DecodeTags(s string) []string {
	var tags []string
	if s == "" || s == "[]" || json.Unmarshal([]byte(s), &tags) != nil || tags == nil {
		return []string{}
	}
	return tags
}

// watchedStatuses are the statuses devices_status_watch holds
// (cloud.RuleStatuses), as the index's predicate says them.
const watchedStatuses = `status IN ('ERROR', 'UPDATING', 'REBOOTING')`

// StatusDevices implements cloud.AlertEngineStore: up to limit devices in
// one of statuses (each one of cloud.RuleStatuses, else EINVALID), ordered
// by id after cursor, with when they entered it and their tags. The
// statuses are written into the query as literals under the index's own
// predicate, so that both stores read devices_status_watch in id order.
func (s AlertEngineStore) StatusDevices(ctx context.Context, statuses []resource.DeviceStatus, cursor string, limit int) ([]cloud.StatusDevice, error) {
	if len(statuses) == 0 || limit <= 0 {
		return []cloud.StatusDevice{}, nil
	}
	q, err := StatusDevicesSQL(statuses)
	if err != nil {
		return nil, err
	}
	out, err := Collect(ctx, s.R, scanStatusDevice, q, cursor, limit)
	return out, s.Wrap("status devices", err)
}

// StatusDevicesSQL is StatusDevices' read of statuses (arguments: cursor,
// limit); EINVALID for a status that is not one of cloud.RuleStatuses.
func StatusDevicesSQL(statuses []resource.DeviceStatus) (string, error) {
	in := make([]string, 0, len(statuses))
	for _, st := range statuses {
		if !slices.Contains(cloud.RuleStatuses, st) {
			return "", cloud.Errorf(cloud.EINVALID, "status %q is not one a status rule watches", st)
		}
		in = append(in, `'`+string(st)+`'`)
	}
	return `SELECT d.id, d.org_id, d.model, d.status, COALESCE(d.status_since, d.created_at), d.tags
		FROM devices d WHERE ` + watchedStatuses + ` AND d.status IN (` + strings.Join(in, ", ") + `) AND d.id > ? ORDER BY d.id LIMIT ?`, nil
}

func scanStatusDevice(r Row) (cloud.StatusDevice, error) {
	var d cloud.StatusDevice
	var st, tags string
	var since int64
	err := r.Scan(&d.Device.ID, &d.Device.OrgID, &d.Device.Model, &st, &since, &tags)
	d.Status, d.Since, d.Tags = resource.DeviceStatus(st), time.UnixMilli(since).UTC(), DecodeTags(tags)
	return d, err
}

// OfflineColumns are the columns ScanOffline reads, in order, of devices
// AS d.
const OfflineColumns = `d.id, d.org_id, d.model, d.last_seen, d.agent_heartbeat_ms, d.tags, d.planned_at`

// ScanOffline reads a row of OfflineColumns: a device gone silent, for the
// alert engine.
func ScanOffline(row Row) (alert.Offline, error) {
	var o alert.Offline
	var seen, hb int64
	var tags string
	var planned sql.NullInt64
	err := row.Scan(&o.Device.ID, &o.Device.OrgID, &o.Device.Model, &seen, &hb, &tags, &planned)
	o.LastSeen, o.Heartbeat = time.UnixMilli(seen).UTC(), time.Duration(hb)*time.Millisecond
	o.Tags, o.PlannedAt = DecodeTags(tags), nullMs(planned)
	return o, err
}

// nullMs is a nullable Unix-milliseconds column as a time (zero for NULL).
func nullMs(v sql.NullInt64) time.Time {
	if !v.Valid {
		return time.Time{}
	}
	return time.UnixMilli(v.Int64).UTC()
}
