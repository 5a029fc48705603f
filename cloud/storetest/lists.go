package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

func testDeviceReadPaths(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	other := e.org("other")
	svc := e.Store.Devices()
	d := e.device(org.ID, "IG-500")
	foreign := e.device(other.ID, "IG-500")

	got, err := svc.Device(e.ctx, org.ID, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.ID != d.ID || got.Status != resource.StatusProvisioning || got.Model != "IG-500" || got.LastSeen != nil || got.Notes != nil || got.Name != "dev" {
		t.Errorf("device = %+v", got)
	}
	if _, err := svc.Device(e.ctx, org.ID, foreign.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("other org's device: err = %v, want not_found", err)
	}

	// Metrics: ascending; the newest limit when more fall in the window.
	now := t0.Add(time.Hour)
	var items []protocol.Record
	for i := 0; i < 10; i++ {
		items = append(items, metricRecord(now.Add(time.Duration(i-10)*time.Minute), float64(i)))
	}
	if out := e.records(d, items...); len(out.Metrics) != 10 {
		t.Fatalf("stored %d samples, want 10", len(out.Metrics))
	}
	m, err := svc.Metrics(e.ctx, org.ID, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now, Limit: 4})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Data) != 4 || m.Data[0].CPUPct != 6 || m.Data[3].CPUPct != 9 || m.Data[0].MemPct != 1 || m.Data[0].LoadAvg1 != 0.5 {
		t.Errorf("metrics = %+v", m.Data)
	}
	if !m.Window.From.Equal(m.Data[0].CapturedAt.Time) || !m.Window.To.Equal(now) {
		t.Errorf("window = %+v", m.Window)
	}
	m, err = svc.Metrics(e.ctx, org.ID, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now, Limit: 200})
	if err != nil || len(m.Data) != 10 || !m.Window.From.Equal(now.Add(-time.Hour)) {
		t.Errorf("untruncated metrics: %d samples, window %+v, err %v", len(m.Data), m.Window, err)
	}
	for i := 1; i < len(m.Data); i++ {
		if !m.Data[i].CapturedAt.After(m.Data[i-1].CapturedAt.Time) {
			t.Errorf("metrics not ascending at %d", i)
		}
	}
	m, err = svc.Metrics(e.ctx, org.ID, d.ID, cloud.MetricsQuery{From: now.Add(-5 * time.Minute), To: now.Add(-3 * time.Minute)})
	if err != nil || len(m.Data) != 3 || m.Data[0].CPUPct != 5 || m.Data[2].CPUPct != 7 {
		t.Errorf("window bounds are inclusive: %+v, %v", m.Data, err)
	}
	if _, err := svc.Metrics(e.ctx, org.ID, d.ID, cloud.MetricsQuery{From: now, To: now.Add(-time.Hour)}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("from after to: err = %v", err)
	}
	if _, err := svc.Metrics(e.ctx, other.ID, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("metrics of another org's device: err = %v", err)
	}

	// Events keep their data; a filter with no match is an empty list.
	rec := eventRecord("vpn.down", resource.SeverityError, now)
	rec.Event.Data = json.RawMessage(`{"interfaceName":"wg0","endpoint":"1.2.3.4:51820","peerCount":0}`)
	stored := e.records(d, rec)
	evs, err := svc.Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Type: "vpn.down"})
	if err != nil || len(evs.Data) != 1 || evs.Data[0].ID != rec.Event.ID || evs.Pagination.HasMore || evs.Pagination.NextCursor != nil || len(stored.Events) != 1 {
		t.Fatalf("events = %+v, %v", evs, err)
	}
	var data map[string]any
	if err := json.Unmarshal(evs.Data[0].Data, &data); err != nil || data["interfaceName"] != "wg0" || data["peerCount"] != 0.0 ||
		evs.Data[0].Severity != resource.SeverityError || !evs.Data[0].CreatedAt.Equal(now) {
		t.Errorf("event = %+v (%s)", evs.Data[0], evs.Data[0].Data)
	}
	if l, err := svc.Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Type: "usb.attached"}); err != nil || len(l.Data) != 0 || l.Data == nil {
		t.Errorf("type filter with no match = %+v, %v", l, err)
	}
	if _, err := svc.Events(e.ctx, other.ID, d.ID, cloud.EventFilter{}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("events of another org's device: err = %v", err)
	}
}

