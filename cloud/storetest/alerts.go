package storetest

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
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

// testAlertStateTable walks the spec's state table cell by cell.
func testAlertStateTable(t *testing.T, open Opener) {
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
			e := newEnv(t, open)
			org := e.org("acme")
			d := e.device(org.ID, "IG-500")
			a := e.alert(d, alert.RuleHighCPU, tc.from)
			log := &alertLog{}
			e.Store.Observe(nil, log)
			svc := e.Store.Alerts()
			e.clock.Add(time.Minute)
			op := svc.Acknowledge
			if tc.op == "resolve" {
				op = svc.Resolve
			}
			got, err := op(e.ctx, org.ID, a.ID)
			if cloud.ErrorCode(err) != tc.wantCode && !(err == nil && tc.wantCode == "") {
				t.Fatalf("err = %v, want %q", err, tc.wantCode)
			}
			list, err2 := svc.ListAlerts(e.ctx, org.ID, cloud.AlertFilter{State: tc.want})
			if err2 != nil || len(list.Data) != 1 || list.Data[0].ID != a.ID {
				t.Fatalf("%s alerts: %+v, %v", tc.want, list.Data, err2)
			}
			stored := list.Data[0]
			if err == nil && (got.State != tc.want || got.ID != a.ID || got.Severity != resource.SeverityWarning || got.Message != a.Message || got.RuleID != a.RuleID) {
				t.Errorf("returned %+v", got)
			}
			now := e.clock.Now()
			switch {
			case tc.changed && tc.op == "ack":
				if stored.AcknowledgedAt == nil || !stored.AcknowledgedAt.Equal(now) || stored.ResolvedAt != nil {
					t.Errorf("acknowledgedAt %v resolvedAt %v", stored.AcknowledgedAt, stored.ResolvedAt)
				}
			case tc.changed && tc.op == "resolve":
				if stored.ResolvedAt == nil || !stored.ResolvedAt.Equal(now) {
					t.Errorf("resolvedAt %v, want %v", stored.ResolvedAt, now)
				}
				if !sameTime(stored.AcknowledgedAt, a.AcknowledgedAt) {
					t.Errorf("acknowledgedAt changed from %v to %v", a.AcknowledgedAt, stored.AcknowledgedAt)
				}
			default: // unchanged row
				if !sameTime(stored.AcknowledgedAt, a.AcknowledgedAt) || !sameTime(stored.ResolvedAt, a.ResolvedAt) {
					t.Errorf("times changed: ack %v->%v resolved %v->%v", a.AcknowledgedAt, stored.AcknowledgedAt, a.ResolvedAt, stored.ResolvedAt)
				}
			}
			evs, err := e.Store.Devices().Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Type: "alert.resolved"})
			if err != nil {
				t.Fatal(err)
			}
			wantEvents := 0
			if tc.from == resource.AlertResolved {
				wantEvents = 1 // the fixture's own resolve
			}
			if tc.changed && tc.op == "resolve" {
				wantEvents = 1
			}
			if len(evs.Data) != wantEvents {
				t.Errorf("%d alert.resolved events, want %d", len(evs.Data), wantEvents)
			} else if tc.changed && tc.op == "resolve" && (!evs.Data[0].CreatedAt.Equal(now) || !strings.Contains(string(evs.Data[0].Data), a.ID)) {
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

// testAlertConcurrentTransitions fires 50 concurrent acknowledge/resolve
// calls at one alert, through two handles on the database: it ends
// RESOLVED with one resolvedAt, each real change is heard once, and every
// call answers consistently.
func testAlertConcurrentTransitions(t *testing.T, open Opener) {
	e, e2, d := newTwoRelays(t, open)
	a := e.alert(d, alert.RuleHighTemp, resource.AlertActive)
	log := &alertLog{}
	e.Store.Observe(nil, log)
	e2.Store.Observe(nil, log)
	type result struct {
		op  string
		a   resource.Alert
		err error
	}
	results := make(chan result, 50)
	concurrently(50, func(i int) {
		svc := []*env{e, e2}[i%4/2].Store.Alerts()
		if i%2 == 0 {
			r, err := svc.Acknowledge(e.ctx, d.OrgID, a.ID)
			results <- result{"ack", r, err}
		} else {
			r, err := svc.Resolve(e.ctx, d.OrgID, a.ID)
			results <- result{"resolve", r, err}
		}
	})
	close(results)
	l, err := e.Store.Alerts().ListAlerts(e.ctx, d.OrgID, cloud.AlertFilter{State: resource.AlertResolved})
	if err != nil || len(l.Data) != 1 || l.Data[0].ResolvedAt == nil {
		t.Fatalf("resolved = %+v, %v", l.Data, err)
	}
	final := l.Data[0]
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
	resolved, acked := 0, 0
	for _, ev := range log.list() {
		switch ev {
		case "alert.resolved RESOLVED":
			resolved++
		case "alert.acknowledged ACKNOWLEDGED":
			acked++
		default:
			t.Errorf("observer heard %q", ev)
		}
	}
	if resolved != 1 || acked > 1 {
		t.Errorf("observer heard %d resolves and %d acknowledges, want 1 and at most 1", resolved, acked)
	}
	if (acked == 1) != (final.AcknowledgedAt != nil) {
		t.Errorf("acknowledgedAt %v but %d acknowledge events", final.AcknowledgedAt, acked)
	}
	evs, _ := e.Store.Devices().Events(e.ctx, d.OrgID, d.ID, cloud.EventFilter{Type: "alert.resolved"})
	if len(evs.Data) != 1 {
		t.Errorf("%d alert.resolved events after 50 concurrent calls, want 1", len(evs.Data))
	}
}

func testAlertFilters(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d1 := e.device(org.ID, "IG-500")
	d2 := e.device(org.ID, "IG-100")
	e.alert(d1, alert.RuleHighCPU, resource.AlertActive)        // WARNING
	e.alert(d1, alert.RuleDiskFull, resource.AlertActive)       // ERROR
	e.alert(d2, alert.RuleDiskFull, resource.AlertAcknowledged) // ERROR
	e.alert(d2, alert.RuleHighCPU, resource.AlertResolved)
	e.alert(d2, alert.RuleHighCPU, resource.AlertActive)
	svc := e.Store.Alerts()
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
		l, err := svc.ListAlerts(e.ctx, org.ID, tc.f)
		if err != nil || len(l.Data) != tc.want || l.Data == nil {
			t.Errorf("filter %+v: %d alerts, %v; want %d", tc.f, len(l.Data), err, tc.want)
		}
		for _, a := range l.Data {
			if string(a.Payload) != "{}" || a.RuleID == "" || a.DeviceID == "" {
				t.Errorf("alert %+v", a)
			}
		}
	}
}

