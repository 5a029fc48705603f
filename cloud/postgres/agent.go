package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// AgentStore is the agent endpoint's store (agentlink.Store) on PostgreSQL.
// Its writes go through one writer goroutine (ingest.go); Close stops it.
// Every write names its session, and a device belongs to the newest
// session, wherever (on whichever relay) it connected: Connect raises the
// device's epoch and records the relay (presence), and a write of an older
// session is refused with ErrSessionGone, so that relay closes it.
type AgentStore struct {
	db    *DB
	log   *slog.Logger
	w     *ingestWriter
	merge agentlink.HeartbeatMerge // applyHeartbeats' memory (writer goroutine only)
	relay string
}

var _ agentlink.Store = (*AgentStore)(nil)

// onlineish are the statuses of a connected device.
const onlineish = `('ONLINE', 'CONNECTING', 'REBOOTING', 'UPDATING', 'ERROR')`

// NewAgentStore starts the writer goroutine. relay names this relay
// process in the devices' presence (agent_relay).
func NewAgentStore(db *DB, log *slog.Logger, relay string) *AgentStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &AgentStore{db: db, log: log, relay: relay}
	s.w = newIngestWriter(db, log)
	s.w.bulk = s.applyHeartbeats
	return s
}

// Close finishes the queued writes and stops the writer.
func (s *AgentStore) Close() error {
	s.w.close()
	return nil
}

// AuthDevice implements agentlink.Store.
func (s *AgentStore) AuthDevice(ctx context.Context, tokenHash [32]byte) (agentlink.Device, error) {
	var d agentlink.Device
	var revoked *int64
	var status string
	err := s.db.Pool.QueryRow(ctx, `SELECT id, org_id, model, status, token_revoked_at FROM devices WHERE token_hash = $1`, tokenHash[:]).
		Scan(&d.ID, &d.OrgID, &d.Model, &status, &revoked)
	if errors.Is(err, pgx.ErrNoRows) || err == nil && revoked != nil {
		return agentlink.Device{}, agentlink.ErrUnauthorized
	}
	if err != nil {
		return agentlink.Device{}, storeError("postgres: auth device: %w", err)
	}
	d.Status = resource.DeviceStatus(status)
	return d, nil
}

// agentTx runs the agent store's statements in the writer's transaction
// (sqlstore.AgentTx).
type agentTx struct {
	s  *AgentStore
	tx pgx.Tx
}

var _ sqlstore.AgentTx = agentTx{}

// DeviceState implements sqlstore.AgentTx, locking the device's row for
// the transaction.
func (a agentTx) DeviceState(ctx context.Context, id string) (status resource.DeviceStatus, session string, lastSeq uint64, err error) {
	var st string
	var seq int64
	if err := a.tx.QueryRow(ctx, `SELECT status, COALESCE(agent_session, ''), agent_last_seq FROM devices WHERE id = $1 FOR UPDATE`, id).Scan(&st, &session, &seq); err != nil {
		return "", "", 0, storeError("postgres: device %s status: %w", id, err)
	}
	return resource.DeviceStatus(st), session, uint64(seq), nil
}

// SessionStatus implements sqlstore.AgentTx, locking the device's row.
func (a agentTx) SessionStatus(ctx context.Context, id, session string) (resource.DeviceStatus, bool, error) {
	var st string
	err := a.tx.QueryRow(ctx, `SELECT status FROM devices WHERE id = $1 AND agent_session = $2 FOR UPDATE`, id, session).Scan(&st)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, storeError("postgres: session of %s: %w", id, err)
	}
	return resource.DeviceStatus(st), true, nil
}

// SetOnline implements sqlstore.AgentTx.
func (a agentTx) SetOnline(ctx context.Context, in agentlink.HelloIn, deadline time.Time) error {
	h := in.Hello
	if _, err := a.tx.Exec(ctx, `UPDATE devices SET status = 'ONLINE', firmware_version = $1, agent_device_name = $2, agent_device_location = $3,
		agent_timezone = $4, agent_version = $5, agent_heartbeat_ms = $6, last_seen = $7, agent_deadline = $8 WHERE id = $9`,
		h.FirmwareVersion, h.DeviceName, h.DeviceLocation, h.Timezone, h.AgentVersion, in.HeartbeatInterval.Milliseconds(), in.At.UnixMilli(),
		deadline.UnixMilli(), in.Device.ID); err != nil {
		return storeError("postgres: hello %s: %w", in.Device.ID, err)
	}
	return nil
}

