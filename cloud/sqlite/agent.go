package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// AgentStore is the agent endpoint's store (agentlink.Store) on SQLite. Its
// writes go through one writer goroutine that coalesces the writes of many
// connections into one transaction; Close stops it.
type AgentStore struct {
	db  *DB
	log *slog.Logger
	w   *ingestWriter
	st  agentStmts
	// bulk holds the multi-row statements for full chunks and the
	// heartbeat statements, by kind or query text.
	bulk map[string]*sql.Stmt
	// hbArgs are the writer's buffers for the arguments of each of
	// hbStmts; only the writer goroutine touches them.
	hbArgs [len(hbStmts)][]any
	// rowids holds the rowids of the devices that sent heartbeats, by
	// device id (writer goroutine only).
	rowids map[string]*devRowids
	// hbSQL is each of hbStmts for 1, 2, 4 … hbMaxRows rows; hb and
	// hbSet are the bulk function's memory (writer goroutine only).
	hbSQL [len(hbStmts)][]hbSized
	hb    hbScratch
	hbSet []int
}

var _ agentlink.Store = (*AgentStore)(nil)

// agentStmts are the writer's prepared statements.
type agentStmts struct {
	status, connect, hello                 *sql.Stmt
	serialApply, heartbeatStatus           *sql.Stmt
	serialEnsure, desiredVersion, channels *sql.Stmt
	event, eventOwner                      *sql.Stmt
	lastSeq, session, offline              *sql.Stmt
	due, orphans, rowids                   *sql.Stmt
	auth                                   *sql.Stmt // on the readers
}

// onlineish are the statuses of a connected device.
const onlineish = `('ONLINE', 'CONNECTING', 'REBOOTING', 'UPDATING', 'ERROR')`

// NewAgentStore prepares the statements and starts the writer goroutine.
func NewAgentStore(db *DB, log *slog.Logger) (*AgentStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &AgentStore{db: db, log: log, rowids: make(map[string]*devRowids)}
	prep := []struct {
		dst  **sql.Stmt
		pool *sql.DB
		q    string
	}{
		{&s.st.auth, db.R, `SELECT id, org_id, model, status, token_revoked_at FROM devices WHERE token_hash = ?`},
		{&s.st.status, db.W, `SELECT status, COALESCE(agent_session, ''), agent_last_seq FROM devices WHERE id = ?`},
		{&s.st.connect, db.W, `UPDATE devices SET status = 'CONNECTING', agent_session = ?, agent_deadline = ? WHERE id = ?`},
		{&s.st.hello, db.W, `UPDATE devices SET status = 'ONLINE', firmware_version = ?, agent_device_name = ?, agent_device_location = ?,
			agent_timezone = ?, agent_version = ?, agent_heartbeat_ms = ?, last_seen = ?, agent_deadline = ? WHERE id = ? AND agent_session = ?`},
		// A heartbeat that changes the status (the other heartbeats go in
		// bulk: agent_heartbeats.go), so that most heartbeats touch neither
		// the status index nor the deadline index.
		{&s.st.heartbeatStatus, db.W, `UPDATE devices SET last_seen = ?, ip_address = ?, agent_deadline = ?, status = ? WHERE id = ? AND agent_session = ?`},
		{&s.st.serialEnsure, db.W, `INSERT INTO serial_state (device_id) VALUES (?) ON CONFLICT (device_id) DO NOTHING`},
		{&s.st.desiredVersion, db.W, `SELECT desired_version FROM serial_state WHERE device_id = ?`},
		{&s.st.channels, db.W, `SELECT channel_id, available, live, tx_on, error, COALESCE(passthrough_address, '') FROM serial_channels WHERE device_id = ?`},
		{&s.st.serialApply, db.W, `UPDATE serial_state SET applied_version = ? WHERE device_id = ?`},
		{&s.st.event, db.W, eventRows.sql(1)},
		{&s.st.eventOwner, db.W, `SELECT device_id FROM events WHERE id = ?`},
		{&s.st.lastSeq, db.W, `UPDATE devices SET agent_last_seq = MAX(agent_last_seq, ?) WHERE id = ? RETURNING agent_last_seq`},
		{&s.st.session, db.W, `SELECT status FROM devices WHERE id = ? AND agent_session = ?`},
		{&s.st.offline, db.W, `UPDATE devices SET status = 'OFFLINE', agent_session = NULL, agent_deadline = NULL WHERE id = ?`},
		{&s.st.due, db.W, `SELECT ` + sqlstore.DueColumns + ` FROM devices WHERE agent_deadline IS NOT NULL AND agent_deadline < ? ORDER BY agent_deadline LIMIT 2000`},
		{&s.st.rowids, db.W, `SELECT d.rowid, COALESCE((SELECT s.rowid FROM serial_state AS s WHERE s.device_id = d.id), 0) FROM devices AS d WHERE d.id = ?`},
		{&s.st.orphans, db.W, `UPDATE devices SET agent_deadline = ? WHERE agent_deadline IS NULL AND status IN ` + onlineish},
	}
	for _, p := range prep {
		st, err := p.pool.Prepare(p.q)
		if err != nil {
			s.closeStmts()
			return nil, fmt.Errorf("sqlite: agent store: prepare: %w", err)
		}
		*p.dst = st
	}
	if err := s.prepareBulk(); err != nil {
		s.closeStmts()
		return nil, err
	}
	w, err := newIngestWriter(db, log)
	if err != nil {
		s.closeStmts()
		return nil, err
	}
	w.bulk = s.applyHeartbeats
	s.w = w
	return s, nil
}