func testDevicePaginationUnderInserts(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Tick = true
	org := e.org("acme")
	other := e.org("other")
	var want []string
	for i := 0; i < 157; i++ {
		want = append(want, e.device(org.ID, "IG-500").ID)
		e.device(other.ID, "IG-100")
	}
	svc := e.Store.Devices()
	stop := WriteLoop(t, func(i int) error {
		_, _, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: org.ID, Name: "new", SerialNumber: fmt.Sprintf("N%05d", i), Model: "IG-100"})
		return err
	})
	var listed []resource.Device
	got := walk(t, 10, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 10, Cursor: cursor}})
		var ids []string
		for _, d := range l.Data {
			ids = append(ids, d.ID)
		}
		listed = append(listed, l.Data...)
		return ids, l.Pagination, err
	})
	stop()
	exactlyOnce(t, got, want)
	// Oldest first: created_at, then id.
	for i := 1; i < len(listed); i++ {
		a, b := listed[i-1], listed[i]
		if b.CreatedAt.Before(a.CreatedAt.Time) || b.CreatedAt.Equal(a.CreatedAt.Time) && b.ID < a.ID {
			t.Fatalf("device %d (%s %v) listed after %s %v: not oldest first", i, b.ID, b.CreatedAt, a.ID, a.CreatedAt)
		}
	}
	// Only the organization's devices.
	mine := map[string]bool{}
	for _, id := range got {
		mine[id] = true
	}
	all, _ := svc.ListDevices(e.ctx, other.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 100}})
	for _, d := range all.Data {
		if mine[d.ID] {
			t.Fatalf("device %s of another organization listed", d.ID)
		}
	}
	if len(all.Data) != 100 || !all.Pagination.HasMore {
		t.Errorf("limit 100: %d devices, hasMore %v", len(all.Data), all.Pagination.HasMore)
	}
	if l, _ := svc.ListDevices(e.ctx, other.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 1000}}); len(l.Data) != 100 {
		t.Errorf("a limit over 100 gives %d devices, want 100", len(l.Data))
	}
	if l, _ := svc.ListDevices(e.ctx, other.ID, cloud.DeviceFilter{}); len(l.Data) != 25 {
		t.Errorf("the default limit gives %d devices, want 25", len(l.Data))
	}
}

func testDeviceStatusFilter(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	svc := e.Store.Devices()
	var online []string
	for i := 0; i < 9; i++ {
		e.clock.Add(time.Millisecond)
		d := e.device(org.ID, "IG-500")
		if i%3 == 0 {
			e.online(d, 30*time.Second)
			online = append(online, d.ID)
		}
	}
	l, err := svc.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 2}, Status: resource.StatusOnline})
	if err != nil || len(l.Data) != 2 || !l.Pagination.HasMore || l.Data[0].ID != online[0] || l.Data[0].LastSeen == nil || l.Data[0].FirmwareVersion != "fw-1" {
		t.Fatalf("page 1 = %+v, %v", l, err)
	}
	l, err = svc.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 2, Cursor: *l.Pagination.NextCursor}, Status: resource.StatusOnline})
	if err != nil || len(l.Data) != 1 || l.Pagination.HasMore || l.Data[0].ID != online[2] {
		t.Fatalf("page 2 = %+v, %v", l, err)
	}
	// Exactly limit items left: hasMore must be false, not an empty extra page.
	l, err = svc.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 3}, Status: resource.StatusOnline})
	if err != nil || len(l.Data) != 3 || l.Pagination.HasMore {
		t.Fatalf("exact page = %+v, %v", l, err)
	}
	l, err = svc.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Status: resource.StatusProvisioning})
	if err != nil || len(l.Data) != 6 {
		t.Fatalf("PROVISIONING = %d, %v", len(l.Data), err)
	}
}

