package storetest

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The seed helpers below make the data a test starts from through the
// contract, as the admin CLI, an agent and the alert engine make it, so
// that the tests of the packages above the store seed either dialect the
// same way. Each fails tb on an error.

// Org creates an organization (with its default alert rules).
func Org(tb testing.TB, s cloud.Admin, name string) cloud.Org {
	tb.Helper()
	o, err := s.CreateOrg(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// Device adds a device and returns it with its agent token.
func Device(tb testing.TB, s cloud.Admin, nd cloud.NewDevice) (resource.DeviceDetail, string) {
	tb.Helper()
	d, token, err := s.AddDevice(context.Background(), nd)
	if err != nil {
		tb.Fatal(err)
	}
	return d, token
}

// Auth authenticates a device token as the agent endpoint does and returns
// the device the agent writes as.
func Auth(tb testing.TB, a agentlink.Store, token string) agentlink.Device {
	tb.Helper()
	dev, err := a.AuthDevice(context.Background(), sum(token))
	if err != nil {
		tb.Fatalf("auth device token: %v", err)
	}
	return dev
}

// Connect connects dev as an agent at at (Connect, then Hello with h, with a
// device.online event): the device is ONLINE, last seen at at, with what h
// announces (firmware, the agent's name, location and time zone). It
// returns the session. A zero h.HeartbeatInterval is a minute.
func Connect(tb testing.TB, a agentlink.Store, dev agentlink.Device, at time.Time, h protocol.Hello) string {
	tb.Helper()
	session, _ := connectHello(tb, a, dev, at, h)
	return session
}

// connectHello is Connect, which also returns the hello's outcome.
func connectHello(tb testing.TB, a agentlink.Store, dev agentlink.Device, at time.Time, h protocol.Hello) (string, agentlink.HelloOut) {
	tb.Helper()
	ctx := context.Background()
	hb := h.HeartbeatInterval.Duration
	if hb == 0 {
		hb = time.Minute
	}
	if h.Model == "" {
		h.Model = dev.Model
	}
	session := ids.New()
	if _, err := a.Connect(ctx, dev, session, at, at.Add(time.Minute)); err != nil {
		tb.Fatalf("connect %s: %v", dev.ID, err)
	}
	out, err := a.Hello(ctx, agentlink.HelloIn{Device: dev, Session: session, At: at, HeartbeatInterval: hb, Hello: h,
		Deadline: at.Add(3 * hb), OnlineEvent: true})
	if err != nil {
		tb.Fatalf("hello %s: %v", dev.ID, err)
	}
	return session, out
}

// Offline connects dev at lastSeen, announcing heartbeats every interval,
// and disconnects it: the device is OFFLINE, last seen at lastSeen.
func Offline(tb testing.TB, a agentlink.Store, dev agentlink.Device, lastSeen time.Time, interval time.Duration) {
	tb.Helper()
	session := Connect(tb, a, dev, lastSeen, protocol.Hello{AgentVersion: "1.0.0", HeartbeatInterval: protocol.Duration{Duration: interval}})
	if _, _, err := a.Disconnect(context.Background(), dev, session, lastSeen, "seeded"); err != nil {
		tb.Fatalf("disconnect %s: %v", dev.ID, err)
	}
}

// Heartbeat stores one heartbeat and waits for its outcome.
func Heartbeat(tb testing.TB, a agentlink.Store, in agentlink.HeartbeatIn) agentlink.HeartbeatOut {
	tb.Helper()
	type result struct {
		out agentlink.HeartbeatOut
		err error
	}
	ch := make(chan result, 1)
	if err := a.Heartbeat(context.Background(), in, func(o agentlink.HeartbeatOut, err error) { ch <- result{o, err} }); err != nil {
		tb.Fatalf("heartbeat of %s: %v", in.Device.ID, err)
	}
	select {
	case r := <-ch:
		if r.err != nil {
			tb.Fatalf("heartbeat of %s: %v", in.Device.ID, r.err)
		}
		return r.out
	case <-time.After(30 * time.Second):
		tb.Fatalf("heartbeat of %s: no outcome within 30 s", in.Device.ID)
		return agentlink.HeartbeatOut{}
	}
}

// Channels connects dev at at and reports channels in a heartbeat, as an
// agent does: the serial telemetry time is at, and the channels it leaves
// out keep their stored state (the store takes every channel's state, as
// the agent endpoint hands it over).
func Channels(tb testing.TB, a agentlink.Store, dev agentlink.Device, at time.Time, channels ...protocol.ChannelState) {
	tb.Helper()
	session, out := connectHello(tb, a, dev, at, protocol.Hello{AgentVersion: "1.0.0"})
	Heartbeat(tb, a, agentlink.HeartbeatIn{Device: dev, Session: session, At: at, Status: resource.StatusOnline, PrevStatus: resource.StatusOnline,
		Channels: agentlink.MergeChannels(out.Channels, channels), HasChannels: true})
}

// Metrics stores samples as one agent batch and returns those that were
// new (a sample whose capture time is stored already is not).
func Metrics(tb testing.TB, a agentlink.Store, dev agentlink.Device, samples ...resource.MetricSample) []resource.MetricSample {
	tb.Helper()
	items := make([]protocol.Record, len(samples))
	for i := range samples {
		items[i] = protocol.Record{Seq: uint64(i + 1), Metric: &samples[i]}
	}
	return records(tb, a, dev, items).Metrics
}

// Events stores events as one agent batch and returns those that were new,
// as stored. What an agent always sends is filled in: a fresh id, the time
// now, INFO, empty data.
func Events(tb testing.TB, a agentlink.Store, dev agentlink.Device, events ...resource.Event) []resource.Event {
	tb.Helper()
	items := make([]protocol.Record, len(events))
	for i, e := range events {
		if e.ID == "" {
			e.ID = ids.New()
		}
		if e.CreatedAt.IsZero() {
			e.CreatedAt = resource.T(time.Now())
		}
		if e.Severity == "" {
			e.Severity = resource.SeverityInfo
		}
		if len(e.Data) == 0 {
			e.Data = json.RawMessage(`{}`)
		}
		items[i] = protocol.Record{Seq: uint64(i + 1), Event: &protocol.Event{ID: e.ID, Type: e.Type, Severity: e.Severity, Message: e.Message, Data: e.Data, CreatedAt: e.CreatedAt}}
	}
	return records(tb, a, dev, items).Events
}

func records(tb testing.TB, a agentlink.Store, dev agentlink.Device, items []protocol.Record) agentlink.RecordsOut {
	tb.Helper()
	out, err := a.Records(context.Background(), agentlink.RecordsIn{Device: dev, Session: "seed", Items: items})
	if err != nil {
		tb.Fatalf("records of %s: %v", dev.ID, err)
	}
	return out
}

// Rule returns the organization's alert rule named name.
func Rule(tb testing.TB, eng alert.Store, orgID, name string) alert.Rule {
	tb.Helper()
	rules, err := eng.Rules(context.Background(), orgID)
	if err != nil {
		tb.Fatal(err)
	}
	for _, r := range rules {
		if r.Name == name {
			return r
		}
	}
	tb.Fatalf("no alert rule %s in %+v", name, rules)
	return alert.Rule{}
}

// NewAlert is an alert to seed.
type NewAlert struct {
	OrgID    string
	DeviceID string
	Rule     string // the name of one of the organization's rules
	Message  string
	Payload  json.RawMessage
	At       time.Time           // when it opens; zero for now
	State    resource.AlertState // "" or ACTIVE, ACKNOWLEDGED, RESOLVED
}

// Alert opens an alert as the alert engine does (with its alert.<rule>
// event) and moves it to na.State through the alert service, as a user
// does.
func Alert(tb testing.TB, eng alert.Store, alerts cloud.AlertService, na NewAlert) resource.Alert {
	tb.Helper()
	ctx := context.Background()
	if na.At.IsZero() {
		na.At = time.Now()
	}
	a, opened, err := eng.OpenAlert(ctx, alert.Opening{OrgID: na.OrgID, DeviceID: na.DeviceID, Rule: Rule(tb, eng, na.OrgID, na.Rule),
		Message: na.Message, Payload: na.Payload, At: na.At, WithEvent: true})
	if err != nil || !opened {
		tb.Fatalf("open %s on %s: opened %v, %v", na.Rule, na.DeviceID, opened, err)
	}
	switch na.State {
	case resource.AlertAcknowledged:
		a, err = alerts.Acknowledge(ctx, na.OrgID, a.ID)
	case resource.AlertResolved:
		a, err = alerts.Resolve(ctx, na.OrgID, a.ID)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return a
}
