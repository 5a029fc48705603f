package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// AgentWrites are AgentTx's statements, written once, on a store's
// agent-endpoint transaction Q in dialect D; Event stores a relay-made
// event the store's own way (its bulk event insert).
type AgentWrites struct {
	Q     Querier
	D     *Dialect
	Event func(ctx context.Context, dev agentlink.Device, ev *resource.Event) error
}

var _ AgentTx = AgentWrites{}

// The statements of AgentWrites; LockRows and SkipLocked are the
// dialect's (AgentSQL lists them as run).
const (
	deviceStateSQL   = `SELECT status, COALESCE(agent_session, ''), agent_last_seq FROM devices WHERE id = ?`
	sessionStatusSQL = `SELECT status FROM devices WHERE id = ? AND agent_session = ?`
	setOnlineSQL     = `UPDATE devices SET status = 'ONLINE', firmware_version = ?, agent_device_name = ?, agent_device_location = ?,
		agent_timezone = ?, agent_version = ?, agent_arch = ?, agent_heartbeat_ms = ?, last_seen = ?, agent_deadline = ?,
		status_since = CASE WHEN status = 'ONLINE' THEN status_since ELSE ? END WHERE id = ? AND agent_session = ?`
	desiredVersionSQL = `INSERT INTO serial_state (device_id) VALUES (?) ON CONFLICT (device_id) DO UPDATE SET device_id = excluded.device_id
		RETURNING desired_version`
	reportedChannelsSQL = `SELECT COALESCE(channel_reports, '') FROM devices WHERE id = ?`
	setAppliedSQL       = `UPDATE serial_state SET applied_version = ? WHERE device_id = ?`
	dueSQL              = `SELECT ` + DueColumns + ` FROM devices WHERE agent_deadline IS NOT NULL AND agent_deadline < ? ORDER BY agent_deadline LIMIT 2000`
)

// OrphansSQL is the orphan rule (agentlink.Store's Orphans): a device in
// a connected status (the statuses a session holds it in) without a
// deadline was left so by a relay process that ended; it gets the deadline
// given, after which the sweep takes it OFFLINE unless its agent
// reconnects.
const OrphansSQL = `UPDATE devices SET agent_deadline = ? WHERE agent_deadline IS NULL AND status IN ('ONLINE', 'CONNECTING', 'REBOOTING', 'UPDATING', 'ERROR')`

func (d *Dialect) setOfflineSQL() string {
	return `UPDATE devices SET status = 'OFFLINE', ` + sinceSQL(resource.StatusOffline) + `, agent_session = NULL, agent_deadline = NULL` + d.OfflineAlso + ` WHERE id = ?`
}

// AgentSQL lists the statements AgentWrites runs in dialect d, as it runs
// them: a store may prepare them ahead.
func AgentSQL(d *Dialect) []string {
	return []string{deviceStateSQL + d.LockRows, sessionStatusSQL + d.LockRows, setOnlineSQL, desiredVersionSQL,
		reportedChannelsSQL, setAppliedSQL, d.setOfflineSQL(), dueSQL + d.SkipLocked}
}

func (a AgentWrites) wrap(err error, format string, args ...any) error {
	return a.D.Wrap(fmt.Sprintf(format, args...), err)
}

// InsertEvent implements AgentTx.
func (a AgentWrites) InsertEvent(ctx context.Context, dev agentlink.Device, ev *resource.Event) error {
	return a.Event(ctx, dev, ev)
}

// DeviceState implements AgentTx, locking the device's row where the
// store locks rows.
func (a AgentWrites) DeviceState(ctx context.Context, id string) (status resource.DeviceStatus, session string, lastSeq uint64, err error) {
	var st string
	var seq int64
	if err := a.Q.QueryRow(ctx, deviceStateSQL+a.D.LockRows, id).Scan(&st, &session, &seq); err != nil {
		return "", "", 0, a.wrap(err, "device %s status", id)
	}
	return resource.DeviceStatus(st), session, uint64(seq), nil
}

// SessionStatus implements AgentTx, locking the device's row where the
// store locks rows.
func (a AgentWrites) SessionStatus(ctx context.Context, id, session string) (resource.DeviceStatus, bool, error) {
	var st string
	err := a.Q.QueryRow(ctx, sessionStatusSQL+a.D.LockRows, id, session).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, a.wrap(err, "session of %s", id)
	}
	return resource.DeviceStatus(st), true, nil
}

// SetOnline implements AgentTx.
func (a AgentWrites) SetOnline(ctx context.Context, in agentlink.HelloIn, deadline time.Time) error {
	h := in.Hello
	_, err := a.Q.Exec(ctx, setOnlineSQL, h.FirmwareVersion, h.DeviceName, h.DeviceLocation, h.Timezone,
		h.AgentVersion, agentArch(h.Arch), in.HeartbeatInterval.Milliseconds(), in.At.UnixMilli(), deadline.UnixMilli(), in.At.UnixMilli(), in.Device.ID, in.Session)
	return a.wrap(err, "hello %s", in.Device.ID)
}

