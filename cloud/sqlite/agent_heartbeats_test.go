package sqlite

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestBulkHeartbeatsInOneTransaction drives the writer's bulk path
// directly with one transaction holding: plain heartbeats of many devices
// (more than one chunk), two heartbeats of one device, a status change, a
// deadline refresh and a heartbeat of a session that no longer owns its
// device.
func TestBulkHeartbeatsInOneTransaction(t *testing.T) {
	db, s, org := newAgentStore(t)
	n := hbChunk + 7
	devs := make([]agentlink.Device, n)
	now := time.Now().Truncate(time.Millisecond)
	for i := range devs {
		devs[i] = connectDevice(t, db, s, org, sessionOf, now)
	}
	at := now.Add(time.Second)
	job := func(i int, mod func(*agentlink.HeartbeatIn)) *ingestJob {
		in := agentlink.HeartbeatIn{Device: devs[i], Session: "s-" + devs[i].ID, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
			IPAddress: "10.0.0.1", HasChannels: true, Channels: []protocol.ChannelState{{ID: "gpio-1", Available: true, Live: "1"}}}
		if mod != nil {
			mod(&in)
		}
		return &ingestJob{hb: &hbJob{in: in, serial: true}}
	}
	var jobs []*ingestJob
	for i := range n {
		jobs = append(jobs, job(i, nil))
	}
	// Device 4's channel text needs escaping in the statements' JSON.
	const oddLive = "q\"b\\s\x01\x1f\x7f é \u2028 ✓ {[,]}"
	const oddAddr = "10.0.0.4:4001\t"
	jobs[4] = job(4, func(in *agentlink.HeartbeatIn) {
		in.Channels = append(in.Channels, protocol.ChannelState{ID: "uart-1", Available: false, Live: oddLive, TxOn: true, Error: `"x"`, PassthroughAddress: oddAddr})
	})
	// Device 0 twice: the later heartbeat's values win.
	jobs = append(jobs, job(0, func(in *agentlink.HeartbeatIn) {
		in.IPAddress = "10.9.9.9"
		in.Channels[0].Live = "0"
		in.Event = &resource.Event{ID: ids.New(), Type: "heartbeat", Severity: resource.SeverityInfo, Data: []byte(`{}`), CreatedAt: resource.T(at)}
	}))
	jobs[1] = job(1, func(in *agentlink.HeartbeatIn) {
		in.Status = resource.StatusUpdating
		in.Deadline = at.Add(time.Minute)
	})
	jobs[2] = job(2, func(in *agentlink.HeartbeatIn) { in.Deadline = at.Add(time.Hour) })
	jobs[3] = job(3, func(in *agentlink.HeartbeatIn) { in.Session = "stale" })
	jobs[5] = job(5, func(in *agentlink.HeartbeatIn) { in.Session, in.Deadline = "stale", at.Add(time.Hour) })
	jobs[6] = job(6, func(in *agentlink.HeartbeatIn) { in.Deadline = at.Add(2 * time.Hour) })
	errs := make([]error, len(jobs))
	if _, err := s.w.runTx(jobs, errs); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if i == 3 || i == 5 {
			if !errors.Is(err, agentlink.ErrSessionGone) {
				t.Errorf("stale session: err = %v, want ErrSessionGone", err)
			}
			continue
		}
		if err != nil {
			t.Errorf("job %d: %v", i, err)
		}
	}
	if ch := jobs[1].hb.out.Change; ch.From != resource.StatusOnline || ch.To != resource.StatusUpdating {
		t.Errorf("status change = %+v", ch)
	}
	var stored int
	db.R.QueryRow(`SELECT COUNT(*) FROM devices WHERE last_seen = ?`, at.UnixMilli()).Scan(&stored)
	if stored != n-2 {
		t.Errorf("last_seen set on %d devices, want %d", stored, n-2)
	}
	var ip, live, status string
	db.R.QueryRow(`SELECT ip_address FROM devices WHERE id = ?`, devs[0].ID).Scan(&ip)
	if r := cloud.FindChannelReport(reportsOf(t, db, devs[0].ID), "gpio-1"); r != nil {
		live = r.Live
	}
	db.R.QueryRow(`SELECT status FROM devices WHERE id = ?`, devs[1].ID).Scan(&status)
	if ip != "10.9.9.9" || live != "0" || status != "UPDATING" {
		t.Errorf("device 0 ip %q live %q, device 1 status %q", ip, live, status)
	}
	var dl int64
	db.R.QueryRow(`SELECT agent_deadline FROM devices WHERE id = ?`, devs[2].ID).Scan(&dl)
	if dl != at.Add(time.Hour).UnixMilli() {
		t.Errorf("deadline not refreshed")
	}
	db.R.QueryRow(`SELECT agent_deadline FROM devices WHERE id = ?`, devs[6].ID).Scan(&dl)
	if dl != at.Add(2*time.Hour).UnixMilli() {
		t.Errorf("deadline of device 6 not refreshed")
	}
	var staleSeen sql.NullInt64
	db.R.QueryRow(`SELECT last_seen FROM devices WHERE id = ?`, devs[5].ID).Scan(&staleSeen)
	if staleSeen.Int64 == at.UnixMilli() {
		t.Errorf("a stale session's heartbeat was stored")
	}
	odd := cloud.FindChannelReport(reportsOf(t, db, devs[4].ID), "uart-1")
	if odd == nil || odd.Available || !odd.TxOn || odd.Live != oddLive || odd.Error != `"x"` || odd.Passthrough != oddAddr {
		t.Errorf("uart-1 of device 4 stored as %+v", odd)
	}
	var chans, tel, evs int
	for _, d := range devs {
		if r := cloud.FindChannelReport(reportsOf(t, db, d.ID), "gpio-1"); r != nil && r.Available && r.Passthrough == "" {
			chans++
		}
	}
	db.R.QueryRow(`SELECT COUNT(*) FROM devices JOIN serial_state ON device_id = id WHERE telemetry_at = ?`, at.UnixMilli()).Scan(&tel)
	db.R.QueryRow(`SELECT COUNT(*) FROM events WHERE device_id = ? AND type = 'heartbeat'`, devs[0].ID).Scan(&evs)
	if chans != n-2 || tel != n-2 || evs != 1 {
		t.Errorf("channels %d, telemetry times %d (want %d each), heartbeat events %d (want 1)", chans, tel, n-2, evs)
	}
}

