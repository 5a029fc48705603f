package storetest

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// The rule preview part of the suite (issue 27, POST /alert-rules/preview):
// a history written as agents write it (metric samples, point samples,
// events, connections), a rule previewed through Store.Rules(), and the
// numbers checked against what was computed by hand. The rule's source
// history read by the engine (AlertEngineStore.History) is checked here
// too.

// previewPoint is the point the preview tests watch, one of rs485Points.
const previewPoint = "rs485-1.temp"

// threshold is a threshold rule body on source.
func threshold(source, op string, value, clear float64, hold string) resource.AlertRule {
	return resource.AlertRule{Name: "hot", Enabled: true, Severity: resource.SeverityWarning,
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: source, Op: op, Value: &value, Clear: &clear, For: hold}}
}

// preview previews r over [from, to] in orgID.
func (e *env) preview(orgID string, r resource.AlertRule, from, to time.Time) (resource.RulePreview, error) {
	return e.Store.Rules().PreviewRule(e.ctx, orgID, r, from, to)
}

// mustPreview is preview failing the test on an error.
func (e *env) mustPreview(orgID string, r resource.AlertRule, from, to time.Time) resource.RulePreview {
	e.t.Helper()
	p, err := e.preview(orgID, r, from, to)
	if err != nil {
		e.t.Fatalf("preview: %v", err)
	}
	return p
}

// previewRows is p's devices as "device:opened:open time" strings.
func previewRows(p resource.RulePreview) []string {
	out := []string{}
	for _, d := range p.Devices {
		out = append(out, fmt.Sprintf("%s:%d:%v", d.DeviceID, d.Opened, time.Duration(d.OpenForMs)*time.Millisecond))
	}
	return out
}

// checkPreview compares p with the opened total and the rows wanted.
func checkPreview(t testing.TB, what string, p resource.RulePreview, opened int, rows ...string) {
	t.Helper()
	if rows == nil {
		rows = []string{}
	}
	if got := previewRows(p); p.Opened != opened || fmt.Sprint(got) != fmt.Sprint(rows) {
		t.Errorf("%s: opened %d %v, want %d %v", what, p.Opened, got, opened, rows)
	}
}

// configurePoints gives devices rs485-1's configuration with its points
// (rs485Points), as PUT channel does.
func (e *env) configurePoints(devices ...device) {
	e.t.Helper()
	for _, d := range devices {
		if _, err := e.Store.Serial().PutChannel(e.ctx, d.OrgID, d.ID, "rs485-1", rs485Points()); err != nil {
			e.t.Fatal(err)
		}
	}
}

// boilerHistory is 30 minutes of previewPoint, one sample every 10 s from
// t0 (the last at 29:50): 70, then 85 over [5m, 8m) with a bad reading at
// 6m, 78 over [8m, 9m) (under the value, over the clear), 70, 90 over
// [12m, 17m) with one 77 at 15m, 60, 95 over [20m, 21m) only, 60, and 88
// from 25m on.
func boilerHistory() []protocol.PointSample {
	var out []protocol.PointSample
	for i := range 180 {
		at := t0.Add(time.Duration(i) * 10 * time.Second)
		m := time.Duration(i) * 10 * time.Second
		v := 70.0
		switch {
		case m == 6*time.Minute:
			out = append(out, bad(previewPoint, at, "modbus timeout (slave 1)"))
			continue
		case m >= 5*time.Minute && m < 8*time.Minute:
			v = 85
		case m >= 8*time.Minute && m < 9*time.Minute:
			v = 78
		case m == 15*time.Minute:
			v = 77
		case m >= 12*time.Minute && m < 17*time.Minute:
			v = 90
		case m >= 17*time.Minute && m < 20*time.Minute:
			v = 60
		case m >= 20*time.Minute && m < 21*time.Minute:
			v = 95
		case m >= 21*time.Minute && m < 25*time.Minute:
			v = 60
		case m >= 25*time.Minute:
			v = 88
		}
		out = append(out, good(previewPoint, at, v))
	}
	return out
}

