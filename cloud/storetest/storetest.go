// Package storetest is the shared behaviour suite of the relay's stores:
// every implementation of the store contract (the bundle cloud.Stores:
// cloud.Store with the agent endpoint's, alert engine's, outbox's and
// panel's stores made from it) runs Run in its own
// tests, against a real database, and must pass it unchanged. The tests
// check behaviour a user of the API or an agent would see (ordering, keyset
// cursors under concurrent inserts, tenant isolation, the alert state table,
// exactly-once ingest, sessions, the webhook outbox, retention), never SQL:
// they reach the data only through the contract's interfaces.
package storetest

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Stores is one test's open store: the relay's bundle (cloud.Stores) with
// the agent endpoint's store opened from it, as a relay process holds them.
// It adds no store of its own.
type Stores struct {
	cloud.Stores
	// Agent is the agent endpoint's store, made by Stores.NewAgentStore.
	Agent cloud.AgentStoreCloser
	// Reopen opens another handle on the same database with the same
	// clock, as a second relay process (or the admin CLI) would; it is
	// closed when the test ends.
	Reopen func(t testing.TB) Stores
	// Close closes the agent store, then the store (idempotent; also run
	// when the test ends).
	Close func()
}

// Opener opens the stores of a fresh, empty database whose clock is now,
// closed when t ends (test/rig/dialects has one per dialect).
type Opener func(t testing.TB, now cloud.Now) Stores

// Open makes s's agent store and returns both as one test's Stores, closed
// when t ends; reopen (nil: none) opens another bundle on the same
// database.
func Open(t testing.TB, s cloud.Stores, reopen func(t testing.TB) cloud.Stores) Stores {
	t.Helper()
	agent, err := s.NewAgentStore(slog.New(slog.DiscardHandler))
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	var once sync.Once
	closeAll := func() { once.Do(func() { agent.Close(); s.Close() }) }
	t.Cleanup(closeAll)
	out := Stores{Stores: s, Agent: agent, Close: closeAll}
	if reopen != nil {
		out.Reopen = func(t testing.TB) Stores { return Open(t, reopen(t), reopen) }
	}
	return out
}

