package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// statusChanges returns d's device.status_changed events, oldest first, as
// "FROM>TO SEVERITY +offset" (offset from t0).
func (e *env) statusChanges(d device) []string {
	e.t.Helper()
	var out []string
	for _, ev := range slices.Backward(e.eventsOf(d, protocol.EventDeviceStatusChanged)) {
		out = append(out, statusChange(e.t, ev))
	}
	return out
}

func statusChange(t testing.TB, ev resource.Event) string {
	t.Helper()
	var data map[string]string
	if err := json.Unmarshal(ev.Data, &data); err != nil || len(data) != 2 {
		t.Fatalf("device.status_changed data %s: %v", ev.Data, err)
	}
	return fmt.Sprintf("%s>%s %s +%s", data["from"], data["to"], ev.Severity, ev.CreatedAt.Sub(t0))
}

// statusHeartbeat stores a heartbeat of dev's session at at moving its
// status from prev to status, and returns its outcome.
func (e *env) statusHeartbeat(dev agentlink.Device, session string, at time.Time, prev, status resource.DeviceStatus) agentlink.HeartbeatOut {
	e.t.Helper()
	out, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: session, At: at, Status: status, PrevStatus: prev, Deadline: at.Add(time.Minute)})
	if err != nil {
		e.t.Fatalf("heartbeat %s>%s: %v", prev, status, err)
	}
	return out
}

// statusDevices returns the ids and times of StatusDevices(statuses),
// every page of limit.
func (e *env) statusDevices(statuses []resource.DeviceStatus, limit int) []cloud.StatusDevice {
	e.t.Helper()
	var all []cloud.StatusDevice
	cursor := ""
	for range 100 {
		page, err := e.Engine.StatusDevices(e.ctx, statuses, cursor, limit)
		if err != nil {
			e.t.Fatalf("StatusDevices(%v): %v", statuses, err)
		}
		all = append(all, page...)
		if len(page) < limit {
			return all
		}
		cursor = page[len(page)-1].Device.ID
	}
	e.t.Fatal("StatusDevices does not end")
	return nil
}

