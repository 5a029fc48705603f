package storetest

import (
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// metricsOf returns every stored sample of d in [from, to], ascending.
func (e *env) metricsOf(d device, from, to time.Time) []resource.MetricSample {
	e.t.Helper()
	m, err := e.Store.Devices().Metrics(e.ctx, d.OrgID, d.ID, cloud.MetricsQuery{From: from, To: to, Limit: 1000})
	if err != nil {
		e.t.Fatal(err)
	}
	return m.Data
}

// eventsOf returns every stored event of d, newest first.
func (e *env) eventsOf(d device, typ string) []resource.Event {
	e.t.Helper()
	var all []resource.Event
	walk(e.t, 200, func(cursor string) ([]string, resource.Pagination, error) {
		l, err := e.Store.Devices().Events(e.ctx, d.OrgID, d.ID, cloud.EventFilter{Page: cloud.Page{Limit: 200, Cursor: cursor}, Type: typ})
		var ids []string
		for _, ev := range l.Data {
			ids = append(ids, ev.ID)
		}
		all = append(all, l.Data...)
		return ids, l.Pagination, err
	})
	return all
}

// testRecordsExactlyOnce: a batch sent again (the agent did not see the
// ack) stores nothing new; the device's last sequence only rises; an event
// id that another device already used is stored under an id of its own.
func testRecordsExactlyOnce(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	d2 := e.device(org.ID, "IG-500")
	var batch []protocol.Record
	for i := 0; i < 300; i++ {
		at := t0.Add(time.Duration(i) * time.Minute)
		if i%3 == 0 {
			batch = append(batch, eventRecord("usb.attached", resource.SeverityInfo, at))
		} else {
			batch = append(batch, metricRecord(at, float64(i)))
		}
	}
	for i := range batch {
		batch[i].Seq = uint64(1000 + i)
	}
	out := e.records(d, batch...)
	if len(out.Metrics) != 200 || len(out.Events) != 100 || out.LastSeq != 1299 {
		t.Fatalf("first send: %d metrics, %d events, last seq %d", len(out.Metrics), len(out.Events), out.LastSeq)
	}
	again := e.records(d, batch[100:]...)
	if len(again.Metrics) != 0 || len(again.Events) != 0 || again.LastSeq != 1299 {
		t.Errorf("resend stored %d metrics and %d events, last seq %d", len(again.Metrics), len(again.Events), again.LastSeq)
	}
	// A partial overlap stores only the new records.
	more := []protocol.Record{batch[299], metricRecord(t0.Add(400*time.Minute), 1)}
	more[1].Seq = 1300
	if o := e.records(d, more...); len(o.Metrics) != 1 || !o.Metrics[0].CapturedAt.Equal(t0.Add(400*time.Minute)) || o.LastSeq != 1300 {
		t.Errorf("overlap: %+v", o)
	}
	// An older sequence never lowers the last one.
	old := metricRecord(t0.Add(-time.Hour), 1)
	old.Seq = 5
	if o := e.records(d, old); o.LastSeq != 1300 || len(o.Metrics) != 1 {
		t.Errorf("old seq: %+v", o)
	}
	if n := len(e.metricsOf(d, t0.Add(-2*time.Hour), t0.Add(10*time.Hour))); n != 202 {
		t.Errorf("%d samples stored, want 202", n)
	}
	if n := len(e.eventsOf(d, "usb.attached")); n != 100 {
		t.Errorf("%d events stored, want 100", n)
	}
	// Hello tells the agent the last stored sequence.
	session := e.online(d, 30*time.Second)
	hello, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: e.auth(d), Session: session, At: t0, HeartbeatInterval: 30 * time.Second, Deadline: t0.Add(time.Minute)})
	if err != nil || hello.LastSeq != 1300 {
		t.Errorf("hello last seq = %d, %v", hello.LastSeq, err)
	}

	// Another device reusing an event id: its own row, the first untouched.
	shared := *batch[0].Event
	theirs := protocol.Record{Seq: 1, Event: &protocol.Event{ID: shared.ID, Type: "usb.detached", Severity: resource.SeverityWarning, Message: "mine", CreatedAt: shared.CreatedAt}}
	o := e.records(d2, theirs)
	if len(o.Events) != 1 || o.Events[0].ID == shared.ID || o.Events[0].Type != "usb.detached" {
		t.Fatalf("colliding id stored as %+v", o.Events)
	}
	if o2 := e.records(d2, theirs); len(o2.Events) != 0 {
		t.Errorf("resend of a remapped event stored again: %+v", o2.Events)
	}
	first := e.eventsOf(d, "usb.attached")
	found := false
	for _, ev := range first {
		if ev.ID == shared.ID {
			found = ev.Message == shared.Message
		}
	}
	if !found {
		t.Errorf("the first device's event %s changed or vanished", shared.ID)
	}
	if evs := e.eventsOf(d2, ""); len(evs) != 1 || evs[0].Message != "mine" {
		t.Errorf("second device's events: %+v", evs)
	}
}