// Run runs the whole suite against the stores open makes.
func Run(t *testing.T, open Opener) {
	for _, tc := range []struct {
		name string
		fn   func(t *testing.T, open Opener)
	}{
		{"Orgs", testOrgs},
		{"AuditLog", testAuditLog},
		{"OIDCConfig", testOIDCConfig},
		{"Keys", testKeys},
		{"DevicesAndTokens", testDevicesAndTokens},
		{"OrgWebhookSettings", testOrgWebhookSettings},
		{"DeviceReadPaths", testDeviceReadPaths},
		{"DevicePaginationUnderInserts", testDevicePaginationUnderInserts},
		{"DeviceStatusFilter", testDeviceStatusFilter},
		{"EventPaginationUnderInserts", testEventPaginationUnderInserts},
		{"AlertPaginationUnderInserts", testAlertPaginationUnderInserts},
		{"InvalidCursors", testInvalidCursors},
		{"OrgIsolation", testOrgIsolation},
		{"AlertStateTable", testAlertStateTable},
		{"AlertConcurrentTransitions", testAlertConcurrentTransitions},
		{"AlertFilters", testAlertFilters},
		{"OneOpenAlertPerDeviceAndRule", testOneOpenAlert},
		{"AlertEngineStore", testAlertEngineStore},
		{"OfflineDevices", testOfflineDevices},
		{"RuleDefaults", testRuleDefaults},
		{"RuleCRUD", testRuleCRUD},
		{"RuleDeleteResolves", testRuleDeleteResolves},
		{"NotificationChannels", testNotificationChannels},
		{"Silences", testSilences},
		{"RulesObserved", testRulesObserved},
		{"DeviceAlerts", testDeviceAlerts},
		{"RulesBounded", testRulesBounded},
		{"StatusChangeEvents", testStatusChangeEvents},
		{"LateConnect", testLateConnect},
		{"PlannedWorkHold", testPlannedWorkHold},
		{"DeviceTags", testDeviceTags},
		{"PatchDevice", testPatchDevice},
		{"DeviceTagFilter", testDeviceTagFilter},
		{"SerialDefaults", testSerialDefaults},
		{"SerialTelemetryAndAvailability", testSerialTelemetry},
		{"PutChannel", testPutChannel},
		{"PatchSerial", testPatchSerial},
		{"PointState", testPointState},
		{"RecordsExactlyOnce", testRecordsExactlyOnce},
		{"MetricsMissing", testMetricsMissing},
		{"RecordsFromTwoHandles", testRecordsFromTwoHandles},
		{"RecordsConcurrentBatches", testRecordsConcurrentBatches},
		{"Sessions", testSessions},
		{"SweepRevokedOrphans", testSweepRevokedOrphans},
		{"HeartbeatEvents", testHeartbeatEvents},
		{"WebhookOutbox", testWebhookOutbox},
		{"WebhookAdmin", testWebhookAdmin},
		{"AlertNotifications", testAlertNotifications},
		{"AlertReminders", testAlertReminders},
		{"AlertNotificationsSurviveCrash", testAlertNotificationsSurviveCrash},
		{"ChannelTest", testChannelTest},
		{"Retention", testRetention},
		{"DataVersion", testDataVersion},
		{"Users", testUsers},
		{"FleetGlance", testFleetGlance},
		{"FleetSortWorst", testFleetSortWorst},
		{"AccountsAcrossOrgs", testAccountsAcrossOrgs},
		{"PasswordChanges", testPasswordChanges},
		{"LastOwnerUnderConcurrency", testLastOwnerConcurrent},
		{"TwoFactor", testTwoFactor},
		{"PanelSessions", testPanelSessions},
		{"FleetView", testFleetView},
		{"LiveState", testLiveState},
		{"PanelKeys", testPanelKeys},
		{"PanelWebhooks", testPanelWebhooks},
		{"DeliveryLog", testDeliveryLog},
		{"PointsExactlyOnce", testPointsExactlyOnce},
		{"PointsRaw", testPointsRaw},
		{"PointsBuckets", testPointsBuckets},
		{"PointsScope", testPointsScope},
		{"PointsCompaction", testPointsCompaction},
		{"PointsRetention", testPointsRetention},
		{"RuleHistory", testRuleHistory},
		{"PreviewThreshold", testPreviewThreshold},
		{"PreviewOffline", testPreviewOffline},
		{"PreviewEvents", testPreviewEvents},
		{"PreviewStatus", testPreviewStatus},
		{"PreviewValidation", testPreviewValidation},
		{"Releases", testReleases},
		{"RolloutWaves", testRolloutWaves},
		{"RolloutStops", testRolloutStops},
		{"RolloutActions", testRolloutActions},
		{"RolloutTimeout", testRolloutTimeout},
		{"RolloutCreate", testRolloutCreate},
		{"RolloutIsolation", testRolloutIsolation},
		{"RolloutConcurrentSteps", testRolloutConcurrentSteps},
		{"RebootCommand", testRebootCommand},
		{"Claims", testClaims},
		{"ClaimRaces", testClaimRaces},
		{"AuditKeys", testAuditKeys},
		{"AuditMembers", testAuditMembers},
		{"AuditOrg", testAuditOrg},
		{"AuditDevices", testAuditDevices},
		{"AuditClaims", testAuditClaims},
		{"AuditSerial", testAuditSerial},
		{"AuditChannels", testAuditChannels},
		{"AuditAlerts", testAuditAlerts},
		{"AuditRules", testAuditRules},
		{"AuditRollouts", testAuditRollouts},
	} {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
}

// Clock is a settable clock. With Tick set, every third call to Now
// advances it by one millisecond, so that many rows share a creation time
// and the id tie-break of the list orders is exercised.
type Clock struct {
	mu   sync.Mutex
	t    time.Time
	Tick bool
	n    atomic.Int64
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{t: t} }

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.Tick && c.n.Add(1)%3 == 0 {
		c.t = c.t.Add(time.Millisecond)
	}
	return c.t
}

// Add moves the clock.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// Set sets the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// t0 is the suite's usual start time.
var t0 = time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)

// env is one test's store with its clock and fixtures made through the
// contract.
type env struct {
	t     testing.TB
	ctx   context.Context
	clock *Clock
	cloud.Stores
	// Agent is the agent endpoint's store made from Stores.
	Agent  agentlink.Store
	reopen func() *env
	// reported is each device's channels as e.report last stored them.
	reported map[string][]protocol.ChannelState
}

func newEnv(t testing.TB, open Opener) *env {
	t.Helper()
	c := NewClock(t0)
	return start(t, c, open(t, c.Now))
}

// start makes the env of s; its reopen is a second handle on the same
// database (another relay or process).
func start(t testing.TB, c *Clock, s Stores) *env {
	t.Helper()
	return &env{t: t, ctx: context.Background(), clock: c, Stores: s.Stores, Agent: s.Agent,
		reopen: func() *env { return start(t, c, s.Reopen(t)) }}
}

// newTwoRelays is a store with a second handle on it, as two relays have,
// and a device of the organization acme.
func newTwoRelays(t testing.TB, open Opener) (e, e2 *env, d device) {
	t.Helper()
	e = newEnv(t, open)
	e2 = e.reopen()
	return e, e2, e.device(e.org("acme").ID, "IG-500")
}