// testRuleHistory: History returns a metric's column or a point's good
// samples in [from, to], ascending, the newest limit of them, from the
// head and the chunks alike; another organization's device is not found.
func testRuleHistory(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Set(t0.Add(time.Hour))
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	e.records(d, metricRecord(t0, 10), metricRecord(t0.Add(time.Minute), 20), metricRecord(t0.Add(2*time.Minute), 30))
	e.storePoints(d, boilerHistory())
	e.compactAll(t0.Add(10 * time.Minute)) // the first 10 minutes in chunks, the rest in the head
	cpu, err := cloud.CompileRule(org.ID, threshold("metric.cpuPct", ">", 1, 1, "0s"))
	if err != nil {
		t.Fatal(err)
	}
	pt, err := cloud.CompileRule(org.ID, threshold("point."+previewPoint, ">", 1, 1, "0s"))
	if err != nil {
		t.Fatal(err)
	}
	show := func(xs []cloud.RuleSample) string {
		var b strings.Builder
		for _, x := range xs {
			fmt.Fprintf(&b, "%v=%v ", x.At.Sub(t0), x.Value)
		}
		return strings.TrimSpace(b.String())
	}
	for _, tc := range []struct {
		what     string
		c        cloud.RuleCondition
		from, to time.Duration
		limit    int
		want     string
	}{
		{"metric, all", cpu.Cond, 0, time.Hour, 10, "0s=10 1m0s=20 2m0s=30"},
		{"metric, newest 2", cpu.Cond, 0, time.Hour, 2, "1m0s=20 2m0s=30"},
		{"metric, window", cpu.Cond, time.Minute, time.Minute, 10, "1m0s=20"},
		{"point, across the bad reading", pt.Cond, 5*time.Minute + 50*time.Second, 6*time.Minute + 10*time.Second, 10, "5m50s=85 6m10s=85"},
		{"point, newest 2 before the bad reading", pt.Cond, 0, 6*time.Minute + 5*time.Second, 2, "5m40s=85 5m50s=85"},
		{"point, newest 3 over chunks and head", pt.Cond, 0, 10*time.Minute + 10*time.Second, 3, "9m50s=70 10m0s=70 10m10s=70"},
	} {
		got, err := e.Engine.History(e.ctx, org.ID, d.ID, tc.c, t0.Add(tc.from), t0.Add(tc.to), tc.limit)
		if err != nil {
			t.Fatalf("%s: %v", tc.what, err)
		}
		if s := show(got); s != tc.want {
			t.Errorf("%s: %s, want %s", tc.what, s, tc.want)
		}
	}
	other := e.org("other")
	if _, err := e.Engine.History(e.ctx, other.ID, d.ID, cpu.Cond, t0, t0.Add(time.Hour), 10); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another organization's device: %v, want not found", err)
	}
}

