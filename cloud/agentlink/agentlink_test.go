package agentlink_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/dialects"
)

func TestRefusesBadTokensBeforeUpgrade(t *testing.T) {
	stores.Run(t, testRefusesBadTokensBeforeUpgrade)
}

func testRefusesBadTokensBeforeUpgrade(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	_, revokedTok := e.addDevice("IG-500")
	revokedID := storetest.Auth(t, e.s.Agent, revokedTok).ID
	if _, err := e.s.Store.RevokeDevice(context.Background(), revokedID); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, token string }{
		{"missing", ""},
		{"unknown", "fdt_" + strings.Repeat("x", 40)},
		{"revoked", revokedTok},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, resp, err := e.dial(tc.token)
			if err == nil {
				t.Fatal("upgrade succeeded")
			}
			if resp == nil || resp.StatusCode != http.StatusUnauthorized {
				t.Fatalf("want HTTP 401, got %v (%v)", resp, err)
			}
			if resp.Header.Get("WWW-Authenticate") != "Bearer" {
				t.Errorf("WWW-Authenticate = %q", resp.Header.Get("WWW-Authenticate"))
			}
		})
	}
	if logs := e.logs.String(); strings.Contains(logs, revokedTok) || !strings.Contains(logs, "agent refused") {
		t.Errorf("refusals must be logged without the token; logs:\n%s", logs)
	}
	if got := e.device(revokedID).Status; got != "PROVISIONING" {
		t.Errorf("revoked device status = %s", got)
	}
	// The good token still works.
	_, w := e.connect(tok, hello())
	if w.DeviceID != id {
		t.Errorf("welcome.deviceId = %q, want %q", w.DeviceID, id)
	}
}

func TestHelloStoresAgentInfoAndGoesOnline(t *testing.T) {
	stores.Run(t, testHelloStoresAgentInfoAndGoesOnline)
}

func testHelloStoresAgentInfoAndGoesOnline(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	if got := e.device(id).Status; got != "PROVISIONING" {
		t.Fatalf("new device status = %s", got)
	}
	a := e.mustDial(tok)
	// Between the upgrade and the hello the device is CONNECTING.
	eventually(t, 2*time.Second, func() string {
		if s := e.device(id).Status; s != "CONNECTING" {
			return "status " + s
		}
		return ""
	})
	before := time.Now().Add(-time.Second)
	a.send(protocol.Message{Type: protocol.TypeHello, Hello: ptr(hello())})
	m := a.recv()
	if m.Type != protocol.TypeWelcome || m.Welcome.DeviceID != id || m.Welcome.LastSeq != 0 {
		t.Fatalf("welcome = %+v", m)
	}
	if st := m.Welcome.ServerTime.Time; st.Before(before) || st.After(time.Now().Add(time.Second)) {
		t.Errorf("serverTime %v is not now", st)
	}
	d := e.device(id)
	want := deviceRow{Status: "ONLINE", Firmware: "fw-2.1", AgentName: "gw-hall-3", AgentLocation: "Hall 3", AgentTZ: "Europe/Berlin"}
	d.LastSeen, d.IP = 0, ""
	if d != want {
		t.Errorf("device = %+v, want %+v", d, want)
	}
	if got, want := e.obs.statusList(id), []string{"PROVISIONING>CONNECTING", "CONNECTING>ONLINE"}; !slices.Equal(got, want) {
		t.Errorf("status changes = %v, want %v", got, want)
	}
	if n := e.countEvents(id, "device.online", func(ev resource.Event) bool { return ev.Severity == resource.SeverityInfo }); n != 1 {
		t.Errorf("device.online events = %d", n)
	}
}

func ptr[T any](v T) *T { return &v }

func TestHeartbeatStoresStateAndChangedChannels(t *testing.T) {
	forCodecs(t, testHeartbeatStoresStateAndChangedChannels)
}

func testHeartbeatStoresStateAndChangedChannels(t *testing.T, e *env) {
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	chans := []protocol.ChannelState{
		{ID: "rs485-1", Available: true, Live: "12 34", Error: ""},
		{ID: "gpio-1", Available: true, Live: "1"},
		{ID: "uart-1", Available: false, Error: "port closed"},
		{ID: "bogus-9", Available: true, Live: "x"}, // not an IG-500 channel: ignored
	}
	a.heartbeat(protocol.Heartbeat{IPAddress: "10.1.2.3", Channels: chans})
	a.heartbeat(protocol.Heartbeat{IPAddress: "10.1.2.3", Channels: chans})
	chans[1].Live = "0"
	a.heartbeat(protocol.Heartbeat{IPAddress: "10.1.2.3", Channels: chans, Status: resource.StatusUpdating})

	eventually(t, 2*time.Second, func() string {
		e.obs.mu.Lock()
		defer e.obs.mu.Unlock()
		if n := len(e.obs.heartbeats[id]); n != 3 {
			return fmt.Sprintf("%d heartbeats observed", n)
		}
		return ""
	})
	e.obs.mu.Lock()
	hbs := e.obs.heartbeats[id]
	e.obs.mu.Unlock()
	ids := func(cs []resource.SignalChannel) (out []string) {
		for _, c := range cs {
			out = append(out, c.ID+"="+c.Live)
		}
		return out
	}
	if got := ids(hbs[0].Changed); !slices.Equal(got, []string{"rs485-1=12 34", "gpio-1=1", "uart-1="}) {
		t.Errorf("first heartbeat changed = %v", got)
	}
	if len(hbs[1].Changed) != 0 {
		t.Errorf("identical heartbeat reported changes %v", hbs[1].Changed)
	}
	if got := ids(hbs[2].Changed); !slices.Equal(got, []string{"gpio-1=0"}) {
		t.Errorf("third heartbeat changed = %v", got)
	}
	d := e.device(id)
	if d.Status != "UPDATING" || d.IP != "10.1.2.3" || d.LastSeen == 0 {
		t.Errorf("device = %+v", d)
	}
	if got := e.obs.statusList(id); got[len(got)-1] != "ONLINE>UPDATING" {
		t.Errorf("status changes = %v", got)
	}
	tel, err := e.serial.Telemetry(context.Background(), e.org.ID, id)
	if err != nil {
		t.Fatal(err)
	}
	if tel.At == nil {
		t.Error("telemetry at not set")
	}
	live := map[string]string{}
	for _, c := range tel.Channels {
		live[c.ID] = c.Live + "|" + c.Error
	}
	if live["rs485-1"] != "12 34|" || live["gpio-1"] != "0|" || live["uart-1"] != "|port closed" {
		t.Errorf("telemetry = %v", live)
	}
	ch, err := e.serial.Channel(context.Background(), e.org.ID, id, "uart-1")
	if err != nil {
		t.Fatal(err)
	}
	if ch.Available {
		t.Error("uart-1 reported unavailable but shows available")
	}
	// Three heartbeats within one metrics interval (5m default): one event.
	if n := e.countEvents(id, "heartbeat", nil); n != 1 {
		t.Errorf("heartbeat events = %d, want 1", n)
	}
}

