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
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// The public API's rollout queries (RolloutTables) and the reboot command.

// RolloutColumns are the columns scanRollout reads, in order.
const RolloutColumns = `id, version, scope, waves, max_failures, health_for_ms, state, wave, reason, created_at, updated_at`

// rolloutDeviceStates are the per-device states, each counted in a
// rollout's counts (0 when none).
var rolloutDeviceStates = []string{resource.RolloutDevicePending, resource.RolloutDeviceDownloading, resource.RolloutDeviceInstalling,
	resource.RolloutDeviceHealthy, resource.RolloutDeviceFailed, resource.RolloutDeviceRolledBack, resource.RolloutDeviceSkipped}

func scanRollout(r Row) (resource.Rollout, error) {
	var ro resource.Rollout
	var scope, waves string
	var healthFor, created, updated int64
	var reason sql.NullString
	if err := r.Scan(&ro.ID, &ro.Version, &scope, &waves, &ro.MaxFailures, &healthFor, &ro.State, &ro.Wave, &reason, &created, &updated); err != nil {
		return ro, err
	}
	if err := json.Unmarshal([]byte(scope), &ro.Scope); err != nil {
		return ro, err
	}
	if err := json.Unmarshal([]byte(waves), &ro.Waves); err != nil {
		return ro, err
	}
	ro.HealthFor = cloud.FormatRuleDuration(time.Duration(healthFor) * time.Millisecond)
	ro.Wave = max(ro.Wave, 0)
	ro.CreatedAt, ro.UpdatedAt = resource.T(time.UnixMilli(created)), resource.T(time.UnixMilli(updated))
	if reason.Valid {
		ro.Reason = &reason.String
	}
	ro.Counts = map[string]int{}
	for _, st := range rolloutDeviceStates {
		ro.Counts[st] = 0
	}
	return ro, nil
}

// RolloutList is the organization's rollouts, newest first.
func RolloutList(orgID string, p cloud.Page) Keyset[resource.Rollout] {
	return Keyset[resource.Rollout]{
		What: "list rollouts", Table: "rollouts", Columns: RolloutColumns, ScopeColumn: "org_id", Scope: orgID,
		Newest: true, Cursor: p.Cursor, Limit: cloud.ListLimit(p.Limit, 25, 100),
		Scan: scanRollout,
		ID:   func(r resource.Rollout) string { return r.ID },
	}
}

// RolloutPage implements RolloutTables, with each rollout's counts.
func (s *Store) RolloutPage(ctx context.Context, k Keyset[resource.Rollout]) (resource.List[resource.Rollout], error) {
	l, err := listPage(ctx, s, k)
	if err != nil || len(l.Data) == 0 {
		return l, err
	}
	// One statement text for every page (at most inChunk rollouts), the
	// ids padded with "".
	args := make([]any, inChunk)
	at := map[string]int{}
	for i := range args {
		args[i] = ""
		if i < len(l.Data) {
			args[i], at[l.Data[i].ID] = l.Data[i].ID, i
		}
	}
	err = Each(ctx, s.R, `SELECT rollout_id, state, COUNT(*) FROM rollout_devices WHERE rollout_id IN (`+inMarks+`) GROUP BY rollout_id, state`, args,
		func(r Row) error {
			var id, st string
			var n int
			if err := r.Scan(&id, &st, &n); err != nil {
				return err
			}
			ro := &l.Data[at[id]]
			ro.Counts[st] += n
			ro.Total += n
			return nil
		})
	if err != nil {
		return resource.List[resource.Rollout]{Data: []resource.Rollout{}}, s.Wrap("rollout counts", err)
	}
	return l, nil
}

// RolloutNotFound is ENOTFOUND for rollout id.
func RolloutNotFound(id string) error {
	return cloud.Errorf(cloud.ENOTFOUND, "rollout %q not found", id)
}

// RolloutDetail implements RolloutTables: the rollout, its counts and its
// devices with their names, by wave then id.
func (s *Store) RolloutDetail(ctx context.Context, orgID, id string) (resource.RolloutDetail, error) {
	ro, err := scanRollout(s.R.QueryRow(ctx, `SELECT `+RolloutColumns+` FROM rollouts WHERE id = ? AND org_id = ?`, id, orgID))
	if errors.Is(err, sql.ErrNoRows) {
		return resource.RolloutDetail{}, RolloutNotFound(id)
	}
	if err != nil {
		return resource.RolloutDetail{}, s.Wrap("rollout", err)
	}
	devs, err := Collect(ctx, s.R, func(r Row) (resource.RolloutDevice, error) {
		var d resource.RolloutDevice
		var e sql.NullString
		var at int64
		err := r.Scan(&d.DeviceID, &d.DeviceName, &d.Wave, &d.State, &d.FromVersion, &e, &at)
		if e.Valid {
			d.Error = &e.String
		}
		d.UpdatedAt = resource.T(time.UnixMilli(at))
		return d, err
	}, `SELECT rd.device_id, d.name, rd.wave, rd.state, rd.from_version, rd.error, rd.updated_at
		FROM rollout_devices rd JOIN devices d ON d.id = rd.device_id WHERE rd.rollout_id = ? AND d.org_id = ? ORDER BY rd.wave, rd.device_id`, id, orgID)
	if err != nil {
		return resource.RolloutDetail{}, s.Wrap("rollout devices", err)
	}
	for _, d := range devs {
		ro.Counts[d.State]++
	}
	ro.Total = len(devs)
	return resource.RolloutDetail{Rollout: ro, Devices: devs}, nil
}