// testStatusChangeEvents: every status change (connect, hello, a heartbeat
// with another status, disconnect, sweep) stores one device.status_changed
// event {"from","to"} at its time (WARNING to ERROR and OFFLINE) and hands
// it back with the change; the time the device entered its status moves
// with it, and REBOOTING or UPDATING marks planned work.
func testStatusChangeEvents(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	dev := e.auth(d)
	session := "s-1"
	ch, err := e.Agent.Connect(e.ctx, dev, session, t0, t0.Add(time.Minute))
	if err != nil || ch.StatusEvent == nil || statusChange(t, *ch.StatusEvent) != "PROVISIONING>CONNECTING INFO +0s" {
		t.Fatalf("connect: %+v, %v", ch, err)
	}
	at := t0.Add(time.Second)
	hello, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: dev, Session: session, At: at, HeartbeatInterval: 10 * time.Second,
		Deadline: at.Add(time.Minute), OnlineEvent: true, Hello: protocol.Hello{AgentVersion: "1.0.0"}})
	if err != nil || hello.Change.StatusEvent == nil || hello.Change.Event == nil || statusChange(t, *hello.Change.StatusEvent) != "CONNECTING>ONLINE INFO +1s" {
		t.Fatalf("hello: %+v, %v", hello, err)
	}
	if out := e.statusHeartbeat(dev, session, t0.Add(2*time.Second), resource.StatusOnline, resource.StatusOnline); out.Change.StatusEvent != nil {
		t.Errorf("a heartbeat keeping the status made %+v", out.Change.StatusEvent)
	}
	out := e.statusHeartbeat(dev, session, t0.Add(3*time.Second), resource.StatusOnline, resource.StatusRebooting)
	if out.Change.StatusEvent == nil || statusChange(t, *out.Change.StatusEvent) != "ONLINE>REBOOTING INFO +3s" {
		t.Errorf("heartbeat to REBOOTING: %+v", out.Change)
	}
	if got := e.statusDevices([]resource.DeviceStatus{resource.StatusRebooting}, 10); len(got) != 1 || got[0].Device.ID != d.ID ||
		got[0].Device.OrgID != org.ID || got[0].Status != resource.StatusRebooting || !got[0].Since.Equal(t0.Add(3*time.Second)) {
		t.Errorf("REBOOTING devices = %+v", got)
	}
	e.statusHeartbeat(dev, session, t0.Add(4*time.Second), resource.StatusRebooting, resource.StatusRebooting)
	e.statusHeartbeat(dev, session, t0.Add(5*time.Second), resource.StatusRebooting, resource.StatusError)
	e.statusHeartbeat(dev, session, t0.Add(6*time.Second), resource.StatusError, resource.StatusError)
	if got := e.statusDevices([]resource.DeviceStatus{resource.StatusError, resource.StatusRebooting}, 10); len(got) != 1 ||
		got[0].Status != resource.StatusError || !got[0].Since.Equal(t0.Add(5*time.Second)) {
		t.Errorf("ERROR or REBOOTING devices = %+v", got)
	}
	e.statusHeartbeat(dev, session, t0.Add(7*time.Second), resource.StatusError, resource.StatusUpdating)
	e.statusHeartbeat(dev, session, t0.Add(8*time.Second), resource.StatusUpdating, resource.StatusOnline)
	if got := e.statusDevices(cloud.RuleStatuses, 10); len(got) != 0 {
		t.Errorf("devices in a watched status while ONLINE: %+v", got)
	}
	off, ok, err := e.Agent.Disconnect(e.ctx, dev, session, t0.Add(9*time.Second), "connection closed")
	if err != nil || !ok || off.StatusEvent == nil || statusChange(t, *off.StatusEvent) != "ONLINE>OFFLINE WARNING +9s" {
		t.Fatalf("disconnect: %+v %v %v", off, ok, err)
	}
	want := []string{"PROVISIONING>CONNECTING INFO +0s", "CONNECTING>ONLINE INFO +1s", "ONLINE>REBOOTING INFO +3s", "REBOOTING>ERROR WARNING +5s",
		"ERROR>UPDATING INFO +7s", "UPDATING>ONLINE INFO +8s", "ONLINE>OFFLINE WARNING +9s"}
	if got := e.statusChanges(d); !slices.Equal(got, want) {
		t.Errorf("device.status_changed events:\n got %v\nwant %v", got, want)
	}
	// The last planned work (UPDATING at +7s) is the offline sweep's.
	o, err := e.Engine.OfflineDevices(e.ctx, t0.Add(time.Hour), d.ID, "", 10)
	if err != nil || len(o) != 1 || !o[0].PlannedAt.Equal(t0.Add(7*time.Second)) || !o[0].LastSeen.Equal(t0.Add(8*time.Second)) {
		t.Errorf("OfflineDevices = %+v, %v", o, err)
	}

	// The sweep takes a device past its deadline OFFLINE, with its event.
	x := e.device(org.ID, "IG-500")
	e.online(x, 10*time.Second) // deadline t0 + 30s
	swept, err := e.Agent.Sweep(e.ctx, t0.Add(time.Minute))
	if err != nil || len(swept) != 1 || swept[0].Device.ID != x.ID || swept[0].StatusEvent == nil {
		t.Fatalf("sweep: %+v, %v", swept, err)
	}
	if got := e.statusChanges(x); !slices.Equal(got, []string{"PROVISIONING>CONNECTING INFO +0s", "CONNECTING>ONLINE INFO +0s", "ONLINE>OFFLINE WARNING +1m0s"}) &&
		!slices.Equal(got, []string{"CONNECTING>ONLINE INFO +0s", "PROVISIONING>CONNECTING INFO +0s", "ONLINE>OFFLINE WARNING +1m0s"}) {
		t.Errorf("swept device's status changes: %v", got)
	}
	// The device.online and device.offline events stay as they were.
	if n, m := len(e.eventsOf(d, protocol.EventDeviceOnline)), len(e.eventsOf(d, protocol.EventDeviceOffline)); n != 1 || m != 1 {
		t.Errorf("%d device.online and %d device.offline events, want 1 and 1", n, m)
	}
}