// agentArch is the architecture a hello announced as stored: "" for one
// longer than any (so bounded).
func agentArch(arch string) string {
	if len(arch) > 16 {
		return ""
	}
	return arch
}

// SerialState implements AgentTx: the channels never reported are left
// out (any report of theirs is a change).
func (a AgentWrites) SerialState(ctx context.Context, id string) (desiredVersion int64, channels []protocol.ChannelState, err error) {
	if err := a.Q.QueryRow(ctx, desiredVersionSQL, id).Scan(&desiredVersion); err != nil {
		return 0, nil, a.wrap(err, "desired version %s", id)
	}
	var stored string
	if err := a.Q.QueryRow(ctx, reportedChannelsSQL, id).Scan(&stored); err != nil {
		return 0, nil, a.wrap(err, "channels %s", id)
	}
	// Reports that do not decode are as never made: the next report of
	// each channel is a change.
	reports, _ := cloud.DecodeChannelReports(stored)
	for _, r := range reports {
		channels = append(channels, r.State())
	}
	return desiredVersion, channels, nil
}

// SetApplied implements AgentTx.
func (a AgentWrites) SetApplied(ctx context.Context, id string, version int64) error {
	_, err := a.Q.Exec(ctx, setAppliedSQL, version, id)
	return a.wrap(err, "config applied %s", id)
}

// SetOffline implements AgentTx.
func (a AgentWrites) SetOffline(ctx context.Context, id string, at time.Time) error {
	_, err := a.Q.Exec(ctx, a.D.setOfflineSQL(), at.UnixMilli(), id)
	return a.wrap(err, "offline %s", id)
}

// Due implements AgentTx; relays sweeping at once skip each other's rows
// where the store locks rows (SkipLocked), so each device goes OFFLINE
// once.
func (a AgentWrites) Due(ctx context.Context, now time.Time) ([]agentlink.Device, error) {
	out, err := Collect(ctx, a.Q, ScanDue, dueSQL+a.D.SkipLocked, now.UnixMilli())
	return out, a.wrap(err, "sweep")
}

// AgentReads are the agent endpoint store's reads (agentlink.Store's
// AuthDevice, Revoked, DesiredConfig), written once; each store's agent
// store embeds them. Log hears of a stored channel configuration that does
// not decode.
type AgentReads struct {
	*Store
	Log *slog.Logger
}

// DeviceByTokenSQL finds a device by its token's hash (AuthDevice; the
// stores' explain tests check it is served by an index).
const DeviceByTokenSQL = `SELECT id, org_id, model, status, token_revoked_at FROM devices WHERE token_hash = ?`

// AuthDevice implements agentlink.Store: ErrUnauthorized for an unknown or
// revoked token.
func (s AgentReads) AuthDevice(ctx context.Context, tokenHash [32]byte) (agentlink.Device, error) {
	var d agentlink.Device
	var revoked sql.NullInt64
	var status string
	err := s.R.QueryRow(ctx, DeviceByTokenSQL, tokenHash[:]).
		Scan(&d.ID, &d.OrgID, &d.Model, &status, &revoked)
	if errors.Is(err, sql.ErrNoRows) || err == nil && revoked.Valid {
		return agentlink.Device{}, agentlink.ErrUnauthorized
	}
	if err != nil {
		return agentlink.Device{}, s.Wrap("auth device", err)
	}
	d.Status = resource.DeviceStatus(status)
	return d, nil
}

// Revoked implements agentlink.Store.
func (s AgentReads) Revoked(ctx context.Context) ([]string, error) {
	out, err := Collect(ctx, s.R, ScanString, `SELECT id FROM devices WHERE token_revoked_at IS NOT NULL AND agent_session IS NOT NULL`)
	return out, s.Wrap("revoked devices", err)
}

// StaleConfigs returns the devices with an agent connected whose desired
// serial configuration is newer than what their agent applied: pushes they
// may have missed. relay, when not "", keeps those whose socket that relay
// holds (a store several relays share records it in agent_relay).
func (s *Store) StaleConfigs(ctx context.Context, relay string) ([]string, error) {
	// serial_state's narrow rows are scanned, devices looked up by key
	// for the few stale ones only.
	q := `SELECT s.device_id FROM serial_state s WHERE s.desired_version > s.applied_version
		AND EXISTS (SELECT 1 FROM devices d WHERE d.id = s.device_id AND d.agent_session IS NOT NULL`
	var args []any
	if relay != "" {
		q += ` AND d.agent_relay = ?`
		args = append(args, relay)
	}
	q += `)`
	out, err := Collect(ctx, s.R, ScanString, q, args...)
	return out, s.Wrap("stale configs", err)
}

// DesiredConfig implements agentlink.Store (the package's DesiredConfig).
func (s AgentReads) DesiredConfig(ctx context.Context, dev agentlink.Device) (protocol.Config, bool, error) {
	return DesiredConfig(ctx, s.Store, dev, func(ch string, err error) {
		s.Log.Error("stored channel config does not decode; sending the default", "device", dev.ID, "channel", ch, "err", err)
	})
}