// reportsOf reads the channels device id reported, as stored in its row.
func reportsOf(t testing.TB, db *DB, id string) []cloud.ChannelReport {
	t.Helper()
	var stored sql.NullString
	if err := db.R.QueryRow(`SELECT channel_reports FROM devices WHERE id = ?`, id).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	r, err := cloud.DecodeChannelReports(stored.String)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// newAgentStore opens a database in a temporary directory with an agent
// store and one organization; both close when tb ends.
func newAgentStore(tb testing.TB) (*DB, *AgentStore, cloud.Org) {
	ctx := context.Background()
	db, _ := openTemp(tb)
	s, err := NewAgentStore(db, nil)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { s.Close() })
	org, err := db.CreateOrg(ctx, "o")
	if err != nil {
		tb.Fatal(err)
	}
	return db, s, org
}

// TestHeartbeatsOfOneSessionMerged checks that several heartbeats of one
// session in one transaction leave what applying them one by one would:
// the last values of the device row and of the serial telemetry time,
// the channels of the last heartbeat that changed one (each carries every
// channel, as the agent endpoint hands them over), each status change and
// each event;
// and that another session's heartbeats for the same device in the same
// transaction are refused without touching the device.
func TestHeartbeatsOfOneSessionMerged(t *testing.T) {
	db, s, org := newAgentStore(t)
	now := time.Now().Truncate(time.Millisecond)
	devs := []agentlink.Device{connectDevice(t, db, s, org, sessionOf, now), connectDevice(t, db, s, org, sessionOf, now)}
	at := func(k int) time.Time { return now.Add(time.Duration(k) * time.Second) }
	ev := func(k int) *resource.Event {
		return &resource.Event{ID: ids.New(), Type: "heartbeat", Severity: resource.SeverityInfo, Data: []byte(`{}`), CreatedAt: resource.T(at(k))}
	}
	hb := func(d agentlink.Device, k int, mod func(*agentlink.HeartbeatIn)) *ingestJob {
		in := agentlink.HeartbeatIn{Device: d, Session: "s-" + d.ID, At: at(k), Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
			IPAddress: fmt.Sprintf("10.0.0.%d", k), AppliedVersion: int64(k)}
		mod(&in)
		return &ingestJob{hb: &hbJob{in: in, serial: true}}
	}
	chans := func(kv ...string) []protocol.ChannelState {
		var out []protocol.ChannelState
		for i := 0; i < len(kv); i += 2 {
			out = append(out, protocol.ChannelState{ID: kv[i], Available: true, Live: kv[i+1]})
		}
		return out
	}
	d0, d1 := devs[0], devs[1]
	jobs := []*ingestJob{
		hb(d0, 1, func(in *agentlink.HeartbeatIn) {
			in.HasChannels, in.Channels, in.Event = true, chans("gpio-1", "1", "rs485-1", "a"), ev(1)
		}),
		// The other device: its status change comes last.
		hb(d1, 2, func(in *agentlink.HeartbeatIn) {}),
		hb(d0, 3, func(in *agentlink.HeartbeatIn) {
			in.Status, in.Deadline, in.HasChannels, in.Channels = resource.StatusUpdating, at(60), true, chans("gpio-1", "0", "rs485-1", "a")
		}),
		// A stale session of device 0.
		hb(d0, 4, func(in *agentlink.HeartbeatIn) {
			in.Session, in.HasChannels, in.Channels = "old", true, chans("gpio-3", "stale")
		}),
		hb(d0, 5, func(in *agentlink.HeartbeatIn) {
			in.Status, in.PrevStatus, in.HasChannels, in.Channels, in.Event = resource.StatusUpdating, resource.StatusUpdating, true, chans("gpio-1", "0", "rs485-1", "a", "gpio-2", "x"), ev(5)
		}),
		hb(d0, 6, func(in *agentlink.HeartbeatIn) {
			in.Status, in.PrevStatus = resource.StatusUpdating, resource.StatusUpdating
		}),
		hb(d1, 7, func(in *agentlink.HeartbeatIn) { in.Status, in.Deadline = resource.StatusRebooting, at(90) }),
	}
	errs := make([]error, len(jobs))
	if _, err := s.w.runTx(jobs, errs); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if want := i == 3; errors.Is(err, agentlink.ErrSessionGone) != want || (!want && err != nil) {
			t.Errorf("job %d: err = %v", i, err)
		}
	}
	if ch := jobs[2].hb.out.Change; !ch.Changed() || ch.To != resource.StatusUpdating {
		t.Errorf("status change of job 2 = %+v", ch)
	}
	type devRow struct {
		status, ip           string
		lastSeen, deadline   int64
		telemetryAt, applied int64
	}
	row := func(d agentlink.Device) devRow {
		var r devRow
		if err := db.R.QueryRow(`SELECT status, ip_address, last_seen, agent_deadline, COALESCE(telemetry_at, 0), applied_version FROM devices JOIN serial_state ON device_id = id WHERE id = ?`, d.ID).
			Scan(&r.status, &r.ip, &r.lastSeen, &r.deadline, &r.telemetryAt, &r.applied); err != nil {
			t.Fatal(err)
		}
		return r
	}
	// Device 0: the last heartbeat (6) has no channels, so the telemetry
	// time and applied version are those of 5.
	if got, want := row(d0), (devRow{"UPDATING", "10.0.0.6", at(6).UnixMilli(), at(60).UnixMilli(), at(5).UnixMilli(), 5}); got != want {
		t.Errorf("device 0 = %+v, want %+v", got, want)
	}
	if got := row(d1); got.status != "REBOOTING" || got.ip != "10.0.0.7" || got.lastSeen != at(7).UnixMilli() || got.deadline != at(90).UnixMilli() {
		t.Errorf("device 1 = %+v", got)
	}
	live := map[string]string{}
	for _, r := range reportsOf(t, db, d0.ID) {
		if r.Available {
			live[r.ID] = r.Live
		}
	}
	if want := map[string]string{"gpio-1": "0", "rs485-1": "a", "gpio-2": "x"}; !maps.Equal(live, want) {
		t.Errorf("device 0 channels = %v, want %v", live, want)
	}
	var evs int
	db.R.QueryRow(`SELECT COUNT(*) FROM events WHERE device_id = ? AND type = 'heartbeat'`, d0.ID).Scan(&evs)
	if evs != 2 {
		t.Errorf("%d heartbeat events stored, want 2", evs)
	}
}