func (e *env) org(name string) cloud.Org {
	e.t.Helper()
	o, err := e.Store.CreateOrg(e.ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	return o
}

var serials atomic.Int64

// device is a registered device with its token.
type device struct {
	resource.DeviceDetail
	OrgID string
	Token string
}

func (d device) ref() agentlink.Device {
	return agentlink.Device{ID: d.ID, OrgID: d.OrgID, Model: d.Model}
}

func (e *env) device(orgID, model string) device {
	e.t.Helper()
	d, tok, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: orgID, Name: "dev", SerialNumber: fmt.Sprintf("SN-%d", serials.Add(1)), Model: model})
	if err != nil {
		e.t.Fatal(err)
	}
	return device{DeviceDetail: d, OrgID: orgID, Token: tok}
}

// online connects d as an agent (Connect, then Hello) under a new session
// and returns the session.
func (e *env) online(d device, hb time.Duration) string {
	e.t.Helper()
	dev := e.auth(d)
	session := ids.New()
	now := e.clock.Now()
	if _, err := e.Agent.Connect(e.ctx, dev, session, now, now.Add(time.Minute)); err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.Agent.Hello(e.ctx, agentlink.HelloIn{Device: dev, Session: session, At: now, HeartbeatInterval: hb,
		Hello: protocol.Hello{AgentVersion: "1.0.0", FirmwareVersion: "fw-1", Model: d.Model}, Deadline: now.Add(3 * hb), OnlineEvent: true}); err != nil {
		e.t.Fatal(err)
	}
	return session
}

// auth authenticates d's token as the agent endpoint does.
func (e *env) auth(d device) agentlink.Device {
	e.t.Helper()
	dev, err := e.Agent.AuthDevice(e.ctx, sum(d.Token))
	if err != nil {
		e.t.Fatalf("auth %s: %v", d.ID, err)
	}
	return dev
}

func sum(token string) [32]byte {
	var s [32]byte
	copy(s[:], apikey.HashDeviceToken(token))
	return s
}

// records stores items as one agent batch and returns what it inserted.
func (e *env) records(d device, items ...protocol.Record) agentlink.RecordsOut {
	e.t.Helper()
	out, err := e.Agent.Records(e.ctx, agentlink.RecordsIn{Device: d.ref(), Session: "s", Items: items})
	if err != nil {
		e.t.Fatal(err)
	}
	return out
}

// seq numbers records of this process.
var seq atomic.Uint64

func eventRecord(typ string, sev resource.Severity, at time.Time) protocol.Record {
	return protocol.Record{Seq: seq.Add(1), Event: &protocol.Event{ID: ids.New(), Type: typ, Severity: sev, Message: typ, Data: json.RawMessage(`{}`), CreatedAt: resource.T(at)}}
}

func metricRecord(at time.Time, cpu float64) protocol.Record {
	return protocol.Record{Seq: seq.Add(1), Metric: &resource.MetricSample{CapturedAt: resource.T(at), CPUPct: cpu, MemPct: 1, DiskUsedPct: 2, TempCPU: 3, LoadAvg1: 0.5}}
}

// event stores one agent event created at the clock's time.
func (e *env) event(d device, typ string, sev resource.Severity) resource.Event {
	e.t.Helper()
	out := e.records(d, eventRecord(typ, sev, e.clock.Now()))
	if len(out.Events) != 1 {
		e.t.Fatalf("event not stored: %+v", out)
	}
	return out.Events[0]
}

// rule returns the organization's rule named name.
func (e *env) rule(orgID, name string) alert.Rule {
	e.t.Helper()
	rules, err := e.Engine.Rules(e.ctx, orgID)
	if err != nil {
		e.t.Fatal(err)
	}
	for _, r := range rules {
		if r.Name == name {
			return r
		}
	}
	e.t.Fatalf("no rule %s in %+v", name, rules)
	return alert.Rule{}
}

// alert opens an alert of rule on d at the clock's time and moves it to
// state through the alert service.
func (e *env) alert(d device, rule string, state resource.AlertState) resource.Alert {
	e.t.Helper()
	return e.openAlert(d, e.rule(d.OrgID, rule), state)
}

// openAlert opens an alert of r on d at the clock's time and moves it to
// state through the alert service.
func (e *env) openAlert(d device, r alert.Rule, state resource.AlertState) resource.Alert {
	e.t.Helper()
	a, opened, err := e.Engine.OpenAlert(e.ctx, alert.Opening{OrgID: d.OrgID, DeviceID: d.ID, Rule: r, Message: r.Name + " on " + d.ID, At: e.clock.Now(), WithEvent: true})
	if err != nil || !opened {
		e.t.Fatalf("open %s on %s: opened %v, %v", r.Name, d.ID, opened, err)
	}
	switch state {
	case resource.AlertAcknowledged:
		a, err = e.Store.Alerts().Acknowledge(e.ctx, d.OrgID, a.ID)
	case resource.AlertResolved:
		a, err = e.Store.Alerts().Resolve(e.ctx, d.OrgID, a.ID)
	}
	if err != nil {
		e.t.Fatal(err)
	}
	return a
}