// testLateConnect: a Connect whose connection was opened before the one
// holding the device (its write came late) changes nothing and returns
// agentlink.ErrSuperseded: the newer session keeps the device, its status
// and its heartbeats, and no status event is stored. A Connect opened in
// the same millisecond as the session, or after it, takes the device.
func testLateConnect(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	dev := e.auth(d)
	at := t0.Add(10 * time.Second)
	if _, err := e.Agent.Connect(e.ctx, dev, "s-new", at, at.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: dev, Session: "s-new", At: at, HeartbeatInterval: 10 * time.Second,
		Deadline: at.Add(time.Minute), OnlineEvent: true, Hello: protocol.Hello{AgentVersion: "1.0.0"}}); err != nil {
		t.Fatal(err)
	}
	before := e.statusChanges(d)
	ch, err := e.Agent.Connect(e.ctx, dev, "s-old", t0, t0.Add(time.Minute))
	if !errors.Is(err, agentlink.ErrSuperseded) || ch.StatusEvent != nil {
		t.Fatalf("a Connect opened before the device's session: %+v, %v; want agentlink.ErrSuperseded", ch, err)
	}
	if got := e.statusChanges(d); !slices.Equal(got, before) {
		t.Errorf("status events after the refused Connect: %v, want %v", got, before)
	}
	e.statusHeartbeat(dev, "s-new", at.Add(time.Second), resource.StatusOnline, resource.StatusOnline)
	if _, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: "s-old", At: at.Add(2 * time.Second), Status: resource.StatusOnline,
		PrevStatus: resource.StatusOnline, Deadline: at.Add(time.Minute)}); !errors.Is(err, agentlink.ErrSessionGone) {
		t.Errorf("a heartbeat of the refused session: %v, want agentlink.ErrSessionGone", err)
	}
	if _, ok, err := e.Agent.Disconnect(e.ctx, dev, "s-old", at.Add(3*time.Second), "connection closed"); err != nil || ok {
		t.Errorf("the refused session's disconnect: changed %v, %v; want nothing changed", ok, err)
	}
	if got := e.deviceRow(org.ID, d.ID); got.Status != resource.StatusOnline || got.LastSeen == nil || !got.LastSeen.Equal(at.Add(time.Second)) {
		t.Errorf("device %s, last seen %v; want ONLINE, seen at the newer session's heartbeat", got.Status, got.LastSeen)
	}
	if _, err := e.Agent.Connect(e.ctx, dev, "s-same-ms", at, at.Add(time.Minute)); err != nil {
		t.Fatalf("a Connect in the session's millisecond: %v", err)
	}
	if _, err := e.Agent.Connect(e.ctx, dev, "s-later", at.Add(time.Hour), at.Add(time.Hour+time.Minute)); err != nil {
		t.Fatalf("a later Connect: %v", err)
	}
}