// InsertEvent implements sqlstore.AgentTx.
func (a agentTx) InsertEvent(ctx context.Context, dev agentlink.Device, ev *resource.Event) error {
	return a.s.db.insertEvents(ctx, a.tx, dev.OrgID, dev.ID, []resource.Event{*ev})
}

// SerialState implements sqlstore.AgentTx.
func (a agentTx) SerialState(ctx context.Context, id string) (desiredVersion int64, channels []protocol.ChannelState, err error) {
	if err := a.tx.QueryRow(ctx, `INSERT INTO serial_state (device_id) VALUES ($1) ON CONFLICT (device_id) DO UPDATE SET device_id = excluded.device_id
		RETURNING desired_version`, id).Scan(&desiredVersion); err != nil {
		return 0, nil, storeError("postgres: desired version %s: %w", id, err)
	}
	rows, err := a.tx.Query(ctx, `SELECT channel_id, available, live, tx_on, error, COALESCE(passthrough_address, '') FROM serial_channels
		WHERE device_id = $1 AND available IS NOT NULL`, id)
	if err != nil {
		return 0, nil, storeError("postgres: channels %s: %w", id, err)
	}
	channels, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (protocol.ChannelState, error) {
		var c protocol.ChannelState
		err := r.Scan(&c.ID, &c.Available, &c.Live, &c.TxOn, &c.Error, &c.PassthroughAddress)
		return c, err
	})
	if err != nil {
		return 0, nil, storeError("postgres: channels %s: %w", id, err)
	}
	return desiredVersion, channels, nil
}

// SetApplied implements sqlstore.AgentTx.
func (a agentTx) SetApplied(ctx context.Context, id string, version int64) error {
	if _, err := a.tx.Exec(ctx, `UPDATE serial_state SET applied_version = $1 WHERE device_id = $2`, version, id); err != nil {
		return storeError("postgres: config applied %s: %w", id, err)
	}
	return nil
}

// SetOffline implements sqlstore.AgentTx, clearing the device's relay too.
func (a agentTx) SetOffline(ctx context.Context, id string) error {
	if _, err := a.tx.Exec(ctx, `UPDATE devices SET status = 'OFFLINE', agent_session = NULL, agent_deadline = NULL, agent_relay = NULL WHERE id = $1`, id); err != nil {
		return storeError("postgres: offline %s: %w", id, err)
	}
	return nil
}

// Due implements sqlstore.AgentTx. Relays sweeping at once skip each
// other's rows (SKIP LOCKED), so each device goes OFFLINE once.
func (a agentTx) Due(ctx context.Context, now time.Time) ([]agentlink.Device, error) {
	rows, err := a.tx.Query(ctx, `SELECT `+sqlstore.DueColumns+` FROM devices WHERE agent_deadline IS NOT NULL AND agent_deadline < $1
		ORDER BY agent_deadline LIMIT 2000 FOR UPDATE SKIP LOCKED`, now.UnixMilli())
	if err != nil {
		return nil, storeError("postgres: sweep: %w", err)
	}
	due, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (agentlink.Device, error) { return sqlstore.ScanDue(r) })
	if err != nil {
		return nil, storeError("postgres: sweep: %w", err)
	}
	return due, nil
}

// Connect implements agentlink.Store: session becomes the device's, on this
// relay, with a new epoch.
func (s *AgentStore) Connect(ctx context.Context, dev agentlink.Device, session string, at, deadline time.Time) (agentlink.StatusChange, error) {
	ch := agentlink.StatusChange{Device: dev, To: resource.StatusConnecting}
	err := s.w.do(ctx, &ingestJob{apply: func(ctx context.Context, tx pgx.Tx) error {
		from, _, _, err := agentTx{s, tx}.DeviceState(ctx, dev.ID)
		if err != nil {
			return err
		}
		ch.From = from
		if _, err = tx.Exec(ctx, `UPDATE devices SET status = 'CONNECTING', agent_session = $1, agent_deadline = $2, agent_relay = $3, agent_epoch = agent_epoch + 1
			WHERE id = $4`, session, deadline.UnixMilli(), s.relay, dev.ID); err != nil {
			return err
		}
		// The relay holding an older session of the device closes it at
		// once (Listen's Presence); its next write would be refused anyway.
		return notify(ctx, tx, channelPresence, dev.ID+" "+session)
	}})
	return ch, err
}

