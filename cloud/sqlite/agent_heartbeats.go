package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
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
	hbMatchedSQL = `SELECT devices.id, devices.agent_session FROM json_each(?) AS j JOIN devices ON devices.id = j.value->>0 AND devices.agent_session = j.value->>3`
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

// hbGroup is the heartbeats of one session in one transaction, applied
// as one: the device row and the serial telemetry time get the values of
// the last of them, each channel the state of the last that reported it,
// and every heartbeat event is stored. The state committed is what
// applying them one by one in order would leave.
type hbGroup struct {
	key      string // device id NUL session
	jobs     []int  // in queue order
	last     int    // the last job
	deadline time.Time
	// serialAt is the last job that carries serial telemetry, -1: none.
	serialAt int
	chans    []protocol.ChannelState // by first report, last state of each
}

// applyHeartbeats is the writer's bulk function. A heartbeat that changes
// the status first updates the device row alone (the status, and the
// deadline, move only with such a heartbeat); then the heartbeats of each
// session are merged (hbGroup) and written with one statement per table.
func (s *AgentStore) applyHeartbeats(t *ingestTx, jobs []*ingestJob, errs []error) error {
	groups := make([]*hbGroup, 0, len(jobs))
	byKey := make(map[string]*hbGroup, len(jobs))
	for i, j := range jobs {
		in := &j.hb.in
		if in.Status != in.PrevStatus {
			if errs[i] = s.applyStatus(t, j.hb); errs[i] != nil {
				continue
			}
		}
		key := in.Device.ID + "\x00" + in.Session
		g := byKey[key]
		if g == nil {
			g = &hbGroup{key: key, serialAt: -1}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.jobs = append(g.jobs, i)
		g.last = i
		if !in.Deadline.IsZero() {
			g.deadline = in.Deadline
		}
		if j.hb.serial && in.HasChannels {
			g.serialAt = i
			g.chans = mergeChannels(g.chans, in.Channels)
		}
	}
	matched, err := s.updateDevices(t, jobs, groups)
	if err != nil {
		return err
	}
	serial, chans := &s.hbRows[2], &s.hbRows[3]
	serial.reset()
	chans.reset()
	var eventRows [][]any
	for _, g := range groups {
		if matched != nil && !matched[g.key] {
			for _, i := range g.jobs {
				errs[i] = agentlink.ErrSessionGone
			}
			continue
		}
		dev := jobs[g.last].hb.in.Device
		if g.serialAt >= 0 {
			in := &jobs[g.serialAt].hb.in
			serial.row().str(dev.ID).int(in.At.UnixMilli()).int(in.AppliedVersion)
			for _, c := range g.chans {
				r := chans.row().str(dev.ID).str(c.ID).bool(c.Available).str(c.Live).bool(c.TxOn).str(c.Error)
				if c.PassthroughAddress == "" {
					r.null()
				} else {
					r.str(c.PassthroughAddress)
				}
			}
		}
		for _, i := range g.jobs {
			hb := jobs[i].hb
			in := &hb.in
			hb.out.Change = agentlink.StatusChange{Device: in.Device, From: in.PrevStatus, To: in.Status}
			if e := in.Event; e != nil {
				data := string(e.Data)
				if data == "" {
					data = "{}"
				}
				eventRows = append(eventRows, []any{e.ID, dev.OrgID, dev.ID, e.Type, string(e.Severity), e.Message, data, e.CreatedAt.UnixMilli()})
			}
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

// mergeChannels returns have with the channels of later applied over it:
// a channel already there takes the later state, a new one is appended.
func mergeChannels(have, later []protocol.ChannelState) []protocol.ChannelState {
	if have == nil {
		return later
	}
	have = slices.Clone(have)
next:
	for _, c := range later {
		for k := range have {
			if have[k].ID == c.ID {
				have[k] = c
				continue next
			}
		}
		have = append(have, c)
	}
	return have
}

// updateDevices writes each group's device row (the values of its last
// heartbeat; groups with a new deadline through the statement that also
// sets it). It returns nil when every group's session still owns its
// device (the common case: the updates matched every row), else the keys
// of the groups whose row it updated.
func (s *AgentStore) updateDevices(t *ingestTx, jobs []*ingestJob, groups []*hbGroup) (map[string]bool, error) {
	var matched map[string]bool
	for k, q := range []string{hbDevicesSQL, hbDevicesDeadlineSQL} {
		rows := &s.hbRows[k]
		rows.reset()
		for _, g := range groups {
			if g.deadline.IsZero() != (k == 0) {
				continue
			}
			in := &jobs[g.last].hb.in
			r := rows.row().str(in.Device.ID).int(in.At.UnixMilli()).str(in.IPAddress).str(in.Session)
			if k == 1 {
				r.int(g.deadline.UnixMilli())
			}
		}
		n, err := s.execRows(t, q, rows)
		if err != nil {
			return nil, err
		}
		if n == int64(rows.n) {
			if matched != nil {
				for _, g := range groups {
					if g.deadline.IsZero() == (k == 0) {
						matched[g.key] = true
					}
				}
			}
			continue
		}
		// Some session lost its device: find out which still own theirs.
		if matched == nil {
			matched = make(map[string]bool, len(groups))
			if k == 1 { // the first statement matched every row
				for _, g := range groups {
					if g.deadline.IsZero() {
						matched[g.key] = true
					}
				}
			}
		}
		res, err := t.stmt(s.bulk[hbMatchedSQL]).QueryContext(t.ctx, rows.text())
		if err != nil {
			return nil, fmt.Errorf("sqlite: heartbeat sessions: %w", err)
		}
		for res.Next() {
			var id, session string
			if err := res.Scan(&id, &session); err != nil {
				res.Close()
				return nil, fmt.Errorf("sqlite: heartbeat sessions: %w", err)
			}
			matched[id+"\x00"+session] = true
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

// applyStatus stores the status change of a heartbeat (with its deadline,
// last seen time and address) on its own; ErrSessionGone when its session
// no longer owns the device.
func (s *AgentStore) applyStatus(t *ingestTx, hb *hbJob) error {
	in := &hb.in
	if in.Deadline.IsZero() {
		return fmt.Errorf("sqlite: heartbeat %s: status change without a deadline", in.Device.ID)
	}
	res, err := t.stmt(s.st.heartbeatStatus).ExecContext(t.ctx, in.At.UnixMilli(), in.IPAddress, in.Deadline.UnixMilli(), string(in.Status), in.Device.ID, in.Session)
	if err != nil {
		return fmt.Errorf("sqlite: heartbeat %s: %w", in.Device.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return agentlink.ErrSessionGone
	}
	return nil
}