// testOneOpenAlert: at most one open (ACTIVE or ACKNOWLEDGED) alert per
// device and rule, also when two relays open it at the same moment; a new
// one may open once the last is resolved.
func testOneOpenAlert(t *testing.T, open Opener) {
	e, e2, d := newTwoRelays(t, open)
	r := e.rule(d.OrgID, alert.RuleDeviceOffline)
	opening := alert.Opening{OrgID: d.OrgID, DeviceID: d.ID, Rule: r, Message: "offline", At: e.clock.Now(), WithEvent: true}
	var mu sync.Mutex
	opened := 0
	concurrently(20, func(i int) {
		_, ok, err := []*env{e, e2}[i%2].Engine.OpenAlert(e.ctx, opening)
		if err != nil {
			t.Errorf("open: %v", err)
		}
		if ok {
			mu.Lock()
			opened++
			mu.Unlock()
		}
	})
	if opened != 1 {
		t.Fatalf("%d of 20 concurrent openings opened an alert, want 1", opened)
	}
	evs, _ := e.Store.Devices().Events(e.ctx, d.OrgID, d.ID, cloud.EventFilter{Type: "alert.device_offline"})
	if len(evs.Data) != 1 {
		t.Errorf("%d alert.device_offline events, want 1", len(evs.Data))
	}
	l, _ := e.Store.Alerts().ListAlerts(e.ctx, d.OrgID, cloud.AlertFilter{State: resource.AlertActive})
	if len(l.Data) != 1 {
		t.Fatalf("%d ACTIVE alerts", len(l.Data))
	}
	if _, err := e.Store.Alerts().Acknowledge(e.ctx, d.OrgID, l.Data[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.Engine.OpenAlert(e.ctx, opening); err != nil || ok {
		t.Errorf("opening beside an ACKNOWLEDGED alert: opened %v, %v", ok, err)
	}
	if _, err := e.Store.Alerts().Resolve(e.ctx, d.OrgID, l.Data[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, ok, err := e.Engine.OpenAlert(e.ctx, opening); err != nil || !ok {
		t.Errorf("opening after the resolve: opened %v, %v", ok, err)
	}
}

// testAlertEngineStore: the engine's reads and its resolve.
func testAlertEngineStore(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	cpu := e.rule(org.ID, alert.RuleHighCPU)
	if c := cpu.Cond; c.Source != "metric.cpuPct" || c.Op != ">=" || c.Value != 90 || c.Clear != 80 || c.For != 10*time.Minute || cpu.Severity != resource.SeverityWarning {
		t.Errorf("high_cpu = %+v", cpu)
	}
	for i := 0; i < 5; i++ {
		e.records(d, metricRecord(t0.Add(time.Duration(i)*time.Minute), float64(90+i)))
	}
	ms, err := e.Engine.History(e.ctx, org.ID, d.ID, cpu.Cond, t0, t0.Add(3*time.Minute), 3)
	if err != nil || len(ms) != 3 || ms[0].Value != 91 || ms[2].Value != 93 {
		t.Errorf("History = %+v, %v", ms, err)
	}
	if st, err := e.Engine.DeviceAlerts(e.ctx, org.ID, d.ID); err != nil || len(st.Rules) != 0 {
		t.Errorf("DeviceAlerts = %+v, %v", st, err)
	}
	if id, err := e.Engine.OpenAlertID(e.ctx, d.ID, cpu.ID); err != nil || id != "" {
		t.Errorf("OpenAlertID before any = %q, %v", id, err)
	}
	a, opened, err := e.Engine.OpenAlert(e.ctx, alert.Opening{OrgID: org.ID, DeviceID: d.ID, Rule: cpu, Message: "CPU at 93 %",
		Payload: []byte(`{"value":93}`), At: t0.Add(3 * time.Minute), WithEvent: true})
	if err != nil || !opened || a.State != resource.AlertActive || !a.CreatedAt.Equal(t0.Add(3*time.Minute)) {
		t.Fatalf("open = %+v %v %v", a, opened, err)
	}
	if id, _ := e.Engine.OpenAlertID(e.ctx, d.ID, cpu.ID); id != a.ID {
		t.Errorf("OpenAlertID = %q, want %q", id, a.ID)
	}
	st, err := e.Engine.DeviceAlerts(e.ctx, org.ID, d.ID)
	if err != nil || st.Rules[cpu.ID].OpenID != a.ID || !st.Rules[cpu.ID].LastResolved.IsZero() {
		t.Errorf("DeviceAlerts with an open alert = %+v, %v", st, err)
	}
	evs, _ := e.Store.Devices().Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Type: "alert.high_cpu"})
	if len(evs.Data) != 1 || !strings.Contains(string(evs.Data[0].Data), a.ID) || !strings.Contains(string(evs.Data[0].Data), `"value":93`) {
		t.Errorf("alert event = %+v", evs.Data)
	}
	at := t0.Add(10 * time.Minute)
	res, ok, err := e.Engine.ResolveAlert(e.ctx, org.ID, d.ID, cpu, "CPU back to normal", at)
	if err != nil || !ok || res.ID != a.ID || res.State != resource.AlertResolved || res.ResolvedAt == nil || !res.ResolvedAt.Equal(at) {
		t.Fatalf("resolve = %+v %v %v", res, ok, err)
	}
	if _, ok, err := e.Engine.ResolveAlert(e.ctx, org.ID, d.ID, cpu, "again", at); err != nil || ok {
		t.Errorf("second resolve: %v %v", ok, err)
	}
	st, _ = e.Engine.DeviceAlerts(e.ctx, org.ID, d.ID)
	if st.Rules[cpu.ID].OpenID != "" || !st.Rules[cpu.ID].LastResolved.Equal(at) {
		t.Errorf("rule state after resolve = %+v", st.Rules[cpu.ID])
	}
	// Another organization's view of the device has no rule states.
	other := e.org("other")
	if st, _ := e.Engine.DeviceAlerts(e.ctx, other.ID, d.ID); len(st.Rules) != 0 {
		t.Errorf("DeviceAlerts of another organization: %+v", st)
	}
	evs, _ = e.Store.Devices().Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Type: "alert.resolved"})
	if len(evs.Data) != 1 || evs.Data[0].Message != "CPU back to normal" || !evs.Data[0].CreatedAt.Equal(at) {
		t.Errorf("resolved event = %+v", evs.Data)
	}
}