func (s *AgentStore) closeStmts() {
	for _, st := range []*sql.Stmt{s.st.auth, s.st.status, s.st.connect, s.st.hello, s.st.heartbeatStatus,
		s.st.serialApply, s.st.serialEnsure, s.st.desiredVersion, s.st.channels,
		s.st.event, s.st.eventOwner, s.st.lastSeq, s.st.session,
		s.st.offline, s.st.due, s.st.orphans, s.st.rowids} {
		if st != nil {
			st.Close()
		}
	}
	for _, st := range s.bulk {
		st.Close()
	}
}

// Close finishes the queued writes and stops the writer. Call it after the
// agent endpoint shut down and before DB.Close.
func (s *AgentStore) Close() error {
	s.w.close()
	s.hb.raw.close()
	s.closeStmts()
	return nil
}

// Stats returns the writer's counters.
func (s *AgentStore) Stats() IngestStats { return s.w.snapshot() }

// AuthDevice implements agentlink.Store.
func (s *AgentStore) AuthDevice(ctx context.Context, tokenHash [32]byte) (agentlink.Device, error) {
	var d agentlink.Device
	var revoked sql.NullInt64
	var status string
	err := s.st.auth.QueryRowContext(ctx, tokenHash[:]).Scan(&d.ID, &d.OrgID, &d.Model, &status, &revoked)
	if errors.Is(err, sql.ErrNoRows) {
		return agentlink.Device{}, agentlink.ErrUnauthorized
	}
	if err != nil {
		return agentlink.Device{}, fmt.Errorf("sqlite: auth device: %w", err)
	}
	if revoked.Valid {
		return agentlink.Device{}, agentlink.ErrUnauthorized
	}
	d.Status = resource.DeviceStatus(status)
	return d, nil
}

// agentTx runs the agent store's statements in the writer's transaction
// (sqlstore.AgentTx).
type agentTx struct {
	s *AgentStore
	t *ingestTx
}

var _ sqlstore.AgentTx = agentTx{}

// InsertEvent implements sqlstore.AgentTx.
func (a agentTx) InsertEvent(ctx context.Context, dev agentlink.Device, ev *resource.Event) error {
	data := string(ev.Data)
	if data == "" {
		data = "{}"
	}
	_, err := a.t.stmt(a.s.st.event).ExecContext(ctx, ev.ID, dev.OrgID, dev.ID, ev.Type, string(ev.Severity), ev.Message, data, ev.CreatedAt.UnixMilli())
	if err != nil {
		return fmt.Errorf("sqlite: insert event %s: %w", ev.Type, err)
	}
	return nil
}

// DeviceState implements sqlstore.AgentTx.
func (a agentTx) DeviceState(ctx context.Context, id string) (status resource.DeviceStatus, session string, lastSeq uint64, err error) {
	var st string
	var seq int64
	if err := a.t.stmt(a.s.st.status).QueryRowContext(ctx, id).Scan(&st, &session, &seq); err != nil {
		return "", "", 0, fmt.Errorf("sqlite: device %s status: %w", id, err)
	}
	return resource.DeviceStatus(st), session, uint64(seq), nil
}

// SessionStatus implements sqlstore.AgentTx.
func (a agentTx) SessionStatus(ctx context.Context, id, session string) (resource.DeviceStatus, bool, error) {
	var st string
	err := a.t.stmt(a.s.st.session).QueryRowContext(ctx, id, session).Scan(&st)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("sqlite: session of %s: %w", id, err)
	}
	return resource.DeviceStatus(st), true, nil
}

// SetOnline implements sqlstore.AgentTx.
func (a agentTx) SetOnline(ctx context.Context, in agentlink.HelloIn, deadline time.Time) error {
	h := in.Hello
	if _, err := a.t.stmt(a.s.st.hello).ExecContext(ctx, h.FirmwareVersion, h.DeviceName, h.DeviceLocation, h.Timezone,
		h.AgentVersion, in.HeartbeatInterval.Milliseconds(), in.At.UnixMilli(), deadline.UnixMilli(), in.Device.ID, in.Session); err != nil {
		return fmt.Errorf("sqlite: hello %s: %w", in.Device.ID, err)
	}
	return nil
}