// testPlannedWorkHold: a device that reported REBOOTING opens no offline
// alert until cloud.PlannedWorkHold after it, then one; never a second for
// the same outage (not even after that one was resolved); a new outage
// opens a new one.
func testPlannedWorkHold(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	dev := e.auth(d)
	session := e.online(d, 10*time.Second)
	rebootAt := t0.Add(time.Second)
	e.statusHeartbeat(dev, session, rebootAt, resource.StatusOnline, resource.StatusRebooting)
	if _, ok, err := e.Agent.Disconnect(e.ctx, dev, session, rebootAt.Add(time.Second), "connection closed"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	r := e.rule(org.ID, alert.RuleDeviceOffline)
	opening := func(at time.Time, lastSeen time.Time) alert.Opening {
		return alert.Opening{OrgID: org.ID, DeviceID: d.ID, Rule: r, Message: "offline", At: at, WithEvent: true, LastSeen: lastSeen}
	}
	off, err := e.Engine.OfflineDevices(e.ctx, rebootAt.Add(30*time.Second), "", "", 10)
	if err != nil || len(off) != 1 || !off[0].PlannedAt.Equal(rebootAt) || !off[0].LastSeen.Equal(rebootAt) {
		t.Fatalf("OfflineDevices = %+v, %v", off, err)
	}
	for _, at := range []time.Time{rebootAt.Add(30 * time.Second), rebootAt.Add(cloud.PlannedWorkHold - time.Millisecond)} {
		if _, ok, err := e.Engine.OpenAlert(e.ctx, opening(at, off[0].LastSeen)); err != nil || ok {
			t.Errorf("offline alert opened at +%s after REBOOTING: %v %v", at.Sub(rebootAt), ok, err)
		}
	}
	held := rebootAt.Add(cloud.PlannedWorkHold)
	e.clock.Set(held)
	a, ok, err := e.Engine.OpenAlert(e.ctx, opening(held, off[0].LastSeen))
	if err != nil || !ok {
		t.Fatalf("offline alert once the hold ended: %v %v", ok, err)
	}
	if _, err := e.Store.Alerts().Resolve(e.ctx, org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	// Still the device's silence: listed, but not alerted twice.
	if off, _ := e.Engine.OfflineDevices(e.ctx, held.Add(time.Hour), "", "", 10); len(off) != 1 {
		t.Errorf("OfflineDevices after the alert = %+v", off)
	}
	if _, ok, err := e.Engine.OpenAlert(e.ctx, opening(held.Add(time.Hour), off[0].LastSeen)); err != nil || ok {
		t.Errorf("a second offline alert for one outage: %v %v", ok, err)
	}
	// Back, then silent again without planned work: a new outage alerts
	// at once.
	e.clock.Set(held.Add(2 * time.Hour))
	session = e.online(d, 10*time.Second)
	back := e.clock.Now()
	if _, ok, err := e.Agent.Disconnect(e.ctx, dev, session, back, "connection closed"); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if _, ok, err := e.Engine.OpenAlert(e.ctx, opening(back.Add(30*time.Second), back)); err != nil || !ok {
		t.Errorf("offline alert of a new outage: %v %v", ok, err)
	}
	l, _ := e.Store.Alerts().ListAlerts(e.ctx, org.ID, cloud.AlertFilter{State: resource.AlertActive})
	if len(l.Data) != 1 || l.Data[0].ID == a.ID {
		t.Errorf("ACTIVE alerts = %+v", l.Data)
	}
}

// testDeviceTags: SetDeviceTags validates (EINVALID naming tags[i]),
// stores the tags deduplicated and sorted on that device only, and the
// alert engine's reads return them; the offline read pages by id.
func testDeviceTags(t *testing.T, open Opener) {
	e := newEnv(t, open)
	acme, other := e.org("acme"), e.org("other")
	var ds []device
	for i := range 5 {
		org := acme
		if i == 4 {
			org = other
		}
		d := e.device(org.ID, "IG-500")
		Offline(t, e.Agent, e.auth(d), t0, 10*time.Second)
		ds = append(ds, d)
	}
	for _, tc := range []struct {
		tags  []string
		field string
	}{
		{[]string{"site:north", "Bad"}, "tags[1]"},
		{[]string{""}, "tags[0]"},
		{[]string{strings.Repeat("a", 33)}, "tags[0]"},
		{slices.Repeat([]string{"a"}, 17), "tags"},
	} {
		err := e.Store.SetDeviceTags(e.ctx, ds[0].ID, tc.tags)
		if cloud.ErrorCode(err) != cloud.EINVALID || !strings.HasPrefix(cloud.ErrorMessage(err), tc.field+":") {
			t.Errorf("SetDeviceTags(%q) = %v, want EINVALID naming %s", tc.tags, err, tc.field)
		}
	}
	if err := e.Store.SetDeviceTags(e.ctx, "nosuchdevice", []string{"a"}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("SetDeviceTags of an unknown device = %v", err)
	}
	for _, d := range []device{ds[1], ds[4]} {
		if err := e.Store.SetDeviceTags(e.ctx, d.ID, []string{"site:north", "boiler", "site:north"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := e.Store.SetDeviceTags(e.ctx, ds[4].ID, nil); err != nil { // cleared again
		t.Fatal(err)
	}
	// Every OFFLINE device, two at a time, in id order.
	var got []alert.Offline
	cursor := ""
	for range 10 {
		page, err := e.Engine.OfflineDevices(e.ctx, t0.Add(time.Minute), "", cursor, 2)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, page...)
		if len(page) < 2 {
			break
		}
		cursor = page[len(page)-1].Device.ID
	}
	var ids, want []string
	for _, o := range got {
		ids = append(ids, o.Device.ID)
		wantTags := []string{}
		if o.Device.ID == ds[1].ID {
			wantTags = []string{"boiler", "site:north"}
		}
		if !slices.Equal(o.Tags, wantTags) || o.Tags == nil || !o.PlannedAt.IsZero() {
			t.Errorf("offline %s: tags %q (want %q), planned %v", o.Device.ID, o.Tags, wantTags, o.PlannedAt)
		}
		if o.Device.OrgID != map[bool]string{true: other.ID, false: acme.ID}[o.Device.ID == ds[4].ID] {
			t.Errorf("offline %s in org %s", o.Device.ID, o.Device.OrgID)
		}
	}
	for _, d := range ds {
		want = append(want, d.ID)
	}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("OfflineDevices pages = %v, want %v", ids, want)
	}
	// StatusDevices: tags, pages by id, only the statuses status rules
	// watch.
	var sessions []string
	for _, d := range ds[:3] {
		sessions = append(sessions, e.online(d, 10*time.Second))
	}
	for i, d := range ds[:3] {
		e.statusHeartbeat(e.auth(d), sessions[i], t0.Add(time.Second), resource.StatusOnline, resource.StatusError)
	}
	sd := e.statusDevices([]resource.DeviceStatus{resource.StatusError}, 2)
	var sids []string
	for _, s := range sd {
		sids = append(sids, s.Device.ID)
		if (s.Device.ID == ds[1].ID) != slices.Equal(s.Tags, []string{"boiler", "site:north"}) || s.Tags == nil {
			t.Errorf("ERROR device %s: tags %q", s.Device.ID, s.Tags)
		}
	}
	wantSD := []string{ds[0].ID, ds[1].ID, ds[2].ID}
	slices.Sort(wantSD)
	if !slices.Equal(sids, wantSD) {
		t.Errorf("StatusDevices pages = %v, want %v", sids, wantSD)
	}
	if _, err := e.Engine.StatusDevices(e.ctx, []resource.DeviceStatus{resource.StatusOnline}, "", 10); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("StatusDevices(ONLINE) = %v, want EINVALID", err)
	}
}
