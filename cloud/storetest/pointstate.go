package storetest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// rs485Points is rs485-1's configuration with a temperature, a pump's
// state and a pressure.
func rs485Points() serialcfg.Config {
	cfg := rs485Config(9600)
	cfg.RS485.Points = []serialcfg.RS485Point{
		{Name: "temp", Function: "holding", Register: 0, Type: "f32", Unit: "°C"},
		{Name: "pump", Function: "coil", Register: 3, Type: "bool"},
		{Name: "pressure", Function: "input", Register: 8, Type: "u16", Unit: "bar"},
	}
	return cfg
}

// pointsJSON is v as JSON, for comparing what a user reads.
func pointsJSON(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// telemetry reads d's serial telemetry.
func (e *env) telemetry(d device) resource.SerialTelemetry {
	e.t.Helper()
	tel, err := e.Store.Serial().Telemetry(e.ctx, d.OrgID, d.ID)
	if err != nil {
		e.t.Fatal(err)
	}
	return tel
}

// testPointState: the point states a heartbeat reports are stored with the
// channel and read back, for each point of the desired configuration, through
// telemetry, channel detail and the device's points; a point never reported
// has no value and is stale, and every point is stale once the device is
// not ONLINE; another organization's device is not found, a model without
// serial I/O has no points.
func testPointState(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	session := e.online(d, 30*time.Second)
	svc, pts := e.Store.Serial(), e.Store.Points()
	if _, err := svc.PutChannel(e.ctx, org.ID, d.ID, "rs485-1", rs485Points()); err != nil {
		t.Fatal(err)
	}

	// Configured, never reported.
	tel := e.telemetry(d)
	stale := `[{"id":"rs485-1.temp","value":null,"unit":"°C","quality":"stale","at":null},` +
		`{"id":"rs485-1.pump","value":null,"unit":"","quality":"stale","at":null},` +
		`{"id":"rs485-1.pressure","value":null,"unit":"bar","quality":"stale","at":null}]`
	if got := pointsJSON(t, tel.Channels[1].Points); tel.Channels[1].ID != "rs485-1" || got != stale {
		t.Errorf("telemetry of %s before any report: points %s, want %s", tel.Channels[1].ID, got, stale)
	}
	if got := pointsJSON(t, tel.Channels[0].Points); got != `[]` {
		t.Errorf("uart-1's points %s, want []", got)
	}

	at := time.Date(2026, 4, 1, 8, 30, 0, 123e6, time.UTC)
	read := resource.T(at.Add(-400 * time.Millisecond))
	rs485 := protocol.ChannelState{ID: "rs485-1", Available: true, Live: "16812 0", Points: []protocol.PointState{
		{Name: "temp", Value: 21.5, Quality: "good", At: read},
		{Name: "pump", Value: 1, Quality: "good", At: read},
		{Name: "pressure", Quality: "bad", Error: "modbus exception 2: illegal data address (slave 7)", At: read},
		{Name: "removed", Value: 4, Quality: "good", At: read}, // not in the desired configuration
	}}
	e.report(d, session, at, rs485, protocol.ChannelState{ID: "gpio-1", Available: true, Live: "1",
		Points: []protocol.PointState{{Name: "level", Value: 1, Quality: "good", At: read}}})

	readAt := `"` + resource.FormatTime(read.Time) + `"`
	want := `[{"id":"rs485-1.temp","value":21.5,"unit":"°C","quality":"good","at":` + readAt + `},` +
		`{"id":"rs485-1.pump","value":true,"unit":"","quality":"good","at":` + readAt + `},` +
		`{"id":"rs485-1.pressure","value":null,"unit":"bar","quality":"bad","at":` + readAt + `}]`
	if got := pointsJSON(t, e.telemetry(d).Channels[1].Points); got != want {
		t.Errorf("telemetry points\n%s\nwant\n%s", got, want)
	}
	ch, err := svc.Channel(e.ctx, org.ID, d.ID, "rs485-1")
	if err != nil {
		t.Fatal(err)
	}
	if got := pointsJSON(t, ch.Points); got != want || ch.Telemetry.Live != "16812 0" {
		t.Errorf("channel detail: live %q, points\n%s\nwant\n%s", ch.Telemetry.Live, got, want)
	}
	st, err := svc.Serial(e.ctx, org.ID, d.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := pointsJSON(t, st.Channels[1].Points); got != want {
		t.Errorf("GET /serial's rs485-1 points\n%s\nwant\n%s", got, want)
	}

	// The device's points: catalog order, then configuration order.
	list, err := pts.Points(e.ctx, org.ID, d.ID, at)
	if err != nil {
		t.Fatal(err)
	}
	wantList := `[{"id":"rs485-1.temp","channelId":"rs485-1","name":"temp","type":"f32","unit":"°C","value":21.5,"quality":"good","error":"","at":` + readAt + `},` +
		`{"id":"rs485-1.pump","channelId":"rs485-1","name":"pump","type":"bool","unit":"","value":true,"quality":"good","error":"","at":` + readAt + `},` +
		`{"id":"rs485-1.pressure","channelId":"rs485-1","name":"pressure","type":"u16","unit":"bar","value":null,"quality":"bad","error":"modbus exception 2: illegal data address (slave 7)","at":` + readAt + `},` +
		`{"id":"gpio-1.level","channelId":"gpio-1","name":"level","type":"bool","unit":"","value":true,"quality":"good","error":"","at":` + readAt + `},` +
		`{"id":"gpio-2.level","channelId":"gpio-2","name":"level","type":"bool","unit":"","value":null,"quality":"stale","error":"","at":null},` +
		`{"id":"gpio-3.level","channelId":"gpio-3","name":"level","type":"bool","unit":"","value":null,"quality":"stale","error":"","at":null},` +
		`{"id":"gpio-4.level","channelId":"gpio-4","name":"level","type":"bool","unit":"","value":null,"quality":"stale","error":"","at":null}]`
	if got := pointsJSON(t, list); got != wantList {
		t.Errorf("points\n%s\nwant\n%s", got, wantList)
	}

	// The device's points take a stored sample newer than the heartbeat's
	// state (telemetry shows the heartbeat's alone); an older one changes
	// nothing.
	e.records(d, pointRecord(
		good("rs485-1.temp", read.Add(100*time.Millisecond), 22.25),
		good("rs485-1.pump", read.Add(-time.Second), 0),
		bad("rs485-1.pressure", read.Add(200*time.Millisecond), "modbus timeout (slave 7)"),
		good("gpio-2.level", read.Add(-time.Second), 1)))
	list, err = pts.Points(e.ctx, org.ID, d.ID, at)
	if err != nil {
		t.Fatal(err)
	}
	at100, at200 := `"`+resource.FormatTime(read.Add(100*time.Millisecond))+`"`, `"`+resource.FormatTime(read.Add(200*time.Millisecond))+`"`
	wantMerged := `[{"id":"rs485-1.temp","channelId":"rs485-1","name":"temp","type":"f32","unit":"°C","value":22.25,"quality":"good","error":"","at":` + at100 + `},` +
		`{"id":"rs485-1.pump","channelId":"rs485-1","name":"pump","type":"bool","unit":"","value":true,"quality":"good","error":"","at":` + readAt + `},` +
		`{"id":"rs485-1.pressure","channelId":"rs485-1","name":"pressure","type":"u16","unit":"bar","value":null,"quality":"bad","error":"modbus timeout (slave 7)","at":` + at200 + `},` +
		`{"id":"gpio-1.level","channelId":"gpio-1","name":"level","type":"bool","unit":"","value":true,"quality":"good","error":"","at":` + readAt + `},` +
		`{"id":"gpio-2.level","channelId":"gpio-2","name":"level","type":"bool","unit":"","value":true,"quality":"good","error":"","at":"` + resource.FormatTime(read.Add(-time.Second)) + `"},` +
		`{"id":"gpio-3.level","channelId":"gpio-3","name":"level","type":"bool","unit":"","value":null,"quality":"stale","error":"","at":null},` +
		`{"id":"gpio-4.level","channelId":"gpio-4","name":"level","type":"bool","unit":"","value":null,"quality":"stale","error":"","at":null}]`
	if got := pointsJSON(t, list); got != wantMerged {
		t.Errorf("points with stored samples\n%s\nwant\n%s", got, wantMerged)
	}
	if got := pointsJSON(t, e.telemetry(d).Channels[1].Points); got != want {
		t.Errorf("telemetry took stored samples: %s", got)
	}

	// The agent endpoint learns the stored point states at the next hello,
	// so that a reconnect alone changes nothing.
	out, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: e.auth(d), Session: session, At: at.Add(time.Second), HeartbeatInterval: 30 * time.Second,
		Deadline: at.Add(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range out.Channels {
		if c.ID == "rs485-1" && pointsJSON(t, c.Points) != pointsJSON(t, rs485.Points) {
			t.Errorf("hello: rs485-1's points %s, want %s", pointsJSON(t, c.Points), pointsJSON(t, rs485.Points))
		}
	}

	// A later report of other channels leaves the points alone.
	e.report(d, session, at.Add(2*time.Second), protocol.ChannelState{ID: "uart-1", Available: true, Live: "idle"})
	if ch, _ := svc.Channel(e.ctx, org.ID, d.ID, "rs485-1"); pointsJSON(t, ch.Points) != want {
		t.Errorf("a report of another channel changed rs485-1's points: %s", pointsJSON(t, ch.Points))
	}

	// Not ONLINE: every point is stale, its last value kept.
	if _, ok, err := e.Agent.Disconnect(e.ctx, e.auth(d), session, at.Add(3*time.Second), "connection closed"); err != nil || !ok {
		t.Fatalf("disconnect: %v %v", ok, err)
	}
	wantOffline := `[{"id":"rs485-1.temp","value":21.5,"unit":"°C","quality":"stale","at":` + readAt + `},` +
		`{"id":"rs485-1.pump","value":true,"unit":"","quality":"stale","at":` + readAt + `},` +
		`{"id":"rs485-1.pressure","value":null,"unit":"bar","quality":"stale","at":` + readAt + `}]`
	if got := pointsJSON(t, e.telemetry(d).Channels[1].Points); got != wantOffline {
		t.Errorf("offline telemetry points\n%s\nwant\n%s", got, wantOffline)
	}
	if ch, _ := svc.Channel(e.ctx, org.ID, d.ID, "rs485-1"); pointsJSON(t, ch.Points) != wantOffline {
		t.Errorf("offline channel points %s", pointsJSON(t, ch.Points))
	}
	list, err = pts.Points(e.ctx, org.ID, d.ID, at)
	if err != nil || len(list) != 7 || list[0].Quality != "stale" || list[0].Value != 22.25 || list[3].Quality != "stale" {
		t.Errorf("offline points %s, %v", pointsJSON(t, list), err)
	}

	// Scoping and capability.
	other := e.org("other")
	if _, err := pts.Points(e.ctx, other.ID, d.ID, at); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another organization's device: %v, want ENOTFOUND", err)
	}
	if _, err := pts.Points(e.ctx, org.ID, "nosuchdevice", at); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("an unknown device: %v, want ENOTFOUND", err)
	}
	d100 := e.device(org.ID, "IG-100")
	if _, err := pts.Points(e.ctx, org.ID, d100.ID, at); cloud.ErrorCode(err) != cloud.ECAPABILITY {
		t.Errorf("a model without serial I/O: %v, want ECAPABILITY", err)
	}
	// A device without configured rs485 points lists its gpio levels.
	d2 := e.device(org.ID, "IG-500")
	if list, err := pts.Points(e.ctx, org.ID, d2.ID, at); err != nil || len(list) != 4 || list[0].ID != "gpio-1.level" || list[0].Value != nil {
		t.Errorf("a device never reported: %s, %v", pointsJSON(t, list), err)
	}
}
