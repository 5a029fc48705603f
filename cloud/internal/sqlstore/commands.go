package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The agent endpoint's and the rollout engine's command queries
// (RolloutTables: OpenCommands, StoreCommandStatus, StepRollouts).
//
// Lock order, so that concurrent transactions never deadlock on
// PostgreSQL: a transaction that locks rows of several of rollouts,
// device_commands and rollout_devices locks them in that order; devices
// are locked after the command (CommandStatus) or before any command row
// is read (RebootDevice), and the engine reads them without locking.

// maxCommandError bounds the error an agent reports of a command.
const maxCommandError = 1000

// OpenCommands implements RolloutTables: the device's commands not
// finished, oldest first; a reboot past cloud.RebootExpiry is left out
// even before the engine marks it expired.
func (s *Store) OpenCommands(ctx context.Context, dev cloud.AgentDevice) ([]protocol.Command, error) {
	out, err := Collect(ctx, s.R, func(r Row) (protocol.Command, error) {
		var c protocol.Command
		var payload sql.NullString
		if err := r.Scan(&c.ID, &c.Kind, &payload); err != nil {
			return c, err
		}
		if c.Kind == protocol.CommandUpdate && payload.Valid {
			c.Update = &protocol.UpdateOrder{}
			if err := json.Unmarshal([]byte(payload.String), c.Update); err != nil {
				return c, fmt.Errorf("command %s: %w", c.ID, err)
			}
		}
		return c, nil
	}, OpenCommandsSQL, dev.ID, dev.OrgID, s.Clock().Add(-cloud.RebootExpiry).UnixMilli())
	return out, s.Wrap("pending commands", err)
}

// OpenCommandsSQL reads a device's commands not finished, oldest first
// (arguments: device, organization, the creation time after which a
// reboot is not expired).
const OpenCommandsSQL = `SELECT id, kind, payload FROM device_commands WHERE device_id = ? AND ` + openCommandStates + ` AND org_id = ?
	AND (kind <> 'reboot' OR created_at > ?) ORDER BY created_at, id`

// commandDone are the states of a command the agent finished: a report
// after them changes nothing.
var commandDone = []string{protocol.CommandHealthy, protocol.CommandFailed, protocol.CommandRolledBack, protocol.CommandRebooting}

// commandReports are the states an agent reports of a command of each
// kind.
var commandReports = map[string][]string{
	protocol.CommandUpdate: {protocol.CommandAccepted, protocol.CommandDownloading, protocol.CommandInstalling, protocol.CommandHealthy,
		protocol.CommandFailed, protocol.CommandRolledBack},
	protocol.CommandReboot: {protocol.CommandAccepted, protocol.CommandRebooting, protocol.CommandFailed},
}

// commandDeviceStatus is the device status an agent's report of a command
// of kind moves the device to from status ("" for none): UPDATING while an
// update downloads and installs, REBOOTING on rebooting, and back to
// ONLINE from those once the command ends.
func commandDeviceStatus(kind, state string, status resource.DeviceStatus) resource.DeviceStatus {
	connected := []resource.DeviceStatus{resource.StatusOnline, resource.StatusError, resource.StatusUpdating, resource.StatusRebooting}
	switch {
	case !slices.Contains(connected, status):
		return ""
	case kind == protocol.CommandUpdate && (state == protocol.CommandDownloading || state == protocol.CommandInstalling):
		return resource.StatusUpdating
	case kind == protocol.CommandReboot && state == protocol.CommandRebooting:
		return resource.StatusRebooting
	case kind == protocol.CommandUpdate && slices.Contains(commandDone, state) && status == resource.StatusUpdating,
		kind == protocol.CommandReboot && state == protocol.CommandFailed && status == resource.StatusRebooting:
		return resource.StatusOnline
	}
	return ""
}

