package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/internal/sqlstore"
	"github.com/fleet/fleet/cloud/sqlite/rawstmt"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/resource"
)

// Heartbeats are the bulk of the agent endpoint's writes. The writer applies
// the heartbeats of one transaction together: each device's row (the
// session's heartbeats merged) by a one-row UPDATE prepared once and run
// for every row inside one call of the driver connection
// (rawstmt.ExecEach), and the records and events with multi-row inserts. A
// multi-row `UPDATE … FROM (VALUES …)` made fewer calls into SQLite, but
// SQLite runs it as a join whose result, every new value of every row,
// goes through an ephemeral table before the rows are written: it cost the
// writer a fifth more CPU per heartbeat with the usual device row, and two
// fifths more with a channel reporting 50 points
// (BenchmarkWriterHeartbeatTx, docs/benchmarks.md). The one-row calls are
// short (a few µs each), mostly under the 20 µs after which the runtime may
// hand the writer's P to the connection goroutines while it is in C, so
// the writer seldom has to queue for one after a call. (Rows handed over
// as one JSON array read with json_each cost a third more CPU per row than
// bound VALUES: each ->> parses the row again.) Records use statements of
// up to hbChunk rows whose RETURNING names the rows actually inserted.
const hbChunk = 128

// hbJob is a queued heartbeat, with its queue entry (one allocation per
// heartbeat).
type hbJob struct {
	job    ingestJob
	in     agentlink.HeartbeatIn
	serial bool // the model has serial I/O
	out    agentlink.HeartbeatOut
	// status is the device.status_changed event applyStatus stored.
	status *resource.Event
	// done is called with out after the commit, on the completion
	// goroutine.
	done func(agentlink.HeartbeatOut, error)
}

// hbJobs holds finished *hbJob for reuse: a heartbeat then allocates no
// queue entry.
var hbJobs sync.Pool

// Heartbeat implements agentlink.Store.
func (s *AgentStore) Heartbeat(ctx context.Context, in agentlink.HeartbeatIn, done func(agentlink.HeartbeatOut, error)) error {
	model, _ := catalog.Lookup(in.Device.Model)
	hb, _ := hbJobs.Get().(*hbJob)
	if hb == nil {
		hb = new(hbJob)
	}
	hb.in, hb.serial, hb.done = in, model.Has(resource.CapabilitySerialIO), done
	hb.job.hb = hb
	if err := s.w.enqueue(ctx, &hb.job); err != nil {
		hb.release()
		return err
	}
	return nil
}

// release returns a job whose callback has run (or that was never queued)
// for reuse.
func (hb *hbJob) release() {
	*hb = hbJob{}
	hbJobs.Put(hb)
}

// bulkStmt is a multi-row statement: each row of values is cols in order
// (their number is the statement's width), and the statement is head, the
// rows of placeholders, then tail. The UPDATEs read a row's values as
// v.column1, v.column2 … in the order of cols.
type bulkStmt struct {
	name       string
	cols       []string
	head, tail string
}

// sql returns the statement for n rows.
func (b *bulkStmt) sql(n int) string {
	row := "(" + strings.Repeat("?, ", len(b.cols)-1) + "?)"
	return b.head + strings.Repeat(row+", ", n-1) + row + b.tail
}

// insertStmt is `verb INTO table (cols) VALUES` the rows, then tail.
func insertStmt(verb, table string, cols []string, tail string) bulkStmt {
	return bulkStmt{name: table, cols: cols, head: verb + " INTO " + table + " (" + strings.Join(cols, ", ") + ") VALUES ", tail: tail}
}

// The heartbeat statements, in the order of AgentStore.hbArgs. The device
// row is written by rowid and session (unique to a connection: the row is
// still the device's); the deadline has a statement of its own, so that
// most heartbeats leave the deadline index alone.
const (
	hbDevices = iota
	hbDevicesDeadline
	hbSerial
)

// hbStmt is a heartbeat statement: its name (also its key among the
// writer's raw statements), the columns of its row, and its text, with
// the row's values as the numbered parameters ?1 … ?len(cols).
type hbStmt struct {
	name string
	cols []string
	sql  string
}