// testRecordsConcurrentBatches: sample batches of many devices arriving
// at once (a store may write them in one transaction, even in one
// statement) are each answered as if stored alone: the samples the batch
// stored, in order (a batch sent twice at once stores once, reported by one
// of the two), and the device's last sequence. A batch that fails (its
// device is not in the store) fails alone.
func testRecordsConcurrentBatches(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	const devices = 16
	ds := make([]device, devices)
	for i := range ds {
		ds[i] = e.device(org.ID, "IG-500")
	}
	// batch is device i's samples from minute k0 to k1-1, sequence k+1,
	// values telling device and minute apart.
	batch := func(i, k0, k1 int) []protocol.Record {
		var b []protocol.Record
		for k := k0; k < k1; k++ {
			r := metricRecord(t0.Add(time.Duration(k)*time.Minute), float64(i*100+k))
			r.Seq = uint64(k + 1)
			b = append(b, r)
		}
		return b
	}
	ghost := agentlink.Device{ID: ids.New(), OrgID: org.ID, Model: "IG-500"}
	round := func(k0, k1 int, withGhost bool) (reported [devices][]float64) {
		var mu sync.Mutex
		n := 2 * devices
		if withGhost {
			n++
		}
		concurrently(n, func(n int) {
			if n == 2*devices {
				if _, err := e.Agent.Records(e.ctx, agentlink.RecordsIn{Device: ghost, Session: "s", Items: batch(99, k0, k1)}); err == nil {
					t.Errorf("records of a device the store does not have: no error")
				}
				return
			}
			i := n % devices
			out, err := e.Agent.Records(e.ctx, agentlink.RecordsIn{Device: ds[i].ref(), Session: "s", Items: batch(i, k0, k1)})
			if err != nil {
				t.Errorf("device %d: %v", i, err)
				return
			}
			if out.LastSeq != uint64(k1) {
				t.Errorf("device %d: last seq %d, want %d", i, out.LastSeq, k1)
			}
			mu.Lock()
			defer mu.Unlock()
			for j, m := range out.Metrics {
				if j > 0 && !m.CapturedAt.After(out.Metrics[j-1].CapturedAt.Time) {
					t.Errorf("device %d: stored samples reported out of order", i)
				}
				reported[i] = append(reported[i], m.CPUPct)
			}
		})
		return reported
	}
	check := func(what string, reported [devices][]float64, k0, k1 int) {
		t.Helper()
		for i, got := range reported {
			slices.Sort(got)
			var want []float64
			for k := k0; k < k1; k++ {
				want = append(want, float64(i*100+k))
			}
			if !slices.Equal(got, want) {
				t.Errorf("%s: device %d: reported stored %v, want %v", what, i, got, want)
			}
		}
	}
	check("first batches, each sent twice at once", round(0, 5, false), 0, 5)
	check("overlapping batches", round(3, 8, false), 5, 8)
	check("batches beside one that fails", round(6, 10, true), 8, 10)
	for i, d := range ds {
		ms := e.metricsOf(d, t0, t0.Add(time.Hour))
		if len(ms) != 10 {
			t.Fatalf("device %d: %d samples stored, want 10", i, len(ms))
		}
		for k, m := range ms {
			if m.CPUPct != float64(i*100+k) {
				t.Errorf("device %d: sample %d holds %v", i, k, m.CPUPct)
			}
		}
	}
}