func TestHeartbeatEventsOnePerMetricsInterval(t *testing.T) {
	stores.Run(t, testHeartbeatEventsOnePerMetricsInterval)
}

func testHeartbeatEventsOnePerMetricsInterval(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-100")
	h := hello()
	h.MetricsInterval = protocol.Duration{Duration: 200 * time.Millisecond}
	a, _ := e.connect(tok, h)
	start := time.Now()
	n := 0
	for time.Since(start) < 1100*time.Millisecond {
		a.heartbeat(protocol.Heartbeat{})
		n++
		time.Sleep(20 * time.Millisecond)
	}
	got := e.countEvents(id, "heartbeat", nil)
	if got < 3 || got > 7 || got >= n/2 {
		t.Errorf("%d heartbeat events for %d heartbeats over 1.1s at a 200ms metrics interval", got, n)
	}
}

// TestPointsToObservers: the point samples of a batch, once stored, are
// handed to the observers that read points (cloud.PointObserver) with the
// batch's other records; a resend stores nothing and tells nobody.
func TestPointsToObservers(t *testing.T) { forCodecs(t, testPointsToObservers) }

func testPointsToObservers(t *testing.T, e *env) {
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	t0 := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	batch := []protocol.Record{
		metricRec(1, t0, 10),
		{Seq: 2, Points: &protocol.PointBatch{Samples: []protocol.PointSample{
			{Point: "rs485-1.boiler_temp", At: resource.T(t0), Value: 21.5},
			{Point: "gpio-1.level", At: resource.T(t0), Value: 1},
		}}},
		{Seq: 3, Points: &protocol.PointBatch{Samples: []protocol.PointSample{
			{Point: "rs485-1.boiler_temp", At: resource.T(t0.Add(time.Second)), Error: "modbus timeout (slave 7)"},
		}}},
	}
	for range 2 {
		if seq := a.records(batch...); seq != 3 {
			t.Fatalf("ack = %d, want 3", seq)
		}
	}
	e.obs.mu.Lock()
	got := append([]protocol.PointSample(nil), e.obs.points[id]...)
	nm := len(e.obs.metrics[id])
	e.obs.mu.Unlock()
	var want []protocol.PointSample
	for _, r := range batch[1:] {
		want = append(want, r.Points.Samples...)
	}
	sort.Slice(got, func(i, j int) bool {
		return got[i].Point < got[j].Point || (got[i].Point == got[j].Point && got[i].At.Before(got[j].At.Time))
	})
	sort.Slice(want, func(i, j int) bool {
		return want[i].Point < want[j].Point || (want[i].Point == want[j].Point && want[i].At.Before(want[j].At.Time))
	})
	if !reflect.DeepEqual(got, want) || nm != 1 {
		t.Fatalf("observers told %d metrics and points %+v, want 1 and %+v", nm, got, want)
	}
}

func TestRecordsStoredOnceAndAcked(t *testing.T) { forCodecs(t, testRecordsStoredOnceAndAcked) }

func testRecordsStoredOnceAndAcked(t *testing.T, e *env) {
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	t0 := time.Now().Add(-time.Hour).Truncate(time.Millisecond)
	evID := ids.New()
	batch := []protocol.Record{
		metricRec(1, t0, 10),
		metricRec(2, t0.Add(5*time.Minute), 20),
		eventRec(3, evID, "usb.attached", t0.Add(6*time.Minute)),
		metricRec(4, t0.Add(10*time.Minute), 30),
	}
	if seq := a.records(batch...); seq != 4 {
		t.Fatalf("ack = %d, want 4", seq)
	}
	// A resend (the agent lost the ack) is acknowledged and stored nowhere twice.
	if seq := a.records(batch...); seq != 4 {
		t.Fatalf("ack of resend = %d, want 4", seq)
	}
	if seq := a.records(metricRec(5, t0.Add(15*time.Minute), 40)); seq != 5 {
		t.Fatalf("ack = %d, want 5", seq)
	}
	if n := e.metrics(id); n != 4 {
		t.Errorf("metrics stored = %d, want 4", n)
	}
	if n := e.countEvents(id, "", func(ev resource.Event) bool { return ev.ID == evID }); n != 1 {
		t.Errorf("event stored %d times", n)
	}
	e.obs.mu.Lock()
	nm, ne := len(e.obs.metrics[id]), 0
	for _, ev := range e.obs.events[id] {
		if ev.ID == evID {
			ne++
		}
	}
	e.obs.mu.Unlock()
	if nm != 4 || ne != 1 {
		t.Errorf("observers told %d metrics and %d agent events, want 4 and 1 (inserted rows only)", nm, ne)
	}
	// A new session learns the last stored sequence.
	a.ws.Close(websocket.StatusNormalClosure, "")
	_, w := e.connect(tok, hello())
	if w.LastSeq != 5 {
		t.Errorf("welcome.lastSeq = %d, want 5", w.LastSeq)
	}
	var data string
	for _, ev := range e.events(id, "") {
		if ev.ID == evID {
			data = string(ev.Data)
		}
	}
	if data != `{"k":1}` {
		t.Errorf("event data = %s", data)
	}
}

func TestEventIDOfAnotherDeviceNeitherLeaksNorOverwrites(t *testing.T) {
	stores.Run(t, testEventIDOfAnotherDeviceNeitherLeaksNorOverwrites)
}

