package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/bench/benchreport"
)

// readRecorded runs fn with the report's results file set and returns the
// rows it recorded.
func readRecorded(t *testing.T, fn func() error) []benchreport.Row {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rows.jsonl")
	t.Setenv(benchreport.EnvResults, path)
	t.Setenv(benchreport.EnvTarget, "bench-agentlink")
	if err := fn(); err != nil {
		t.Fatal(err)
	}
	rows, err := benchreport.ReadRows(path)
	if err != nil {
		t.Fatal(err)
	}
	return rows
}

// The guest's rows travel over its console and are recorded on the host
// as the guest measured them.
func TestGuestRowsRoundTrip(t *testing.T) {
	guest := readRecorded(t, func() error {
		return recordCapacity(capacity{agents: 20000, rss: 800 << 20, baseRSS: 18 << 20, connectTime: 87 * time.Second})
	})
	if len(guest) != 3 {
		t.Fatalf("recorded %d rows, want 3", len(guest))
	}
	var console strings.Builder
	console.WriteString("[    1.2] kernel noise\nFLEET-RUN command\n")
	for _, r := range guest {
		r.Bench = "" // the guest has no make target
		line, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		console.WriteString("  " + rowMarker + string(line) + "\r\n")
	}
	console.WriteString("FLEET-RESULT command PASS\n")
	rows, err := parseGuestRows(console.String())
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 3 {
		t.Fatalf("parsed %d rows, want 3", len(rows))
	}
	agents, rss, perConn := rows[0], rows[1], rows[2]
	if agents.Figure != figAgents || agents.Measured != 20000 || agents.Target == nil {
		t.Errorf("agents row: %+v", agents)
	}
	if res, err := agents.Evaluate(); err != nil || res != benchreport.Pass {
		t.Errorf("20,000 agents against the 20,000 target: %v %v", res, err)
	}
	if rss.Figure != figRSS || rss.Measured != 800 || !strings.Contains(rss.Notes, "40 KiB per connection over a 18 MiB base") {
		t.Errorf("RSS row: %+v", rss)
	}
	if res, err := perConn.Evaluate(); err != nil || res != benchreport.Miss || perConn.Figure != figPerConn || perConn.Unit != "KiB" {
		t.Errorf("40 KiB per connection against the 20 KiB target: %v %v (%+v)", res, err, perConn)
	}
}

// A guest run of 50,000 agents adds the whole relay's RSS against 1 GiB.
func TestGuestRowOf50000Agents(t *testing.T) {
	rows := readRecorded(t, func() error {
		return recordCapacity(capacity{agents: 50000, rss: 900 << 20, baseRSS: 20 << 20, connectTime: 4 * time.Minute})
	})
	if len(rows) != 4 || rows[3].Figure != figRSSGuest || rows[3].Measured != 900 {
		t.Fatalf("rows: %+v", rows)
	}
	if res, err := rows[3].Evaluate(); err != nil || res != benchreport.Pass {
		t.Errorf("900 MiB against 1 GiB: %v %v", res, err)
	}
	if res, err := rows[2].Evaluate(); err != nil || res != benchreport.Pass {
		t.Errorf("18 KiB per connection against 20 KiB: %v %v (%+v)", res, err, rows[2])
	}
}

func TestGuestRowsRejected(t *testing.T) {
	for name, console := range map[string]string{
		"none":      "FLEET-RUN command\nFLEET-RESULT command PASS\n",
		"malformed": rowMarker + "{\"area\":\n",
		"invalid":   rowMarker + `{"area":"agent link"}` + "\n",
	} {
		if _, err := parseGuestRows(console); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// A host whose RLIMIT_NOFILE caps the agents keeps its own capacity
// figures for information only, so the report carries one verdict for
// each target: the guest's.
func TestCappedHostRowsHaveNoTarget(t *testing.T) {
	f := figures{agents: 19936, rss: 806 << 20, baseRSS: 17 << 20, rssLoaded: 1114 << 20, rate: 20198, offered: 20200,
		p50: 16 * time.Millisecond, p99: 50 * time.Millisecond, stored: 600000, drain: 10 * time.Second,
		spooled: 12, spooledWant: 12, heartbeatEvery: time.Second, measuring: 30 * time.Second}
	for _, capped := range []bool{false, true} {
		f.capped = capped
		rows := readRecorded(t, func() error { return record(f) })
		names := map[string]*benchreport.Target{}
		for _, r := range rows {
			names[r.Figure] = r.Target
		}
		_, hasTarget := names[figAgents]
		if hasTarget == capped {
			t.Errorf("capped=%v: target row %q present=%v", capped, figAgents, hasTarget)
		}
		if capped {
			if tg, ok := names[figAgents+", this host"]; !ok || tg != nil {
				t.Errorf("capped: the host's own count must be an information row: %v", names)
			}
		} else if names[figAgents] == nil || names[figRSS] == nil {
			t.Errorf("uncapped: capacity rows need their targets: %v", names)
		}
		if names["heartbeats stored per second"] == nil {
			t.Errorf("capped=%v: the rate row keeps its target", capped)
		}
	}
}
