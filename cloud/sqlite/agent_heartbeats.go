package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"strings"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
)

// Heartbeats are the bulk of the agent endpoint's writes. The writer applies
// the heartbeats of one transaction together, with multi-row statements of
// up to hbChunk rows: far fewer calls into SQLite (each of which may cost
// the writer goroutine its scheduler slot when thousands of connections are
// busy) and each touched page written once.
const hbChunk = 128

// hbJob is a queued heartbeat.
type hbJob struct {
	in     agentlink.HeartbeatIn
	serial bool // the model has serial I/O
	out    agentlink.HeartbeatOut
}

// Heartbeat implements agentlink.Store.
func (s *AgentStore) Heartbeat(ctx context.Context, in agentlink.HeartbeatIn, done func(agentlink.HeartbeatOut, error)) error {
	model, _ := catalog.Lookup(in.Device.Model)
	hb := &hbJob{in: in, serial: model.Has(resource.CapabilitySerialIO)}
	return s.w.enqueue(ctx, &ingestJob{hb: hb, after: func(err error) { done(hb.out, err) }})
}

// Bulk statement kinds.
const (
	bulkDevices         = "devices"
	bulkDevicesDeadline = "devices+deadline"
	bulkSerial          = "serial"
	bulkChannels        = "channels"
	bulkEvents          = "events"
	bulkMetrics         = "metrics"
)

// bulkSQL returns the statement of kind for n rows.
func bulkSQL(kind string, n int) string {
	rows := func(cols int) string {
		row := "(" + strings.Repeat("?, ", cols-1) + "?)"
		return strings.Repeat(row+", ", n-1) + row
	}
	switch kind {
	case bulkDevices:
		return `UPDATE devices SET last_seen = v.column2, ip_address = v.column3 FROM (VALUES ` + rows(4) +
			`) AS v WHERE devices.id = v.column1 AND devices.agent_session = v.column4 RETURNING devices.id`
	case bulkDevicesDeadline:
		return `UPDATE devices SET last_seen = v.column2, ip_address = v.column3, agent_deadline = v.column5 FROM (VALUES ` + rows(5) +
			`) AS v WHERE devices.id = v.column1 AND devices.agent_session = v.column4 RETURNING devices.id`
	case bulkSerial:
		return `UPDATE serial_state SET telemetry_at = v.column2, applied_version = v.column3 FROM (VALUES ` + rows(3) +
			`) AS v WHERE serial_state.device_id = v.column1`
	case bulkChannels:
		return `INSERT INTO serial_channels (device_id, channel_id, available, live, tx_on, error, passthrough_address) VALUES ` + rows(7) +
			` ON CONFLICT (device_id, channel_id) DO UPDATE SET available = excluded.available, live = excluded.live,
			tx_on = excluded.tx_on, error = excluded.error, passthrough_address = excluded.passthrough_address`
	case bulkEvents:
		return `INSERT OR IGNORE INTO events (id, org_id, device_id, type, severity, message, data, created_at) VALUES ` + rows(8)
	case bulkMetrics:
		return `INSERT OR IGNORE INTO metrics (device_id, captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1) VALUES ` + rows(7) +
			` RETURNING captured_at`
	}
	panic("sqlite: unknown bulk statement " + kind)
}

// prepareBulk prepares the full-chunk statements.
func (s *AgentStore) prepareBulk() error {
	s.bulk = make(map[string]*sql.Stmt)
	for _, k := range []string{bulkDevices, bulkDevicesDeadline, bulkSerial, bulkChannels, bulkEvents, bulkMetrics} {
		st, err := s.db.W.Prepare(bulkSQL(k, hbChunk))
		if err != nil {
			return fmt.Errorf("sqlite: prepare bulk %s: %w", k, err)
		}
		s.bulk[k] = st
	}
	return nil
}

// bulkStmt returns the statement of kind for n rows in t: the prepared one
// for a full chunk, else one prepared for this transaction.
func (s *AgentStore) bulkStmt(t *ingestTx, kind string, n int) (*sql.Stmt, error) {
	if n == hbChunk {
		return t.stmt(s.bulk[kind]), nil
	}
	return t.prepare(bulkSQL(kind, n))
}