func testEventIDOfAnotherDeviceNeitherLeaksNorOverwrites(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	idA, tokA := e.addDevice("IG-500")
	idB, tokB := e.addDevice("IG-500")
	a, _ := e.connect(tokA, hello())
	b, _ := e.connect(tokB, hello())
	shared := ids.New()
	at := time.Now().Add(-time.Minute)
	a.records(eventRec(1, shared, "usb.attached", at))
	evB := eventRec(1, shared, "usb.detached", at)
	evB.Event.Message = "from B"
	b.records(evB)
	b.records(evB) // and its resend
	var devOfShared, typ string
	for _, dev := range []string{idA, idB} {
		for _, ev := range e.events(dev, "") {
			if ev.ID == shared {
				devOfShared, typ = dev, ev.Type
			}
		}
	}
	if devOfShared != idA || typ != "usb.attached" {
		t.Errorf("event %s now belongs to %s as %s; device A's row was overwritten", shared, devOfShared, typ)
	}
	if n := e.countEvents(idB, "usb.detached", func(ev resource.Event) bool { return ev.Message == "from B" }); n != 1 {
		t.Errorf("device B's event stored %d times, want once under its own id", n)
	}
	if n := e.countEvents(idB, "usb.attached", nil); n != 0 {
		t.Error("device A's event leaked to device B")
	}
}

func TestBadInputClosesOnlyThatConnection(t *testing.T) {
	stores.Run(t, testBadInputClosesOnlyThatConnection)
}

func testBadInputClosesOnlyThatConnection(t *testing.T, open storetest.Opener) {
	now := time.Now()
	big := `{"type":"heartbeat","heartbeat":{"status":"ONLINE","ipAddress":"` + strings.Repeat("x", protocol.MaxMessageBytes) + `"}}`
	rec := func(items ...protocol.Record) []byte {
		b, _ := json.Marshal(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: items}})
		return b
	}
	var tooMany []protocol.Record
	for i := range protocol.MaxBatch + 1 {
		tooMany = append(tooMany, metricRec(uint64(i+1), now.Add(-time.Duration(i)*time.Second), 1))
	}
	badData := eventRec(1, ids.New(), "usb.attached", now)
	badData.Event.Data = json.RawMessage(`{"x":"` + strings.Repeat("y", protocol.MaxEventDataBytes) + `"}`)
	cases := []struct {
		name      string
		skipHello bool
		msg       []byte
		code      websocket.StatusCode
		reason    string
	}{
		{"records before hello", true, rec(metricRec(1, now, 1)), protocol.CloseProtocolError, "first message must be hello"},
		{"oversized", false, []byte(big), protocol.CloseTooLarge, "message over"},
		{"malformed json", false, []byte(`{"type":"heartbeat",`), protocol.CloseProtocolError, "malformed JSON"},
		{"unknown type", false, []byte(`{"type":"reboot"}`), protocol.CloseProtocolError, "unknown message type"},
		{"second hello", false, mustJSON(protocol.Message{Type: protocol.TypeHello, Hello: ptr(hello())}), protocol.CloseProtocolError, "hello sent twice"},
		{"relay message from agent", false, []byte(`{"type":"ack","ack":{"seq":1}}`), protocol.CloseProtocolError, "relay-to-agent"},
		{"batch over MaxBatch", false, rec(tooMany...), protocol.CloseTooLarge, "batch of"},
		{"seq not increasing", false, rec(metricRec(2, now, 1), metricRec(2, now.Add(time.Second), 1)), protocol.CloseProtocolError, "seq"},
		{"cpu out of range", false, rec(metricRec(1, now, 150)), protocol.CloseProtocolError, "cpuPct"},
		{"capturedAt in the far future", false, rec(metricRec(1, now.Add(48*time.Hour), 1)), protocol.CloseProtocolError, "capturedAt"},
		{"reserved event type", false, rec(eventRec(1, ids.New(), "device.online", now)), protocol.CloseProtocolError, "relay only"},
		{"bad severity", false, []byte(`{"type":"records","records":{"items":[{"seq":1,"event":{"id":"` + ids.New() + `","type":"usb.attached","severity":"LOUD","message":"","createdAt":"` + resource.FormatTime(now) + `"}}]}}`), protocol.CloseProtocolError, "severity"},
		{"event data too big", false, rec(badData), protocol.CloseProtocolError, "data over"},
		{"bad heartbeat status", false, []byte(`{"type":"heartbeat","heartbeat":{"status":"PROVISIONING","channels":[]}}`), protocol.CloseProtocolError, "status"},
		{"seq above 2^63-1", false, rec(metricRec(1<<63, now, 1)), protocol.CloseProtocolError, "seq 9223372036854775808 is above the protocol's bound 2^63-1"},
		{"seq 2^64-1", false, rec(metricRec(1, now, 1), metricRec(math.MaxUint64, now.Add(time.Second), 1)), protocol.CloseProtocolError, "records.items[1].seq 18446744073709551615 is above"},
		{"ipAddress not an address", false, []byte(`{"type":"heartbeat","heartbeat":{"status":"ONLINE","ipAddress":"<script>","channels":[]}}`), protocol.CloseProtocolError, "ipAddress"},
		{"ipAddress with a zone", false, []byte(`{"type":"heartbeat","heartbeat":{"status":"ONLINE","ipAddress":"fe80::1%eth0","channels":[]}}`), protocol.CloseProtocolError, "ipAddress"},
		{"point id not <channelId>.<name>", false, rec(protocol.Record{Seq: 1, Points: &protocol.PointBatch{Samples: []protocol.PointSample{{Point: "rs485-1.Boiler", At: resource.T(now), Value: 1}}}}),
			protocol.CloseProtocolError, "records.items[0].points.samples[0].point"},
		{"point quality", false, []byte(`{"type":"heartbeat","heartbeat":{"status":"ONLINE","channels":[{"id":"rs485-1","points":[{"name":"t","value":1,"quality":"fine"}]}]}}`),
			protocol.CloseProtocolError, "heartbeat.channels[0].points[0].quality"},
		{"configApplied above desired", false, []byte(`{"type":"config_applied","configApplied":{"version":7}}`), protocol.CloseProtocolError, "configApplied.version 7 is above the desired version 0"},
	}
	e := newEnv(t, open, nil)
	_, goodTok := e.addDevice("IG-500")
	good, _ := e.connect(goodTok, hello())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, tok := e.addDevice("IG-500")
			var a *agent
			if tc.skipHello {
				a = e.mustDial(tok)
			} else {
				a, _ = e.connect(tok, hello())
			}
			a.sendRaw(tc.msg)
			e.closedAlone(t, a, id, good, tc.code, tc.reason)
		})
	}
	if !strings.Contains(e.logs.String(), "agent connection closed") {
		t.Error("closes are not logged")
	}
}

