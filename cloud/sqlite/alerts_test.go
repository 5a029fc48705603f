package sqlite_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

// alertLog records AlertChanged calls.
type alertLog struct {
	mu     sync.Mutex
	events []string
}

func (l *alertLog) AlertChanged(_ context.Context, event string, a resource.Alert) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.events = append(l.events, event+" "+string(a.State))
}

func (l *alertLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...)
}

// TestAlertStateTable walks the spec's state table cell by cell.
func TestAlertStateTable(t *testing.T) {
	ctx := context.Background()
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name     string
		from     resource.AlertState
		op       string // ack or resolve
		wantCode string
		want     resource.AlertState
		changed  bool // acknowledgedAt/resolvedAt set now, observer told
	}{
		{"ACTIVE acknowledge", resource.AlertActive, "ack", "", resource.AlertAcknowledged, true},
		{"ACKNOWLEDGED acknowledge", resource.AlertAcknowledged, "ack", "", resource.AlertAcknowledged, false},
		{"RESOLVED acknowledge", resource.AlertResolved, "ack", cloud.ERESOLVED, resource.AlertResolved, false},
		{"ACTIVE resolve", resource.AlertActive, "resolve", "", resource.AlertResolved, true},
		{"ACKNOWLEDGED resolve", resource.AlertAcknowledged, "resolve", "", resource.AlertResolved, true},
		{"RESOLVED resolve", resource.AlertResolved, "resolve", "", resource.AlertResolved, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db := MustOpen(t)
			clock := &fakeClock{t: t0}
			db.Now = clock.Now
			org := MustOrg(t, db, "acme")
			d := MustDevice(t, db, org.ID, "IG-500")
			a, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: "high_cpu", Message: "CPU over 90 %", State: tc.from})
			if err != nil {
				t.Fatal(err)
			}
			before := a
			log := &alertLog{}
			svc := sqlite.NewAlertService(db)
			svc.Observer = log
			clock.Add(time.Minute)
			op := svc.Acknowledge
			if tc.op == "resolve" {
				op = svc.Resolve
			}
			got, err := op(ctx, org.ID, a.ID)
			if cloud.ErrorCode(err) != tc.wantCode && !(err == nil && tc.wantCode == "") {
				t.Fatalf("err = %v, want %q", err, tc.wantCode)
			}
			stored, err2 := svc.Alert(ctx, org.ID, a.ID)
			if err2 != nil {
				t.Fatal(err2)
			}
			if stored.State != tc.want {
				t.Errorf("stored state %s, want %s", stored.State, tc.want)
			}
			if err == nil && (got.State != tc.want || got.ID != a.ID || got.Severity != resource.SeverityWarning || got.Message != "CPU over 90 %") {
				t.Errorf("returned %+v", got)
			}
			now := resource.T(clock.Now())
			switch {
			case tc.changed && tc.op == "ack":
				if stored.AcknowledgedAt == nil || !stored.AcknowledgedAt.Equal(now.Time) || stored.ResolvedAt != nil {
					t.Errorf("acknowledgedAt %v resolvedAt %v", stored.AcknowledgedAt, stored.ResolvedAt)
				}
			case tc.changed && tc.op == "resolve":
				if stored.ResolvedAt == nil || !stored.ResolvedAt.Equal(now.Time) {
					t.Errorf("resolvedAt %v, want %v", stored.ResolvedAt, now)
				}
				if !sameTime(stored.AcknowledgedAt, before.AcknowledgedAt) {
					t.Errorf("acknowledgedAt changed from %v to %v", before.AcknowledgedAt, stored.AcknowledgedAt)
				}
			default: // unchanged row
				if !sameTime(stored.AcknowledgedAt, before.AcknowledgedAt) || !sameTime(stored.ResolvedAt, before.ResolvedAt) {
					t.Errorf("times changed: ack %v->%v resolved %v->%v", before.AcknowledgedAt, stored.AcknowledgedAt, before.ResolvedAt, stored.ResolvedAt)
				}
			}
			evs, err := sqlite.NewDeviceService(db).Events(ctx, org.ID, d.ID, cloud.EventFilter{Type: "alert.resolved"})
			if err != nil {
				t.Fatal(err)
			}
			wantEvents := 0
			if tc.changed && tc.op == "resolve" {
				wantEvents = 1
			}
			if len(evs.Data) != wantEvents {
				t.Errorf("%d alert.resolved events, want %d", len(evs.Data), wantEvents)
			} else if wantEvents == 1 && (!evs.Data[0].CreatedAt.Equal(now.Time) || !strings.Contains(string(evs.Data[0].Data), a.ID)) {
				t.Errorf("event %+v", evs.Data[0])
			}
			events := log.list()
			if tc.changed != (len(events) == 1) || len(events) > 1 {
				t.Errorf("observer heard %v, changed=%v", events, tc.changed)
			}
			if tc.changed {
				want := map[string]string{"ack": "alert.acknowledged ACKNOWLEDGED", "resolve": "alert.resolved RESOLVED"}[tc.op]
				if events[0] != want {
					t.Errorf("observer heard %q, want %q", events[0], want)
				}
			}
		})
	}
}

func sameTime(a, b *resource.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b.Time)
}

