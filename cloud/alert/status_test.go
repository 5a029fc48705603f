package alert_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestOfflineAfter: an offline rule with a longer `after` than three
// heartbeats opens once the device was silent that long, beside the
// default device_offline (after 30s), and both resolve when it is back.
func TestOfflineAfter(t *testing.T) { stores.Run(t, testOfflineAfter) }

func testOfflineAfter(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	long := e.createRule(resource.AlertRule{Name: "gone for good", Condition: resource.RuleCondition{Kind: resource.ConditionOffline, After: "10m"}})
	lastSeen := e.clock.Now()
	storetest.Offline(t, e.s.Agent, e.agent, lastSeen, 10*time.Second)
	e.clock.Set(lastSeen.Add(31 * time.Second))
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOnline, resource.StatusOffline)
	if as := e.activeOf(e.ruleID("device_offline")); len(as) != 1 {
		t.Fatalf("%d device_offline after 31 s, want 1", len(as))
	}
	if as := e.activeOf(long.ID); len(as) != 0 {
		t.Fatalf("opened after 31 s of 10m: %+v", as)
	}
	e.clock.Set(lastSeen.Add(10 * time.Minute))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.engine.Run(runCtx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	for len(e.activeOf(long.ID)) == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
	as := e.activeOf(long.ID)
	if len(as) != 1 {
		t.Fatalf("%d %s alerts after 10m, want 1", len(as), long.Name)
	}
	var p map[string]any
	json.Unmarshal(as[0].Payload, &p)
	if p["after"] != "10m" || p["heartbeatIntervalMs"] != 10000.0 || p["lastSeen"] == nil || p["ruleId"] != long.ID {
		t.Errorf("payload %s", as[0].Payload)
	}
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOffline, resource.StatusOnline)
	if as := e.alerts(resource.AlertActive); len(as) != 0 {
		t.Fatalf("still active once online: %+v", as)
	}
}

// runSweeps runs the engine's sweeps until cond holds (at most 5 s); a
// nil cond runs them for half a second (many sweeps: to show what they do
// not do).
func (e *env) runSweeps(cond func() bool) {
	e.t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { e.engine.Run(ctx); close(done) }()
	deadline := time.Now().Add(5 * time.Second)
	if cond == nil {
		cond, deadline = func() bool { return false }, time.Now().Add(500*time.Millisecond)
	}
	for !cond() && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	<-done
}

// connected puts the device online (a hello at the clock's time, with a
// heartbeat interval) and returns its session.
func (e *env) connected(interval time.Duration) string {
	e.t.Helper()
	return storetest.Connect(e.t, e.s.Agent, e.agent, e.clock.Now(), protocol.Hello{AgentVersion: "1.0.0", HeartbeatInterval: protocol.Duration{Duration: interval}})
}

// beat stores a heartbeat of session at the clock's time moving the
// device from prev to status, and tells the engine.
func (e *env) beat(session string, prev, status resource.DeviceStatus) {
	e.t.Helper()
	at := e.clock.Now()
	dev := e.agent
	dev.Status = prev
	storetest.Heartbeat(e.t, e.s.Agent, agentlink.HeartbeatIn{Device: dev, Session: session, At: at, Status: status, PrevStatus: prev, Deadline: at.Add(time.Minute)})
	if prev != status {
		e.engine.StatusChanged(context.Background(), e.dev, prev, status)
	}
	e.engine.HeartbeatStored(context.Background(), e.dev, cloud.Heartbeat{At: at, Status: status})
}

// TestStatusRuleDeviceError: the default device_error opens once the
// device has been in ERROR for a minute (the leader's sweep), and
// resolves when a heartbeat reports it ONLINE again.
func TestStatusRuleDeviceError(t *testing.T) { stores.Run(t, testStatusRuleDeviceError) }

