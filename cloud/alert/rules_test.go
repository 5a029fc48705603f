package alert_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

func num(v float64) *float64 { return &v }

// createRule stores a rule through the rule service, as the API does.
func (e *env) createRule(r resource.AlertRule) resource.AlertRule {
	e.t.Helper()
	r.Enabled = true
	if r.Severity == "" {
		r.Severity = resource.SeverityWarning
	}
	out, err := e.s.Store.Rules().CreateRule(context.Background(), e.org.ID, r)
	if err != nil {
		e.t.Fatalf("create rule %s: %v", r.Name, err)
	}
	return out
}

// setEnabled enables or disables a rule through the rule service.
func (e *env) setEnabled(id string, on bool) {
	e.t.Helper()
	if _, err := e.s.Store.Rules().UpdateRule(context.Background(), e.org.ID, id, cloud.RulePatch{Enabled: &on}); err != nil {
		e.t.Fatal(err)
	}
}

// withPoints configures the device's rs485-1 with a temperature, a pump
// (bool) and a pressure point.
func (e *env) withPoints() {
	e.t.Helper()
	cfg := serialcfg.Config{Kind: "rs485", RS485: &serialcfg.RS485{Kind: "rs485", BaudRate: 9600, DataBits: 8, Parity: "even", StopBits: 1,
		Mode: "modbus_rtu_master", SlaveID: 7, Points: []serialcfg.RS485Point{
			{Name: "temp", Function: "holding", Register: 0, Type: "f32", Unit: "°C"},
			{Name: "pump", Function: "coil", Register: 3, Type: "bool"},
		}}}
	if _, err := e.s.Store.Serial().PutChannel(context.Background(), e.org.ID, e.dev.ID, "rs485-1", cfg); err != nil {
		e.t.Fatal(err)
	}
}