func testEventPaginationUnderInserts(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	d2 := e.device(org.ID, "IG-500")
	var want []string
	var batch, batch2 []protocol.Record
	for i := 0; i < 233; i++ {
		sev := resource.SeverityInfo
		if i%4 == 0 {
			sev = resource.SeverityError
		}
		at := t0.Add(time.Duration(i/3) * time.Millisecond) // three events a millisecond: the id breaks ties
		r := eventRecord("heartbeat", sev, at)
		batch = append(batch, r)
		want = append(want, r.Event.ID)
		batch2 = append(batch2, eventRecord("heartbeat", resource.SeverityInfo, at))
	}
	e.records(d, batch...)
	e.records(d2, batch2...)
	svc := e.Store.Devices()
	stop := WriteLoop(t, func(i int) error {
		_, err := e.Agent.Records(e.ctx, agentlink.RecordsIn{Device: d.ref(), Session: "s",
			Items: []protocol.Record{eventRecord("heartbeat", resource.SeverityInfo, t0.Add(time.Duration(i%100)*time.Millisecond))}})
		return err
	})
	var prev resource.Event
	got := walk(t, 20, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Limit: 20, Cursor: cursor}})
		var ids []string
		for _, ev := range l.Data {
			if prev.ID != "" && (ev.CreatedAt.After(prev.CreatedAt.Time) || ev.CreatedAt.Equal(prev.CreatedAt.Time) && ev.ID > prev.ID) {
				t.Errorf("event %s (%v) after %s (%v): not newest first", ev.ID, ev.CreatedAt, prev.ID, prev.CreatedAt)
			}
			prev = ev
			ids = append(ids, ev.ID)
		}
		return ids, l.Pagination, err
	})
	stop()
	exactlyOnce(t, got, want)

	filtered := walk(t, 7, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Limit: 7, Cursor: cursor}, Severity: resource.SeverityError, Type: "heartbeat"})
		var ids []string
		for _, ev := range l.Data {
			if ev.Severity != resource.SeverityError || ev.Type != "heartbeat" {
				t.Errorf("filters let %s %s through", ev.Type, ev.Severity)
			}
			ids = append(ids, ev.ID)
		}
		return ids, l.Pagination, err
	})
	if len(filtered) != 59 {
		t.Errorf("ERROR events = %d, want 59", len(filtered))
	}
}

func testAlertPaginationUnderInserts(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Tick = true
	org := e.org("acme")
	rules := []string{alert.RuleHighCPU, alert.RuleHighMem, alert.RuleDiskFull, alert.RuleHighTemp, alert.RuleDeviceOffline, alert.RuleVPNDown}
	var want []string
	for i := 0; i < 20; i++ {
		d := e.device(org.ID, "IG-500")
		for _, r := range rules {
			want = append(want, e.alert(d, r, resource.AlertActive).ID)
		}
	}
	svc := e.Store.Alerts()
	cpu := e.rule(org.ID, alert.RuleHighCPU)
	stop := WriteLoop(t, func(i int) error {
		d, _, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: org.ID, Name: "n", SerialNumber: fmt.Sprintf("N%05d", i), Model: "IG-500"})
		if err != nil {
			return err
		}
		_, _, err = e.Engine.OpenAlert(e.ctx, alert.Opening{OrgID: org.ID, DeviceID: d.ID, Rule: cpu, Message: "new", At: e.clock.Now()})
		return err
	})
	var prev resource.Alert
	got := walk(t, 25, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := svc.ListAlerts(e.ctx, org.ID, cloud.AlertFilter{Page: cloud.Page{Limit: 25, Cursor: cursor}, State: resource.AlertActive})
		var ids []string
		for _, a := range l.Data {
			if prev.ID != "" && (a.CreatedAt.After(prev.CreatedAt.Time) || a.CreatedAt.Equal(prev.CreatedAt.Time) && a.ID > prev.ID) {
				t.Errorf("alert %s after %s: not newest first", a.ID, prev.ID)
			}
			prev = a
			ids = append(ids, a.ID)
		}
		return ids, l.Pagination, err
	})
	stop()
	exactlyOnce(t, got, want)
}

func testInvalidCursors(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	other := e.org("other")
	d := e.device(org.ID, "IG-500")
	d2 := e.device(org.ID, "IG-500")
	od := e.device(other.ID, "IG-500")
	ev2 := e.event(d2, "heartbeat", resource.SeverityInfo)
	oev := e.event(od, "heartbeat", resource.SeverityInfo)
	oa := e.alert(od, alert.RuleHighCPU, resource.AlertActive)
	devs := e.Store.Devices()
	alerts := e.Store.Alerts()
	for _, tc := range []struct {
		name string
		call func(cursor string) error
		bad  []string
	}{
		{"devices", func(c string) error {
			_, err := devs.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Cursor: c}})
			return err
		}, []string{"garbage!", "zzzzzzzzzzzzzzzzzzzzzzzz", od.ID, ev2.ID, ids.New()}},
		{"events", func(c string) error {
			_, err := devs.Events(e.ctx, org.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Cursor: c}})
			return err
		}, []string{"garbage!", ev2.ID, oev.ID, d.ID}},
		{"alerts", func(c string) error {
			_, err := alerts.ListAlerts(e.ctx, org.ID, cloud.AlertFilter{Page: cloud.Page{Cursor: c}, State: resource.AlertActive})
			return err
		}, []string{"garbage!", oa.ID, d.ID, "' OR 1=1 --"}},
	} {
		for _, c := range tc.bad {
			if err := tc.call(c); cloud.ErrorCode(err) != cloud.ECURSOR {
				t.Errorf("%s with cursor %q: err = %v, want invalid_cursor", tc.name, c, err)
			}
		}
	}
	// A device of the organization is a valid devices cursor even when it
	// does not match the status filter (its status may have changed).
	if _, err := devs.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Cursor: d.ID}, Status: resource.StatusOnline}); err != nil {
		t.Errorf("own device as cursor with a status filter: %v", err)
	}
	// The last item as cursor: an empty last page, not an error.
	all, _ := devs.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{})
	l, err := devs.ListDevices(e.ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Cursor: all.Data[len(all.Data)-1].ID}})
	if err != nil || len(l.Data) != 0 || l.Pagination.HasMore {
		t.Errorf("after the last device: %+v, %v", l, err)
	}
}