func testStatusRuleDeviceError(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rule := e.ruleID("device_error")
	session := e.connected(10 * time.Second)
	e.beat(session, resource.StatusOnline, resource.StatusOnline)
	erred := e.clock.Now().Add(time.Second)
	e.clock.Set(erred)
	e.beat(session, resource.StatusOnline, resource.StatusError)
	e.clock.Set(erred.Add(50 * time.Second))
	e.beat(session, resource.StatusError, resource.StatusError)
	e.runSweeps(nil) // one sweep at least, 50 s in
	if as := e.activeOf(rule); len(as) != 0 {
		t.Fatalf("device_error after 50 s of ERROR: %+v", as)
	}
	e.clock.Set(erred.Add(61 * time.Second))
	e.runSweeps(func() bool { return len(e.activeOf(rule)) > 0 })
	as := e.activeOf(rule)
	if len(as) != 1 || as[0].Severity != resource.SeverityError || as[0].Message != "Device in ERROR for 1m (since "+resource.FormatTime(erred)+")" {
		t.Fatalf("device_error after 61 s of ERROR: %+v", as)
	}
	var p map[string]any
	json.Unmarshal(as[0].Payload, &p)
	if p["status"] != "ERROR" || p["since"] != resource.FormatTime(erred) || p["rule"] != "device_error" {
		t.Errorf("payload %s", as[0].Payload)
	}
	e.runSweeps(nil) // a second sweep opens no second alert
	e.clock.Set(erred.Add(2 * time.Minute))
	e.beat(session, resource.StatusError, resource.StatusOnline)
	if as := e.activeOf(rule); len(as) != 0 {
		t.Fatalf("device_error still active once ONLINE: %+v", as)
	}
	if res := e.alerts(resource.AlertResolved); len(res) != 1 {
		t.Errorf("%d resolved alerts, want the one device_error", len(res))
	}
}

// TestOfflineHeldByPlannedWork: a device that reported REBOOTING and went
// silent opens no offline alert for 15 minutes, then one.
func TestOfflineHeldByPlannedWork(t *testing.T) { stores.Run(t, testOfflineHeldByPlannedWork) }

func testOfflineHeldByPlannedWork(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	rule := e.ruleID("device_offline")
	session := e.connected(10 * time.Second)
	rebootAt := e.clock.Now().Add(time.Second)
	e.clock.Set(rebootAt)
	e.beat(session, resource.StatusOnline, resource.StatusRebooting)
	if _, _, err := e.s.Agent.Disconnect(ctx, e.agent, session, rebootAt, "rebooting"); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(rebootAt.Add(time.Minute))
	e.engine.StatusChanged(ctx, e.dev, resource.StatusRebooting, resource.StatusOffline)
	e.clock.Set(rebootAt.Add(cloud.PlannedWorkHold - time.Second))
	e.runSweeps(nil)
	if as := e.activeOf(rule); len(as) != 0 {
		t.Fatalf("device_offline during the planned reboot's hold: %+v", as)
	}
	e.clock.Set(rebootAt.Add(cloud.PlannedWorkHold + time.Second))
	e.runSweeps(func() bool { return len(e.activeOf(rule)) > 0 })
	if as := e.activeOf(rule); len(as) != 1 {
		t.Fatalf("%d device_offline once the hold ended, want 1", len(as))
	}
}

// TestRuleScopeByTags: a rule scoped to tags watches the devices holding
// all of them; the engine reads a device's tags again after a while.
func TestRuleScopeByTags(t *testing.T) { stores.Run(t, testRuleScopeByTags) }

