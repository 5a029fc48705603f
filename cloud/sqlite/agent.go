package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
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
	sqlstore.AgentReads // AuthDevice, Revoked, DesiredConfig
	sqlstore.AgentFlows // Hello, ConfigApplied, Disconnect, Sweep
	db                  *DB
	log                 *slog.Logger
	w                   *ingestWriter
	st                  agentStmts
	// bulk holds the multi-row statements for full chunks and the
	// heartbeat statements, by kind or query text.
	bulk map[string]*sql.Stmt
	// shared holds sqlstore.AgentSQL's statements, by query text
	// (writerConn).
	shared map[string]*sql.Stmt
	// hbArgs are the writer's buffers for the arguments of each of
	// hbStmts; only the writer goroutine touches them.
	hbArgs [len(hbStmts)][]any
	// rowids holds the rowids of the devices that sent heartbeats, by
	// device id (writer goroutine only).
	rowids map[string]*devRowids
	// hb and hbSet are the bulk function's memory (writer goroutine
	// only).
	hb    hbScratch
	hbSet []int
	// series caches the point series ids (point history).
	series sqlstore.PointSeriesCache
}

var _ agentlink.Store = (*AgentStore)(nil)

// agentStmts are the writer's prepared statements.
type agentStmts struct {
	connect, heartbeatStatus, event, eventOwner *sql.Stmt
	lastSeq, session, orphans, rowids           *sql.Stmt
}

// NewAgentStore prepares the statements and starts the writer goroutine.
func NewAgentStore(db *DB, log *slog.Logger) (*AgentStore, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &AgentStore{db: db, log: log, AgentReads: sqlstore.AgentReads{Store: &db.Store, Log: log}, rowids: make(map[string]*devRowids)}
	prep := []struct {
		dst  **sql.Stmt
		pool *sql.DB
		q    string
	}{
		{&s.st.connect, db.W, sqlstore.ConnectSQL},
		// A heartbeat that changes the status (the other heartbeats go in
		// bulk: agent_heartbeats.go), so that most heartbeats touch neither
		// the status index nor the deadline index.
		{&s.st.heartbeatStatus, db.W, sqlstore.HeartbeatStatusSQL},
		{&s.st.event, db.W, eventRows.sql(1)},
		{&s.st.eventOwner, db.W, `SELECT device_id FROM events WHERE id = ?`},
		{&s.st.lastSeq, db.W, `UPDATE devices SET agent_last_seq = MAX(agent_last_seq, ?) WHERE id = ? RETURNING agent_last_seq`},
		{&s.st.session, db.W, `SELECT status FROM devices WHERE id = ? AND agent_session = ?`},
		{&s.st.rowids, db.W, `SELECT d.rowid, COALESCE((SELECT s.rowid FROM serial_state AS s WHERE s.device_id = d.id), 0) FROM devices AS d WHERE d.id = ?`},
		{&s.st.orphans, db.W, sqlstore.OrphansSQL},
	}
	for _, p := range prep {
		st, err := p.pool.Prepare(p.q)
		if err != nil {
			s.closeStmts()
			return nil, fmt.Errorf("sqlite: agent store: prepare: %w", err)
		}
		*p.dst = st
	}
	s.shared = map[string]*sql.Stmt{}
	for _, q := range sqlstore.AgentSQL(&dialect) {
		st, err := db.W.Prepare(q)
		if err != nil {
			s.closeStmts()
			return nil, fmt.Errorf("sqlite: agent store: prepare: %w", err)
		}
		s.shared[q] = st
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
	s.Run = func(ctx context.Context, _ int64, fn func(context.Context, sqlstore.AgentTx) error) error {
		return w.do(ctx, true, func(t *ingestTx) error { return fn(t.ctx, s.agentTx(t)) })
	}
	return s, nil
}

// ConfigApplied implements agentlink.Store (sqlstore's ConfigApplied, in
// the writer's transaction), and has the device's next heartbeat write its
// applied version again (devRowids.appliedChanged): the writer skips a
// version it wrote last for the session, and this one may differ.
func (s *AgentStore) ConfigApplied(ctx context.Context, in agentlink.ConfigAppliedIn) (agentlink.ConfigAppliedOut, error) {
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		if r := s.rowids[in.Device.ID]; r != nil {
			r.appliedSession = ""
		}
		return sqlstore.ConfigApplied(t.ctx, s.agentTx(t), in)
	})
	return agentlink.ConfigAppliedOut{}, err
}

func (s *AgentStore) closeStmts() {
	for _, st := range []*sql.Stmt{s.st.connect, s.st.heartbeatStatus,
		s.st.event, s.st.eventOwner, s.st.lastSeq, s.st.session, s.st.orphans, s.st.rowids} {
		if st != nil {
			st.Close()
		}
	}
	for _, st := range s.bulk {
		st.Close()
	}
	for _, st := range s.shared {
		st.Close()
	}
}

// Close finishes the queued writes and stops the writer. Call it after the
// agent endpoint shut down and before DB.Close.
func (s *AgentStore) Close() error {
	s.w.close()
	s.hb.raw.Close()
	s.closeStmts()
	return nil
}

// Stats returns the writer's counters.
func (s *AgentStore) Stats() IngestStats { return s.w.snapshot() }