var hbStmts = [...]hbStmt{
	hbDevices: {name: "devices", cols: []string{"rowid", "last_seen", "ip_address", "agent_session", "telemetry_at", "channel_reports"},
		sql: `UPDATE devices SET last_seen = ?2, ip_address = ?3, telemetry_at = COALESCE(?5, telemetry_at),
			channel_reports = COALESCE(?6, channel_reports) WHERE rowid = ?1 AND agent_session = ?4`},
	hbDevicesDeadline: {name: "devices+deadline", cols: []string{"rowid", "last_seen", "ip_address", "agent_session", "telemetry_at", "channel_reports", "agent_deadline"},
		sql: `UPDATE devices SET last_seen = ?2, ip_address = ?3, telemetry_at = COALESCE(?5, telemetry_at),
			channel_reports = COALESCE(?6, channel_reports), agent_deadline = ?7 WHERE rowid = ?1 AND agent_session = ?4`},
	hbSerial: {name: "serial", cols: []string{"rowid", "applied_version", "device_id"},
		sql: `UPDATE serial_state SET applied_version = ?2 WHERE rowid = ?1 AND +device_id = ?3`},
}

// The record statements, run in chunks of up to hbChunk rows (execBulk).
var (
	eventRows  = insertStmt("INSERT OR IGNORE", "events", []string{"id", "org_id", "device_id", "type", "severity", "message", "data", "created_at"}, "")
	metricRows = insertStmt("INSERT OR IGNORE", "metrics", []string{"device_id", "captured_at", "cpu_pct", "mem_pct", "disk_used_pct", "temp_cpu", "load_avg1", "missing"}, ` RETURNING captured_at`)
)

// prepareBulk prepares the full-chunk statements of records and events.
// The heartbeat statements run at the driver level (rawstmt), each
// prepared on its first use.
func (s *AgentStore) prepareBulk() error {
	s.bulk = make(map[string]*sql.Stmt)
	for _, b := range []*bulkStmt{&eventRows, &metricRows} {
		st, err := s.db.W.Prepare(b.sql(hbChunk))
		if err != nil {
			return fmt.Errorf("sqlite: prepare bulk %s: %w", b.name, err)
		}
		s.bulk[b.name] = st
	}
	return nil
}

// execRows runs heartbeat statement i over args (a row of its columns
// after another, any number of rows) and returns the rows it changed.
func (s *AgentStore) execRows(t *ingestTx, i int, args []any) (int64, error) {
	st := &hbStmts[i]
	changed, err := s.hb.raw.ExecEach(t.conn, st.name, st.sql, args, len(st.cols))
	if err != nil {
		return 0, fmt.Errorf("sqlite: heartbeats (%s): %w", st.name, err)
	}
	return changed, nil
}

// bulkStmt returns the statement of b for n rows in t: the prepared one
// for a full chunk, else one prepared for this transaction.
func (s *AgentStore) bulkStmt(t *ingestTx, b *bulkStmt, n int) (*sql.Stmt, error) {
	if n == hbChunk {
		return t.stmt(s.bulk[b.name]), nil
	}
	return t.prepare(b.sql(n))
}

// execBulk runs b over rows in chunks; each row is a slice of arguments.
// With matched, the statement's RETURNING values (as text) are added to it.
func (s *AgentStore) execBulk(t *ingestTx, b *bulkStmt, rows [][]any, matched map[string]bool) error {
	for len(rows) > 0 {
		n := min(len(rows), hbChunk)
		st, err := s.bulkStmt(t, b, n)
		if err != nil {
			return fmt.Errorf("sqlite: bulk %s: %w", b.name, err)
		}
		args := make([]any, 0, n*len(b.cols))
		for _, r := range rows[:n] {
			args = append(args, r...)
		}
		if matched == nil {
			if _, err := st.ExecContext(t.ctx, args...); err != nil {
				return fmt.Errorf("sqlite: bulk %s: %w", b.name, err)
			}
		} else {
			res, err := st.QueryContext(t.ctx, args...)
			if err != nil {
				return fmt.Errorf("sqlite: bulk %s: %w", b.name, err)
			}
			for res.Next() {
				var id string
				if err := res.Scan(&id); err != nil {
					res.Close()
					return fmt.Errorf("sqlite: bulk %s: %w", b.name, err)
				}
				matched[id] = true
			}
			res.Close()
			if err := res.Err(); err != nil {
				return fmt.Errorf("sqlite: bulk %s: %w", b.name, err)
			}
		}
		rows = rows[n:]
	}
	return nil
}

// nullText is s as a driver value: NULL when empty.
func nullText(s string) any {
	if s == "" {
		return nil
	}
	return s
}