func testRuleScopeByTags(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	if err := e.s.Store.SetDeviceTags(ctx, e.dev.ID, []string{"pump", "site-a"}); err != nil {
		t.Fatal(err)
	}
	siteA := e.createRule(resource.AlertRule{Name: "site a pumps hot", Scope: resource.RuleScope{Tags: []string{"site-a", "pump"}},
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.tempCpu", Op: ">", Value: num(60), For: "0s"}})
	siteB := e.createRule(resource.AlertRule{Name: "site b hot", Scope: resource.RuleScope{Tags: []string{"site-b"}},
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.tempCpu", Op: ">", Value: num(60), For: "0s"}})
	hot := resource.MetricSample{CPUPct: 10, MemPct: 30, DiskUsedPct: 40, TempCPU: 70}
	e.metrics(hot)
	if as := e.activeOf(siteA.ID); len(as) != 1 || as[0].Message != "CPU temperature 70.0 °C > 60.0 °C" {
		t.Fatalf("site-a rule on a device tagged pump and site-a: %+v", as)
	}
	if as := e.activeOf(siteB.ID); len(as) != 0 {
		t.Fatalf("site-b rule on a device without the tag: %+v", as)
	}
	if err := e.s.Store.SetDeviceTags(ctx, e.dev.ID, []string{"site-b"}); err != nil {
		t.Fatal(err)
	}
	e.metrics(hot) // 5 minutes later: the device's tags read again
	if as := e.activeOf(siteB.ID); len(as) != 1 {
		t.Fatalf("site-b rule once the device is tagged site-b: %+v", as)
	}
}

// TestRuleScopeFollowsPatchedTags: tags changed through PATCH
// /devices/{id} reach the rules scoped by tags at the device's next
// report, however long the engine trusts what it read of the device.
func TestRuleScopeFollowsPatchedTags(t *testing.T) { stores.Run(t, testRuleScopeFollowsPatchedTags) }

func testRuleScopeFollowsPatchedTags(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	e.engine = alert.New(alert.Config{Store: e.s.Engine, Points: e.s.Store.Points(), Observer: e.notify, Now: e.clock.Now,
		SweepInterval: sweepEvery, DeviceTTL: 24 * time.Hour})
	line3 := e.createRule(resource.AlertRule{Name: "line 3 hot", Scope: resource.RuleScope{Tags: []string{"line-3"}},
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.tempCpu", Op: ">", Value: num(60), For: "0s"}})
	hot := resource.MetricSample{CPUPct: 10, MemPct: 30, DiskUsedPct: 40, TempCPU: 70}
	e.metrics(hot)
	if as := e.activeOf(line3.ID); len(as) != 0 {
		t.Fatalf("line-3 rule on an untagged device: %+v", as)
	}
	tags := []string{"line-3"}
	if _, err := e.s.Store.Devices().PatchDevice(ctx, e.org.ID, e.dev.ID, cloud.DevicePatch{Tags: &tags}); err != nil {
		t.Fatal(err)
	}
	e.metrics(hot)
	if as := e.activeOf(line3.ID); len(as) != 1 {
		t.Fatalf("line-3 rule at the report after the device was tagged line-3: %+v", as)
	}
}

// reminders counts the organization's alert.reminder deliveries.
func (e *env) reminders() int {
	e.t.Helper()
	ds, err := e.s.Store.WebhookDeliveries(context.Background(), e.org.ID, 100)
	if err != nil {
		e.t.Fatal(err)
	}
	n := 0
	for _, d := range ds {
		if d.Event == "alert.reminder" {
			n++
		}
	}
	return n
}

// TestReminders: the leader's sweep reminds of an ACTIVE alert nobody
// acknowledged once its rule's repeatEvery passed (a delivery to the
// rule's channel), and no more once it is acknowledged.
func TestReminders(t *testing.T) { stores.Run(t, testReminders) }

func testReminders(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	ch, err := e.s.Store.Rules().CreateChannel(ctx, cloud.NewChannel{OrgID: e.org.ID, Name: "ops mail", Kind: resource.ChannelEmail, Target: "ops@example.com"})
	if err != nil {
		t.Fatal(err)
	}
	r := e.createRule(resource.AlertRule{Name: "disk half full", Notify: []string{ch.ID}, RepeatEvery: "5m",
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "metric.diskUsedPct", Op: ">", Value: num(50), For: "0s"}})
	e.metrics(disk(60))
	as := e.activeOf(r.ID)
	if len(as) != 1 {
		t.Fatalf("%d alerts, want 1", len(as))
	}
	e.runSweeps(nil)
	if n := e.reminders(); n != 0 {
		t.Fatalf("%d reminders before repeatEvery passed", n)
	}
	e.clock.Set(e.clock.Now().Add(5 * time.Minute))
	e.runSweeps(func() bool { return e.reminders() > 0 })
	if n := e.reminders(); n != 1 {
		t.Fatalf("%d reminders once repeatEvery passed, want 1", n)
	}
	if _, err := e.s.Store.Alerts().Acknowledge(ctx, e.org.ID, as[0].ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Set(e.clock.Now().Add(10 * time.Minute))
	e.runSweeps(nil)
	if n := e.reminders(); n != 1 {
		t.Fatalf("%d reminders after the acknowledgement, want still 1", n)
	}
}