// closedAlone checks that the relay closed a (of device id) with code and
// a reason containing reason, stored no metric of it, and that the other
// agent carries on.
func (e *env) closedAlone(t *testing.T, a *agent, id string, other *agent, code websocket.StatusCode, reason string) {
	t.Helper()
	ce := a.expectClose(5 * time.Second)
	if ce.Code != code || !strings.Contains(ce.Reason, reason) {
		t.Errorf("closed with %d %q, want %d containing %q", ce.Code, ce.Reason, code, reason)
	}
	if n := e.metrics(id); n != 0 {
		t.Errorf("%d metrics stored from a rejected message", n)
	}
	other.heartbeat(protocol.Heartbeat{})
	e.otherSeq++ // one after another: a seq far above the last stored is refused (MaxSeqStep)
	if seq := other.records(metricRec(e.otherSeq, time.Now(), 5)); seq != e.otherSeq {
		t.Error("other agent not acknowledged")
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func TestNewerConnectionReplacesOlder(t *testing.T) { stores.Run(t, testNewerConnectionReplacesOlder) }

func testNewerConnectionReplacesOlder(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	old, _ := e.connect(tok, hello())
	cur, _ := e.connect(tok, hello())
	ce := old.expectClose(5 * time.Second)
	if ce.Code != protocol.CloseReplaced {
		t.Errorf("old connection closed with %d %q, want %d", ce.Code, ce.Reason, protocol.CloseReplaced)
	}
	cur.heartbeat(protocol.Heartbeat{})
	if seq := cur.records(metricRec(1, time.Now(), 3)); seq != 1 {
		t.Errorf("ack = %d", seq)
	}
	time.Sleep(100 * time.Millisecond)
	if s := e.device(id).Status; s != "ONLINE" {
		t.Errorf("status after replacement = %s, want ONLINE", s)
	}
	if n := e.countEvents(id, "device.offline", nil); n != 0 {
		t.Errorf("replacement recorded %d device.offline events", n)
	}
}

func TestOfflineAfterThreeMissedHeartbeats(t *testing.T) {
	stores.Run(t, testOfflineAfterThreeMissedHeartbeats)
}

func testOfflineAfterThreeMissedHeartbeats(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	h := hello()
	h.HeartbeatInterval = protocol.Duration{Duration: 100 * time.Millisecond}
	a, _ := e.connect(tok, h)
	a.heartbeat(protocol.Heartbeat{})
	start := time.Now()
	ce := a.expectClose(5 * time.Second)
	if el := time.Since(start); el < 250*time.Millisecond {
		t.Errorf("closed after %s, before three intervals", el)
	}
	if ce.Code != websocket.StatusPolicyViolation || !strings.Contains(ce.Reason, "heartbeat") {
		t.Errorf("close = %d %q", ce.Code, ce.Reason)
	}
	eventually(t, 2*time.Second, func() string {
		if s := e.device(id).Status; s != "OFFLINE" {
			return "status " + s
		}
		return ""
	})
	if got := e.obs.statusList(id); got[len(got)-1] != "ONLINE>OFFLINE" {
		t.Errorf("status changes = %v", got)
	}
	if n := e.countEvents(id, "device.offline", func(ev resource.Event) bool { return ev.Severity == resource.SeverityWarning }); n != 1 {
		t.Errorf("device.offline events = %d", n)
	}
}

func TestOfflineWhenSocketClosesAndOnlineAgain(t *testing.T) {
	stores.Run(t, testOfflineWhenSocketClosesAndOnlineAgain)
}

func testOfflineWhenSocketClosesAndOnlineAgain(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	a.ws.CloseNow() // the link drops
	eventually(t, 2*time.Second, func() string {
		if s := e.device(id).Status; s != "OFFLINE" {
			return "status " + s
		}
		return ""
	})
	e.connect(tok, hello())
	if s := e.device(id).Status; s != "ONLINE" {
		t.Errorf("status after reconnect = %s", s)
	}
	want := []string{"device.online", "device.offline", "device.online"}
	var got []string
	for _, ev := range slices.Backward(e.events(id, "")) { // oldest first
		if strings.HasPrefix(ev.Type, "device.") && ev.Type != protocol.EventDeviceStatusChanged {
			got = append(got, ev.Type)
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("events = %v, want %v", got, want)
	}
	types := slices.DeleteFunc(e.obs.eventTypes(id), func(t string) bool { return t == protocol.EventDeviceStatusChanged })
	if !slices.Equal(types, want) {
		t.Errorf("observed events = %v, want %v", types, want)
	}
	// Every status change is a device.status_changed event, stored and
	// heard, in the order of the changes.
	wantChanges := []string{"PROVISIONING>CONNECTING", "CONNECTING>ONLINE", "ONLINE>OFFLINE", "OFFLINE>CONNECTING", "CONNECTING>ONLINE"}
	if got := e.obs.statusList(id); !slices.Equal(got, wantChanges) {
		t.Errorf("status changes = %v, want %v", got, wantChanges)
	}
	var heard []string
	for _, ev := range e.obs.eventsOf(id) {
		if ev.Type == protocol.EventDeviceStatusChanged {
			var d struct{ From, To string }
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				t.Fatal(err)
			}
			heard = append(heard, d.From+">"+d.To)
		}
	}
	if !slices.Equal(heard, wantChanges) {
		t.Errorf("heard device.status_changed %v, want %v", heard, wantChanges)
	}
	if n := e.countEvents(id, protocol.EventDeviceStatusChanged, func(resource.Event) bool { return true }); n != len(wantChanges) {
		t.Errorf("%d device.status_changed events stored, want %d", n, len(wantChanges))
	}
}

func TestDevicesLeftOnlineByACrashedRelayGoOffline(t *testing.T) {
	stores.Run(t, testDevicesLeftOnlineByACrashedRelayGoOffline)
}

func testDevicesLeftOnlineByACrashedRelayGoOffline(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, func(c *agentlink.Config) { c.OrphanWindow = 300 * time.Millisecond })
	stale, _ := e.addDevice("IG-500")
	back, backTok := e.addDevice("IG-500")
	// A previous relay process died with both devices ONLINE and no
	// deadline: a state no relay of today leaves, written directly.
	dialects.Exec(t, e.s.Store, `UPDATE devices SET status = 'ONLINE', agent_session = 'dead', agent_deadline = NULL WHERE id IN (?, ?)`, stale, back)
	srv2 := agentlink.New(agentlink.Config{Store: e.s.Agent, OrphanWindow: 300 * time.Millisecond, SweepInterval: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go srv2.Run(ctx)
	// One of them reconnects (to the test's server) within the window.
	h := hello()
	h.HeartbeatInterval = protocol.Duration{Duration: time.Minute}
	e.connect(backTok, h)
	eventually(t, 3*time.Second, func() string {
		if s := e.device(stale).Status; s != "OFFLINE" {
			return "stale device status " + s
		}
		return ""
	})
	if s := e.device(back).Status; s != "ONLINE" {
		t.Errorf("reconnected device status = %s", s)
	}
}

func TestConfigReachesConnectedAgent(t *testing.T) { forCodecs(t, testConfigReachesConnectedAgent) }

func testConfigReachesConnectedAgent(t *testing.T, e *env) {
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	a.heartbeat(protocol.Heartbeat{Channels: []protocol.ChannelState{{ID: "rs485-1", Available: true}}})
	time.Sleep(50 * time.Millisecond)
	cfg, err := serialcfg.DecodeFor("rs485", []byte(`{"kind":"rs485","baudRate":19200,"dataBits":8,"parity":"even","stopBits":1,"mode":"modbus_rtu_master","slaveId":7}`))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := e.serial.PutChannel(context.Background(), e.org.ID, id, "rs485-1", cfg); err != nil {
		t.Fatal(err)
	}
	m, err := a.recvTimeout(time.Second)
	if err != nil {
		t.Fatalf("no config within 1s of PUT: %v", err)
	}
	if m.Type != protocol.TypeConfig || m.Config.Version != 1 {
		t.Fatalf("got %+v", m)
	}
	t.Logf("config arrived %s after PUT", time.Since(start))
	var rs *serialcfg.RS485
	for _, c := range m.Config.Channels {
		if c.ID == "rs485-1" {
			rs = c.Config.RS485
		}
	}
	if rs == nil || rs.BaudRate != 19200 || rs.SlaveID != 7 || len(m.Config.Channels) != 8 || m.Config.Mode != "managed" || !m.Config.Enabled {
		t.Errorf("config = %+v", m.Config)
	}
	a.send(protocol.Message{Type: protocol.TypeConfigApplied, ConfigApplied: &protocol.ConfigApplied{Version: 1}})
	eventually(t, 2*time.Second, func() string {
		if v := e.appliedVersion(id); v != 1 {
			return fmt.Sprintf("applied_version %d", v)
		}
		return ""
	})

	// A disconnected agent receives the newer configuration after its hello.
	a.ws.Close(websocket.StatusNormalClosure, "")
	mode := "both"
	if _, err := e.serial.PatchSerial(context.Background(), e.org.ID, id, cloud.SerialPatch{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	h := hello()
	h.AppliedVersion = 1
	b, _ := e.connect(tok, h)
	m = b.recv()
	if m.Type != protocol.TypeConfig || m.Config.Version != 2 || m.Config.Mode != "both" {
		t.Errorf("after reconnect got %+v", m)
	}
	// Up to date: nothing is sent.
	b.ws.Close(websocket.StatusNormalClosure, "")
	h.AppliedVersion = 2
	c, _ := e.connect(tok, h)
	c.heartbeat(protocol.Heartbeat{})
	if m, err := c.recvTimeout(300 * time.Millisecond); err == nil {
		t.Errorf("up-to-date agent got %+v", m)
	}
}

func TestShutdownClosesWithShutdownCode(t *testing.T) {
	stores.Run(t, testShutdownClosesWithShutdownCode)
}

func testShutdownClosesWithShutdownCode(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		done <- e.srv.Shutdown(ctx)
	}()
	ce := a.expectClose(5 * time.Second)
	if ce.Code != protocol.CloseServiceRestart {
		t.Errorf("close = %d %q", ce.Code, ce.Reason)
	}
	if err := <-done; err != nil {
		t.Errorf("shutdown: %v", err)
	}
	if s := e.device(id).Status; s != "ONLINE" {
		t.Errorf("status after relay shutdown = %s; the next relay decides", s)
	}
	if _, resp, err := e.dial(tok); err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("dial after shutdown: %v %v", resp, err)
	}
}

func TestRevokedWhileConnected(t *testing.T) { stores.Run(t, testRevokedWhileConnected) }

func testRevokedWhileConnected(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, func(c *agentlink.Config) { c.RevocationCheck = 50 * time.Millisecond })
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	if _, err := e.s.Store.RevokeDevice(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	ce := a.expectClose(5 * time.Second)
	if ce.Code != protocol.CloseUnauthorized {
		t.Errorf("close = %d %q, want %d", ce.Code, ce.Reason, protocol.CloseUnauthorized)
	}
	eventually(t, 2*time.Second, func() string {
		if s := e.device(id).Status; s != "OFFLINE" {
			return "status " + s
		}
		return ""
	})
	if _, resp, err := e.dial(tok); err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("reconnect with a revoked token: %v %v", resp, err)
	}
}

// Heartbeats from many connections at once, each changing a channel every
// time: every device's observers see exactly its own changes, in order,
// and the store keeps its last values. The endpoint and the store reuse
// their per-heartbeat memory (hbPending, the store's queue entries), so a
// record handed on too early would show here as another device's value or
// a skipped or repeated one.
func TestConcurrentHeartbeatsKeepTheirOwnValues(t *testing.T) {
	forCodecs(t, testConcurrentHeartbeatsKeepTheirOwnValues)
}

func testConcurrentHeartbeatsKeepTheirOwnValues(t *testing.T, e *env) {
	const devices, beats = 16, 60
	ids := make([]string, devices)
	agents := make([]*agent, devices)
	for d := range devices {
		var tok string
		ids[d], tok = e.addDevice("IG-500")
		agents[d], _ = e.connect(tok, hello())
	}
	var wg sync.WaitGroup
	for d := range devices {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := range beats {
				agents[d].heartbeat(protocol.Heartbeat{IPAddress: fmt.Sprintf("10.0.%d.%d", d, n), Channels: []protocol.ChannelState{
					{ID: "rs485-1", Available: true, Live: fmt.Sprintf("dev%d-beat%d", d, n)},
					{ID: "gpio-1", Available: true, Live: "1"},
				}})
			}
		}()
	}
	wg.Wait()
	eventually(t, 10*time.Second, func() string {
		e.obs.mu.Lock()
		defer e.obs.mu.Unlock()
		for d, id := range ids {
			if n := len(e.obs.heartbeats[id]); n != beats {
				return fmt.Sprintf("device %d: %d of %d heartbeats observed", d, n, beats)
			}
		}
		return ""
	})
	e.obs.mu.Lock()
	defer e.obs.mu.Unlock()
	for d, id := range ids {
		for n, hb := range e.obs.heartbeats[id] {
			var got []string
			for _, c := range hb.Changed {
				got = append(got, c.ID+"="+c.Live)
			}
			want := []string{fmt.Sprintf("rs485-1=dev%d-beat%d", d, n)}
			if n == 0 {
				want = append(want, "gpio-1=1")
			}
			if !slices.Equal(got, want) {
				t.Errorf("device %d heartbeat %d: observers saw changes %v, want %v", d, n, got, want)
			}
		}
		if r := e.device(id); r.IP != fmt.Sprintf("10.0.%d.%d", d, beats-1) {
			t.Errorf("device %d: stored address %q, want its last", d, r.IP)
		}
		ch, err := e.serial.Channel(context.Background(), e.org.ID, id, "rs485-1")
		if err != nil {
			t.Fatal(err)
		}
		live := ch.Telemetry.Live
		if want := fmt.Sprintf("dev%d-beat%d", d, beats-1); live != want {
			t.Errorf("device %d: stored live %q, want %q", d, live, want)
		}
	}
}

// TestSeqAboveInt64RefusedAndTelemetryGoesOn: a record numbered above
// 2^63-1 closes the connection with a reason naming the bound and stores
// nothing; the device's next connection has its records stored and acked
// as before (the bad number did not become its last stored sequence).
func TestSeqAboveInt64RefusedAndTelemetryGoesOn(t *testing.T) {
	stores.Run(t, testSeqAboveInt64RefusedAndTelemetryGoesOn)
}

func testSeqAboveInt64RefusedAndTelemetryGoesOn(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	now := time.Now()
	if seq := a.records(metricRec(3, now.Add(-time.Minute), 1)); seq != 3 {
		t.Fatalf("ack %d, want 3", seq)
	}
	a.send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(1<<63+5, now.Add(-30*time.Second), 2)}}})
	ce := a.expectClose(5 * time.Second)
	if ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "2^63-1") {
		t.Errorf("closed with %d %q, want 4000 naming the bound", ce.Code, ce.Reason)
	}
	b, w := e.connect(tok, hello())
	if w.LastSeq != 3 {
		t.Errorf("welcome lastSeq %d after the refused record, want 3", w.LastSeq)
	}
	if seq := b.records(metricRec(4, now, 3)); seq != 4 {
		t.Errorf("next record acked at %d, want 4", seq)
	}
	if n := e.metrics(id); n != 2 {
		t.Errorf("%d metrics stored, want 2", n)
	}
}

