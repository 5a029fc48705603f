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
// the heartbeats of one transaction together: each table's rows go to
// SQLite as one JSON array bound to one statement that reads it with
// json_each, so a transaction of thousands of heartbeats costs a handful of
// calls into SQLite. Every call is a cgo crossing after which the writer
// goroutine may have to queue for a scheduler slot behind thousands of
// connection goroutines, so the number of calls, more than their size, set
// the writer's pace under load. Records still use multi-row statements of
// up to hbChunk rows (their RETURNING names the rows actually inserted).
const hbChunk = 128

// The heartbeat statements. Each takes one JSON array of rows (arrays of
// column values, see jsonRows); $i is value->>i of a row.
const (
	// devices: [id, lastSeen, ip, session]; devicesDeadline adds the
	// deadline as column 4 (a separate statement, so that most heartbeats
	// leave the deadline index alone).
	hbDevicesSQL = `UPDATE devices SET last_seen = j.value->>1, ip_address = j.value->>2
		FROM json_each(?) AS j WHERE devices.id = j.value->>0 AND devices.agent_session = j.value->>3`
	hbDevicesDeadlineSQL = `UPDATE devices SET last_seen = j.value->>1, ip_address = j.value->>2, agent_deadline = j.value->>4
		FROM json_each(?) AS j WHERE devices.id = j.value->>0 AND devices.agent_session = j.value->>3`
	// hbMatchedSQL names the devices of a devices array that their session
	// owns: asked only when an update matched fewer rows than it had.
	hbMatchedSQL = `SELECT devices.id FROM json_each(?) AS j JOIN devices ON devices.id = j.value->>0 AND devices.agent_session = j.value->>3`
	// serial: [deviceID, telemetryAt, appliedVersion]
	hbSerialSQL = `UPDATE serial_state SET telemetry_at = j.value->>1, applied_version = j.value->>2
		FROM json_each(?) AS j WHERE serial_state.device_id = j.value->>0`
	// channels: [deviceID, channelID, available, live, txOn, error, passthroughAddress or null]
	hbChannelsSQL = `INSERT INTO serial_channels (device_id, channel_id, available, live, tx_on, error, passthrough_address)
		SELECT value->>0, value->>1, value->>2, value->>3, value->>4, value->>5, value->>6 FROM json_each(?) WHERE true
		ON CONFLICT (device_id, channel_id) DO UPDATE SET available = excluded.available, live = excluded.live,
		tx_on = excluded.tx_on, error = excluded.error, passthrough_address = excluded.passthrough_address`
)

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
	bulkEvents  = "events"
	bulkMetrics = "metrics"
)

// bulkSQL returns the statement of kind for n rows.
func bulkSQL(kind string, n int) string {
	rows := func(cols int) string {
		row := "(" + strings.Repeat("?, ", cols-1) + "?)"
		return strings.Repeat(row+", ", n-1) + row
	}
	switch kind {
	case bulkEvents:
		return `INSERT OR IGNORE INTO events (id, org_id, device_id, type, severity, message, data, created_at) VALUES ` + rows(8)
	case bulkMetrics:
		return `INSERT OR IGNORE INTO metrics (device_id, captured_at, cpu_pct, mem_pct, disk_used_pct, temp_cpu, load_avg1) VALUES ` + rows(7) +
			` RETURNING captured_at`
	}
	panic("sqlite: unknown bulk statement " + kind)
}