// inChunk is how many values a statement of a chunked read or insert
// takes, always as many (short reads padded), so that its text is one.
const inChunk = 100

// inMarks are the placeholders of inChunk values.
var inMarks = strings.TrimSuffix(strings.Repeat("?, ", inChunk), ", ")

// rolloutScope resolves a checked scope into the organization's devices
// (not revoked), sorted by id.
func (s *Store) rolloutScope(ctx context.Context, orgID string, sc resource.RolloutScope) ([]string, error) {
	const q = `SELECT id FROM devices WHERE org_id = ? AND token_revoked_at IS NULL`
	if len(sc.DeviceIDs) == 0 {
		where, args := s.TagsWhere(sc.Tags)
		query := q
		if where != "" {
			query += ` AND ` + where
		}
		out, err := Collect(ctx, s.R, ScanString, query, append([]any{orgID}, args...)...)
		if err != nil {
			return nil, s.Wrap("rollout scope", err)
		}
		slices.Sort(out)
		return out, nil
	}
	found := map[string]bool{}
	for chunk := range slices.Chunk(sc.DeviceIDs, inChunk) {
		args := []any{orgID}
		for i := range inChunk {
			v := ""
			if i < len(chunk) {
				v = chunk[i]
			}
			args = append(args, v)
		}
		got, err := Collect(ctx, s.R, ScanString, q+` AND id IN (`+inMarks+`)`, args...)
		if err != nil {
			return nil, s.Wrap("rollout scope", err)
		}
		for _, id := range got {
			found[id] = true
		}
	}
	for i, id := range sc.DeviceIDs {
		if !found[id] {
			return nil, cloud.RolloutUnknownDevice(i, id)
		}
	}
	out := slices.Clone(sc.DeviceIDs)
	slices.Sort(out)
	return out, nil
}

// releaseVersionSQL counts the organization's releases of a version.
const releaseVersionSQL = `SELECT COUNT(*) FROM releases WHERE org_id = ? AND version = ?`

// InsertRollout implements RolloutTables.
func (s *Store) InsertRollout(ctx context.Context, orgID string, c cloud.CheckedRollout) (string, error) {
	var n int
	if err := s.R.QueryRow(ctx, releaseVersionSQL, orgID, c.Version).Scan(&n); err != nil {
		return "", s.Wrap("rollout version", err)
	}
	if n == 0 {
		return "", cloud.RolloutNoRelease(c.Version)
	}
	devs, err := s.rolloutScope(ctx, orgID, c.Scope)
	if err != nil {
		return "", err
	}
	if len(devs) == 0 {
		return "", cloud.RolloutEmptyScope()
	}
	scope, err := json.Marshal(c.Scope)
	if err != nil {
		return "", s.Wrap("rollout scope", err)
	}
	waves, err := json.Marshal(c.Waves)
	if err != nil {
		return "", s.Wrap("rollout waves", err)
	}
	id, now := ids.New(), s.nowMs()
	waveOf := cloud.RolloutWaveOf(c.Waves, len(devs))
	err = s.Tx(ctx, func(tx Querier) error {
		if _, err := tx.Exec(ctx, `INSERT INTO rollouts (id, org_id, version, scope, waves, max_failures, health_for_ms, state, wave, created_at, updated_at)
			VALUES (?, ?, ?, ?, ?, ?, ?, 'running', -1, ?, ?)`,
			id, orgID, c.Version, string(scope), string(waves), c.MaxFailures, c.HealthFor.Milliseconds(), now, now); err != nil {
			return err
		}
		const row = `(?, ?, ?, ?)`
		insert := `INSERT INTO rollout_devices (rollout_id, device_id, wave, updated_at) VALUES `
		chunk := insert + strings.TrimSuffix(strings.Repeat(row+", ", inChunk), ", ")
		for i := 0; i < len(devs); {
			q, k := chunk, inChunk
			if len(devs)-i < inChunk {
				q, k = insert+row, 1
			}
			var args []any
			for j := i; j < i+k; j++ {
				args = append(args, id, devs[j], waveOf[j], now)
			}
			if _, err := tx.Exec(ctx, q, args...); err != nil {
				return err
			}
			i += k
		}
		return s.audit(ctx, tx, orgID, cloud.ActionRolloutCreated, cloud.AuditTarget{Kind: cloud.TargetRollout, ID: id}, map[string]any{
			"version": c.Version, "scope": scopeDetails(c.Scope.DeviceIDs, c.Scope.Tags), "waves": c.Waves, "devices": len(devs)})
	})
	if err != nil {
		return "", s.Wrap("create rollout", err)
	}
	return id, nil
}