// testRecordsFromTwoHandles: the same batch sent at once through two
// handles (an agent that reconnected to another relay while the first
// still wrote) is stored exactly once.
func testRecordsFromTwoHandles(t *testing.T, open Opener) {
	e, e2, d := newTwoRelays(t, open)
	var batch []protocol.Record
	for i := 0; i < 200; i++ {
		at := t0.Add(time.Duration(i) * time.Second)
		if i%2 == 0 {
			batch = append(batch, eventRecord("serial.error", resource.SeverityError, at))
		} else {
			batch = append(batch, metricRecord(at, float64(i)))
		}
	}
	var mu sync.Mutex
	inserted := map[string]int{}
	concurrently(8, func(i int) { // 4 rounds on each handle
		s := []*env{e, e2}[i%2]
		out, err := s.Agent.Records(e.ctx, agentlink.RecordsIn{Device: d.ref(), Session: "s", Items: batch})
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		for _, m := range out.Metrics {
			inserted[m.CapturedAt.String()]++
		}
		for _, ev := range out.Events {
			inserted[ev.ID]++
		}
	})
	if len(inserted) != 200 {
		t.Errorf("%d records reported inserted, want 200", len(inserted))
	}
	for k, n := range inserted {
		if n != 1 {
			t.Errorf("record %s reported inserted %d times", k, n)
		}
	}
	if n := len(e.metricsOf(d, t0, t0.Add(time.Hour))); n != 100 {
		t.Errorf("%d samples stored, want 100", n)
	}
	if n := len(e.eventsOf(d, "serial.error")); n != 100 {
		t.Errorf("%d events stored, want 100", n)
	}
}