// testOrgIsolation calls every read and write of the services with the
// other organization's id: each answers not_found and changes nothing.
func testOrgIsolation(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	other := e.org("intruder")
	d := e.device(org.ID, "IG-500")
	ev := e.event(d, "agent.started", resource.SeverityInfo)
	a := e.alert(d, alert.RuleHighCPU, resource.AlertActive)
	devs, serial, alerts := e.Store.Devices(), e.Store.Serial(), e.Store.Alerts()
	mode := "passthrough"
	now := e.clock.Now()
	for name, call := range map[string]func(orgID string) error{
		"Device": func(o string) error { _, err := devs.Device(e.ctx, o, d.ID); return err },
		"Metrics": func(o string) error {
			_, err := devs.Metrics(e.ctx, o, d.ID, cloud.MetricsQuery{From: now.Add(-time.Hour), To: now})
			return err
		},
		"Events":    func(o string) error { _, err := devs.Events(e.ctx, o, d.ID, cloud.EventFilter{}); return err },
		"Serial":    func(o string) error { _, err := serial.Serial(e.ctx, o, d.ID); return err },
		"Telemetry": func(o string) error { _, err := serial.Telemetry(e.ctx, o, d.ID); return err },
		"Channel":   func(o string) error { _, err := serial.Channel(e.ctx, o, d.ID, "rs485-1"); return err },
		"PatchSerial": func(o string) error {
			_, err := serial.PatchSerial(e.ctx, o, d.ID, cloud.SerialPatch{Mode: &mode})
			return err
		},
		"PutChannel": func(o string) error {
			_, err := serial.PutChannel(e.ctx, o, d.ID, "rs485-1", rs485Config(9600))
			return err
		},
		"Acknowledge": func(o string) error { _, err := alerts.Acknowledge(e.ctx, o, a.ID); return err },
		"Resolve":     func(o string) error { _, err := alerts.Resolve(e.ctx, o, a.ID); return err },
	} {
		if err := call(other.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
			t.Errorf("%s from another organization: err = %v, want not_found", name, err)
		}
		if err := call(org.ID); err != nil && name != "Acknowledge" && name != "Resolve" {
			t.Errorf("%s from the owner: %v", name, err)
		}
	}
	if l, _ := devs.ListDevices(e.ctx, other.ID, cloud.DeviceFilter{}); len(l.Data) != 0 {
		t.Errorf("intruder lists %d devices", len(l.Data))
	}
	for _, st := range []resource.AlertState{resource.AlertActive, resource.AlertAcknowledged, resource.AlertResolved} {
		if l, _ := alerts.ListAlerts(e.ctx, other.ID, cloud.AlertFilter{State: st}); len(l.Data) != 0 {
			t.Errorf("intruder lists %d %s alerts", len(l.Data), st)
		}
	}
	if l, _ := alerts.ListAlerts(e.ctx, other.ID, cloud.AlertFilter{State: resource.AlertActive, DeviceID: d.ID}); len(l.Data) != 0 {
		t.Errorf("intruder lists the owner's alerts by device id")
	}
	if _, err := devs.Events(e.ctx, other.ID, d.ID, cloud.EventFilter{Page: cloud.Page{Cursor: ev.ID}}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("events with the owner's cursor from another org: %v", err)
	}
}

// deviceRow returns the device as the API shows it.
func (e *env) deviceRow(orgID, id string) resource.DeviceDetail {
	e.t.Helper()
	d, err := e.Store.Devices().Device(context.Background(), orgID, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}