// points stores point samples (as the agent endpoint does: one record)
// captured at the given offsets from base and tells the engine.
func (e *env) points(samples ...protocol.PointSample) {
	e.t.Helper()
	last := time.Time{}
	for _, s := range samples {
		if s.At.After(last) {
			last = s.At.Time
		}
	}
	e.clock.Set(last.Add(time.Second))
	e.seq++
	out, err := e.s.Agent.Records(context.Background(), agentlink.RecordsIn{Device: e.agent, Session: "seed",
		Items: []protocol.Record{{Seq: e.seq, Points: &protocol.PointBatch{Samples: samples}}}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.engine.PointsStored(context.Background(), e.dev, out.Points)
}

func pt(id string, at time.Time, v float64) protocol.PointSample {
	return protocol.PointSample{Point: id, At: resource.T(at), Value: v}
}

// activeOf returns the active alerts of a rule.
func (e *env) activeOf(ruleID string) []resource.Alert {
	e.t.Helper()
	var out []resource.Alert
	for _, a := range e.alerts(resource.AlertActive) {
		if a.RuleID == ruleID {
			out = append(out, a)
		}
	}
	return out
}

// TestPointRuleHysteresis: a rule on a point opens on the first good
// sample over its value (for 0s), ignores bad readings, stays open in the
// band between clear and value, and resolves past clear; its message and
// payload carry the point's unit.
func TestPointRuleHysteresis(t *testing.T) { stores.Run(t, testPointRuleHysteresis) }

func testPointRuleHysteresis(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.withPoints()
	r := e.createRule(resource.AlertRule{Name: "boiler hot", Severity: resource.SeverityCritical,
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "point.rs485-1.temp", Op: ">", Value: num(80), Clear: num(75), For: "0s"}})
	base := e.clock.Now()
	e.points(pt("rs485-1.temp", base, 70), protocol.PointSample{Point: "rs485-1.temp", At: resource.T(base.Add(time.Second)), Value: 999, Error: "timeout"})
	if as := e.activeOf(r.ID); len(as) != 0 {
		t.Fatalf("alert on 70 °C or on a bad reading: %+v", as)
	}
	e.points(pt("rs485-1.pump", base.Add(2*time.Second), 1), pt("rs485-1.temp", base.Add(2*time.Second), 92.5))
	as := e.activeOf(r.ID)
	if len(as) != 1 || as[0].Severity != resource.SeverityCritical {
		t.Fatalf("alerts after 92.5 °C: %+v", as)
	}
	if want := "rs485-1.temp 92.5 °C > 80 °C"; as[0].Message != want {
		t.Errorf("message %q, want %q", as[0].Message, want)
	}
	var p map[string]any
	json.Unmarshal(as[0].Payload, &p)
	if p["source"] != "point.rs485-1.temp" || p["value"] != 92.5 || p["threshold"] != 80.0 || p["clear"] != 75.0 || p["unit"] != "°C" || p["rule"] != "boiler hot" {
		t.Errorf("payload %s", as[0].Payload)
	}
	if evs := e.events("alert.boiler_hot"); len(evs) != 1 {
		t.Errorf("%d alert.boiler_hot events, want 1", len(evs))
	}
	e.points(pt("rs485-1.temp", base.Add(3*time.Second), 78), pt("rs485-1.temp", base.Add(4*time.Second), 85))
	if as := e.activeOf(r.ID); len(as) != 1 {
		t.Fatalf("%d active in the band between clear and value, want the one", len(as))
	}
	e.points(pt("rs485-1.temp", base.Add(5*time.Second), 74.5))
	if as := e.activeOf(r.ID); len(as) != 0 {
		t.Fatalf("still active under clear: %+v", as)
	}
	if evs := e.events("alert.resolved"); len(evs) != 1 || evs[0].Message != "boiler hot resolved: rs485-1.temp 74.5 °C < 75 °C" {
		t.Errorf("alert.resolved events: %+v", evs)
	}
}

// TestPointForAcrossRestart: a point held over the value for 20 s of a
// 30 s `for` before a restart opens 10 s after it, not 30 s.
func TestPointForAcrossRestart(t *testing.T) { stores.Run(t, testPointForAcrossRestart) }

func testPointForAcrossRestart(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.withPoints()
	r := e.createRule(resource.AlertRule{Name: "pump stuck",
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "point.rs485-1.pump", Op: ">=", Value: num(1), For: "30s"}})
	base := e.clock.Now()
	e.points(pt("rs485-1.pump", base, 0), pt("rs485-1.pump", base.Add(10*time.Second), 1))
	e.points(pt("rs485-1.pump", base.Add(20*time.Second), 1), pt("rs485-1.pump", base.Add(30*time.Second), 1))
	if as := e.activeOf(r.ID); len(as) != 0 {
		t.Fatalf("opened after 20 s of 30: %+v", as)
	}
	e.restart()
	e.points(pt("rs485-1.pump", base.Add(35*time.Second), 1))
	if as := e.activeOf(r.ID); len(as) != 0 {
		t.Fatalf("opened after 25 s of 30: %+v", as)
	}
	e.restart()
	e.points(pt("rs485-1.pump", base.Add(40*time.Second), 1))
	as := e.activeOf(r.ID)
	if len(as) != 1 || as[0].Message != "rs485-1.pump 1 >= 1 for 30s" {
		t.Fatalf("after 30 s held across two restarts: %+v", as)
	}
}

// TestRuleScopeByDevices: a rule scoped to a device list watches those
// devices only.
func TestRuleScopeByDevices(t *testing.T) { stores.Run(t, testRuleScopeByDevices) }