// agentTx returns the agent store's writes (sqlstore.AgentWrites) in the
// writer's transaction t.
func (s *AgentStore) agentTx(t *ingestTx) sqlstore.AgentWrites {
	return sqlstore.AgentWrites{Q: s.writerConn(t), D: &dialect, Event: func(ctx context.Context, dev agentlink.Device, ev *resource.Event) error {
		data := string(ev.Data)
		if data == "" {
			data = "{}"
		}
		_, err := t.stmt(s.st.event).ExecContext(ctx, ev.ID, dev.OrgID, dev.ID, ev.Type, string(ev.Severity), ev.Message, data, ev.CreatedAt.UnixMilli())
		return wrapErr("insert event "+ev.Type, err)
	}}
}

// writerConn returns the shared statements for the writer's transaction
// t: those of sqlstore.AgentSQL prepared once on the writer (shared) and
// bound to t, any other prepared once per transaction.
func (s *AgentStore) writerConn(t *ingestTx) prepared {
	return func(_ context.Context, query string) (statement, error) {
		if st, ok := s.shared[query]; ok {
			return t.stmt(st), nil
		}
		return t.prepare(query)
	}
}

// Connect implements agentlink.Store, with the device.status_changed
// event of the change to CONNECTING.
func (s *AgentStore) Connect(ctx context.Context, dev agentlink.Device, session string, at, deadline time.Time) (agentlink.StatusChange, error) {
	ch := agentlink.StatusChange{Device: dev, To: resource.StatusConnecting}
	superseded := false
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		superseded = false
		tx := s.agentTx(t)
		from, _, _, err := tx.DeviceState(t.ctx, dev.ID)
		if err != nil {
			return err
		}
		ch.From = from
		res, err := t.stmt(s.st.connect).ExecContext(t.ctx, sqlstore.ConnectArgs(session, at, deadline, dev.ID)...)
		if err != nil {
			return fmt.Errorf("sqlite: connect %s: %w", dev.ID, err)
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			superseded = err == nil
			return err
		}
		ch.StatusEvent = sqlstore.StatusEvent(from, ch.To, at)
		if ch.StatusEvent != nil {
			return tx.InsertEvent(t.ctx, dev, ch.StatusEvent)
		}
		return nil
	})
	if err == nil && superseded {
		return agentlink.StatusChange{}, agentlink.ErrSuperseded
	}
	return ch, err
}

// Records implements agentlink.Store: metric samples, events and point
// samples in the writer's transaction, with the device's last sequence
// number; a resent sample or event is not stored again.
func (s *AgentStore) Records(ctx context.Context, in agentlink.RecordsIn) (agentlink.RecordsOut, error) {
	var out agentlink.RecordsOut
	var newSeries map[string]int64
	dev := in.Device
	err := s.w.do(ctx, true, func(t *ingestTx) error {
		out, newSeries = agentlink.RecordsOut{}, nil
		var maxSeq uint64
		var metrics [][]any
		var points []*protocol.PointSample
		for _, r := range in.Items {
			if r.Seq > maxSeq {
				maxSeq = r.Seq
			}
			switch {
			case r.Metric != nil:
				m := r.Metric
				metrics = append(metrics, []any{dev.ID, m.CapturedAt.UnixMilli(), m.CPUPct, m.MemPct, m.DiskUsedPct, m.TempCPU, m.LoadAvg1, resource.MissingMask(m.Missing)})
			case r.Event != nil:
				ev, ok, err := s.insertAgentEvent(t, dev, r.Event)
				if err != nil {
					return err
				}
				if ok {
					out.Events = append(out.Events, ev)
				}
			case r.Points != nil:
				points = appendPointSamples(points, r.Points)
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
		var err error
		if out.Points, newSeries, err = s.insertPoints(t, dev.ID, points); err != nil {
			return err
		}
		var last int64
		if err := t.stmt(s.st.lastSeq).QueryRowContext(t.ctx, int64(maxSeq), dev.ID).Scan(&last); err != nil {
			return fmt.Errorf("sqlite: last seq of %s: %w", dev.ID, err)
		}
		out.LastSeq = uint64(last)
		return nil
	})
	if err == nil {
		s.series.Add(dev.ID, newSeries)
	}
	return out, err
}

// appendPointSamples adds the samples of b that name a point.
func appendPointSamples(dst []*protocol.PointSample, b *protocol.PointBatch) []*protocol.PointSample {
	for i := range b.Samples {
		if b.Samples[i].Point != "" {
			dst = append(dst, &b.Samples[i])
		}
	}
	return dst
}

// insertPoints stores a device's point samples in the head (point history)
// as one row (sqlstore.NewHeadRow: a resent sample is not stored again)
// and returns those it stored, in order, and the series it made or first
// looked up (for the cache once the transaction committed).
func (s *AgentStore) insertPoints(t *ingestTx, deviceID string, points []*protocol.PointSample) ([]protocol.PointSample, map[string]int64, error) {
	if len(points) == 0 {
		return nil, nil, nil
	}
	q := s.writerConn(t)
	ids, fresh, err := s.series.Resolve(t.ctx, q, deviceID, points)
	if err != nil {
		return nil, nil, fmt.Errorf("sqlite: %w", err)
	}
	row, keep, ok, err := sqlstore.NewHeadRow(t.ctx, q, deviceID, ids, points)
	if err != nil || !ok {
		return nil, fresh, wrapPoints(err)
	}
	if _, err := q.Exec(t.ctx, sqlstore.InsertHeadSQL, row.DeviceID, row.AtMin, row.AtMax, row.Samples); err != nil {
		return nil, nil, wrapPoints(err)
	}
	out := make([]protocol.PointSample, len(keep))
	for i, k := range keep {
		out[i] = *points[k]
	}
	return out, fresh, nil
}

// wrapPoints names point samples in err, if any.
func wrapPoints(err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("sqlite: point samples: %w", err)
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