// testPreviewThreshold: a point's history with two stretches over the
// value longer than `for` (3 and 5 minutes, one dipping under the value
// but not under clear), one shorter, and one still open at the end of the
// window, on two devices and a metric rule on a third: the counts and
// open times computed by hand; deviceIds scopes; a window that starts
// inside a stretch.
func testPreviewThreshold(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Set(t0.Add(time.Hour))
	org := e.org("acme")
	a, b, c := e.device(org.ID, "IG-500"), e.device(org.ID, "IG-500"), e.device(org.ID, "IG-500")
	e.configurePoints(a, b)
	e.storePoints(a, boilerHistory())
	e.storePoints(b, boilerHistory()[:120]) // up to 19:50: the last stretch is not there
	e.compactAll(t0.Add(12 * time.Minute))  // a's and b's history split between chunks and head
	e.records(c, metricRecord(t0, 50), metricRecord(t0.Add(time.Minute), 95), metricRecord(t0.Add(2*time.Minute), 85),
		metricRecord(t0.Add(3*time.Minute), 70), metricRecord(t0.Add(4*time.Minute), 91))
	end := t0.Add(30 * time.Minute)

	// a: opens at 7m (85 since 5m; the bad reading at 6m is skipped),
	// stays open through 78, resolves at 9m (70 < 75): 2m. Opens at 14m,
	// stays through the 77 at 15m, resolves at 17m: 3m. 95 over [20m, 21m)
	// is a minute only. Opens at 27m, open until 30m: 3m. b: the first two.
	rule := threshold("point."+previewPoint, ">", 80, 75, "2m")
	p := e.mustPreview(org.ID, rule, t0, end)
	checkPreview(t, "point", p, 5, a.ID+":3:8m0s", b.ID+":2:5m0s")
	if !p.From.Equal(t0) || !p.To.Equal(end) {
		t.Errorf("window %v..%v, want %v..%v", p.From, p.To, t0, end)
	}
	// Without hysteresis the dips resolve: 78 at 8m and 77 at 15m.
	p = e.mustPreview(org.ID, threshold("point."+previewPoint, ">", 80, 80, "2m"), t0, end)
	checkPreview(t, "no hysteresis", p, 5, a.ID+":3:5m0s", b.ID+":2:2m0s")
	// for 0s: the first sample over 80 opens at once, and the minute of
	// 95 opens one more. a: [5m, 9m), [12m, 17m), [20m, 21m), [25m, 30m].
	p = e.mustPreview(org.ID, threshold("point."+previewPoint, ">", 80, 75, "0s"), t0, end)
	checkPreview(t, "for 0s", p, 6, a.ID+":4:15m0s", b.ID+":2:9m0s")

	// A metric: 95 opens at 1m, 85 holds, 70 resolves at 3m; 91 at 4m
	// opens, open until the end.
	p = e.mustPreview(org.ID, threshold("metric.cpuPct", ">", 90, 80, "0s"), t0, end)
	checkPreview(t, "metric", p, 2, c.ID+":2:28m0s")

	// Scopes.
	rule.Scope = resource.RuleScope{DeviceIDs: []string{b.ID}}
	checkPreview(t, "deviceIds", e.mustPreview(org.ID, rule, t0, end), 2, b.ID+":2:5m0s")
	rule.Scope = resource.RuleScope{DeviceIDs: []string{c.ID}}
	if _, err := e.preview(org.ID, rule, t0, end); cloud.ErrorCode(err) != cloud.EINVALID || !strings.Contains(err.Error(), "condition.source") {
		t.Errorf("a scope without the point: %v, want invalid naming condition.source", err)
	}
	rule.Scope = resource.RuleScope{}

	// A window from 13m: the run over 80 seen from 13m is broken by the
	// 77 at 15m, and 90 again from 15m10s lasts less than 2m; so a opens
	// only at 27m, b nothing.
	p = e.mustPreview(org.ID, rule, t0.Add(13*time.Minute), end)
	checkPreview(t, "window from 13m", p, 1, a.ID+":1:3m0s")

	// A window ending in the future ends now; from zero is 7 days before.
	p = e.mustPreview(org.ID, rule, time.Time{}, t0.Add(48*time.Hour))
	if now := e.clock.Now(); !p.To.Equal(now) || !p.From.Equal(now.Add(-cloud.DefaultPreviewRange)) {
		t.Errorf("window %v..%v, want the 7 days to %v", p.From, p.To, now)
	}
	checkPreview(t, "to now", p, 5, a.ID+":3:38m0s", b.ID+":2:5m0s")

	// Another organization sees none of it.
	other := e.org("other")
	checkPreview(t, "other organization", e.mustPreview(other.ID, threshold("metric.cpuPct", ">", 90, 80, "0s"), t0, end), 0)
}