// TestAgentReportsNormalized: an IPv6 address is stored in its one
// canonical spelling; a heartbeat's appliedVersion is never stored above
// the desired version; an agent whose hello claims a version above the
// desired one gets the desired configuration.
func TestAgentReportsNormalized(t *testing.T) { stores.Run(t, testAgentReportsNormalized) }

func testAgentReportsNormalized(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	a.sendRaw([]byte(`{"type":"heartbeat","heartbeat":{"status":"ONLINE","ipAddress":"2001:DB8:0:0::0:1","appliedVersion":9,"channels":[]}}`))
	applied := func() int64 { return e.appliedVersion(id) }
	eventually(t, 2*time.Second, func() string {
		if ip := e.device(id).IP; ip != "2001:db8::1" {
			return "ipAddress " + ip
		}
		return ""
	})
	if v := applied(); v != 0 {
		t.Errorf("applied_version %d stored from a heartbeat, desired is 0", v)
	}

	mode := "both"
	if _, err := e.serial.PatchSerial(context.Background(), e.org.ID, id, cloud.SerialPatch{Mode: &mode}); err != nil {
		t.Fatal(err)
	}
	if m := a.recv(); m.Type != protocol.TypeConfig || m.Config.Version != 1 {
		t.Fatalf("want config 1, got %+v", m)
	}
	a.heartbeat(protocol.Heartbeat{AppliedVersion: 5})
	a.send(protocol.Message{Type: protocol.TypeConfigApplied, ConfigApplied: &protocol.ConfigApplied{Version: 1}})
	eventually(t, 2*time.Second, func() string {
		if v := applied(); v != 1 {
			return fmt.Sprintf("applied_version %d, want 1", v)
		}
		return ""
	})
	a.ws.Close(websocket.StatusNormalClosure, "")

	h := hello()
	h.AppliedVersion = 7 // a version this relay never issued
	b, _ := e.connect(tok, h)
	if m := b.recv(); m.Type != protocol.TypeConfig || m.Config.Version != 1 || m.Config.Mode != "both" {
		t.Errorf("after a hello above the desired version: got %+v, want config 1", m)
	}
}