// hbScratch is the bulk function's memory, kept from one transaction to
// the next so that a transaction allocates nothing per heartbeat in the
// common case (writer goroutine only).
type hbScratch struct {
	merge agentlink.HeartbeatMerge
	rows  []*devRowids // per group of merge: as looked up for the device row
	raw   rawstmt.Stmts
	boxes argBoxes
}

// argBoxes boxes the writer's statement arguments, reusing the box of a
// value it boxed before: putting an int64 into an interface allocates
// (the value's copy on the heap), and the heartbeat statements take a
// []any. A time in milliseconds keeps the last one of each kind (at 20,000
// heartbeats a second, a transaction's heartbeats share a millisecond
// twenty at a time). Writer goroutine only.
type argBoxes struct {
	atMilli, deadlineMilli int64
	atArg, deadlineArg     any
}

// at returns a heartbeat's time in milliseconds as an argument.
func (b *argBoxes) at(t time.Time) any {
	return lastMilli(&b.atMilli, &b.atArg, t)
}

// deadline returns a deadline in milliseconds as an argument.
func (b *argBoxes) deadline(t time.Time) any {
	return lastMilli(&b.deadlineMilli, &b.deadlineArg, t)
}

// lastMilli returns t in milliseconds boxed, in *arg, boxing it only when
// it differs from *ms (the last one).
func lastMilli(ms *int64, arg *any, t time.Time) any {
	if v := t.UnixMilli(); *arg == nil || *ms != v {
		*ms, *arg = v, v
	}
	return *arg
}

// applyHeartbeats is the writer's bulk function. A heartbeat that changes
// the status first updates the device row alone (the status, and the
// deadline, move only with such a heartbeat); then the heartbeats of each
// session are merged (agentlink.HeartbeatMerge) and written with one
// statement per table.
func (s *AgentStore) applyHeartbeats(t *ingestTx, jobs []*ingestJob, errs []error) error {
	m := &s.hb.merge
	defer func() {
		m.Reset()
		clear(s.hb.rows)
		s.hb.rows = s.hb.rows[:0]
	}()
	// The status changes' device.status_changed events go in with the
	// heartbeats' own events.
	var events [][]any
	for i, j := range jobs {
		in := &j.hb.in
		j.hb.status = nil
		if in.Status != in.PrevStatus {
			if errs[i] = s.applyStatus(t, j.hb); errs[i] != nil {
				m.Skip()
				continue
			}
			events = appendEvent(events, in.Device, j.hb.status)
		}
		m.Add(in, j.hb.serial)
	}
	groups := m.Groups
	for len(s.hb.rows) < len(groups) {
		s.hb.rows = append(s.hb.rows, nil)
	}
	rows := s.hb.rows[:len(groups)]
	matched, err := s.updateDevices(t, jobs, groups, rows)
	if err != nil {
		return err
	}
	serial := s.hbArgs[hbSerial][:0]
	for gi := range groups {
		g := &groups[gi]
		if matched != nil && !matched[gi] {
			for i := g.First; i >= 0; i = m.Next(i) {
				errs[i] = agentlink.ErrSessionGone
			}
			continue
		}
		dev := jobs[g.Last].hb.in.Device
		if g.SerialAt >= 0 {
			in := &jobs[g.SerialAt].hb.in
			if rows[gi] == nil || rows[gi].serial == 0 {
				if rows[gi], err = s.rowidsOf(t, dev.ID, true); err != nil {
					return err
				}
			}
			r := rows[gi]
			if r.appliedChanged(in) {
				serial = append(serial, r.serialArg, r.applied(in.AppliedVersion), r.idArg)
			}
		}
		for i := g.First; i >= 0; i = m.Next(i) {
			hb := jobs[i].hb
			in := &hb.in
			hb.out.Change = agentlink.StatusChange{Device: in.Device, From: in.PrevStatus, To: in.Status, StatusEvent: hb.status}
			if e := in.Event; e != nil {
				data := string(e.Data)
				if data == "" {
					data = "{}"
				}
				events = append(events, []any{e.ID, dev.OrgID, dev.ID, e.Type, string(e.Severity), e.Message, data, e.CreatedAt.UnixMilli()})
			}
		}
	}
	s.hbArgs[hbSerial] = serial
	defer s.clearArgs()
	if n, err := s.execRows(t, hbSerial, serial); err != nil {
		return err
	} else if n < int64(len(serial)/len(hbStmts[hbSerial].cols)) {
		if err := s.rewriteSerial(t, serial); err != nil {
			return err
		}
	}
	return s.execBulk(t, &eventRows, events, nil)
}