// TestHeartbeatStatementsSearchByKey checks the plans of the heartbeat
// statements: each row is found by rowid or primary key, never by a scan.
func TestHeartbeatStatementsSearchByKey(t *testing.T) {
	db, _, _ := newAgentStore(t)
	want := [len(hbStmts)]string{
		hbDevices:         "SEARCH devices USING INTEGER PRIMARY KEY (rowid=?)",
		hbDevicesDeadline: "SEARCH devices USING INTEGER PRIMARY KEY (rowid=?)",
		hbSerial:          "SEARCH serial_state USING INTEGER PRIMARY KEY (rowid=?)",
	}
	for i, hk := range hbStmts {
		q := hk.sql
		args := make([]any, len(hk.cols))
		for i := range args {
			args[i] = i
		}
		rows, err := db.W.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		var detail string
		for rows.Next() && rows.Scan(new(int), new(int), new(int), &detail) == nil {
			plan = append(plan, detail)
		}
		if err := errors.Join(rows.Err(), rows.Close()); err != nil {
			t.Fatal(err)
		}
		all := strings.Join(plan, "\n")
		for _, step := range plan {
			if fullScan.MatchString(step) {
				t.Errorf("%s: full scan in\n%s", hk.name, all)
			}
		}
		if !strings.Contains(all, want[i]) {
			t.Errorf("%s: plan\n%s\nlacks %q", hk.name, all, want[i])
		}
	}
}

