package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// The tables of the services (Tables), written once: Store implements
// Tables, and NewServices(store) makes the services of cloud.Store.

var _ Tables = (*Store)(nil)

// Now is the store's clock (Tables).
func (s *Store) Now() time.Time { return s.Clock() }

// DeviceDetail implements DeviceTables.
func (s *Store) DeviceDetail(ctx context.Context, orgID, id string) (resource.DeviceDetail, error) {
	var dd resource.DeviceDetail
	var notes sql.NullString
	var err error
	dd.Device, err = ScanDevice(s.R.QueryRow(ctx, `SELECT `+DeviceColumns+`, notes, agent_device_name, agent_device_location, agent_timezone, agent_version FROM devices WHERE id = ? AND org_id = ?`, id, orgID),
		&notes, &dd.AgentDeviceName, &dd.AgentDeviceLocation, &dd.AgentTimezone, &dd.AgentVersion)
	if errors.Is(err, sql.ErrNoRows) {
		return resource.DeviceDetail{}, DeviceNotFound(id)
	}
	if err != nil {
		return resource.DeviceDetail{}, s.Wrap("device", err)
	}
	if notes.Valid {
		dd.Notes = &notes.String
	}
	return dd, nil
}

// NewestSamples implements DeviceTables.
func (s *Store) NewestSamples(ctx context.Context, deviceID string, from, to time.Time, n int) ([]resource.MetricSample, error) {
	out, err := Collect(ctx, s.R, ScanSample, SamplesSQL, deviceID, from.UnixMilli(), to.UnixMilli(), n)
	return out, s.Wrap("metrics", err)
}

// DevicePage implements DeviceTables.
func (s *Store) DevicePage(ctx context.Context, k Keyset[resource.Device]) (resource.List[resource.Device], error) {
	return listPage(ctx, s, k)
}

// EventPage implements DeviceTables.
func (s *Store) EventPage(ctx context.Context, k Keyset[resource.Event]) (resource.List[resource.Event], error) {
	return listPage(ctx, s, k)
}

// AlertPage implements AlertTables.
func (s *Store) AlertPage(ctx context.Context, k Keyset[resource.Alert]) (resource.List[resource.Alert], error) {
	return listPage(ctx, s, k)
}

// listPage reads the page of k on the readers.
func listPage[T any](ctx context.Context, s *Store, k Keyset[T]) (resource.List[T], error) {
	q, args, err := k.SQL()
	if err != nil {
		return k.Page(nil, err, nil)
	}
	list, err := Collect(ctx, s.R, k.Scan, q, args...)
	return k.Page(list, s.Wrap(k.What, err), func() error { return s.checkCursor(ctx, k.CursorSQL(), k.Cursor, k.Scope) })
}

// checkCursor returns ECURSOR unless query (cursor, scope) finds the
// cursor's item.
func (s *Store) checkCursor(ctx context.Context, query, cursor, scope string) error {
	if !ids.Valid(cursor) {
		return cloud.ErrCursor()
	}
	var at int64
	err := s.R.QueryRow(ctx, query, cursor, scope).Scan(&at)
	if errors.Is(err, sql.ErrNoRows) {
		return cloud.ErrCursor()
	}
	return s.Wrap("cursor", err)
}

// DeviceModelSQL reads the model of an organization's device.
const DeviceModelSQL = `SELECT model FROM devices WHERE id = ? AND org_id = ?`

// DeviceModel implements DeviceTables and SerialTables.
func (s *Store) DeviceModel(ctx context.Context, orgID, deviceID string) (string, error) {
	var model string
	err := s.R.QueryRow(ctx, DeviceModelSQL, deviceID, orgID).Scan(&model)
	if errors.Is(err, sql.ErrNoRows) {
		return "", DeviceNotFound(deviceID)
	}
	return model, s.Wrap("device", err)
}

// DeviceModelStatusSQL reads the model and the status of an organization's
// device.
const DeviceModelStatusSQL = `SELECT model, status FROM devices WHERE id = ? AND org_id = ?`

