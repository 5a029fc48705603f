package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Heartbeats are the bulk of the agent endpoint's writes. The writer applies
// the heartbeats of one transaction together with multi-row statements
// (`UPDATE … FROM (VALUES …)` and multi-row upserts), without RETURNING: a
// set of n rows goes in as the binary decomposition of n over statements of
// 1, 2, 4 … hbMaxRows rows, all prepared once, so a transaction of
// thousands of heartbeats costs a few dozen calls into SQLite. Every call
// is a cgo crossing after which the writer goroutine may queue for a
// scheduler slot behind thousands of connection goroutines, so the number
// of calls sets the writer's pace under load as much as their work. (Rows
// handed over as one JSON array read with json_each cost a third more CPU
// per row than bound VALUES here: each ->> parses the row again.) Records
// use statements of up to hbChunk rows whose RETURNING names the rows
// actually inserted.
const (
	hbChunk   = 128
	hbMaxRows = 1024 // rows of the largest heartbeat statement
)

// hbJob is a queued heartbeat, with its queue entry (one allocation per
// heartbeat).
type hbJob struct {
	job    ingestJob
	in     agentlink.HeartbeatIn
	serial bool // the model has serial I/O
	out    agentlink.HeartbeatOut
	// done is called with out after the commit, on the completion
	// goroutine.
	done func(agentlink.HeartbeatOut, error)
}

// Heartbeat implements agentlink.Store.
func (s *AgentStore) Heartbeat(ctx context.Context, in agentlink.HeartbeatIn, done func(agentlink.HeartbeatOut, error)) error {
	model, _ := catalog.Lookup(in.Device.Model)
	hb := &hbJob{in: in, serial: model.Has(resource.CapabilitySerialIO), done: done}
	hb.job.hb = hb
	return s.w.enqueue(ctx, &hb.job)
}

// Bulk statement kinds and their columns.
const (
	// devices: rowid, lastSeen, ip, session; devicesDeadline adds the
	// deadline (a statement of its own, so that most heartbeats leave the
	// deadline index alone). The session (unique to a connection) makes
	// sure the row is still the device's.
	bulkDevices         = "devices"
	bulkDevicesDeadline = "devices+deadline"
	bulkSerial          = "serial"   // rowid, telemetryAt, appliedVersion, deviceID
	bulkChannels        = "channels" // deviceID, channelID, available, live, txOn, error, passthroughAddress
	bulkEvents          = "events"
	bulkMetrics         = "metrics"
)

// hbKinds are the heartbeat statements, with their columns.
var hbKinds = [...]struct {
	kind string
	cols int
}{{bulkDevices, 4}, {bulkDevicesDeadline, 5}, {bulkSerial, 4}, {bulkChannels, 7}}