func TestAlertOtherOrgIsNotFound(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	d := MustDevice(t, db, org.ID, "IG-500")
	a, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: "vpn_down"})
	if err != nil {
		t.Fatal(err)
	}
	svc := sqlite.NewAlertService(db)
	for name, op := range map[string]func(context.Context, string, string) (resource.Alert, error){"ack": svc.Acknowledge, "resolve": svc.Resolve} {
		if _, err := op(ctx, other.ID, a.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("%s from another org: err = %v, want not_found", name, err)
		}
		if _, err := op(ctx, org.ID, "nosuchalert"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("%s unknown: err = %v", name, err)
		}
	}
	if got, _ := svc.Alert(ctx, org.ID, a.ID); got.State != resource.AlertActive {
		t.Errorf("another org's call changed the alert to %s", got.State)
	}
	l, err := svc.ListAlerts(ctx, other.ID, cloud.AlertFilter{State: resource.AlertActive})
	if err != nil || len(l.Data) != 0 {
		t.Errorf("other org lists %d alerts, %v", len(l.Data), err)
	}
	// At most one open alert per device and rule.
	if _, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: "vpn_down"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("second open alert: err = %v, want conflict", err)
	}
}

// TestAlertConcurrentTransitions fires 50 concurrent acknowledge/resolve
// calls at one alert: it ends RESOLVED with one resolvedAt, the observer
// hears each real change once, and every call answers consistently.
func TestAlertConcurrentTransitions(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	d := MustDevice(t, db, org.ID, "IG-500")
	a, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: d.ID, RuleName: "high_temp"})
	if err != nil {
		t.Fatal(err)
	}
	log := &alertLog{}
	svc := sqlite.NewAlertService(db)
	svc.Observer = log
	var wg sync.WaitGroup
	type result struct {
		op  string
		a   resource.Alert
		err error
	}
	results := make(chan result, 50)
	start := make(chan struct{})
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				r, err := svc.Acknowledge(ctx, org.ID, a.ID)
				results <- result{"ack", r, err}
			} else {
				r, err := svc.Resolve(ctx, org.ID, a.ID)
				results <- result{"resolve", r, err}
			}
		}(i)
	}
	close(start)
	wg.Wait()
	close(results)
	final, err := svc.Alert(ctx, org.ID, a.ID)
	if err != nil {
		t.Fatal(err)
	}
	if final.State != resource.AlertResolved || final.ResolvedAt == nil {
		t.Fatalf("final = %+v", final)
	}
	for r := range results {
		switch {
		case r.op == "resolve" && (r.err != nil || r.a.State != resource.AlertResolved || !r.a.ResolvedAt.Equal(final.ResolvedAt.Time)):
			t.Errorf("resolve answered %+v, %v", r.a, r.err)
		case r.op == "ack" && r.err != nil && cloud.ErrorCode(r.err) != cloud.ERESOLVED:
			t.Errorf("acknowledge failed with %v", r.err)
		case r.op == "ack" && r.err == nil && r.a.State != resource.AlertAcknowledged:
			t.Errorf("acknowledge answered state %s without error", r.a.State)
		}
	}
	ev := log.list()
	resolved, acked := 0, 0
	for _, e := range ev {
		switch e {
		case "alert.resolved RESOLVED":
			resolved++
		case "alert.acknowledged ACKNOWLEDGED":
			acked++
		default:
			t.Errorf("observer heard %q", e)
		}
	}
	if resolved != 1 || acked > 1 {
		t.Errorf("observer heard %d resolves and %d acknowledges, want 1 and at most 1", resolved, acked)
	}
	if (acked == 1) != (final.AcknowledgedAt != nil) {
		t.Errorf("acknowledgedAt %v but %d acknowledge events", final.AcknowledgedAt, acked)
	}
	evs, _ := sqlite.NewDeviceService(db).Events(ctx, org.ID, d.ID, cloud.EventFilter{Type: "alert.resolved"})
	if len(evs.Data) != 1 {
		t.Errorf("%d alert.resolved events after 50 concurrent calls, want 1", len(evs.Data))
	}
}

func TestAlertFilters(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	d1 := MustDevice(t, db, org.ID, "IG-500")
	d2 := MustDevice(t, db, org.ID, "IG-100")
	mk := func(dev string, rule string, st resource.AlertState) resource.Alert {
		a, err := db.InsertAlert(ctx, sqlite.NewAlert{DeviceID: dev, RuleName: rule, State: st})
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	mk(d1.ID, "high_cpu", resource.AlertActive)        // WARNING
	mk(d1.ID, "disk_full", resource.AlertActive)       // ERROR
	mk(d2.ID, "disk_full", resource.AlertAcknowledged) // ERROR
	mk(d2.ID, "high_cpu", resource.AlertResolved)
	mk(d2.ID, "high_cpu", resource.AlertActive)
	svc := sqlite.NewAlertService(db)
	for _, tc := range []struct {
		f    cloud.AlertFilter
		want int
	}{
		{cloud.AlertFilter{}, 3}, // state defaults to ACTIVE
		{cloud.AlertFilter{State: resource.AlertActive}, 3},
		{cloud.AlertFilter{State: resource.AlertAcknowledged}, 1},
		{cloud.AlertFilter{State: resource.AlertResolved}, 1},
		{cloud.AlertFilter{State: resource.AlertActive, Severity: resource.SeverityError}, 1},
		{cloud.AlertFilter{State: resource.AlertActive, DeviceID: d2.ID}, 1},
		{cloud.AlertFilter{State: resource.AlertActive, DeviceID: d1.ID, Severity: resource.SeverityWarning}, 1},
		{cloud.AlertFilter{State: resource.AlertActive, DeviceID: "nosuchdevice"}, 0},
	} {
		l, err := svc.ListAlerts(ctx, org.ID, tc.f)
		if err != nil || len(l.Data) != tc.want {
			t.Errorf("filter %+v: %d alerts, %v; want %d", tc.f, len(l.Data), err, tc.want)
		}
		for _, a := range l.Data {
			if string(a.Payload) != "{}" || a.RuleID == "" {
				t.Errorf("alert %+v", a)
			}
		}
	}
}