// DeviceModelStatus implements SerialTables.
func (s *Store) DeviceModelStatus(ctx context.Context, orgID, deviceID string) (string, resource.DeviceStatus, error) {
	var model, status string
	err := s.R.QueryRow(ctx, DeviceModelStatusSQL, deviceID, orgID).Scan(&model, &status)
	if errors.Is(err, sql.ErrNoRows) {
		return "", "", DeviceNotFound(deviceID)
	}
	return model, resource.DeviceStatus(status), s.Wrap("device", err)
}

// Alert implements AlertTables.
func (s *Store) Alert(ctx context.Context, orgID, id string) (resource.Alert, error) {
	a, err := ScanAlert(s.R.QueryRow(ctx, `SELECT `+AlertColumns+` FROM alerts WHERE id = ? AND org_id = ?`, id, orgID))
	if errors.Is(err, sql.ErrNoRows) {
		return a, AlertNotFound(id)
	}
	return a, s.Wrap("alert", err)
}

// AlertTx implements AlertTables: the dialect's EventsAt first, then a
// write transaction (SQLite's writer serializes them; on PostgreSQL the
// row lock of an UPDATE orders concurrent ones, another relay's too).
func (s *Store) AlertTx(ctx context.Context, eventsAt int64, what string, fn func(Querier) error) error {
	if s.EventsAt != nil {
		if err := s.EventsAt(ctx, eventsAt); err != nil {
			return err
		}
	}
	return s.Wrap(what, s.Tx(ctx, fn))
}