// Hello implements agentlink.Store (sqlstore.Hello).
func (s *AgentStore) Hello(ctx context.Context, in agentlink.HelloIn) (agentlink.HelloOut, error) {
	var out agentlink.HelloOut
	job := &ingestJob{apply: func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, err = sqlstore.Hello(ctx, agentTx{s, tx}, in)
		return err
	}}
	if in.OnlineEvent {
		job.events = []int64{in.At.UnixMilli()}
	}
	err := s.w.do(ctx, job)
	return out, err
}

// Records implements agentlink.Store: samples and events in multi-row
// statements whose RETURNING names the rows actually inserted. A batch of
// samples alone is stored with the others of its transaction (recJob).
func (s *AgentStore) Records(ctx context.Context, in agentlink.RecordsIn) (agentlink.RecordsOut, error) {
	var out agentlink.RecordsOut
	dev := in.Device
	job := &ingestJob{}
	var maxSeq uint64
	var ms []*resource.MetricSample
	var evs []*protocol.Event
	for _, r := range in.Items {
		maxSeq = max(maxSeq, r.Seq)
		switch {
		case r.Metric != nil:
			ms = append(ms, r.Metric)
			job.metrics = append(job.metrics, r.Metric.CapturedAt.UnixMilli())
		case r.Event != nil:
			evs = append(evs, r.Event)
			job.events = append(job.events, r.Event.CreatedAt.UnixMilli())
		}
	}
	if len(evs) == 0 {
		job.rec = &recJob{dev: dev, ms: ms, maxSeq: maxSeq, out: &out}
	}
	job.apply = func(ctx context.Context, tx pgx.Tx) error {
		out = agentlink.RecordsOut{}
		var err error
		if out.Metrics, err = insertMetrics(ctx, tx, dev.ID, ms); err != nil {
			return err
		}
		if out.Events, err = s.insertAgentEvents(ctx, tx, dev, evs); err != nil {
			return err
		}
		var last int64
		if err := tx.QueryRow(ctx, `UPDATE devices SET agent_last_seq = GREATEST(agent_last_seq, $1) WHERE id = $2 RETURNING agent_last_seq`,
			int64(maxSeq), dev.ID).Scan(&last); err != nil {
			return storeError("postgres: last seq of %s: %w", dev.ID, err)
		}
		out.LastSeq = uint64(last)
		return nil
	}
	err := s.w.do(ctx, job)
	return out, err
}

// insertMetrics stores samples of one device and returns those that were
// new, in their order.
func insertMetrics(ctx context.Context, tx pgx.Tx, deviceID string, ms []*resource.MetricSample) ([]resource.MetricSample, error) {
	if len(ms) == 0 {
		return nil, nil
	}
	at := make([]int64, len(ms))
	var cpu, mem, disk, temp, load []float64
	for i, m := range ms {
		at[i] = m.CapturedAt.UnixMilli()
		cpu, mem, disk = append(cpu, m.CPUPct), append(mem, m.MemPct), append(disk, m.DiskUsedPct)
		temp, load = append(temp, m.TempCPU), append(load, m.LoadAvg1)
	}
	rows, err := tx.Query(ctx, `INSERT INTO metrics (device_id, captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1)
		SELECT $1, * FROM unnest($2::bigint[], $3::float8[], $4::float8[], $5::float8[], $6::float8[], $7::float8[])
		ON CONFLICT DO NOTHING RETURNING captured_at`, deviceID, at, cpu, mem, disk, temp, load)
	if err != nil {
		return nil, storeError("postgres: insert metrics of %s: %w", deviceID, err)
	}
	got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, storeError("postgres: insert metrics of %s: %w", deviceID, err)
	}
	inserted := make(map[int64]bool, len(got))
	for _, t := range got {
		inserted[t] = true
	}
	var out []resource.MetricSample
	for _, m := range ms {
		if t := m.CapturedAt.UnixMilli(); inserted[t] {
			out = append(out, *m)
			delete(inserted, t)
		}
	}
	return out, nil
}