// bulkSQL returns the statement of kind for n rows.
func bulkSQL(kind string, n int) string {
	rows := func(cols int) string {
		row := "(" + strings.Repeat("?, ", cols-1) + "?)"
		return strings.Repeat(row+", ", n-1) + row
	}
	switch kind {
	case bulkDevices:
		return `UPDATE devices SET last_seen = v.column2, ip_address = v.column3 FROM (VALUES ` + rows(4) +
			`) AS v WHERE devices.rowid = v.column1 AND devices.agent_session = v.column4`
	case bulkDevicesDeadline:
		return `UPDATE devices SET last_seen = v.column2, ip_address = v.column3, agent_deadline = v.column5 FROM (VALUES ` + rows(5) +
			`) AS v WHERE devices.rowid = v.column1 AND devices.agent_session = v.column4`
	case bulkSerial:
		return `UPDATE serial_state SET telemetry_at = v.column2, applied_version = v.column3 FROM (VALUES ` + rows(4) +
			`) AS v WHERE serial_state.rowid = v.column1 AND +serial_state.device_id = v.column4`
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

// hbStmtKey names the heartbeat statement of kind for 1<<k rows.
func hbStmtKey(kind string, k int) string { return fmt.Sprintf("%s/%d", kind, 1<<k) }

// prepareBulk prepares the full-chunk statements of records and events and
// every heartbeat statement.
func (s *AgentStore) prepareBulk() error {
	s.bulk = make(map[string]*sql.Stmt)
	prep := func(key, q string) error {
		st, err := s.db.W.Prepare(q)
		if err != nil {
			return fmt.Errorf("sqlite: prepare bulk %s: %w", key, err)
		}
		s.bulk[key] = st
		return nil
	}
	for _, k := range []string{bulkEvents, bulkMetrics} {
		if err := prep(k, bulkSQL(k, hbChunk)); err != nil {
			return err
		}
	}
	for _, hk := range hbKinds {
		for k := 0; 1<<k <= hbMaxRows; k++ {
			if err := prep(hbStmtKey(hk.kind, k), bulkSQL(hk.kind, 1<<k)); err != nil {
				return err
			}
		}
	}
	return nil
}

// execRows runs the heartbeat statement of kind over args (cols values a
// row, any number of rows) and returns the rows it changed.
func (s *AgentStore) execRows(t *ingestTx, kind string, cols int, args []any) (int64, error) {
	var changed int64
	for n := len(args) / cols; n > 0; {
		k := min(bits.Len(uint(n))-1, bits.Len(hbMaxRows)-1)
		rows := 1 << k
		res, err := t.stmt(s.bulk[hbStmtKey(kind, k)]).ExecContext(t.ctx, args[:rows*cols]...)
		if err != nil {
			return 0, fmt.Errorf("sqlite: heartbeats (%s): %w", kind, err)
		}
		c, err := res.RowsAffected()
		if err != nil {
			return 0, fmt.Errorf("sqlite: heartbeats (%s): %w", kind, err)
		}
		changed += c
		args, n = args[rows*cols:], n-rows
	}
	return changed, nil
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
	r        devRowids               // as looked up for the device row
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
	serial, chans := s.hbArgs[2][:0], s.hbArgs[3][:0]
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
			if g.r.serial == 0 {
				if g.r, err = s.rowidsOf(t, dev.ID, true); err != nil {
					return err
				}
			}
			serial = append(serial, g.r.serial, in.At.UnixMilli(), in.AppliedVersion, dev.ID)
			for _, c := range g.chans {
				chans = append(chans, dev.ID, c.ID, c.Available, c.Live, c.TxOn, c.Error, nullString(c.PassthroughAddress))
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
	s.hbArgs[2], s.hbArgs[3] = serial, chans
	defer s.clearArgs()
	if n, err := s.execRows(t, bulkSerial, 4, serial); err != nil {
		return err
	} else if n < int64(len(serial)/4) {
		if err := s.rewriteSerial(t, serial); err != nil {
			return err
		}
	}
	if _, err := s.execRows(t, bulkChannels, 7, chans); err != nil {
		return err
	}
	return s.execBulk(t, bulkEvents, eventRows, nil)
}

// rewriteSerial repeats the serial rows (rowid, telemetryAt, applied
// version, device id) with their rowids looked up again, when some did not
// match: a remembered rowid may be stale (the file was vacuumed by another
// process), or a device may have no serial state row (then nothing is
// written, as before).
func (s *AgentStore) rewriteSerial(t *ingestTx, serial []any) error {
	for i := 0; i < len(serial); i += 4 {
		id := serial[i+3].(string)
		delete(s.rowids, id)
		r, err := s.rowidsOf(t, id, true)
		if err != nil {
			return err
		}
		serial[i] = r.serial
	}
	_, err := s.execRows(t, bulkSerial, 4, serial)
	return err
}

// clearArgs drops the references the argument buffers hold, keeping their
// room for the next transaction.
func (s *AgentStore) clearArgs() {
	for i := range s.hbArgs {
		clear(s.hbArgs[i])
		s.hbArgs[i] = s.hbArgs[i][:0]
	}
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

// devRowids are the rowids of a device's row and of its serial_state row
// (0: none yet).
type devRowids struct{ dev, serial int64 }

// rowidsOf returns the rowids of device id (zeros for a device that is
// gone), from the writer's memory after the first lookup; with serial, a
// serial row missing so far is looked up again. Updates by rowid skip the
// search through the id index; each statement still checks that the row
// is the device's.
func (s *AgentStore) rowidsOf(t *ingestTx, id string, serial bool) (devRowids, error) {
	r, ok := s.rowids[id]
	if ok && (!serial || r.serial != 0) {
		return r, nil
	}
	err := t.stmt(s.st.rowids).QueryRowContext(t.ctx, id).Scan(&r.dev, &r.serial)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return devRowids{}, nil
	case err != nil:
		return r, fmt.Errorf("sqlite: rowids of %s: %w", id, err)
	}
	s.rowids[id] = r
	return r, nil
}

// updateDevices writes each group's device row (the values of its last
// heartbeat; groups with a new deadline through the statement that also
// sets it). It returns nil when every group's session still owns its
// device (the common case: the updates matched every row), else the keys
// of the groups whose row it updated.
func (s *AgentStore) updateDevices(t *ingestTx, jobs []*ingestJob, groups []*hbGroup) (map[string]bool, error) {
	var matched map[string]bool
	for k := range 2 {
		var set []*hbGroup
		for _, g := range groups {
			if g.deadline.IsZero() == (k == 0) {
				set = append(set, g)
			}
		}
		ok, err := s.writeDevices(t, jobs, set, k)
		if err != nil {
			return nil, err
		}
		if !ok {
			// A remembered rowid may be stale (the file was vacuumed by
			// another process): look them up again and repeat (the rows
			// already written get the same values).
			for _, g := range set {
				delete(s.rowids, jobs[g.last].hb.in.Device.ID)
			}
			if ok, err = s.writeDevices(t, jobs, set, k); err != nil {
				return nil, err
			}
		}
		if ok {
			if matched != nil {
				for _, g := range set {
					matched[g.key] = true
				}
			}
			continue
		}
		// Some session lost its device (rare: a takeover or the sweeper):
		// ask which still own theirs.
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
		for _, g := range set {
			in := &jobs[g.last].hb.in
			var st string
			err := t.stmt(s.st.session).QueryRowContext(t.ctx, in.Device.ID, in.Session).Scan(&st)
			switch {
			case err == nil:
				matched[g.key] = true
			case !errors.Is(err, sql.ErrNoRows):
				return nil, fmt.Errorf("sqlite: heartbeat session of %s: %w", in.Device.ID, err)
			}
		}
	}
	return matched, nil
}

// writeDevices writes the device rows of set, with the deadline when
// deadline is 1; ok reports that every row matched.
func (s *AgentStore) writeDevices(t *ingestTx, jobs []*ingestJob, set []*hbGroup, deadline int) (ok bool, err error) {
	args := s.hbArgs[deadline][:0]
	for _, g := range set {
		in := &jobs[g.last].hb.in
		if g.r, err = s.rowidsOf(t, in.Device.ID, false); err != nil {
			return false, err
		}
		args = append(args, g.r.dev, in.At.UnixMilli(), in.IPAddress, in.Session)
		if deadline == 1 {
			args = append(args, g.deadline.UnixMilli())
		}
	}
	s.hbArgs[deadline] = args
	kind := []string{bulkDevices, bulkDevicesDeadline}[deadline]
	n, err := s.execRows(t, kind, 4+deadline, args)
	return n == int64(len(set)), err
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