// SerialState implements sqlstore.AgentTx.
func (a agentTx) SerialState(ctx context.Context, id string) (desiredVersion int64, channels []protocol.ChannelState, err error) {
	if _, err := a.t.stmt(a.s.st.serialEnsure).ExecContext(ctx, id); err != nil {
		return 0, nil, fmt.Errorf("sqlite: serial state %s: %w", id, err)
	}
	if err := a.t.stmt(a.s.st.desiredVersion).QueryRowContext(ctx, id).Scan(&desiredVersion); err != nil {
		return 0, nil, fmt.Errorf("sqlite: desired version %s: %w", id, err)
	}
	rows, err := a.t.stmt(a.s.st.channels).QueryContext(ctx, id)
	if err != nil {
		return 0, nil, fmt.Errorf("sqlite: channels %s: %w", id, err)
	}
	defer rows.Close()
	for rows.Next() {
		var c protocol.ChannelState
		var avail sql.NullBool
		if err := rows.Scan(&c.ID, &avail, &c.Live, &c.TxOn, &c.Error, &c.PassthroughAddress); err != nil {
			return 0, nil, fmt.Errorf("sqlite: channels %s: %w", id, err)
		}
		if !avail.Valid {
			continue // never reported: any report is a change
		}
		c.Available = avail.Bool
		channels = append(channels, c)
	}
	return desiredVersion, channels, rows.Err()
}

// SetApplied implements sqlstore.AgentTx.
func (a agentTx) SetApplied(ctx context.Context, id string, version int64) error {
	if _, err := a.t.stmt(a.s.st.serialApply).ExecContext(ctx, version, id); err != nil {
		return fmt.Errorf("sqlite: config applied %s: %w", id, err)
	}
	return nil
}

// SetOffline implements sqlstore.AgentTx.
func (a agentTx) SetOffline(ctx context.Context, id string) error {
	if _, err := a.t.stmt(a.s.st.offline).ExecContext(ctx, id); err != nil {
		return fmt.Errorf("sqlite: offline %s: %w", id, err)
	}
	return nil
}

// Due implements sqlstore.AgentTx.
func (a agentTx) Due(ctx context.Context, now time.Time) ([]agentlink.Device, error) {
	rows, err := a.t.stmt(a.s.st.due).QueryContext(ctx, now.UnixMilli())
	return collect(rows, err, "sweep", sqlstore.ScanDue)
}

// Connect implements agentlink.Store.
func (s *AgentStore) Connect(ctx context.Context, dev agentlink.Device, session string, at, deadline time.Time) (agentlink.StatusChange, error) {
	ch := agentlink.StatusChange{Device: dev, To: resource.StatusConnecting}
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		from, _, _, err := agentTx{s, t}.DeviceState(t.ctx, dev.ID)
		if err != nil {
			return err
		}
		ch.From = from
		if _, err := t.stmt(s.st.connect).ExecContext(t.ctx, session, deadline.UnixMilli(), dev.ID); err != nil {
			return fmt.Errorf("sqlite: connect %s: %w", dev.ID, err)
		}
		return nil
	})
	return ch, err
}

// Hello implements agentlink.Store (sqlstore.Hello).
func (s *AgentStore) Hello(ctx context.Context, in agentlink.HelloIn) (agentlink.HelloOut, error) {
	var out agentlink.HelloOut
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		var err error
		out, err = sqlstore.Hello(t.ctx, agentTx{s, t}, in)
		return err
	})
	return out, err
}

// Records implements agentlink.Store.
func (s *AgentStore) Records(ctx context.Context, in agentlink.RecordsIn) (agentlink.RecordsOut, error) {
	var out agentlink.RecordsOut
	dev := in.Device
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		out = agentlink.RecordsOut{}
		var maxSeq uint64
		var metrics [][]any
		for _, r := range in.Items {
			if r.Seq > maxSeq {
				maxSeq = r.Seq
			}
			switch {
			case r.Metric != nil:
				m := r.Metric
				metrics = append(metrics, []any{dev.ID, m.CapturedAt.UnixMilli(), m.CPUPct, m.MemPct, m.DiskUsedPct, m.TempCPU, m.LoadAvg1})
			case r.Event != nil:
				ev, ok, err := s.insertAgentEvent(t, dev, r.Event)
				if err != nil {
					return err
				}
				if ok {
					out.Events = append(out.Events, ev)
				}
			}
		}
		// Samples go in with multi-row statements; RETURNING names the
		// ones actually inserted (not those a resend already stored).
		inserted := make(map[string]bool, len(metrics))
		if err := s.execBulk(t, &metricRows, metrics, inserted); err != nil {
			return err
		}
		for _, r := range in.Items {
			if m := r.Metric; m != nil && inserted[fmt.Sprint(m.CapturedAt.UnixMilli())] {
				out.Metrics = append(out.Metrics, *m)
				delete(inserted, fmt.Sprint(m.CapturedAt.UnixMilli()))
			}
		}
		var last int64
		if err := t.stmt(s.st.lastSeq).QueryRowContext(t.ctx, int64(maxSeq), dev.ID).Scan(&last); err != nil {
			return fmt.Errorf("sqlite: last seq of %s: %w", dev.ID, err)
		}
		out.LastSeq = uint64(last)
		return nil
	})
	return out, err
}