// insertAgentEvents stores an agent's events unless they are there
// already and returns those inserted. An id that another device's event
// holds (same id and time) is stored under a derived id instead.
func (s *AgentStore) insertAgentEvents(ctx context.Context, tx pgx.Tx, dev agentlink.Device, evs []*protocol.Event) ([]resource.Event, error) {
	if len(evs) == 0 {
		return nil, nil
	}
	var out []resource.Event
	pending := make([]resource.Event, 0, len(evs))
	for _, e := range evs {
		data := string(e.Data)
		if data == "" {
			data = "{}"
		}
		pending = append(pending, resource.Event{ID: e.ID, Type: e.Type, Severity: e.Severity, Message: e.Message, Data: json.RawMessage(data), CreatedAt: e.CreatedAt})
	}
	for attempt := 0; attempt < 2 && len(pending) > 0; attempt++ {
		inserted, err := insertEventRows(ctx, tx, repeat(dev.OrgID, len(pending)), repeat(dev.ID, len(pending)), pending)
		if err != nil {
			return nil, err
		}
		var again []resource.Event
		for _, ev := range pending {
			if inserted[ev.ID] {
				out = append(out, ev)
				continue
			}
			var owner string
			if err := tx.QueryRow(ctx, `SELECT device_id FROM events WHERE id = $1 AND created_at = $2`, ev.ID, ev.CreatedAt.UnixMilli()).Scan(&owner); err != nil {
				return nil, storeError("postgres: event owner: %w", err)
			}
			if owner == dev.ID {
				continue // a resend
			}
			s.log.Warn("agent event id collides with another device's event; storing under a derived id", "device", dev.ID, "event", ev.ID)
			ev.ID = agentlink.RemapEventID(dev.ID, ev.ID)
			again = append(again, ev)
		}
		pending = again
	}
	return out, nil
}

// ConfigApplied implements agentlink.Store (sqlstore.ConfigApplied).
func (s *AgentStore) ConfigApplied(ctx context.Context, in agentlink.ConfigAppliedIn) (agentlink.ConfigAppliedOut, error) {
	err := s.w.do(ctx, &ingestJob{apply: func(ctx context.Context, tx pgx.Tx) error {
		return sqlstore.ConfigApplied(ctx, agentTx{s, tx}, in)
	}})
	return agentlink.ConfigAppliedOut{}, err
}

// Disconnect implements agentlink.Store (sqlstore.Disconnect).
func (s *AgentStore) Disconnect(ctx context.Context, dev agentlink.Device, session string, at time.Time, reason string) (agentlink.StatusChange, bool, error) {
	var ch agentlink.StatusChange
	var ok bool
	err := s.w.do(ctx, &ingestJob{events: []int64{at.UnixMilli()}, apply: func(ctx context.Context, tx pgx.Tx) error {
		var err error
		ch, ok, err = sqlstore.Disconnect(ctx, agentTx{s, tx}, dev, session, at, reason)
		return err
	}})
	return ch, ok, err
}

// Sweep implements agentlink.Store (sqlstore.Sweep).
func (s *AgentStore) Sweep(ctx context.Context, now time.Time) ([]agentlink.StatusChange, error) {
	var out []agentlink.StatusChange
	err := s.w.do(ctx, &ingestJob{events: []int64{now.UnixMilli()}, apply: func(ctx context.Context, tx pgx.Tx) error {
		var err error
		out, err = sqlstore.Sweep(ctx, agentTx{s, tx}, now)
		return err
	}})
	return out, err
}

// Revoked implements agentlink.Store.
func (s *AgentStore) Revoked(ctx context.Context) ([]string, error) {
	return query(ctx, s.db, "revoked devices", sqlstore.ScanString, `SELECT id FROM devices WHERE token_revoked_at IS NOT NULL AND agent_session IS NOT NULL`)
}

// Orphans implements agentlink.Store.
func (s *AgentStore) Orphans(ctx context.Context, now time.Time, window time.Duration) (int, error) {
	tag, err := s.db.Pool.Exec(ctx, `UPDATE devices SET agent_deadline = $1 WHERE agent_deadline IS NULL AND status IN `+onlineish, now.Add(window).UnixMilli())
	if err != nil {
		return 0, storeError("postgres: orphans: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

// DesiredConfig implements agentlink.Store.
func (s *AgentStore) DesiredConfig(ctx context.Context, dev agentlink.Device) (protocol.Config, bool, error) {
	return sqlstore.DesiredConfig(ctx, &s.db.Store, dev, func(ch string, err error) {
		s.log.Error("stored channel config does not decode; sending the default", "device", dev.ID, "channel", ch, "err", err)
	})
}