// rewriteSerial repeats the serial rows (rowid, applied version, device
// id) with their rowids looked up again, when some did not
// match: a remembered rowid may be stale (the file was vacuumed by another
// process), or a device may have no serial state row (then nothing is
// written, as before).
func (s *AgentStore) rewriteSerial(t *ingestTx, serial []any) error {
	width := len(hbStmts[hbSerial].cols)
	for i := 0; i < len(serial); i += width {
		id := serial[i+width-1].(string)
		delete(s.rowids, id)
		r, err := s.rowidsOf(t, id, true)
		if err != nil {
			return err
		}
		serial[i] = r.serialArg
	}
	_, err := s.execRows(t, hbSerial, serial)
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

// devRowids are the rowids of a device's row and of its serial_state row
// (0: none yet), with the device's statement arguments boxed once: putting
// an int64 or a string into an interface allocates, and the writer builds
// its statements' []any for every heartbeat.
type devRowids struct {
	dev, serial              int64
	devArg, serialArg, idArg any
	// the last session and IP address written, boxed
	session, ip       string
	sessionArg, ipArg any
	// the last applied configuration version written, boxed
	appliedVersion int64
	appliedArg     any
	// the session whose heartbeat wrote appliedVersion last ("" before)
	appliedSession string
}

// appliedChanged tells whether in's applied configuration version is to
// be written to the device's serial_state row: the first heartbeat of
// each session writes it (another writer may have changed the row since:
// a config_applied, a hello), then only one that moved it. Within a
// session only this writer and the session's own config_applied write
// it, and an agent reports what it applied last. It marks the version
// written.
func (r *devRowids) appliedChanged(in *agentlink.HeartbeatIn) bool {
	if r.appliedSession == in.Session && r.appliedArg != nil && r.appliedVersion == in.AppliedVersion {
		return false
	}
	r.appliedSession = in.Session
	return true
}

// applied returns the applied configuration version v as an argument,
// boxing it only when it differs from the last one.
func (r *devRowids) applied(v int64) any {
	if r.appliedArg == nil || r.appliedVersion != v {
		r.appliedVersion, r.appliedArg = v, v
	}
	return r.appliedArg
}

// sessionAndIP returns in's session and address as arguments, boxing
// them only when they differ from the last ones.
func (r *devRowids) sessionAndIP(in *agentlink.HeartbeatIn) (session, ip any) {
	if r.sessionArg == nil || r.session != in.Session {
		r.session, r.sessionArg = in.Session, in.Session
	}
	if r.ipArg == nil || r.ip != in.IPAddress {
		r.ip, r.ipArg = in.IPAddress, in.IPAddress
	}
	return r.sessionArg, r.ipArg
}

// rowidsOf returns the rowids of device id (zeros, not remembered, for a
// device that is gone), from the writer's memory after the first lookup; with serial,
// a serial row missing so far is looked up again. Updates by rowid skip
// the search through the id index; each statement still checks that the
// row is the device's.
func (s *AgentStore) rowidsOf(t *ingestTx, id string, serial bool) (*devRowids, error) {
	r, ok := s.rowids[id]
	if ok && (!serial || r.serial != 0) {
		return r, nil
	}
	var dev, ser int64
	err := t.stmt(s.st.rowids).QueryRowContext(t.ctx, id).Scan(&dev, &ser)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return &devRowids{devArg: int64(0), serialArg: int64(0), idArg: id}, nil
	case err != nil:
		return nil, fmt.Errorf("sqlite: rowids of %s: %w", id, err)
	}
	r = &devRowids{dev: dev, serial: ser, devArg: dev, serialArg: ser, idArg: id}
	s.rowids[id] = r
	return r, nil
}

