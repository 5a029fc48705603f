package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/cloud/storetest"
)

// TestHeartbeatsUpdateInPlace: a heartbeat rewrites a device's last_seen,
// serial telemetry time (migration 0025) and, when a channel changed, its
// channels' reported states (migration 0027), all in its device row. None
// of these may be in an index (nor in a partial index's predicate), and the
// table keeps room on its pages, so that PostgreSQL updates the rows in
// place (HOT: no new index entries, no index bloat, pruning instead of
// vacuum). A cluster storing 10,000 heartbeats a second depends on it;
// pg_stat_user_tables counts the updates and those that were HOT. A
// device whose channel reports 50 points (their states kept in its row)
// is updated in place too.
func TestHeartbeatsUpdateInPlace(t *testing.T) {
	for _, points := range []int{0, 50} {
		t.Run(fmt.Sprintf("points=%d", points), func(t *testing.T) { testHeartbeatsUpdateInPlace(t, points) })
	}
}

func testHeartbeatsUpdateInPlace(t *testing.T, points int) {
	ctx := context.Background()
	url := migratedDB(t)
	st := openStores(t, url, time.Now, "relay-1")
	defer st.Close()
	stats, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer stats.Close(ctx)
	org, err := st.Store.CreateOrg(ctx, "Hot")
	if err != nil {
		t.Fatal(err)
	}
	before := updates(t, stats)
	const devices, beats = 20, 10
	storetest.HeartbeatsWithPoints(t, st, org.ID, devices, beats, points)
	// Every heartbeat updates the device's row, and the serial state's row
	// only when the applied version moves (never here: at most one update
	// per device); no heartbeat writes serial_channels (configurations
	// only since migration 0027). Statistics reach the view within
	// about ten seconds of a backend going idle. Connecting changes a
	// device's status (indexed) twice: those updates may not be HOT.
	want := int64(devices * (beats - 1))
	var got map[string][2]int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got = updates(t, stats)
		if all(got, before, want) || time.Now().After(deadline) {
			break
		}
	}
	if upd := got["serial_state"][0] - before["serial_state"][0]; upd > devices {
		t.Errorf("serial_state: %d updates counted, want at most %d: heartbeats that leave the applied version rewrite no serial state row", upd, devices)
	}
	if upd := got["serial_channels"][0] - before["serial_channels"][0]; upd != 0 {
		t.Errorf("serial_channels: %d updates counted, want none: the channels' reports are in the device row", upd)
	}
	for _, table := range heartbeatTables {
		upd, hot := got[table][0]-before[table][0], got[table][1]-before[table][1]
		if upd < want {
			t.Fatalf("%s: %d updates counted, want at least %d", table, upd, want)
		}
		if cold := upd - hot; cold > 2*devices+want/10 {
			t.Errorf("%s: %d of %d updates were not HOT (in place), want at most %d (the connects' and a tenth of the heartbeats')", table, cold, upd, 2*devices+want/10)
		}
	}
}

// updates reads each heartbeat table's updates and HOT updates.
func updates(t *testing.T, stats *pgx.Conn) map[string][2]int64 {
	t.Helper()
	rows, err := stats.Query(context.Background(), `SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables
		WHERE relname IN ('devices', 'serial_state', 'serial_channels')`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string][2]int64{}
	for rows.Next() {
		var name string
		var upd, hot int64
		if err := rows.Scan(&name, &upd, &hot); err != nil {
			t.Fatal(err)
		}
		m[name] = [2]int64{upd, hot}
	}
	return m
}

// heartbeatTables are the tables every heartbeat here rewrites a row of.
var heartbeatTables = []string{"devices"}

func all(got, before map[string][2]int64, want int64) bool {
	for _, table := range heartbeatTables {
		if got[table][0]-before[table][0] < want {
			return false
		}
	}
	return true
}
