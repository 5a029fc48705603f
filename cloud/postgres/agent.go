package postgres

import (
	"context"
	"encoding/json"
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
	sqlstore.AgentReads // AuthDevice, Revoked, DesiredConfig
	sqlstore.AgentFlows // Hello, ConfigApplied, Disconnect, Sweep
	db                  *DB
	log                 *slog.Logger
	w                   *ingestWriter
	merge               agentlink.HeartbeatMerge // applyHeartbeats' memory (writer goroutine only)
	relay               string
	series              sqlstore.PointSeriesCache // point series ids (point history)
}

var _ agentlink.Store = (*AgentStore)(nil)

// NewAgentStore starts the writer goroutine. relay names this relay
// process in the devices' presence (agent_relay).
func NewAgentStore(db *DB, log *slog.Logger, relay string) *AgentStore {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &AgentStore{db: db, log: log, AgentReads: sqlstore.AgentReads{Store: &db.Store, Log: log}, relay: relay}
	s.w = newIngestWriter(db, log)
	s.w.bulk = s.applyHeartbeats
	s.Run = func(ctx context.Context, eventsAt int64, fn func(context.Context, sqlstore.AgentTx) error) error {
		job := &ingestJob{apply: func(ctx context.Context, tx pgx.Tx) error { return fn(ctx, s.agentTx(tx)) }}
		if eventsAt != 0 {
			job.events = []int64{eventsAt}
		}
		return s.w.do(ctx, job)
	}
	return s
}

// Close finishes the queued writes and stops the writer.
func (s *AgentStore) Close() error {
	s.w.close()
	return nil
}

// agentTx returns the agent store's writes (sqlstore.AgentWrites) in tx.
func (s *AgentStore) agentTx(tx pgx.Tx) sqlstore.AgentWrites {
	return sqlstore.AgentWrites{Q: pgConn{tx}, D: &s.db.Dialect, Event: func(ctx context.Context, dev agentlink.Device, ev *resource.Event) error {
		return s.db.insertEvents(ctx, tx, dev.OrgID, dev.ID, []resource.Event{*ev})
	}}
}

// Connect implements agentlink.Store: session becomes the device's, on this
// relay, with a new epoch, and the change to CONNECTING its
// device.status_changed event.
func (s *AgentStore) Connect(ctx context.Context, dev agentlink.Device, session string, at, deadline time.Time) (agentlink.StatusChange, error) {
	ch := agentlink.StatusChange{Device: dev, To: resource.StatusConnecting}
	superseded := false
	err := s.w.do(ctx, &ingestJob{events: []int64{at.UnixMilli()}, apply: func(ctx context.Context, tx pgx.Tx) error {
		superseded = false
		w := s.agentTx(tx)
		from, _, _, err := w.DeviceState(ctx, dev.ID)
		if err != nil {
			return err
		}
		ch.From = from
		// A session opened later than this one keeps the device: this
		// attempt's write came late (agentlink.ErrSuperseded).
		tag, err := tx.Exec(ctx, `UPDATE devices SET status = 'CONNECTING', agent_session = $1, agent_deadline = $2, agent_relay = $3, agent_epoch = agent_epoch + 1,
			status_since = CASE WHEN status = 'CONNECTING' THEN status_since ELSE $5 END, agent_session_at = $5
			WHERE id = $4 AND COALESCE(agent_session_at, 0) <= $5`, session, deadline.UnixMilli(), s.relay, dev.ID, at.UnixMilli())
		if err != nil {
			return err
		}
		if superseded = tag.RowsAffected() == 0; superseded {
			return nil
		}
		if ch.StatusEvent = sqlstore.StatusEvent(from, ch.To, at); ch.StatusEvent != nil {
			if err := w.InsertEvent(ctx, dev, ch.StatusEvent); err != nil {
				return err
			}
		}
		// The relay holding an older session of the device closes it at
		// once (Listen's Presence); its next write would be refused anyway.
		return notify(ctx, tx, channelPresence, dev.ID+" "+session)
	}})
	if err == nil && superseded {
		return agentlink.StatusChange{}, agentlink.ErrSuperseded
	}
	return ch, err
}

// Records implements agentlink.Store: metric samples, events and point
// samples in multi-row statements whose RETURNING names the rows actually
// inserted. A batch without events is stored with the others of its
// transaction (recJob).
func (s *AgentStore) Records(ctx context.Context, in agentlink.RecordsIn) (agentlink.RecordsOut, error) {
	var out agentlink.RecordsOut
	dev := in.Device
	job := &ingestJob{}
	var maxSeq uint64
	var ms []*resource.MetricSample
	var evs []*protocol.Event
	pb := &pointBatch{dev: dev.ID}
	for _, r := range in.Items {
		maxSeq = max(maxSeq, r.Seq)
		switch {
		case r.Metric != nil:
			ms = append(ms, r.Metric)
			job.metrics = append(job.metrics, r.Metric.CapturedAt.UnixMilli())
		case r.Event != nil:
			evs = append(evs, r.Event)
			job.events = append(job.events, r.Event.CreatedAt.UnixMilli())
		case r.Points != nil:
			for i := range r.Points.Samples {
				if r.Points.Samples[i].Point != "" {
					pb.pts = append(pb.pts, &r.Points.Samples[i])
				}
			}
		}
	}
	if len(evs) == 0 {
		job.rec = &recJob{dev: dev, ms: ms, points: pb, series: &s.series, maxSeq: maxSeq, out: &out}
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
		if err := insertPoints(ctx, tx, &s.series, []*pointBatch{pb}); err != nil {
			return err
		}
		out.Points = pb.out
		var last int64
		if err := tx.QueryRow(ctx, `UPDATE devices SET agent_last_seq = GREATEST(agent_last_seq, $1) WHERE id = $2 RETURNING agent_last_seq`,
			int64(maxSeq), dev.ID).Scan(&last); err != nil {
			return storeError("postgres: last seq of %s: %w", dev.ID, err)
		}
		out.LastSeq = uint64(last)
		return nil
	}
	err := s.w.do(ctx, job)
	if err == nil {
		s.series.Add(dev.ID, pb.fresh)
	}
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
	missing := make([]int64, len(ms))
	for i, m := range ms {
		at[i], missing[i] = m.CapturedAt.UnixMilli(), resource.MissingMask(m.Missing)
		cpu, mem, disk = append(cpu, m.CPUPct), append(mem, m.MemPct), append(disk, m.DiskUsedPct)
		temp, load = append(temp, m.TempCPU), append(load, m.LoadAvg1)
	}
	rows, err := tx.Query(ctx, `INSERT INTO metrics (device_id, captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1, missing)
		SELECT $1, * FROM unnest($2::bigint[], $3::float8[], $4::float8[], $5::float8[], $6::float8[], $7::float8[], $8::int[])
		ON CONFLICT DO NOTHING RETURNING captured_at`, deviceID, at, cpu, mem, disk, temp, load, missing)
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

// Orphans implements agentlink.Store.
func (s *AgentStore) Orphans(ctx context.Context, now time.Time, window time.Duration) (int, error) {
	n, err := s.db.W.Exec(ctx, sqlstore.OrphansSQL, now.Add(window).UnixMilli())
	return int(n), s.db.Wrap("orphans", err)
}