// updateDevices writes each group's device row (the values of its last
// heartbeat; groups with a new deadline through the statement that also
// sets it), keeping the rowids it looked up in rows (by group). It returns
// nil when every group's session still owns its device (the common case:
// the updates matched every row), else the groups whose row it updated.
func (s *AgentStore) updateDevices(t *ingestTx, jobs []*ingestJob, groups []agentlink.HeartbeatGroup, rows []*devRowids) (map[int]bool, error) {
	var matched map[int]bool
	set := s.hbSet[:0]
	defer func() { s.hbSet = set[:0] }()
	for k := range 2 {
		set = set[:0]
		for gi := range groups {
			if groups[gi].Deadline.IsZero() == (k == 0) {
				set = append(set, gi)
			}
		}
		ok, err := s.writeDevices(t, jobs, groups, rows, set, k)
		if err != nil {
			return nil, err
		}
		if !ok {
			// A remembered rowid may be stale (the file was vacuumed by
			// another process): look them up again and repeat (the rows
			// already written get the same values).
			for _, gi := range set {
				delete(s.rowids, groups[gi].DeviceID)
			}
			if ok, err = s.writeDevices(t, jobs, groups, rows, set, k); err != nil {
				return nil, err
			}
		}
		if ok {
			if matched != nil {
				for _, gi := range set {
					matched[gi] = true
				}
			}
			continue
		}
		// Some session lost its device (rare: a takeover or the sweeper):
		// ask which still own theirs.
		if matched == nil {
			matched = make(map[int]bool, len(groups))
			if k == 1 { // the first statement matched every row
				for gi := range groups {
					if groups[gi].Deadline.IsZero() {
						matched[gi] = true
					}
				}
			}
		}
		for _, gi := range set {
			g := &groups[gi]
			var st string
			err := t.stmt(s.st.session).QueryRowContext(t.ctx, g.DeviceID, g.Session).Scan(&st)
			switch {
			case err == nil:
				matched[gi] = true
			case !errors.Is(err, sql.ErrNoRows):
				return nil, fmt.Errorf("sqlite: heartbeat session of %s: %w", g.DeviceID, err)
			}
		}
	}
	return matched, nil
}

// writeDevices writes the device rows of the groups in set, with the
// deadline when deadline is 1; ok reports that every row matched.
func (s *AgentStore) writeDevices(t *ingestTx, jobs []*ingestJob, groups []agentlink.HeartbeatGroup, rows []*devRowids, set []int, deadline int) (ok bool, err error) {
	args := s.hbArgs[deadline][:0]
	for _, gi := range set {
		g := &groups[gi]
		in := &jobs[g.Last].hb.in
		if rows[gi], err = s.rowidsOf(t, in.Device.ID, false); err != nil {
			return false, err
		}
		session, ip := rows[gi].sessionAndIP(in)
		// telemetry_at: the time of the group's last heartbeat with
		// serial signals (the serial state's telemetryAt), else kept.
		var telemetry any
		if g.SerialAt >= 0 {
			if at := jobs[g.SerialAt].hb.in.At; at.Equal(in.At) {
				telemetry = s.hb.boxes.at(at)
			} else {
				telemetry = at.UnixMilli()
			}
		}
		// channel_reports: every channel's state after the group, when
		// one changed (migration 0027), else kept.
		args = append(args, rows[gi].devArg, s.hb.boxes.at(in.At), ip, session, telemetry, nullText(g.Reports))
		if deadline == 1 {
			args = append(args, s.hb.boxes.deadline(g.Deadline))
		}
	}
	s.hbArgs[deadline] = args
	n, err := s.execRows(t, hbDevices+deadline, args)
	return n == int64(len(set)), err
}

// applyStatus stores the status change of a heartbeat (with its deadline,
// last seen time and address, status_since and planned_at) on its own, and
// makes its device.status_changed event (hb.status, stored with the
// batch's events); ErrSessionGone when its session no longer owns the
// device.
func (s *AgentStore) applyStatus(t *ingestTx, hb *hbJob) error {
	in := &hb.in
	if in.Deadline.IsZero() {
		return fmt.Errorf("sqlite: heartbeat %s: status change without a deadline", in.Device.ID)
	}
	res, err := t.stmt(s.st.heartbeatStatus).ExecContext(t.ctx, sqlstore.HeartbeatStatusArgs(in)...)
	if err != nil {
		return fmt.Errorf("sqlite: heartbeat %s: %w", in.Device.ID, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return agentlink.ErrSessionGone
	}
	hb.status = sqlstore.StatusEvent(in.PrevStatus, in.Status, in.At)
	return nil
}

// appendEvent adds ev, an event the relay made (its data set), of dev, to
// rows of eventRows.
func appendEvent(rows [][]any, dev agentlink.Device, ev *resource.Event) [][]any {
	return append(rows, []any{ev.ID, dev.OrgID, dev.ID, ev.Type, string(ev.Severity), ev.Message, string(ev.Data), ev.CreatedAt.UnixMilli()})
}