// AddDevice registers a device in PROVISIONING state with a fresh device
// token, of which only the SHA-256 sum is stored, and its serial state
// row. It returns the device and the token (shown once). An unknown model
// is EINVALID naming the catalog's models; a serial number already used in
// the organization is ECONFLICT (the unique index decides, whichever relay
// races).
func (s *Store) AddDevice(ctx context.Context, nd cloud.NewDevice) (resource.DeviceDetail, string, error) {
	d, err := PrepareDevice(nd, s.Clock())
	if err != nil {
		return resource.DeviceDetail{}, "", err
	}
	if _, err := s.Org(ctx, d.OrgID); err != nil {
		return resource.DeviceDetail{}, "", err
	}
	err = s.Tx(ctx, func(tx Querier) error {
		if _, err := tx.Exec(ctx, InsertDeviceSQL, d.Args()...); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id) VALUES (?)`, d.Detail.ID); err != nil {
			return err
		}
		x := d.Detail
		return s.audit(ctx, tx, d.OrgID, cloud.ActionDeviceAdded, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: x.ID},
			map[string]any{"name": x.Name, "serialNumber": x.SerialNumber, "model": x.Model, "location": x.Location})
	})
	if s.IsUnique(err) {
		return resource.DeviceDetail{}, "", ErrSerialTaken(d.Detail.SerialNumber)
	}
	if err != nil {
		return resource.DeviceDetail{}, "", s.Wrap("add device", err)
	}
	return d.Detail, d.Token, nil
}

// RevokeDevice revokes the device's token: the agent endpoint refuses it
// from then on, and every relay closes the device's connection
// (ChangeRevoked). Idempotent (the first revocation time is kept, and
// returned); ENOTFOUND for an unknown id.
func (s *Store) RevokeDevice(ctx context.Context, id string) (time.Time, error) {
	var at int64
	err := s.Tx(ctx, func(tx Querier) error {
		// The first revocation is the change its audit record tells of.
		var orgID, name, serial string
		err := tx.QueryRow(ctx, `UPDATE devices SET token_revoked_at = ? WHERE id = ? AND token_revoked_at IS NULL
			RETURNING token_revoked_at, org_id, name, serial_number`, s.nowMs(), id).Scan(&at, &orgID, &name, &serial)
		first := err == nil
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRow(ctx, `SELECT token_revoked_at FROM devices WHERE id = ?`, id).Scan(&at)
		}
		if err != nil {
			return err
		}
		if err := s.changed(ctx, tx, ChangeRevoked, id); err != nil || !first {
			return err
		}
		return s.audit(ctx, tx, orgID, cloud.ActionDeviceRevoked, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: id},
			map[string]any{"name": name, "serialNumber": serial})
	})
	if errors.Is(err, sql.ErrNoRows) {
		return time.Time{}, DeviceNotFound(id)
	}
	if err != nil {
		return time.Time{}, s.Wrap("revoke device", err)
	}
	return time.UnixMilli(at).UTC(), nil
}

// readSerialState reads the device's serial state with q;
// DefaultSerialState when it has no row.
func readSerialState(ctx context.Context, q Querier, deviceID string) (SerialState, error) {
	st, err := ScanSerialState(q.QueryRow(ctx, `SELECT `+SerialStateColumns+` FROM serial_state WHERE device_id = ?`, deviceID))
	if errors.Is(err, sql.ErrNoRows) {
		return DefaultSerialState(), nil
	}
	return st, err
}

// SerialRows implements SerialTables.
func (s *Store) SerialRows(ctx context.Context, deviceID string) (SerialState, map[string]*cloud.StoredChannel, error) {
	st, err := readSerialState(ctx, s.R, deviceID)
	if err != nil {
		return st, nil, s.Wrap("serial state", err)
	}
	chans, err := channelRows(ctx, s.R, deviceID, "")
	if err != nil {
		return st, nil, s.Wrap("serial channels", err)
	}
	return st, chans, nil
}

// StoredChannel implements SerialTables.
func (s *Store) StoredChannel(ctx context.Context, deviceID, channelID string) (*cloud.StoredChannel, error) {
	chans, err := channelRows(ctx, s.R, deviceID, channelID)
	if err != nil {
		return nil, s.Wrap("serial channel", err)
	}
	return chans[channelID], nil
}

// ChannelConfig implements SerialTables.
func (s *Store) ChannelConfig(ctx context.Context, deviceID, channelID string) (*string, error) {
	var config *string
	err := s.R.QueryRow(ctx, `SELECT config FROM serial_channels WHERE device_id = ? AND channel_id = ?`, deviceID, channelID).Scan(&config)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, s.Wrap("serial channel", err)
	}
	return config, nil
}

// PatchSerial implements SerialTables; other relays hear of the change
// (ChangeConfig). Its audit record (serial.updated, ctx's actor) names
// each field that changed, from and to; none when nothing changed.
func (s *Store) PatchSerial(ctx context.Context, orgID, deviceID string, p cloud.SerialPatch) (SerialState, error) {
	var st SerialState
	err := s.Tx(ctx, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `INSERT OR IGNORE INTO serial_state (device_id) VALUES (?)`, deviceID); err != nil {
			return err
		}
		old, err := readSerialState(ctx, tx, deviceID)
		if err != nil {
			return err
		}
		q, args := SerialPatchSQL(p, deviceID)
		if _, err := tx.Exec(ctx, q, args...); err != nil {
			return err
		}
		if err := s.changed(ctx, tx, ChangeConfig, deviceID); err != nil {
			return err
		}
		if st, err = readSerialState(ctx, tx, deviceID); err != nil {
			return err
		}
		changes := serialChanges(old, st)
		if len(changes) == 0 { // as device.updated: a PATCH that changed nothing has no record
			return nil
		}
		return s.audit(ctx, tx, orgID, cloud.ActionSerialUpdated, cloud.AuditTarget{Kind: cloud.TargetSerial, ID: deviceID}, changes)
	})
	return st, s.Wrap("patch serial", err)
}

// PutChannel implements SerialTables: a channel the agent reported
// unusable takes no configuration (cloud.ChannelUnavailable); other
// relays hear of the change (ChangeConfig). Its audit record
// (channel.configured, or channel.points_imported for an import) names
// the channel's kind and the members of its configuration that changed.
func (s *Store) PutChannel(ctx context.Context, put ChannelPut) error {
	err := s.Tx(ctx, func(tx Querier) error {
		var old sql.NullString
		err := tx.QueryRow(ctx, `SELECT config FROM serial_channels WHERE device_id = ? AND channel_id = ?`, put.DeviceID, put.ChannelID).Scan(&old)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		reports, err := readChannelReports(ctx, tx, put.DeviceID)
		if err != nil {
			return err
		}
		r := cloud.FindChannelReport(reports, put.ChannelID)
		if err := cloud.ChannelUsable(put.ChannelID, r != nil, r != nil && r.Available); err != nil {
			return err
		}
		// serial_state before serial_channels, the order in which the
		// heartbeat writer locks them (applyHeartbeats): the other order
		// deadlocked with it on PostgreSQL under load (40P01).
		if _, err := tx.Exec(ctx, `INSERT INTO serial_state (device_id, desired_version) VALUES (?, 1)
			ON CONFLICT (device_id) DO UPDATE SET desired_version = serial_state.desired_version + 1`, put.DeviceID); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO serial_channels (device_id, channel_id, config) VALUES (?, ?, ?)
			ON CONFLICT (device_id, channel_id) DO UPDATE SET config = excluded.config`, put.DeviceID, put.ChannelID, put.Config); err != nil {
			return err
		}
		if err := s.changed(ctx, tx, ChangeConfig, put.DeviceID); err != nil {
			return err
		}
		if _, ok := cloud.ActorFrom(ctx); !ok {
			return nil
		}
		action, details := put.audit(old)
		return s.audit(ctx, tx, put.OrgID, action, cloud.AuditTarget{Kind: cloud.TargetChannel, ID: put.DeviceID + "/" + put.ChannelID}, details)
	})
	return s.Wrap("put channel", err)
}