// testSessions: a newer connection supersedes the older one wherever it
// was made; the older session's writes are refused and its disconnect
// changes nothing.
func testSessions(t *testing.T, open Opener) {
	e, e2, d := newTwoRelays(t, open)
	a := e.online(d, 30*time.Second)
	row := e.deviceRow(d.OrgID, d.ID)
	if row.Status != resource.StatusOnline || row.LastSeen == nil || !row.LastSeen.Equal(t0) || row.FirmwareVersion != "fw-1" {
		t.Fatalf("after hello: %+v", row)
	}
	if evs := e.eventsOf(d, protocol.EventDeviceOnline); len(evs) != 1 {
		t.Errorf("%d device.online events", len(evs))
	}
	dev := e.auth(d)
	// Session b on the other handle takes the device over.
	b := ids.New()
	e.clock.Add(time.Second)
	now := e.clock.Now()
	ch, err := e2.Agent.Connect(e.ctx, dev, b, now, now.Add(time.Minute))
	if err != nil || ch.From != resource.StatusOnline || ch.To != resource.StatusConnecting {
		t.Fatalf("connect b: %+v, %v", ch, err)
	}
	if _, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: dev, Session: a, At: now, HeartbeatInterval: 30 * time.Second, Deadline: now.Add(time.Minute)}); !errors.Is(err, agentlink.ErrSessionGone) {
		t.Errorf("hello of the superseded session: %v", err)
	}
	if _, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: a, At: now, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline}); !errors.Is(err, agentlink.ErrSessionGone) {
		t.Errorf("heartbeat of the superseded session: %v", err)
	}
	if _, err := e.Agent.ConfigApplied(e.ctx, agentlink.ConfigAppliedIn{Device: dev, Session: a, At: now, Version: 1}); !errors.Is(err, agentlink.ErrSessionGone) {
		t.Errorf("config applied of the superseded session: %v", err)
	}
	if _, ok, err := e.Agent.Disconnect(e.ctx, dev, a, now, "connection closed"); err != nil || ok {
		t.Errorf("disconnect of the superseded session: ok %v, %v", ok, err)
	}
	if st := e.deviceRow(d.OrgID, d.ID).Status; st != resource.StatusConnecting {
		t.Errorf("status after the old session left: %s", st)
	}
	out, err := e2.Agent.Hello(e.ctx, agentlink.HelloIn{Device: dev, Session: b, At: now, HeartbeatInterval: 10 * time.Second, Deadline: now.Add(30 * time.Second),
		Hello: protocol.Hello{FirmwareVersion: "fw-2"}})
	if err != nil || out.Change.From != resource.StatusConnecting || out.Change.To != resource.StatusOnline {
		t.Fatalf("hello b: %+v, %v", out, err)
	}
	// Heartbeats: lastSeen and address; a status the agent reports.
	e.clock.Add(10 * time.Second)
	now = e.clock.Now()
	if _, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: b, At: now, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline, IPAddress: "10.0.0.7"}); err != nil {
		t.Fatal(err)
	}
	row = e.deviceRow(d.OrgID, d.ID)
	if row.LastSeen == nil || !row.LastSeen.Equal(now) || row.IPAddress != "10.0.0.7" || row.FirmwareVersion != "fw-2" {
		t.Errorf("after a heartbeat: %+v", row)
	}
	hb, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: b, At: now, Status: resource.StatusRebooting, PrevStatus: resource.StatusOnline,
		Deadline: now.Add(30 * time.Second), IPAddress: "10.0.0.7"})
	if err != nil || hb.Change.From != resource.StatusOnline || hb.Change.To != resource.StatusRebooting {
		t.Errorf("status heartbeat: %+v, %v", hb, err)
	}
	if st := e.deviceRow(d.OrgID, d.ID).Status; st != resource.StatusRebooting {
		t.Errorf("status %s, want REBOOTING", st)
	}
	if _, err := e.Agent.ConfigApplied(e.ctx, agentlink.ConfigAppliedIn{Device: dev, Session: b, At: now, Version: 0}); err != nil {
		t.Errorf("config applied: %v", err)
	}
	ch, ok, err := e.Agent.Disconnect(e.ctx, dev, b, now, "connection closed")
	if err != nil || !ok || ch.To != resource.StatusOffline || ch.Event == nil || ch.Event.Type != protocol.EventDeviceOffline {
		t.Fatalf("disconnect b: %+v %v %v", ch, ok, err)
	}
	if st := e.deviceRow(d.OrgID, d.ID).Status; st != resource.StatusOffline {
		t.Errorf("status %s, want OFFLINE", st)
	}
	if evs := e.eventsOf(d, protocol.EventDeviceOffline); len(evs) != 1 || evs[0].ID != ch.Event.ID {
		t.Errorf("device.offline events: %+v", evs)
	}
}