func testRuleScopeByDevices(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	other, _ := storetest.Device(t, e.s.Store, cloud.NewDevice{OrgID: e.org.ID, Name: "gw2", SerialNumber: "SN2", Model: "IG-500"})
	r := e.createRule(resource.AlertRule{Name: "busy gw2", Scope: resource.RuleScope{DeviceIDs: []string{other.ID}},
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.loadAvg1", Op: ">", Value: num(2), For: "0s"}})
	load := resource.MetricSample{CPUPct: 10, MemPct: 30, DiskUsedPct: 40, TempCPU: 50, LoadAvg1: 3.5}
	e.metrics(load)
	if as := e.activeOf(r.ID); len(as) != 0 {
		t.Fatalf("a device out of scope opened: %+v", as)
	}
	load.CapturedAt = resource.T(e.now)
	dev2 := agentlink.Device{ID: other.ID, OrgID: e.org.ID, Model: "IG-500"}
	storetest.Metrics(t, e.s.Agent, dev2, load)
	e.engine.MetricsStored(context.Background(), cloud.DeviceRef{ID: other.ID, OrgID: e.org.ID, Model: "IG-500"}, []resource.MetricSample{load})
	as := e.activeOf(r.ID)
	if len(as) != 1 || as[0].DeviceID != other.ID || as[0].Message != "Load average 3.50 > 2.00" {
		t.Fatalf("alerts of the device in scope: %+v", as)
	}
}

// TestDisabledRuleDoesNothing: a disabled rule opens nothing, and opens
// again once enabled; the engine hears both through the store.
func TestDisabledRuleDoesNothing(t *testing.T) { stores.Run(t, testDisabledRuleDoesNothing) }

func testDisabledRuleDoesNothing(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	diskFull := e.ruleID("disk_full")
	e.metrics(disk(20)) // the engine has read the rules
	e.setEnabled(diskFull, false)
	e.metrics(disk(97))
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatalf("%d alerts from a disabled rule: %+v", n, e.alerts(resource.AlertActive))
	}
	e.setEnabled(diskFull, true)
	e.metrics(disk(98))
	if as := e.activeOf(diskFull); len(as) != 1 {
		t.Fatalf("%d disk_full alerts once enabled again, want 1", len(as))
	}
}

// TestEventRuleResolveOn: an event rule opens on its type (storing its own
// alert event, since the type is not alert.<rule>) and resolves on its
// resolveOn.
func TestEventRuleResolveOn(t *testing.T) { stores.Run(t, testEventRuleResolveOn) }

func testEventRuleResolveOn(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	r := e.createRule(resource.AlertRule{Name: "Cabinet door", Severity: resource.SeverityError,
		Condition: resource.RuleCondition{Kind: resource.ConditionEvent, Type: "door.open", ResolveOn: "door.closed"}})
	opened := storetest.Events(t, e.s.Agent, e.agent, resource.Event{Type: "door.open", Message: "door 2 open", Data: json.RawMessage(`{"door":2}`)})
	e.engine.EventsStored(ctx, e.dev, opened)
	as := e.activeOf(r.ID)
	if len(as) != 1 || as[0].Message != "door 2 open" || as[0].Severity != resource.SeverityError {
		t.Fatalf("alerts: %+v", as)
	}
	var p map[string]any
	json.Unmarshal(as[0].Payload, &p)
	if p["door"] != 2.0 || p["rule"] != "Cabinet door" || p["ruleId"] != r.ID {
		t.Errorf("payload %s", as[0].Payload)
	}
	if evs := e.events("alert.cabinet_door"); len(evs) != 1 {
		t.Errorf("%d alert.cabinet_door events, want 1", len(evs))
	}
	closed := storetest.Events(t, e.s.Agent, e.agent, resource.Event{Type: "door.closed", Message: "door 2 closed"})
	e.engine.EventsStored(ctx, e.dev, closed)
	if as := e.activeOf(r.ID); len(as) != 0 {
		t.Fatalf("not resolved on door.closed: %+v", as)
	}
	if evs := e.events("alert.resolved"); len(evs) != 1 || evs[0].Message != "Cabinet door resolved: door 2 closed" {
		t.Errorf("alert.resolved events: %+v", evs)
	}
}

// TestNoSensorFiresNoTemperatureRule: a sample whose host has no thermal
// sensor (missing: ["tempCpu"], tempCpu 0) is no reading for a rule on
// metric.tempCpu, neither now nor as history for its `for`; a sample with
// a reading fires it.
func TestNoSensorFiresNoTemperatureRule(t *testing.T) {
	stores.Run(t, testNoSensorFiresNoTemperatureRule)
}

func testNoSensorFiresNoTemperatureRule(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	r := e.createRule(resource.AlertRule{Name: "Cold cabinet",
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.tempCpu", Op: "<", Value: num(5), For: "5m"}})
	noSensor := resource.MetricSample{CPUPct: 10, MemPct: 30, DiskUsedPct: 40, Missing: []string{"tempCpu"}}
	e.metrics(noSensor, noSensor, noSensor)
	if as := e.alerts(resource.AlertActive); len(as) != 0 {
		t.Fatalf("no-sensor samples opened %+v", as)
	}
	e.noHook()
	cold := resource.MetricSample{CPUPct: 10, MemPct: 30, DiskUsedPct: 40, TempCPU: 2}
	e.metrics(cold) // the run starts here: the no-sensor samples before it are no part of it
	if as := e.alerts(resource.AlertActive); len(as) != 0 {
		t.Fatalf("one cold sample opened %+v before its 5m", as)
	}
	e.metrics(cold)
	as := e.alerts(resource.AlertActive)
	if len(as) != 1 || as[0].RuleID != r.ID {
		t.Fatalf("two cold samples 5 minutes apart: %+v", as)
	}
}