// MoveRollout implements RolloutTables: pause (running to paused), resume
// (paused to running), cancel (running or paused to canceled: its devices
// not started, and those sent an update their agent did not take yet,
// skipped, and those commands canceled).
func (s *Store) MoveRollout(ctx context.Context, orgID, id, action string) error {
	from, to := map[string][]string{"pause": {resource.RolloutRunning}, "resume": {resource.RolloutPaused},
		"cancel": {resource.RolloutRunning, resource.RolloutPaused}}[action],
		map[string]string{"pause": resource.RolloutPaused, "resume": resource.RolloutRunning, "cancel": resource.RolloutCanceled}[action]
	err := s.Tx(ctx, func(tx Querier) error {
		var state string
		err := tx.QueryRow(ctx, `SELECT state FROM rollouts WHERE id = ? AND org_id = ?`+s.LockRows, id, orgID).Scan(&state)
		if errors.Is(err, sql.ErrNoRows) {
			return RolloutNotFound(id)
		}
		if err != nil {
			return err
		}
		if !slices.Contains(from, state) {
			return cloud.Errorf(cloud.ECONFLICT, "rollout %s is %s: it cannot %s", id, state, action)
		}
		now := s.nowMs()
		if _, err := tx.Exec(ctx, `UPDATE rollouts SET state = ?, updated_at = ? WHERE id = ?`, to, now, id); err != nil {
			return err
		}
		if err := s.audit(ctx, tx, orgID, cloud.ActionRolloutChanged, cloud.AuditTarget{Kind: cloud.TargetRollout, ID: id}, map[string]any{"action": action}); err != nil {
			return err
		}
		if action != "cancel" {
			return nil
		}
		// Commands first, then the rollout's devices: the order in which
		// CommandStatus locks them.
		if _, err := tx.Exec(ctx, `UPDATE device_commands SET state = 'canceled', updated_at = ? WHERE rollout_id = ? AND state = 'queued'`, now, id); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `UPDATE rollout_devices SET state = 'skipped', updated_at = ? WHERE rollout_id = ? AND state = 'pending'
			AND (command_id IS NULL OR EXISTS (SELECT 1 FROM device_commands c WHERE c.id = rollout_devices.command_id AND c.state = 'canceled'))`, now, id)
		return err
	})
	return s.Wrap("rollout "+action, err)
}

// openCommandStates are the states of a command not finished, as
// device_commands_open's predicate says them.
const openCommandStates = `state IN ('queued', 'accepted', 'downloading', 'installing')`

// QueueReboot implements RolloutTables: a reboot not finished and not
// expired is answered again; else a connected device (ONLINE or ERROR) is
// given one, and other relays hear of it (ChangeConfig).
func (s *Store) QueueReboot(ctx context.Context, orgID, deviceID string) (a cloud.RebootAccepted, queued bool, err error) {
	a.DeviceID = deviceID
	now := s.Clock()
	err = s.Tx(ctx, func(tx Querier) error {
		var status string
		err := tx.QueryRow(ctx, `SELECT status FROM devices WHERE id = ? AND org_id = ?`+s.LockRows, deviceID, orgID).Scan(&status)
		if errors.Is(err, sql.ErrNoRows) {
			return DeviceNotFound(deviceID)
		}
		if err != nil {
			return err
		}
		err = tx.QueryRow(ctx, `SELECT id FROM device_commands WHERE device_id = ? AND `+openCommandStates+`
			AND kind = 'reboot' AND created_at > ? ORDER BY created_at DESC, id DESC LIMIT 1`, deviceID, now.Add(-cloud.RebootExpiry).UnixMilli()).Scan(&a.CommandID)
		if err == nil || !errors.Is(err, sql.ErrNoRows) {
			return err
		}
		switch resource.DeviceStatus(status) {
		case resource.StatusOnline, resource.StatusError:
		default:
			return cloud.Errorf(cloud.ECONFLICT, "device %s is %s: a reboot is sent only to a connected device (ONLINE or ERROR)", deviceID, status)
		}
		a.CommandID = ids.New()
		if _, err := tx.Exec(ctx, `INSERT INTO device_commands (id, org_id, device_id, kind, state, created_at, updated_at) VALUES (?, ?, ?, 'reboot', 'queued', ?, ?)`,
			a.CommandID, orgID, deviceID, now.UnixMilli(), now.UnixMilli()); err != nil {
			return err
		}
		queued = true
		if err := s.changed(ctx, tx, ChangeConfig, deviceID); err != nil {
			return err
		}
		return s.audit(ctx, tx, orgID, cloud.ActionDeviceReboot, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: deviceID}, map[string]any{"commandId": a.CommandID})
	})
	if err != nil {
		return cloud.RebootAccepted{}, false, s.Wrap("reboot", err)
	}
	return a, queued, nil
}