// testOfflineDevices: a device silent for three heartbeat intervals is
// found, from what is stored, by any handle, and alerted once per silence
// (not after a device_offline alert was created since its last
// heartbeat).
func testOfflineDevices(t *testing.T, open Opener) {
	e, e2, d := newTwoRelays(t, open)
	quiet := e.device(d.OrgID, "IG-500")
	session := e.online(d, 10*time.Second)
	e.online(quiet, 10*time.Second)
	dev := e.auth(d)
	if _, ok, err := e.Agent.Disconnect(e.ctx, dev, session, e.clock.Now(), "connection closed"); err != nil || !ok {
		t.Fatalf("disconnect: %v %v", ok, err)
	}
	if off, err := e2.Engine.OfflineDevices(e.ctx, e.clock.Now().Add(29*time.Second), "", "", 100); err != nil || len(off) != 0 {
		t.Errorf("before three intervals: %+v, %v", off, err)
	}
	now := e.clock.Now().Add(30 * time.Second)
	off, err := e2.Engine.OfflineDevices(e.ctx, now, "", "", 100)
	if err != nil || len(off) != 1 || off[0].Device.ID != d.ID || off[0].Device.OrgID != d.OrgID || off[0].Heartbeat != 10*time.Second || !off[0].LastSeen.Equal(t0) {
		t.Fatalf("OfflineDevices = %+v, %v", off, err)
	}
	if off, _ := e2.Engine.OfflineDevices(e.ctx, now, quiet.ID, "", 100); len(off) != 0 {
		t.Errorf("an ONLINE device is not offline: %+v", off)
	}
	r := e.rule(d.OrgID, alert.RuleDeviceOffline)
	// Opened only for the outage read: not for a device ONLINE, not after
	// a heartbeat since (a device back between the read and the opening).
	for _, o := range []alert.Opening{
		{OrgID: quiet.OrgID, DeviceID: quiet.ID, Rule: r, Message: "offline", At: now, WithEvent: true, LastSeen: t0},
		{OrgID: d.OrgID, DeviceID: d.ID, Rule: r, Message: "offline", At: now, WithEvent: true, LastSeen: t0.Add(-time.Second)},
	} {
		if _, ok, err := e2.Engine.OpenAlert(e.ctx, o); err != nil || ok {
			t.Errorf("device_offline of %s, last seen %s, opened: %v %v", o.DeviceID, o.LastSeen, ok, err)
		}
	}
	if _, ok, err := e.Engine.OpenAlert(e.ctx, alert.Opening{OrgID: d.OrgID, DeviceID: d.ID, Rule: r, Message: "offline", At: now, WithEvent: true, LastSeen: off[0].LastSeen}); err != nil || !ok {
		t.Fatal(ok, err)
	}
	// Still silent: still listed (whether to alert is the engine's), but
	// never alerted twice for one outage.
	if off, _ := e2.Engine.OfflineDevices(e.ctx, now.Add(time.Hour), "", "", 100); len(off) != 1 {
		t.Errorf("after its device_offline alert: %+v", off)
	}
	if _, ok, err := e2.Engine.OpenAlert(e.ctx, alert.Opening{OrgID: d.OrgID, DeviceID: d.ID, Rule: r, Message: "offline", At: now.Add(time.Hour), WithEvent: true, LastSeen: off[0].LastSeen}); err != nil || ok {
		t.Errorf("a second device_offline alert for one outage: %v %v", ok, err)
	}
}