// UpdateDevice implements DeviceTables: the fields p sets, in one
// statement of one transaction.
func (s *Store) UpdateDevice(ctx context.Context, orgID, id string, p cloud.DevicePatch) error {
	var set []string
	var args []any
	add := func(column string, v any) {
		set = append(set, column+` = ?`)
		args = append(args, v)
	}
	if p.Name != nil {
		add("name", *p.Name)
	}
	if p.Location != nil {
		add("location", *p.Location)
	}
	if p.ClearNotes {
		add("notes", nil)
	} else if p.Notes != nil {
		add("notes", *p.Notes)
	}
	if p.Tags != nil {
		b, err := json.Marshal(*p.Tags)
		if err != nil {
			return s.Wrap("update device", err)
		}
		add("tags", string(b))
	}
	if len(set) == 0 {
		_, err := s.DeviceModel(ctx, orgID, id)
		return err
	}
	return s.Tx(ctx, func(tx Querier) error {
		var was deviceFields
		err := tx.QueryRow(ctx, `SELECT name, location, notes, tags FROM devices WHERE id = ? AND org_id = ?`+s.LockRows, id, orgID).
			Scan(&was.name, &was.location, &was.notes, &was.tags)
		if errors.Is(err, sql.ErrNoRows) {
			return DeviceNotFound(id)
		}
		if err != nil {
			return s.Wrap("update device", err)
		}
		if _, err := tx.Exec(ctx, `UPDATE devices SET `+strings.Join(set, `, `)+` WHERE id = ? AND org_id = ?`, append(args, id, orgID)...); err != nil {
			return s.Wrap("update device", err)
		}
		if p.Tags != nil {
			if err := s.changed(ctx, tx, ChangeDeviceTags, orgID+" "+id); err != nil {
				return err
			}
		}
		return s.auditDeviceUpdate(ctx, tx, orgID, id, was.changes(p))
	})
}

// DeviceOrg implements cloud.Admin.
func (s *Store) DeviceOrg(ctx context.Context, id string) (string, error) {
	var org string
	err := s.R.QueryRow(ctx, `SELECT org_id FROM devices WHERE id = ?`, id).Scan(&org)
	if errors.Is(err, sql.ErrNoRows) {
		return "", DeviceNotFound(id)
	}
	return org, s.Wrap("device", err)
}