// TestBadCBORClosesOnlyThatConnection: on a connection speaking CBOR, what
// the decoder refuses (malformed, repeated keys, nesting or arrays beyond
// its bounds, indefinite lengths, invalid UTF-8) and frames of the wrong
// type close that connection with 4000 and store nothing; the protocol's
// own limits keep their close codes; another agent carries on.
func TestBadCBORClosesOnlyThatConnection(t *testing.T) {
	stores.Run(t, testBadCBORClosesOnlyThatConnection)
}

func testBadCBORClosesOnlyThatConnection(t *testing.T, open storetest.Opener) {
	now := time.Now()
	cb := func(m protocol.Message) []byte {
		b, err := protocol.CBOR.Marshal(&m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	var tooMany []protocol.Record
	for i := range protocol.MaxBatch + 1 {
		tooMany = append(tooMany, metricRec(uint64(i+1), now.Add(-time.Duration(i)*time.Second), 1))
	}
	var tooManyChannels []protocol.ChannelState
	for i := range 5000 {
		tooManyChannels = append(tooManyChannels, protocol.ChannelState{ID: fmt.Sprint(i)})
	}
	good := cb(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(1, now, 1)}}})
	deep := []byte{0xa2, 0x01, 0x69, 'h', 'e', 'a', 'r', 't', 'b', 'e', 'a', 't', 0x03}
	deep = append(deep, bytes.Repeat([]byte{0x81}, 40)...) // arrays in arrays
	deep = append(deep, 0x00)
	cases := []struct {
		name   string
		text   bool // sent in a text frame
		msg    []byte
		code   websocket.StatusCode
		reason string
	}{
		{"truncated", false, good[:len(good)-3], protocol.CloseProtocolError, "malformed CBOR"},
		{"not CBOR", false, []byte("\xff\xff"), protocol.CloseProtocolError, "malformed CBOR"},
		{"JSON in a text frame", true, mustJSON(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(1, now, 1)}}}), protocol.CloseProtocolError, "a text frame on a connection speaking cbor"},
		{"repeated key", false, []byte{0xa2, 0x01, 0x63, 'a', 'c', 'k', 0x01, 0x63, 'a', 'c', 'k'}, protocol.CloseProtocolError, "duplicate map key"},
		{"nested too deep", false, deep, protocol.CloseProtocolError, "exceeded max nested level"},
		{"indefinite length", false, []byte{0xbf, 0x01, 0x63, 'a', 'c', 'k', 0xff}, protocol.CloseProtocolError, "indefinite-length"},
		{"invalid UTF-8", false, []byte{0xa1, 0x01, 0x62, 0xff, 0xfe}, protocol.CloseProtocolError, "invalid UTF-8"},
		{"array over the decoder's bound", false, cb(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Status: resource.StatusOnline, Channels: tooManyChannels}}), protocol.CloseProtocolError, "exceeded max number of elements"},
		{"batch over MaxBatch", false, cb(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: tooMany}}), protocol.CloseTooLarge, "batch of"},
		{"oversized", false, cb(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{Status: resource.StatusOnline, IPAddress: strings.Repeat("x", protocol.MaxMessageBytes)}}), protocol.CloseTooLarge, "message over"},
		{"heartbeat without heartbeat", false, cb(protocol.Message{Type: protocol.TypeHeartbeat}), protocol.CloseProtocolError, "heartbeat.status"},
		{"cpu out of range", false, cb(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(1, now, 150)}}}), protocol.CloseProtocolError, "cpuPct"},
		{"event data not an object", false, cb(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{
			{Seq: 1, Event: &protocol.Event{ID: ids.New(), Type: "usb.attached", Severity: resource.SeverityInfo, Data: json.RawMessage(`[1]`), CreatedAt: resource.T(now)}}}}}),
			protocol.CloseProtocolError, "must be a JSON object"},
	}
	e := newEnv(t, open, nil)
	e.codec = protocol.CBOR
	_, goodTok := e.addDevice("IG-500")
	other, _ := e.connect(goodTok, hello())
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			id, tok := e.addDevice("IG-500")
			a, _ := e.connect(tok, hello())
			if tc.text {
				a.sendRaw(tc.msg)
			} else {
				a.sendFrame(protocol.CBOR, tc.msg)
			}
			e.closedAlone(t, a, id, other, tc.code, tc.reason)
		})
	}
	t.Run("CBOR hello", func(t *testing.T) {
		_, tok := e.addDevice("IG-500")
		a := e.mustDial(tok)
		h := hello()
		h.Codecs = []protocol.Codec{protocol.CBOR}
		a.sendFrame(protocol.CBOR, cb(protocol.Message{Type: protocol.TypeHello, Hello: &h}))
		if ce := a.expectClose(5 * time.Second); ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "a binary frame on a connection speaking json") {
			t.Errorf("closed with %d %q", ce.Code, ce.Reason)
		}
	})
	t.Run("CBOR on a JSON connection", func(t *testing.T) {
		_, tok := e.addDevice("IG-500")
		e.codec = protocol.JSON
		a, _ := e.connect(tok, hello())
		e.codec = protocol.CBOR
		a.sendFrame(protocol.CBOR, good)
		if ce := a.expectClose(5 * time.Second); ce.Code != protocol.CloseProtocolError || !strings.Contains(ce.Reason, "a binary frame on a connection speaking json") {
			t.Errorf("closed with %d %q", ce.Code, ce.Reason)
		}
	})
}