// testSweepRevokedOrphans: a device whose stored deadline passed goes
// OFFLINE by any handle's sweep, even when the handle that held its session
// is gone; a revoked device with a session is listed for closing.
func testSweepRevokedOrphans(t *testing.T, open Opener) {
	e, e2, d := newTwoRelays(t, open)
	other := e.device(d.OrgID, "IG-500")
	session := e.online(d, 10*time.Second) // deadline t0+30s
	e.clock.Add(time.Second)
	e.online(other, 10*time.Second) // deadline t0+31s
	if got, err := e2.Agent.Sweep(e.ctx, t0.Add(29*time.Second)); err != nil || len(got) != 0 {
		t.Errorf("early sweep: %+v, %v", got, err)
	}
	got, err := e2.Agent.Sweep(e.ctx, t0.Add(30*time.Second+time.Millisecond))
	if err != nil || len(got) != 1 || got[0].Device.ID != d.ID || got[0].To != resource.StatusOffline || got[0].From != resource.StatusOnline ||
		got[0].Event == nil || got[0].Event.Type != protocol.EventDeviceOffline {
		t.Fatalf("sweep = %+v, %v", got, err)
	}
	if st := e.deviceRow(d.OrgID, d.ID).Status; st != resource.StatusOffline {
		t.Errorf("status %s", st)
	}
	if _, err := e.heartbeat(agentlink.HeartbeatIn{Device: e.auth(d), Session: session, At: e.clock.Now(), Status: resource.StatusOnline, PrevStatus: resource.StatusOnline}); !errors.Is(err, agentlink.ErrSessionGone) {
		t.Errorf("heartbeat after the sweep: %v", err)
	}
	if got, _ := e.Agent.Sweep(e.ctx, t0.Add(30*time.Second+time.Millisecond)); len(got) != 0 {
		t.Errorf("second sweep: %+v", got)
	}
	if n, err := e.Agent.Orphans(e.ctx, e.clock.Now(), time.Minute); err != nil || n != 0 {
		t.Errorf("orphans when every connected device has a deadline: %d, %v", n, err)
	}
	if r, err := e.Agent.Revoked(e.ctx); err != nil || len(r) != 0 {
		t.Errorf("revoked before any revocation: %v, %v", r, err)
	}
	if _, err := e.Store.RevokeDevice(e.ctx, other.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.RevokeDevice(e.ctx, d.ID); err != nil { // no session any more
		t.Fatal(err)
	}
	if r, err := e2.Agent.Revoked(e.ctx); err != nil || len(r) != 1 || r[0] != other.ID {
		t.Errorf("revoked = %v, %v", r, err)
	}
}

// testHeartbeatEvents: a heartbeat's event is stored with it, once.
func testHeartbeatEvents(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org := e.org("acme")
	d := e.device(org.ID, "IG-100")
	session := e.online(d, 30*time.Second)
	dev := e.auth(d)
	ev := &resource.Event{ID: ids.New(), Type: "heartbeat", Severity: resource.SeverityInfo, Message: "heartbeat", Data: []byte(`{"uptime":5}`), CreatedAt: resource.T(t0)}
	for i := 0; i < 2; i++ {
		if _, err := e.heartbeat(agentlink.HeartbeatIn{Device: dev, Session: session, At: t0, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline, Event: ev}); err != nil {
			t.Fatal(err)
		}
	}
	evs := e.eventsOf(d, "heartbeat")
	if len(evs) != 1 || evs[0].ID != ev.ID || string(evs[0].Data) != `{"uptime":5}` {
		t.Errorf("heartbeat events = %+v", evs)
	}
	// Many heartbeats of many devices at once (the store batches them):
	// each device ends with its last heartbeat's time.
	var devs []device
	var sessions []string
	for i := 0; i < 20; i++ {
		x := e.device(org.ID, "IG-500")
		devs = append(devs, x)
		sessions = append(sessions, e.online(x, 30*time.Second))
	}
	var wg sync.WaitGroup
	for i := range devs {
		xd := e.auth(devs[i])
		for k := 1; k <= 10; k++ {
			wg.Add(1)
			done := func(_ agentlink.HeartbeatOut, err error) {
				if err != nil {
					t.Error(err)
				}
				wg.Done()
			}
			in := agentlink.HeartbeatIn{Device: xd, Session: sessions[i], At: t0.Add(time.Duration(k) * time.Second), Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
				Channels: []protocol.ChannelState{{ID: "rs485-1", Available: true, Live: string(rune('0' + k%10))}}, HasChannels: true}
			if err := e.Agent.Heartbeat(e.ctx, in, done); err != nil {
				t.Fatal(err)
			}
		}
	}
	wg.Wait()
	for _, x := range devs {
		row := e.deviceRow(org.ID, x.ID)
		if row.LastSeen == nil || !row.LastSeen.Equal(t0.Add(10*time.Second)) {
			t.Errorf("device %s last seen %v, want its last heartbeat", x.ID, row.LastSeen)
		}
		tel, _ := e.Store.Serial().Telemetry(e.ctx, org.ID, x.ID)
		if tel.Channels[1].ID != "rs485-1" || tel.Channels[1].Live != "0" {
			t.Errorf("device %s telemetry %+v, want the last report", x.ID, tel.Channels[1])
		}
	}
}