// StoreCommandStatus implements RolloutTables (cloud.CommandStore's
// CommandStatus), in one transaction: the command's state and error, its
// rollout device's state (healthy only if the device's agent now runs the
// rollout's version), and the device's status with its
// device.status_changed event. An unknown id, another device's, a state
// that is not one of the command's kind or a report of a finished command
// is ignored.
func (s *Store) StoreCommandStatus(ctx context.Context, dev cloud.AgentDevice, st protocol.CommandStatus, at time.Time) error {
	if st.ID == "" || len(st.ID) > 64 {
		return nil
	}
	if s.EventsAt != nil {
		if err := s.EventsAt(ctx, at.UnixMilli()); err != nil {
			return s.Wrap("command status", err)
		}
	}
	errText := clipText(st.Error, maxCommandError)
	atMs := at.UnixMilli()
	err := s.Tx(ctx, func(tx Querier) error {
		var kind, state string
		var rollout sql.NullString
		err := tx.QueryRow(ctx, `SELECT kind, state, rollout_id FROM device_commands WHERE id = ? AND device_id = ? AND org_id = ?`+s.LockRows,
			st.ID, dev.ID, dev.OrgID).Scan(&kind, &state, &rollout)
		if errors.Is(err, sql.ErrNoRows) || err == nil && (slices.Contains(commandDone, state) || !slices.Contains(commandReports[kind], st.State)) {
			return nil
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE device_commands SET state = ?, error = ?, updated_at = ? WHERE id = ?`, st.State, nullText(errText), atMs, st.ID); err != nil {
			return err
		}
		var status, version string
		if err := tx.QueryRow(ctx, `SELECT status, agent_version FROM devices WHERE id = ?`+s.LockRows, dev.ID).Scan(&status, &version); err != nil {
			return err
		}
		if rollout.Valid {
			if err := s.rolloutDeviceReport(ctx, tx, rollout.String, dev.ID, st, errText, version, atMs); err != nil {
				return err
			}
		}
		from := resource.DeviceStatus(status)
		to := commandDeviceStatus(kind, st.State, from)
		if to == "" || to == from {
			return nil
		}
		if _, err := tx.Exec(ctx, `UPDATE devices SET status = ?, status_since = ?, planned_at = COALESCE(?, planned_at) WHERE id = ?`,
			string(to), atMs, PlannedAt(to, at), dev.ID); err != nil {
			return err
		}
		return InsertEvent(ctx, tx, dev.OrgID, dev.ID, *StatusEvent(from, to, at))
	})
	return s.Wrap("command status", err)
}

// rolloutDeviceReport stores in tx the state of the device's part in the
// rollout that an agent's report of its update command gives: accepted is
// still pending; healthy is healthy only when the device's agent (version,
// from its last hello) runs the rollout's version.
func (s *Store) rolloutDeviceReport(ctx context.Context, tx Querier, rolloutID, deviceID string, st protocol.CommandStatus, errText, version string, atMs int64) error {
	state := st.State
	switch state {
	case protocol.CommandAccepted:
		state = resource.RolloutDevicePending
	case protocol.CommandHealthy:
		var want string
		if err := tx.QueryRow(ctx, `SELECT version FROM rollouts WHERE id = ?`, rolloutID).Scan(&want); err != nil {
			return err
		}
		if version != want {
			state, errText = resource.RolloutDeviceFailed, fmt.Sprintf("reported healthy on version %q, not %q", version, want)
		}
	}
	_, err := tx.Exec(ctx, `UPDATE rollout_devices SET state = ?, error = ?, updated_at = ? WHERE rollout_id = ? AND device_id = ? AND command_id = ?
		AND state NOT IN ('healthy', 'failed', 'rolled_back')`, state, nullText(errText), atMs, rolloutID, deviceID, st.ID)
	return err
}

// clipText keeps the first n bytes of s, cut at a rune boundary.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}

// nullText is "" as NULL.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// engineRollout is a rollout as the engine's step reads it.
type engineRollout struct {
	id, orgID, version, state string
	waves                     []int
	maxFailures               int
	healthFor                 time.Duration
	wave                      int
}

// inflight are the states of a rollout device sent its update and not
// done, as rollout_devices_inflight's predicate says them.
const inflight = `sent_at IS NOT NULL AND state IN ('pending', 'downloading', 'installing')`

// RolloutsToStepSQL reads the rollouts the engine steps: those running and
// those with a device sent its update before healthFor and
// RolloutDownloadGrace (argument: now less the grace, Unix ms).
const RolloutsToStepSQL = `SELECT id FROM rollouts WHERE state = 'running'
	UNION SELECT rollout_id FROM rollout_devices WHERE ` + inflight + `
	AND sent_at <= ? - (SELECT r.health_for_ms FROM rollouts r WHERE r.id = rollout_devices.rollout_id)`

// StepRollouts implements RolloutTables (cloud.CommandStore's
// AdvanceRollouts): each running rollout, and each other with a device
// past its time, stepped in a transaction of its own that locks the
// rollout's row (two relays stepping at once step it one after the
// other, and the second finds the wave started); then the reboots past
// cloud.RebootExpiry expire. It returns the devices given commands.
func (s *Store) StepRollouts(ctx context.Context, now time.Time) ([]string, error) {
	late := now.Add(-cloud.RolloutDownloadGrace).UnixMilli()
	rollouts, err := Collect(ctx, s.R, ScanString, RolloutsToStepSQL, late)
	if err != nil {
		return nil, s.Wrap("rollouts to step", err)
	}
	slices.Sort(rollouts)
	var sent []string
	for _, id := range rollouts {
		err := s.Tx(ctx, func(tx Querier) error {
			got, err := s.stepRollout(ctx, tx, id, now)
			sent = append(sent, got...)
			return err
		})
		if err != nil {
			return sent, s.Wrap("step rollout "+id, err)
		}
	}
	_, err = s.W.Exec(ctx, `UPDATE device_commands SET state = 'expired', updated_at = ? WHERE kind = 'reboot' AND state IN ('queued', 'accepted') AND created_at <= ?`,
		now.UnixMilli(), now.Add(-cloud.RebootExpiry).UnixMilli())
	return sent, s.Wrap("expire reboots", err)
}

// stepRollout steps rollout id in tx at now (StepRollouts) and returns the
// devices it gave commands: its devices past healthFor and
// RolloutDownloadGrace since they were sent their update fail; then, if
// it runs, it stops when its failures exceed maxFailures, or starts its
// next wave when every device of those started is done, or completes
// after its last.
func (s *Store) stepRollout(ctx context.Context, tx Querier, id string, now time.Time) ([]string, error) {
	var r engineRollout
	var waves string
	var healthFor int64
	err := tx.QueryRow(ctx, `SELECT id, org_id, version, state, waves, max_failures, health_for_ms, wave FROM rollouts WHERE id = ?`+s.LockRows, id).
		Scan(&r.id, &r.orgID, &r.version, &r.state, &waves, &r.maxFailures, &healthFor, &r.wave)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if err := json.Unmarshal([]byte(waves), &r.waves); err != nil {
		return nil, fmt.Errorf("rollout %s waves: %w", id, err)
	}
	r.healthFor = time.Duration(healthFor) * time.Millisecond
	nowMs := now.UnixMilli()
	if err := s.timeOut(ctx, tx, r, now); err != nil {
		return nil, err
	}
	if r.state != resource.RolloutRunning {
		return nil, nil
	}
	var sent []string
	for {
		var failures, open int
		if err := tx.QueryRow(ctx, `SELECT COALESCE(SUM(CASE WHEN state IN ('failed', 'rolled_back') THEN 1 ELSE 0 END), 0),
			COALESCE(SUM(CASE WHEN wave <= ? AND state IN ('pending', 'downloading', 'installing') THEN 1 ELSE 0 END), 0)
			FROM rollout_devices WHERE rollout_id = ?`, r.wave, id).Scan(&failures, &open); err != nil {
			return nil, err
		}
		if failures > r.maxFailures {
			_, err := tx.Exec(ctx, `UPDATE rollouts SET state = 'stopped', reason = ?, updated_at = ? WHERE id = ?`,
				cloud.RolloutStopReason(failures, r.maxFailures), nowMs, id)
			return sent, err
		}
		if open > 0 {
			return sent, nil
		}
		if r.wave >= len(r.waves)-1 {
			_, err := tx.Exec(ctx, `UPDATE rollouts SET state = 'completed', updated_at = ? WHERE id = ?`, nowMs, id)
			return sent, err
		}
		r.wave++
		got, err := s.startWave(ctx, tx, r, now)
		if err != nil {
			return nil, err
		}
		sent = append(sent, got...)
		if _, err := tx.Exec(ctx, `UPDATE rollouts SET wave = ?, updated_at = ? WHERE id = ?`, r.wave, nowMs, id); err != nil {
			return nil, err
		}
	}
}

// timeOut fails in tx the devices of r past r.healthFor and
// RolloutDownloadGrace since they were sent their update, and their
// commands (no longer sent).
func (s *Store) timeOut(ctx context.Context, tx Querier, r engineRollout, now time.Time) error {
	type late struct{ device, command string }
	due, err := Collect(ctx, tx, func(row Row) (late, error) {
		var l late
		err := row.Scan(&l.device, &l.command)
		return l, err
	}, `SELECT device_id, command_id FROM rollout_devices WHERE rollout_id = ? AND `+inflight+` AND sent_at <= ?`,
		r.id, now.Add(-r.healthFor-cloud.RolloutDownloadGrace).UnixMilli())
	if err != nil {
		return err
	}
	msg := cloud.RolloutTimeout(r.healthFor)
	for _, l := range due {
		if _, err := tx.Exec(ctx, `UPDATE device_commands SET state = 'failed', error = ?, updated_at = ? WHERE id = ? AND `+openCommandStates,
			msg, now.UnixMilli(), l.command); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE rollout_devices SET state = 'failed', error = ?, updated_at = ? WHERE rollout_id = ? AND device_id = ?
			AND state IN ('pending', 'downloading', 'installing')`, msg, now.UnixMilli(), r.id, l.device); err != nil {
			return err
		}
	}
	return nil
}

// waveRelease is the release of a rollout's version for one architecture.
type waveRelease struct {
	id, sha256, signature string
	size                  int64
}

// releaseForSQL reads the organization's release of a version for an
// architecture.
const releaseForSQL = `SELECT id, size, sha256, signature FROM releases WHERE org_id = ? AND version = ? AND arch = ?`

// startWave starts wave r.wave of r in tx: each of its pending devices
// already running the version is healthy at once; one with an update of
// another rollout not finished, one whose agent announced no
// architecture, or one of an architecture without a release of the
// version fails; each other is given an update command (and other
// relays hear of it, ChangeConfig). It returns the devices given commands.
func (s *Store) startWave(ctx context.Context, tx Querier, r engineRollout, now time.Time) ([]string, error) {
	type member struct {
		id, version, arch string
		busy              bool // an update of another rollout not finished
	}
	members, err := Collect(ctx, tx, func(row Row) (member, error) {
		var m member
		err := row.Scan(&m.id, &m.version, &m.arch, &m.busy)
		return m, err
	}, `SELECT rd.device_id, d.agent_version, d.agent_arch, EXISTS (SELECT 1 FROM device_commands c WHERE c.device_id = rd.device_id
			AND c.state IN ('queued', 'accepted', 'downloading', 'installing') AND c.kind = 'update')
		FROM rollout_devices rd JOIN devices d ON d.id = rd.device_id
		WHERE rd.rollout_id = ? AND rd.wave = ? AND rd.state = 'pending' AND rd.command_id IS NULL ORDER BY rd.device_id`, r.id, r.wave)
	if err != nil {
		return nil, err
	}
	nowMs := now.UnixMilli()
	releases := map[string]*waveRelease{}
	settle := func(m member, state, errText string) error {
		_, err := tx.Exec(ctx, `UPDATE rollout_devices SET state = ?, error = ?, from_version = ?, updated_at = ? WHERE rollout_id = ? AND device_id = ?`,
			state, nullText(errText), m.version, nowMs, r.id, m.id)
		return err
	}
	var sent []string
	for _, m := range members {
		if m.version == r.version {
			if err := settle(m, resource.RolloutDeviceHealthy, ""); err != nil {
				return nil, err
			}
			continue
		}
		if m.busy {
			if err := settle(m, resource.RolloutDeviceFailed, "another update of the device is still under way"); err != nil {
				return nil, err
			}
			continue
		}
		if m.arch == "" {
			if err := settle(m, resource.RolloutDeviceFailed, cloud.RolloutNoArch); err != nil {
				return nil, err
			}
			continue
		}
		rel, ok := releases[m.arch]
		if !ok {
			var x waveRelease
			err := tx.QueryRow(ctx, releaseForSQL, r.orgID, r.version, m.arch).Scan(&x.id, &x.size, &x.sha256, &x.signature)
			switch {
			case err == nil:
				rel = &x
			case !errors.Is(err, sql.ErrNoRows):
				return nil, err
			}
			releases[m.arch] = rel
		}
		if rel == nil {
			if err := settle(m, resource.RolloutDeviceFailed, fmt.Sprintf("no release of version %s for %s", r.version, m.arch)); err != nil {
				return nil, err
			}
			continue
		}
		order, err := json.Marshal(protocol.UpdateOrder{RolloutID: r.id, ReleaseID: rel.id, Version: r.version, Path: protocol.ReleasePath(rel.id),
			Size: rel.size, SHA256: rel.sha256, Signature: rel.signature, HealthFor: protocol.Duration{Duration: r.healthFor}})
		if err != nil {
			return nil, err
		}
		cmd := ids.New()
		if _, err := tx.Exec(ctx, `INSERT INTO device_commands (id, org_id, device_id, kind, rollout_id, payload, state, created_at, updated_at)
			VALUES (?, ?, ?, 'update', ?, ?, 'queued', ?, ?)`, cmd, r.orgID, m.id, r.id, string(order), nowMs, nowMs); err != nil {
			return nil, err
		}
		if _, err := tx.Exec(ctx, `UPDATE rollout_devices SET command_id = ?, sent_at = ?, from_version = ?, updated_at = ? WHERE rollout_id = ? AND device_id = ?`,
			cmd, nowMs, m.version, nowMs, r.id, m.id); err != nil {
			return nil, err
		}
		if err := s.changed(ctx, tx, ChangeConfig, m.id); err != nil {
			return nil, err
		}
		sent = append(sent, m.id)
	}
	return sent, nil
}