// testPreviewOffline: outages written as agents connect and disconnect:
// one longer than max(after, 3 heartbeat intervals) opens at that time
// and resolves on reconnection; a shorter one opens nothing; one still
// running at the end of the window counts until then.
func testPreviewOffline(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Set(t0.Add(time.Hour))
	org := e.org("acme")
	fast, slow := e.device(org.ID, "IG-500"), e.device(org.ID, "IG-500")
	df, ds := e.auth(fast), e.auth(slow)
	hello := func(hb time.Duration) protocol.Hello {
		return protocol.Hello{AgentVersion: "1.0.0", HeartbeatInterval: protocol.Duration{Duration: hb}}
	}
	// up connects dev at on and, unless off is zero, disconnects it at
	// off (device.online and device.offline events then).
	up := func(dev agentlink.Device, hb, on, off time.Duration) {
		s := Connect(t, e.Agent, dev, t0.Add(on), hello(hb))
		if off > 0 {
			if _, _, err := e.Agent.Disconnect(e.ctx, dev, s, t0.Add(off), "test"); err != nil {
				t.Fatal(err)
			}
		}
	}
	// fast (10 s heartbeats, after 1m wins): offline [2m, 7m) -> open
	// [3m, 7m); offline [10m, 10m30s) -> nothing; offline from 20m -> open
	// [21m, 30m].
	up(df, 10*time.Second, 0, 2*time.Minute)
	up(df, 10*time.Second, 7*time.Minute, 10*time.Minute)
	up(df, 10*time.Second, 10*time.Minute+30*time.Second, 20*time.Minute)
	// slow (1 min heartbeats: 3 intervals win over after): offline [2m,
	// 4m30s) -> nothing; offline [10m, 15m) -> open [13m, 15m).
	up(ds, time.Minute, 0, 2*time.Minute)
	up(ds, time.Minute, 4*time.Minute+30*time.Second, 10*time.Minute)
	up(ds, time.Minute, 15*time.Minute, 0)

	rule := resource.AlertRule{Name: "gone", Enabled: true, Severity: resource.SeverityError,
		Condition: resource.RuleCondition{Kind: resource.ConditionOffline, After: "1m"}}
	end := t0.Add(30 * time.Minute)
	checkPreview(t, "offline", e.mustPreview(org.ID, rule, t0, end), 3, fast.ID+":2:13m0s", slow.ID+":1:2m0s")
	// A window that starts inside an outage: the alert open then counts
	// from the window's start.
	checkPreview(t, "offline from 5m", e.mustPreview(org.ID, rule, t0.Add(5*time.Minute), end), 3, fast.ID+":2:11m0s", slow.ID+":1:2m0s")
	rule.Condition.After = "6m"
	checkPreview(t, "after 6m", e.mustPreview(org.ID, rule, t0, end), 1, fast.ID+":1:4m0s")

	// Planned work: a device that reported REBOOTING at 5m and went
	// offline at 5m10s until 25m opens at the end of the hold (20m), not
	// at 6m10s.
	planned := e.device(org.ID, "IG-500")
	dp := e.auth(planned)
	s := Connect(t, e.Agent, dp, t0, hello(10*time.Second))
	Heartbeat(t, e.Agent, agentlink.HeartbeatIn{Device: dp, Session: s, At: t0.Add(5 * time.Minute), Deadline: t0.Add(6 * time.Minute),
		Status: resource.StatusRebooting, PrevStatus: resource.StatusOnline})
	if _, _, err := e.Agent.Disconnect(e.ctx, dp, s, t0.Add(5*time.Minute+10*time.Second), "reboot"); err != nil {
		t.Fatal(err)
	}
	up(dp, 10*time.Second, 25*time.Minute, 0)
	rule.Condition.After, rule.Scope = "1m", resource.RuleScope{DeviceIDs: []string{planned.ID}}
	checkPreview(t, "planned work", e.mustPreview(org.ID, rule, t0, end), 1, planned.ID+":1:5m0s")
}

// testPreviewEvents: an event rule opens on its type and resolves on
// resolveOn, one alert at a time.
func testPreviewEvents(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Set(t0.Add(time.Hour))
	org := e.org("acme")
	d := e.device(org.ID, "IG-500")
	at := func(m time.Duration) time.Time { return t0.Add(m * time.Minute) }
	e.records(d, eventRecord("alert.vpn_down", resource.SeverityError, at(1)), eventRecord("alert.vpn_down", resource.SeverityError, at(2)),
		eventRecord("vpn.up", resource.SeverityInfo, at(4)), eventRecord("vpn.up", resource.SeverityInfo, at(5)),
		eventRecord("alert.vpn_down", resource.SeverityError, at(10)))
	rule := resource.AlertRule{Name: "tunnel", Enabled: true, Severity: resource.SeverityError,
		Condition: resource.RuleCondition{Kind: resource.ConditionEvent, Type: "alert.vpn_down", ResolveOn: "vpn.up"}}
	end := at(30)
	checkPreview(t, "resolveOn", e.mustPreview(org.ID, rule, t0, end), 2, d.ID+":2:23m0s")
	checkPreview(t, "from 3m", e.mustPreview(org.ID, rule, at(3), end), 2, d.ID+":2:21m0s")
	rule.Condition.ResolveOn = ""
	checkPreview(t, "no resolveOn", e.mustPreview(org.ID, rule, t0, end), 1, d.ID+":1:29m0s")
}