// TestCodecNegotiation: the relay answers CBOR to a hello offering it
// (among codecs it does not know), and an agent offering nothing, as
// agents from before CBOR, gets a welcome without a codec and JSON text
// frames, acks included.
func TestCodecNegotiation(t *testing.T) { stores.Run(t, testCodecNegotiation) }

func testCodecNegotiation(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, nil)
	_, tok := e.addDevice("IG-500")
	h := hello()
	h.Codecs = []protocol.Codec{"msgpack", protocol.CBOR}
	a, w := e.connect(tok, h)
	if w.Codec != protocol.CBOR {
		t.Fatalf("welcome codec %q, want cbor", w.Codec)
	}
	if seq := a.records(metricRec(1, time.Now(), 1)); seq != 1 { // the ack arrives as CBOR (recv checks the frame)
		t.Errorf("ack %d", seq)
	}
	a.ws.Close(websocket.StatusNormalClosure, "")

	old := e.mustDial(tok)
	old.sendRaw([]byte(`{"type":"hello","hello":{"agentVersion":"0.9.0","model":"IG-500","heartbeatInterval":"1h"}}`))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	typ, b, err := old.ws.Read(ctx)
	if err != nil || typ != websocket.MessageText || strings.Contains(string(b), "codec") || !strings.Contains(string(b), `"type":"welcome"`) {
		t.Fatalf("an old agent's welcome: %v %v %s", typ, err, b)
	}
	old.sendRaw(mustJSON(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{metricRec(2, time.Now(), 1)}}}))
	typ, b, err = old.ws.Read(ctx)
	if err != nil || typ != websocket.MessageText || string(b) != `{"type":"ack","ack":{"seq":2}}` {
		t.Fatalf("an old agent's ack: %v %v %s", typ, err, b)
	}
	if !strings.Contains(e.logs.String(), "codec=cbor") || !strings.Contains(e.logs.String(), "codec=json") {
		t.Errorf("the agent online lines do not name the codec:\n%s", e.logs.String())
	}
}