// execBulk runs kind over rows in chunks; each row is a slice of arguments.
// With matched, the statement's RETURNING values (as text) are added to it.
func (s *AgentStore) execBulk(t *ingestTx, kind string, rows [][]any, matched map[string]bool) error {
	for len(rows) > 0 {
		n := min(len(rows), hbChunk)
		st, err := s.bulkStmt(t, kind, n)
		if err != nil {
			return fmt.Errorf("sqlite: bulk %s: %w", kind, err)
		}
		args := make([]any, 0, n*len(rows[0]))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if matched == nil {
			if _, err := st.ExecContext(t.ctx, args...); err != nil {
				return fmt.Errorf("sqlite: bulk %s: %w", kind, err)
			}
		} else {
			res, err := st.QueryContext(t.ctx, args...)
			if err != nil {
				return fmt.Errorf("sqlite: bulk %s: %w", kind, err)
			}
			for res.Next() {
				var id string
				if err := res.Scan(&id); err != nil {
					res.Close()
					return fmt.Errorf("sqlite: bulk %s: %w", kind, err)
				}
				matched[id] = true
			}
			res.Close()
			if err := res.Err(); err != nil {
				return fmt.Errorf("sqlite: bulk %s: %w", kind, err)
			}
		}
		rows = rows[n:]
	}
	return nil
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// applyHeartbeats is the writer's bulk function. A heartbeat that changes
// the status, and every heartbeat of a device but its last in the
// transaction, is applied alone first; the others together.
func (s *AgentStore) applyHeartbeats(t *ingestTx, jobs []*ingestJob, errs []error) error {
	last := make(map[string]int, len(jobs))
	for i, j := range jobs {
		last[j.hb.in.Device.ID] = i
	}
	var plain, withDeadline []int
	for i, j := range jobs {
		in := &j.hb.in
		switch {
		case in.Status != in.PrevStatus || last[in.Device.ID] != i:
			errs[i] = s.applyHeartbeat(t, j.hb)
		case in.Deadline.IsZero():
			plain = append(plain, i)
		default:
			withDeadline = append(withDeadline, i)
		}
	}
	matched := make(map[string]bool, len(plain)+len(withDeadline))
	devRows := func(idx []int, deadline bool) [][]any {
		out := make([][]any, 0, len(idx))
		for _, i := range idx {
			in := &jobs[i].hb.in
			r := []any{in.Device.ID, in.At.UnixMilli(), in.IPAddress, in.Session}
			if deadline {
				r = append(r, in.Deadline.UnixMilli())
			}
			out = append(out, r)
		}
		return out
	}
	if err := s.execBulk(t, bulkDevices, devRows(plain, false), matched); err != nil {
		return err
	}
	if err := s.execBulk(t, bulkDevicesDeadline, devRows(withDeadline, true), matched); err != nil {
		return err
	}
	var serialRows, chanRows, eventRows [][]any
	for _, i := range append(plain, withDeadline...) {
		hb := jobs[i].hb
		in := &hb.in
		if !matched[in.Device.ID] {
			errs[i] = agentlink.ErrSessionGone
			continue
		}
		hb.out.Change = agentlink.StatusChange{Device: in.Device, From: in.PrevStatus, To: in.Status}
		if hb.serial && in.HasChannels {
			serialRows = append(serialRows, []any{in.Device.ID, in.At.UnixMilli(), in.AppliedVersion})
			for _, c := range in.Channels {
				chanRows = append(chanRows, []any{in.Device.ID, c.ID, c.Available, c.Live, c.TxOn, c.Error, nullString(c.PassthroughAddress)})
			}
		}
		if e := in.Event; e != nil {
			data := string(e.Data)
			if data == "" {
				data = "{}"
			}
			eventRows = append(eventRows, []any{e.ID, in.Device.OrgID, in.Device.ID, e.Type, string(e.Severity), e.Message, data, e.CreatedAt.UnixMilli()})
		}
	}
	if err := s.execBulk(t, bulkSerial, serialRows, nil); err != nil {
		return err
	}
	if err := s.execBulk(t, bulkChannels, chanRows, nil); err != nil {
		return err
	}
	return s.execBulk(t, bulkEvents, eventRows, nil)
}

// applyHeartbeat applies one heartbeat with single-row statements.
func (s *AgentStore) applyHeartbeat(t *ingestTx, hb *hbJob) error {
	in := &hb.in
	at := in.At.UnixMilli()
	var res sql.Result
	var err error
	switch {
	case in.Status != in.PrevStatus:
		dl := in.Deadline
		if dl.IsZero() {
			return fmt.Errorf("sqlite: heartbeat %s: status change without a deadline", in.Device.ID)
		}
		res, err = t.stmt(s.st.heartbeatStatus).ExecContext(t.ctx, at, in.IPAddress, dl.UnixMilli(), string(in.Status), in.Device.ID, in.Session)
	case !in.Deadline.IsZero():
		res, err = t.stmt(s.st.heartbeatDeadline).ExecContext(t.ctx, at, in.IPAddress, in.Deadline.UnixMilli(), in.Device.ID, in.Session)
	default:
		res, err = t.stmt(s.st.heartbeat).ExecContext(t.ctx, at, in.IPAddress, in.Device.ID, in.Session)
	}
	if err != nil {
		return fmt.Errorf("sqlite: heartbeat %s: %w", in.Device.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return agentlink.ErrSessionGone
	}
	hb.out.Change = agentlink.StatusChange{Device: in.Device, From: in.PrevStatus, To: in.Status}
	if hb.serial && in.HasChannels {
		if _, err := t.stmt(s.st.serialTelemetry).ExecContext(t.ctx, at, in.AppliedVersion, in.Device.ID); err != nil {
			return fmt.Errorf("sqlite: serial telemetry %s: %w", in.Device.ID, err)
		}
		for _, c := range in.Channels {
			if _, err := t.stmt(s.st.channelUpsert).ExecContext(t.ctx, in.Device.ID, c.ID, c.Available, c.Live, c.TxOn, c.Error, nullString(c.PassthroughAddress)); err != nil {
				return fmt.Errorf("sqlite: channel %s of %s: %w", c.ID, in.Device.ID, err)
			}
		}
	}
	if in.Event != nil {
		if err := s.insertEvent(t, in.Device, in.Event); err != nil {
			return err
		}
	}
	return nil
}