// insertAgentEvent stores e under dev unless it is there already; ok reports
// an insert. An id held by another device's event is stored under a derived
// id instead (see remapEventID): the other row is neither read out nor
// overwritten.
func (s *AgentStore) insertAgentEvent(t *ingestTx, dev agentlink.Device, e *protocol.Event) (resource.Event, bool, error) {
	data := string(e.Data)
	if data == "" {
		data = "{}"
	}
	ev := resource.Event{ID: e.ID, Type: e.Type, Severity: e.Severity, Message: e.Message, Data: json.RawMessage(data), CreatedAt: e.CreatedAt}
	for attempt := 0; attempt < 2; attempt++ {
		res, err := t.stmt(s.st.event).ExecContext(t.ctx, ev.ID, dev.OrgID, dev.ID, ev.Type, string(ev.Severity), ev.Message, data, ev.CreatedAt.UnixMilli())
		if err != nil {
			return ev, false, fmt.Errorf("sqlite: insert event of %s: %w", dev.ID, err)
		}
		if n, _ := res.RowsAffected(); n > 0 {
			return ev, true, nil
		}
		var owner string
		if err := t.stmt(s.st.eventOwner).QueryRowContext(t.ctx, ev.ID).Scan(&owner); err != nil {
			return ev, false, fmt.Errorf("sqlite: event owner: %w", err)
		}
		if owner == dev.ID {
			return ev, false, nil // a resend
		}
		s.log.Warn("agent event id collides with another device's event; storing under a derived id", "device", dev.ID, "event", e.ID)
		ev.ID = agentlink.RemapEventID(dev.ID, e.ID)
	}
	return ev, false, nil
}

// ConfigApplied implements agentlink.Store (sqlstore.ConfigApplied). The
// agent records the serial.config_applied event (and serial.error for
// failures) itself.
func (s *AgentStore) ConfigApplied(ctx context.Context, in agentlink.ConfigAppliedIn) (agentlink.ConfigAppliedOut, error) {
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		return sqlstore.ConfigApplied(t.ctx, agentTx{s, t}, in)
	})
	return agentlink.ConfigAppliedOut{}, err
}

// Disconnect implements agentlink.Store (sqlstore.Disconnect).
func (s *AgentStore) Disconnect(ctx context.Context, dev agentlink.Device, session string, at time.Time, reason string) (agentlink.StatusChange, bool, error) {
	var ch agentlink.StatusChange
	var ok bool
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		var err error
		ch, ok, err = sqlstore.Disconnect(t.ctx, agentTx{s, t}, dev, session, at, reason)
		return err
	})
	return ch, ok, err
}

// Sweep implements agentlink.Store (sqlstore.Sweep).
func (s *AgentStore) Sweep(ctx context.Context, now time.Time) ([]agentlink.StatusChange, error) {
	var out []agentlink.StatusChange
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		var err error
		out, err = sqlstore.Sweep(t.ctx, agentTx{s, t}, now)
		return err
	})
	return out, err
}

// Revoked implements agentlink.Store.
func (s *AgentStore) Revoked(ctx context.Context) ([]string, error) {
	rows, err := s.db.R.QueryContext(ctx, `SELECT id FROM devices WHERE token_revoked_at IS NOT NULL AND agent_session IS NOT NULL`)
	return collect(rows, err, "revoked devices", sqlstore.ScanString)
}

// Orphans implements agentlink.Store.
func (s *AgentStore) Orphans(ctx context.Context, now time.Time, window time.Duration) (int, error) {
	var n int64
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		res, err := t.stmt(s.st.orphans).ExecContext(t.ctx, now.Add(window).UnixMilli())
		if err != nil {
			return fmt.Errorf("sqlite: orphans: %w", err)
		}
		n, _ = res.RowsAffected()
		return nil
	})
	return int(n), err
}

// DesiredConfig implements agentlink.Store.
func (s *AgentStore) DesiredConfig(ctx context.Context, dev agentlink.Device) (protocol.Config, bool, error) {
	return sqlstore.DesiredConfig(ctx, &s.db.Store, dev, func(ch string, err error) {
		s.log.Error("stored channel config does not decode; sending the default", "device", dev.ID, "channel", ch, "err", err)
	})
}