// prepareBulk prepares the full-chunk statements and the heartbeat
// statements.
func (s *AgentStore) prepareBulk() error {
	s.bulk = make(map[string]*sql.Stmt)
	for _, k := range []string{bulkEvents, bulkMetrics} {
		st, err := s.db.W.Prepare(bulkSQL(k, hbChunk))
		if err != nil {
			return fmt.Errorf("sqlite: prepare bulk %s: %w", k, err)
		}
		s.bulk[k] = st
	}
	for _, q := range []string{hbDevicesSQL, hbDevicesDeadlineSQL, hbMatchedSQL, hbSerialSQL, hbChannelsSQL} {
		st, err := s.db.W.Prepare(q)
		if err != nil {
			return fmt.Errorf("sqlite: prepare heartbeat statement: %w", err)
		}
		s.bulk[q] = st
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
	matched, err := s.updateDevices(t, jobs, plain, withDeadline)
	if err != nil {
		return err
	}
	serial, chans := &s.hbRows[2], &s.hbRows[3]
	serial.reset()
	chans.reset()
	var eventRows [][]any
	for _, i := range append(plain, withDeadline...) {
		hb := jobs[i].hb
		in := &hb.in
		if matched != nil && !matched[in.Device.ID] {
			errs[i] = agentlink.ErrSessionGone
			continue
		}
		hb.out.Change = agentlink.StatusChange{Device: in.Device, From: in.PrevStatus, To: in.Status}
		if hb.serial && in.HasChannels {
			serial.row().str(in.Device.ID).int(in.At.UnixMilli()).int(in.AppliedVersion)
			for _, c := range in.Channels {
				r := chans.row().str(in.Device.ID).str(c.ID).bool(c.Available).str(c.Live).bool(c.TxOn).str(c.Error)
				if c.PassthroughAddress == "" {
					r.null()
				} else {
					r.str(c.PassthroughAddress)
				}
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
	if _, err := s.execRows(t, hbSerialSQL, serial); err != nil {
		return err
	}
	if _, err := s.execRows(t, hbChannelsSQL, chans); err != nil {
		return err
	}
	return s.execBulk(t, bulkEvents, eventRows, nil)
}

// updateDevices applies the devices rows of the plain heartbeats and of
// those that refresh the deadline. It returns nil when every device's
// session still owns it (the common case: the update matched every row),
// else the set of devices that it updated.
func (s *AgentStore) updateDevices(t *ingestTx, jobs []*ingestJob, plain, withDeadline []int) (map[string]bool, error) {
	var matched map[string]bool
	for k, idx := range [][]int{plain, withDeadline} {
		rows := &s.hbRows[k]
		rows.reset()
		for _, i := range idx {
			in := &jobs[i].hb.in
			r := rows.row().str(in.Device.ID).int(in.At.UnixMilli()).str(in.IPAddress).str(in.Session)
			if k == 1 {
				r.int(in.Deadline.UnixMilli())
			}
		}
		q := hbDevicesSQL
		if k == 1 {
			q = hbDevicesDeadlineSQL
		}
		n, err := s.execRows(t, q, rows)
		if err != nil {
			return nil, err
		}
		if n == int64(rows.n) {
			for _, i := range idx {
				if matched != nil {
					matched[jobs[i].hb.in.Device.ID] = true
				}
			}
			continue
		}
		// Some session lost its device: find out which did not.
		if matched == nil {
			matched = make(map[string]bool, len(plain)+len(withDeadline))
			if k == 1 { // the plain statement matched every row
				for _, i := range plain {
					matched[jobs[i].hb.in.Device.ID] = true
				}
			}
		}
		res, err := t.stmt(s.bulk[hbMatchedSQL]).QueryContext(t.ctx, rows.text())
		if err != nil {
			return nil, fmt.Errorf("sqlite: heartbeat sessions: %w", err)
		}
		for res.Next() {
			var id string
			if err := res.Scan(&id); err != nil {
				res.Close()
				return nil, fmt.Errorf("sqlite: heartbeat sessions: %w", err)
			}
			matched[id] = true
		}
		res.Close()
		if err := res.Err(); err != nil {
			return nil, fmt.Errorf("sqlite: heartbeat sessions: %w", err)
		}
	}
	return matched, nil
}

// execRows runs the heartbeat statement q over rows (nothing when empty)
// and returns the rows it changed.
func (s *AgentStore) execRows(t *ingestTx, q string, rows *jsonRows) (int64, error) {
	if rows.n == 0 {
		return 0, nil
	}
	res, err := t.stmt(s.bulk[q]).ExecContext(t.ctx, rows.text())
	if err != nil {
		return 0, fmt.Errorf("sqlite: heartbeats: %w", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("sqlite: heartbeats: %w", err)
	}
	return n, nil
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