// TestHeartbeatOfDeletedDeviceLeavesReusedRowid checks that a heartbeat of
// a session whose device row is gone is refused, and that the device that
// took over the row's rowid is not touched, although the writer remembered
// the rowid.
func TestHeartbeatOfDeletedDeviceLeavesReusedRowid(t *testing.T) {
	ctx := context.Background()
	db, s, org := newAgentStore(t)
	now := time.Now().Truncate(time.Millisecond)
	add := func() agentlink.Device { return connectDevice(t, db, s, org, sessionOf, now) }
	beat := func(d agentlink.Device, at time.Time) error {
		return heartbeatAndWait(ctx, s, agentlink.HeartbeatIn{Device: d, Session: "s-" + d.ID, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
			IPAddress: "10.0.0.1", HasChannels: true, Channels: []protocol.ChannelState{{ID: "gpio-1", Available: true, Live: d.ID}}})
	}
	a := add()
	if err := beat(a, now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	var rowidA int64
	db.R.QueryRow(`SELECT rowid FROM devices WHERE id = ?`, a.ID).Scan(&rowidA)
	for _, q := range []string{`DELETE FROM serial_channels WHERE device_id = ?`, `DELETE FROM serial_state WHERE device_id = ?`, `DELETE FROM events WHERE device_id = ?`, `DELETE FROM devices WHERE id = ?`} {
		if _, err := db.W.Exec(q, a.ID); err != nil {
			t.Fatal(err)
		}
	}
	b := add()
	var rowidB int64
	db.R.QueryRow(`SELECT rowid FROM devices WHERE id = ?`, b.ID).Scan(&rowidB)
	if rowidB != rowidA {
		t.Fatalf("the new device got rowid %d, not the deleted one's %d: the test needs the reuse", rowidB, rowidA)
	}
	if err := beat(a, now.Add(2*time.Second)); !errors.Is(err, agentlink.ErrSessionGone) {
		t.Errorf("heartbeat of the deleted device: err = %v, want ErrSessionGone", err)
	}
	var seen sql.NullInt64
	db.R.QueryRow(`SELECT last_seen FROM devices WHERE id = ?`, b.ID).Scan(&seen)
	if seen.Int64 == now.Add(2*time.Second).UnixMilli() {
		t.Errorf("the deleted device's heartbeat was stored on the device that reused its rowid")
	}
	if err := beat(b, now.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	var live string
	db.R.QueryRow(`SELECT last_seen FROM devices WHERE id = ?`, b.ID).Scan(&seen)
	if r := cloud.FindChannelReport(reportsOf(t, db, b.ID), "gpio-1"); r != nil {
		live = r.Live
	}
	if seen.Int64 != now.Add(3*time.Second).UnixMilli() || live != b.ID {
		t.Errorf("new device: last_seen %d, gpio-1 %q", seen.Int64, live)
	}
}

// TestHeartbeatAfterRowidsMoved checks that heartbeats are still stored
// when the rowids the writer remembered changed under it (as VACUUM by
// another process may do to tables without an INTEGER PRIMARY KEY).
func TestHeartbeatAfterRowidsMoved(t *testing.T) {
	ctx := context.Background()
	db, s, org := newAgentStore(t)
	now := time.Now().Truncate(time.Millisecond)
	d := connectDevice(t, db, s, org, func(string) string { return "s" }, now)
	id := d.ID
	for k := 1; k <= 4; k++ {
		at := now.Add(time.Duration(k) * time.Second)
		err := heartbeatAndWait(ctx, s, agentlink.HeartbeatIn{Device: d, Session: "s", At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
			IPAddress: "10.0.0.1", HasChannels: true, AppliedVersion: int64(k)})
		if err != nil {
			t.Fatalf("heartbeat %d: %v", k, err)
		}
		var seen, tel, applied int64
		db.R.QueryRow(`SELECT last_seen, telemetry_at, applied_version FROM devices JOIN serial_state ON device_id = id WHERE id = ?`, id).Scan(&seen, &tel, &applied)
		if seen != at.UnixMilli() || tel != at.UnixMilli() || applied != int64(k) {
			t.Errorf("heartbeat %d: last_seen %d, telemetry_at %d, applied %d; want %d, %d, %d", k, seen, tel, applied, at.UnixMilli(), at.UnixMilli(), k)
		}
		// Move the device row, then the serial state row, then both.
		moves := []string{`UPDATE devices SET rowid = rowid + 1000 WHERE id = ?`, `UPDATE serial_state SET rowid = rowid + 1000 WHERE device_id = ?`}
		for m, q := range moves {
			if k&(1<<m) == 0 {
				continue
			}
			if _, err := db.W.Exec(q, id); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestAppliedVersionFollowsHeartbeats: a heartbeat that leaves the applied
// configuration version where this writer last wrote it for the session
// does not rewrite the serial state row (the telemetry time lives in the
// device row), yet the stored version still follows the heartbeats when
// something else wrote it in between: a config_applied report, or another
// writer before a new session.
func TestAppliedVersionFollowsHeartbeats(t *testing.T) {
	ctx := context.Background()
	db, s, org := newAgentStore(t)
	now := time.Now().Truncate(time.Millisecond)
	d := connectDevice(t, db, s, org, func(string) string { return "s" }, now)
	// changes counts the rows the writer's connection (the only one of
	// db.W) changed so far.
	changes := func() (n int64) {
		if err := db.W.QueryRow(`SELECT total_changes()`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	// beat stores a heartbeat and returns the rows it changed.
	beat := func(k int, session string, applied int64) int64 {
		t.Helper()
		before := changes()
		at := now.Add(time.Duration(k) * time.Second)
		if err := heartbeatAndWait(ctx, s, agentlink.HeartbeatIn{Device: d, Session: session, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
			IPAddress: "10.0.0.1", HasChannels: true, AppliedVersion: applied}); err != nil {
			t.Fatalf("heartbeat %d: %v", k, err)
		}
		n := changes() - before
		var tel, got int64
		db.R.QueryRow(`SELECT telemetry_at, applied_version FROM devices JOIN serial_state ON device_id = id WHERE id = ?`, d.ID).Scan(&tel, &got)
		if tel != at.UnixMilli() || got != applied {
			t.Errorf("heartbeat %d: telemetry_at %d, applied %d; want %d, %d", k, tel, got, at.UnixMilli(), applied)
		}
		return n
	}
	if n := beat(1, "s", 3); n != 2 {
		t.Errorf("the session's first heartbeat changed %d rows, want 2 (device, serial state)", n)
	}
	if n := beat(2, "s", 3); n != 1 {
		t.Errorf("a heartbeat with the same applied version changed %d rows, want 1 (the device's)", n)
	}
	if _, err := s.ConfigApplied(ctx, agentlink.ConfigAppliedIn{Device: d, Session: "s", At: now, Version: 5, Error: "bad baud rate"}); err != nil {
		t.Fatal(err)
	}
	beat(3, "s", 3) // the agent still runs 3
	if n := beat(4, "s", 4); n != 2 {
		t.Errorf("a heartbeat with a new applied version changed %d rows, want 2", n)
	}
	// Another writer changes the row; the next session's first heartbeat
	// writes its version whatever the writer remembers.
	if _, err := db.W.Exec(`UPDATE serial_state SET applied_version = 9 WHERE device_id = ?`, d.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Connect(ctx, d, "s2", now, now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hello(ctx, agentlink.HelloIn{Device: d, Session: "s2", At: now, HeartbeatInterval: time.Second}); err != nil {
		t.Fatal(err)
	}
	beat(5, "s2", 4)
}

// heartbeatAndWait stores one heartbeat and waits for its commit.
func heartbeatAndWait(ctx context.Context, s *AgentStore, in agentlink.HeartbeatIn) error {
	done := make(chan error, 1)
	if err := s.Heartbeat(ctx, in, func(_ agentlink.HeartbeatOut, err error) { done <- err }); err != nil {
		return err
	}
	return <-done
}

// connectDevice registers an IG-500 device in org and connects it (connect
// and hello) with session at now.
func connectDevice(tb testing.TB, db *DB, s *AgentStore, org cloud.Org, session func(id string) string, now time.Time) agentlink.Device {
	ctx := context.Background()
	id := ids.New()
	sum := sha256.Sum256([]byte(id))
	if _, err := db.W.Exec(`INSERT INTO devices (id, org_id, name, serial_number, model, token_hash, created_at) VALUES (?, ?, 'g', ?, 'IG-500', ?, 0)`, id, org.ID, id, sum[:]); err != nil {
		tb.Fatal(err)
	}
	d := agentlink.Device{ID: id, OrgID: org.ID, Model: "IG-500"}
	if _, err := s.Connect(ctx, d, session(id), now, now.Add(time.Minute)); err != nil {
		tb.Fatal(err)
	}
	if _, err := s.Hello(ctx, agentlink.HelloIn{Device: d, Session: session(id), At: now, HeartbeatInterval: time.Second}); err != nil {
		tb.Fatal(err)
	}
	return d
}

func sessionOf(id string) string { return "s-" + id }

// TestHeartbeatStatementsReadEveryColumn checks that each heartbeat UPDATE
// reads exactly the values of a row as cols lists them: ?1 to ?<width>,
// each at least once, none past.
func TestHeartbeatStatementsReadEveryColumn(t *testing.T) {
	ref := regexp.MustCompile(`\?(\d+)`)
	for _, hk := range hbStmts {
		q := hk.sql
		if !strings.HasPrefix(q, "UPDATE") {
			t.Errorf("%s is not an UPDATE: %s", hk.name, q)
		}
		read := map[string]bool{}
		for _, m := range ref.FindAllStringSubmatch(q, -1) {
			read[m[1]] = true
		}
		for n := 1; n <= len(hk.cols); n++ {
			if !read[strconv.Itoa(n)] {
				t.Errorf("%s: ?%d (%s) is never read", hk.name, n, hk.cols[n-1])
			}
		}
		if len(read) != len(hk.cols) {
			t.Errorf("%s reads %d values of a row of %d columns", hk.name, len(read), len(hk.cols))
		}
		if strings.Count(q, "?") != len(read) {
			t.Errorf("%s has a parameter without a number: %s", hk.name, q)
		}
	}
}