// testPreviewValidation: a bad rule or window is EINVALID naming the
// field, as creating the rule would be.
func testPreviewValidation(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Set(t0.Add(time.Hour))
	org, other := e.org("acme"), e.org("other")
	d := e.device(org.ID, "IG-500")
	foreign := e.device(other.ID, "IG-500")
	e.configurePoints(d)
	e.storePoints(d, boilerHistory()[:3])
	end := t0.Add(30 * time.Minute)
	ok := threshold("point."+previewPoint, ">", 80, 75, "2m")
	badOp := ok
	badOp.Condition.Op = "=>"
	badClear := threshold("point."+previewPoint, ">", 80, 85, "2m")
	unknownPoint := threshold("point.rs485-1.nothing_here", ">", 80, 75, "2m")
	unknownMetric := threshold("metric.humidity", ">", 80, 75, "2m")
	foreignScope := ok
	foreignScope.Scope = resource.RuleScope{DeviceIDs: []string{foreign.ID}}
	for _, tc := range []struct {
		what     string
		r        resource.AlertRule
		from, to time.Time
		field    string
	}{
		{"bad op", badOp, t0, end, "condition.op"},
		{"clear on the wrong side", badClear, t0, end, "condition.clear"},
		{"unknown point", unknownPoint, t0, end, "condition.source"},
		{"unknown metric", unknownMetric, t0, end, "condition.source"},
		{"another organization's device", foreignScope, t0, end, "scope.deviceIds[0]"},
		{"from after to", ok, end, t0, "from"},
		{"longer than the maximum", ok, end.Add(-cloud.MaxPreviewRange - time.Hour), end, "from"},
	} {
		_, err := e.preview(org.ID, tc.r, tc.from, tc.to)
		var ce *cloud.Error
		if !errors.As(err, &ce) || ce.Code != cloud.EINVALID || !strings.HasPrefix(ce.Message, tc.field) {
			t.Errorf("%s: %v, want invalid naming %s", tc.what, err, tc.field)
		}
	}
	if _, err := e.preview(org.ID, ok, t0, end); err != nil {
		t.Errorf("a point with history: %v", err)
	}
}

// testPreviewStatus: status changes an agent reports in heartbeats
// (device.status_changed events): ERROR held for `for` opens, leaving it
// resolves; tag scopes take the devices holding every tag.
func testPreviewStatus(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e.clock.Set(t0.Add(time.Hour))
	org := e.org("acme")
	d, other := e.device(org.ID, "IG-500"), e.device(org.ID, "IG-500")
	// report connects dev at t0 and reports statuses at the offsets
	// given, each in a heartbeat.
	report := func(dev device, steps ...any) {
		ad := e.auth(dev)
		s := Connect(t, e.Agent, ad, t0, protocol.Hello{AgentVersion: "1.0.0"})
		prev := resource.StatusOnline
		for i := 0; i < len(steps); i += 2 {
			at, st := t0.Add(steps[i].(time.Duration)), steps[i+1].(resource.DeviceStatus)
			Heartbeat(t, e.Agent, agentlink.HeartbeatIn{Device: ad, Session: s, At: at, Deadline: at.Add(3 * time.Minute), Status: st, PrevStatus: prev})
			prev = st
		}
	}
	// d: ERROR [2m, 3m) is shorter than for; [5m, 10m) opens at 7m; from
	// 20m on opens at 22m, open until 30m. other: ERROR from 1m, open
	// [3m, 30m].
	report(d, 2*time.Minute, resource.StatusError, 3*time.Minute, resource.StatusOnline,
		5*time.Minute, resource.StatusError, 10*time.Minute, resource.StatusOnline, 20*time.Minute, resource.StatusError)
	report(other, time.Minute, resource.StatusError)
	rule := resource.AlertRule{Name: "broken", Enabled: true, Severity: resource.SeverityError,
		Condition: resource.RuleCondition{Kind: resource.ConditionStatus, Status: resource.StatusError, For: "2m"}}
	end := t0.Add(30 * time.Minute)
	checkPreview(t, "status", e.mustPreview(org.ID, rule, t0, end), 3, d.ID+":2:11m0s", other.ID+":1:27m0s")
	for dev, tags := range map[string][]string{d.ID: {"boiler", "site:north"}, other.ID: {"pump", "site:north"}} {
		if err := e.Store.SetDeviceTags(e.ctx, dev, tags); err != nil {
			t.Fatal(err)
		}
	}
	rule.Scope = resource.RuleScope{Tags: []string{"boiler", "site:north"}}
	checkPreview(t, "tags boiler, site:north", e.mustPreview(org.ID, rule, t0, end), 2, d.ID+":2:11m0s")
	rule.Scope = resource.RuleScope{Tags: []string{"pump"}}
	checkPreview(t, "tag pump", e.mustPreview(org.ID, rule, t0, end), 1, other.ID+":1:27m0s")
	rule.Scope = resource.RuleScope{Tags: []string{"site:south"}}
	checkPreview(t, "a tag nobody has", e.mustPreview(org.ID, rule, t0, end), 0)
}
