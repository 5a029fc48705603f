package storetest

import (
	"testing"
	"time"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// testRetention: a sweep removes every sample and event older than the
// retention and nothing younger, across many days (stores that partition
// by day drop whole partitions and trim the one at the boundary).
func testRetention(t *testing.T, open Opener) {
	e := newEnv(t, open)
	now := time.Date(2026, 6, 1, 13, 7, 0, 0, time.UTC)
	e.clock.Set(now)
	o := e.org("acme")
	d := e.device(o.ID, "IG-500")
	keep := 30 * 24 * time.Hour
	cut := now.Add(-keep)
	var items []protocol.Record
	for i := 0; i < 12000; i++ { // a sample every 5 minutes over 41 days
		at := now.Add(-time.Duration(i) * 5 * time.Minute)
		items = append(items, metricRecord(at, 1))
		if i%2 == 0 {
			items = append(items, eventRecord("heartbeat", resource.SeverityInfo, at))
		}
	}
	for len(items) > 0 {
		n := min(len(items), 2000)
		e.records(d, items[:n]...)
		items = items[n:]
	}
	m, ev, err := e.Store.SweepRetention(e.ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	if m <= 0 || ev <= 0 {
		t.Errorf("sweep reports %d metrics and %d events deleted", m, ev)
	}
	// Samples every 5 minutes: 30 days hold 8640 intervals; ages 0..8640*5min are kept.
	if got := e.metricsOf(d, cut.Add(-48*time.Hour), cut.Add(-time.Millisecond)); len(got) != 0 {
		t.Errorf("%d samples older than the retention survived (oldest %v)", len(got), got[0].CapturedAt)
	}
	if got := e.metricsOf(d, cut, cut.Add(time.Hour)); len(got) != 13 {
		t.Errorf("%d samples in the first kept hour, want 13", len(got))
	}
	total := 0
	for from := cut; from.Before(now.Add(time.Minute)); from = from.Add(24 * time.Hour) {
		total += len(e.metricsOf(d, from, from.Add(24*time.Hour-time.Millisecond)))
	}
	if total != 8641 {
		t.Errorf("%d samples kept, want 8641", total)
	}
	evs := e.eventsOf(d, "heartbeat")
	if len(evs) != 4321 || evs[len(evs)-1].CreatedAt.Before(cut) {
		t.Errorf("%d events kept (oldest %v), want 4321 no older than %v", len(evs), evs[len(evs)-1].CreatedAt, cut)
	}
	if m, ev, err := e.Store.SweepRetention(e.ctx, keep); m != 0 || ev != 0 || err != nil {
		t.Errorf("second sweep deleted %d, %d (%v)", m, ev, err)
	}
	if _, _, err := e.Store.SweepRetention(e.ctx, 0); err == nil {
		t.Error("a retention of 0 is accepted")
	}
	// Data arriving later for old times (an agent's spool) is swept too.
	e.records(d, metricRecord(cut.Add(-time.Hour), 1), eventRecord("late", resource.SeverityInfo, cut.Add(-time.Hour)))
	if m, ev, _ := e.Store.SweepRetention(e.ctx, keep); m != 1 || ev != 1 {
		t.Errorf("late old records: swept %d metrics and %d events, want 1 and 1", m, ev)
	}
}

// testDataVersion: when a store offers a data version, a commit by any
// handle makes it grow, and it holds still while nothing is committed.
func testDataVersion(t *testing.T, open Opener) {
	e := newEnv(t, open)
	v := e.Store.Versioner()
	if v == nil {
		// No data version: callers do not cache, and every request reads
		// its key row (testKeys checks revocation through another handle).
		return
	}
	org := e.org("acme")
	read := func() uint64 {
		t.Helper()
		n, err := v.DataVersion(e.ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	// It holds still while nothing is committed. (A PostgreSQL server's
	// own background work, autovacuum's analyze, may commit in between:
	// a few tries.)
	a := read()
	for try := 0; ; try++ {
		b := read()
		if b == a {
			break
		}
		if try == 20 {
			t.Fatalf("version moved at each of 20 reads without a commit of ours (last %d to %d)", a, b)
		}
		a = b
		time.Sleep(10 * time.Millisecond)
	}
	e.device(org.ID, "IG-500")
	b := read()
	if b <= a {
		t.Errorf("version %d after this handle's commit, %d before: want it to grow", b, a)
	}
	e2 := e.reopen()
	if _, err := e2.Store.RotateOrgSecret(e.ctx, org.ID, 0); err != nil {
		t.Fatal(err)
	}
	if c := read(); c <= b {
		t.Errorf("version %d after another handle's commit, %d before: want it to grow", c, b)
	}
}