// dialFrom dials the endpoint from a given loopback source address.
func (e *env) dialFrom(src, token string) (*http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, DisableKeepAlives: true}}
	h := http.Header{"Authorization": {"Bearer " + token}}
	ws, resp, err := websocket.Dial(ctx, e.url(), &websocket.DialOptions{HTTPClient: client, HTTPHeader: h, Subprotocols: []string{protocol.Subprotocol}})
	if err == nil {
		ws.CloseNow()
	}
	return resp, err
}

// TestRefusalsRateLimitedAndLogsAggregated floods the endpoint with bad
// tokens from one address: after RefusalLimit refusals it answers 429 with
// Retry-After (without looking the token up), the log holds one line for
// that address plus one summary with the count, and an agent on another
// address connects meanwhile. The whole flood falls in one log interval
// (an hour), whose summary the relay writes when it shuts down: with a
// short interval, how many intervals the flood spanned (and so how many
// lines it left) depended on the machine's speed. What each new interval
// logs is TestRefusalLogIntervals (refusals_test.go).
func TestRefusalsRateLimitedAndLogsAggregated(t *testing.T) {
	stores.Run(t, testRefusalsRateLimitedAndLogsAggregated)
}

func testRefusalsRateLimitedAndLogsAggregated(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open, func(c *agentlink.Config) { c.RefusalLimit = 5; c.RefusalLogInterval = time.Hour })
	_, tok := e.addDevice("IG-500")
	var s401, s429 int
	for i := 0; i < 60; i++ {
		resp, err := e.dialFrom("127.0.0.2", "fleet_dt_wrong"+strconv.Itoa(i))
		if err == nil || resp == nil {
			t.Fatalf("bad token %d: %v", i, err)
		}
		switch resp.StatusCode {
		case http.StatusUnauthorized:
			s401++
		case http.StatusTooManyRequests:
			s429++
			if resp.Header.Get("Retry-After") == "" {
				t.Error("429 without Retry-After")
			}
		default:
			t.Fatalf("bad token %d: status %d", i, resp.StatusCode)
		}
	}
	if s401 != 5 || s429 != 55 {
		t.Errorf("401s %d, 429s %d; want 5 and 55", s401, s429)
	}
	if resp, err := e.dialFrom("127.0.0.3", tok); err != nil {
		t.Errorf("a good agent on another address: %v (%v)", err, resp)
	}
	summaries := func() (lines, total int) {
		for _, line := range strings.Split(e.logs.String(), "\n") {
			if !strings.Contains(line, `msg="agent refusals"`) {
				continue
			}
			lines++
			i := strings.Index(line, " count=")
			n, _ := strconv.Atoi(strings.Fields(line[i+len(" count="):])[0])
			total += n
		}
		return lines, total
	}
	// Shutting down ends the interval: its summary is written.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, func() string {
		if lines, _ := summaries(); lines == 0 {
			return "no summary after the relay shut down:\n" + e.logs.String()
		}
		return ""
	})
	if lines, total := summaries(); lines != 1 || total != 60 {
		t.Errorf("%d summary lines counting %d refusals, want 1 counting 60:\n%s", lines, total, e.logs.String())
	}
	if n := strings.Count(e.logs.String(), `msg="agent refused"`); n != 1 {
		t.Errorf("%d individual refusal lines for one address, want 1:\n%s", n, e.logs.String())
	}
}

// TestObserversKeepWhatTheyAreGiven: an Observer may keep a heartbeat's
// tunnel state and changed channels; later heartbeats of the connection,
// decoded into the same memory, do not change them.
func TestObserversKeepWhatTheyAreGiven(t *testing.T) { forCodecs(t, testObserversKeepWhatTheyAreGiven) }

func testObserversKeepWhatTheyAreGiven(t *testing.T, e *env) {
	id, tok := e.addDevice("IG-500")
	a, _ := e.connect(tok, hello())
	for i, up := range []bool{true, true, false, true} {
		a.heartbeat(protocol.Heartbeat{VPN: &protocol.VPN{Up: up, InterfaceName: "wg0", PeerCount: 1},
			Channels: []protocol.ChannelState{{ID: "gpio-1", Available: true, Live: fmt.Sprint(i)}}})
	}
	eventually(t, 2*time.Second, func() string {
		e.obs.mu.Lock()
		defer e.obs.mu.Unlock()
		if n := len(e.obs.heartbeats[id]); n != 4 {
			return fmt.Sprintf("%d heartbeats observed", n)
		}
		return ""
	})
	e.obs.mu.Lock()
	defer e.obs.mu.Unlock()
	for i, hb := range e.obs.heartbeats[id] {
		if hb.VPN == nil || hb.VPN.InterfaceName != "wg0" || hb.VPN.PeerCount != 1 || hb.VPN.Up != (i != 2) {
			t.Errorf("heartbeat %d: observed tunnel %+v", i, hb.VPN)
		}
		if len(hb.Changed) != 1 || hb.Changed[0].Live != fmt.Sprint(i) {
			t.Errorf("heartbeat %d: observed changes %+v", i, hb.Changed)
		}
	}
}