// Heartbeats connects devices new IG-500s of orgID as agents on s
// (Connect, then Hello, on its agent store) and stores beats heartbeats from
// each, every one a second after the last and changing gpio-1's live value,
// each waited for: the load of a store-specific test of how a store writes
// heartbeats.
func Heartbeats(t testing.TB, s Stores, orgID string, devices, beats int) {
	t.Helper()
	HeartbeatsWithPoints(t, s, orgID, devices, beats, 0)
}

// HeartbeatsWithPoints is Heartbeats whose heartbeats, with points > 0,
// change rs485-1 instead, reporting that many points with new values.
func HeartbeatsWithPoints(t testing.TB, s Stores, orgID string, devices, beats, points int) {
	t.Helper()
	e := &env{t: t, ctx: context.Background(), clock: NewClock(time.Now()), Stores: s.Stores, Agent: s.Agent}
	ds, sessions := make([]device, devices), make([]string, devices)
	for i := range ds {
		ds[i] = e.device(orgID, "IG-500")
		sessions[i] = e.online(ds[i], time.Second)
	}
	for b := range beats {
		e.clock.Add(time.Second) // each round a new last_seen
		for i, d := range ds {
			in := agentlink.HeartbeatIn{Device: d.ref(), Session: sessions[i], At: e.clock.Now(), Status: resource.StatusOnline,
				PrevStatus: resource.StatusOnline, IPAddress: "10.0.0.1", HasChannels: true,
				Channels: []protocol.ChannelState{{ID: "gpio-1", Available: true, Live: fmt.Sprint(b % 2)}}}
			if points > 0 {
				ch := protocol.ChannelState{ID: "rs485-1", Available: true, Live: "0"}
				for k := range points {
					ch.Points = append(ch.Points, protocol.PointState{Name: fmt.Sprintf("point_%02d", k), Value: float64(b) + float64(k)/8,
						Quality: "good", At: resource.T(e.clock.Now())})
				}
				in.Channels = []protocol.ChannelState{ch}
			}
			if _, err := e.heartbeat(in); err != nil {
				t.Fatalf("heartbeat %d of %s: %v", b, d.ID, err)
			}
		}
	}
}

// heartbeat stores one heartbeat of session and waits for its outcome.
func (e *env) heartbeat(in agentlink.HeartbeatIn) (agentlink.HeartbeatOut, error) {
	type res struct {
		out agentlink.HeartbeatOut
		err error
	}
	ch := make(chan res, 1)
	if err := e.Agent.Heartbeat(e.ctx, in, func(o agentlink.HeartbeatOut, err error) { ch <- res{o, err} }); err != nil {
		return agentlink.HeartbeatOut{}, err
	}
	select {
	case r := <-ch:
		return r.out, r.err
	case <-time.After(30 * time.Second):
		e.t.Fatal("heartbeat outcome not reported within 30 s")
		return agentlink.HeartbeatOut{}, nil
	}
}

// walk fetches every page of a list with limit and returns the ids in order.
func walk(t testing.TB, limit int, page func(cursor string) (ids []string, p resource.Pagination, err error)) []string {
	t.Helper()
	var all []string
	cursor := ""
	for i := 0; ; i++ {
		ids, p, err := page(cursor)
		if err != nil {
			t.Fatalf("page %d: %v", i, err)
		}
		if len(ids) > limit {
			t.Fatalf("page %d has %d items, limit %d", i, len(ids), limit)
		}
		all = append(all, ids...)
		if !p.HasMore {
			if p.NextCursor != nil {
				t.Fatalf("page %d: hasMore false with nextCursor %q", i, *p.NextCursor)
			}
			return all
		}
		if p.NextCursor == nil || *p.NextCursor != ids[len(ids)-1] {
			t.Fatalf("page %d: nextCursor %v is not the last item's id", i, p.NextCursor)
		}
		cursor = *p.NextCursor
	}
}

// exactlyOnce checks that every id of want occurs exactly once in got and
// that no id occurs twice.
func exactlyOnce(t testing.TB, got, want []string) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range got {
		seen[id]++
	}
	for _, id := range want {
		if seen[id] != 1 {
			t.Errorf("pre-existing item %s seen %d times", id, seen[id])
		}
	}
	for id, n := range seen {
		if n > 1 {
			t.Errorf("item %s seen %d times", id, n)
		}
	}
}

// concurrently runs fn(0) … fn(n-1) in goroutines released at once, and
// waits for them all.
func concurrently(n int, fn func(i int)) {
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			fn(i)
		}()
	}
	close(start)
	wg.Wait()
}

func sameTime(a, b *resource.Time) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	return a.Equal(b.Time)
}
