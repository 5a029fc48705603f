package alert_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
)

// env is a relay store (each test runs on SQLite and on PostgreSQL), an
// alert engine whose alert
// webhooks go through the real dispatcher to a real HTTPS receiver.
type env struct {
	t      *testing.T
	s      storetest.Stores
	org    cloud.Org
	dev    cloud.DeviceRef
	agent  agentlink.Device // dev, as its agent writes
	engine *alert.Engine
	notify cloud.AlertObserver
	hooks  *hookReceiver
	now    time.Time // the capture time of the last sample
	clock  *clock
	seq    uint64 // the last record's sequence number (points)
}

// clock is the relay's clock in these tests: the store and the engine read
// it, the test moves it with the samples.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// hookReceiver is an HTTPS receiver that checks both signatures.
type hookReceiver struct {
	srv    *httptest.Server
	secret string
	mu     sync.Mutex
	got    []resource.AlertWebhook
	bad    int
	ch     chan resource.AlertWebhook
}

func (h *hookReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	ok := signedBoth(h.secret, r, body)
	var aw resource.AlertWebhook
	json.Unmarshal(body, &aw)
	h.mu.Lock()
	if !ok {
		h.bad++
	}
	h.got = append(h.got, aw)
	h.mu.Unlock()
	h.ch <- aw
	w.WriteHeader(http.StatusNoContent)
}

func newEnv(t *testing.T, open storetest.Opener) *env {
	t.Helper()
	now := time.Now().UTC().Truncate(time.Second)
	c := &clock{t: now}
	s := open(t, c.Now)
	org := storetest.Org(t, s.Store, "acme")
	d, _ := storetest.Device(t, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw", SerialNumber: "SN1", Model: "IG-500"})
	e := &env{t: t, s: s, org: org, dev: cloud.DeviceRef{ID: d.ID, OrgID: org.ID, Model: "IG-500"}, now: now, clock: c}
	e.agent = agentlink.Device{ID: d.ID, OrgID: org.ID, Model: "IG-500"}
	e.hooks = &hookReceiver{secret: org.WebhookSecret, ch: make(chan resource.AlertWebhook, 100)}
	e.hooks.srv = httptest.NewTLSServer(e.hooks)
	t.Cleanup(e.hooks.srv.Close)
	disp := startDispatcher(t, s, org.ID, e.hooks.srv, 10*time.Millisecond, c.Now)
	t.Cleanup(func() { disp.Close() })
	e.notify = webhook.NewNotifier(disp)
	e.engine = alert.New(alert.Config{Store: s.Engine, Points: s.Store.Points(), Observer: e.notify, Logger: slog.New(slog.DiscardHandler), Now: e.clock.Now, SweepInterval: sweepEvery})
	s.Store.ObserveRules(rulesHeard{e})
	return e
}

// rulesHeard tells the env's current engine of rule changes, as the relay
// passes its engine to Store.ObserveRules.
type rulesHeard struct{ e *env }

func (h rulesHeard) RulesChanged(orgID string) { h.e.engine.RulesChanged(orgID) }

func (h rulesHeard) DeviceTagsChanged(orgID, deviceID string) {
	h.e.engine.DeviceTagsChanged(orgID, deviceID)
}

// sweepEvery is how often the tests' engines sweep (Run).
const sweepEvery = 20 * time.Millisecond

// restart replaces the engine by a new one on the same store, as a relay
// restart does.
func (e *env) restart() {
	e.engine = alert.New(alert.Config{Store: e.s.Engine, Points: e.s.Store.Points(), Observer: e.notify, Now: e.clock.Now, SweepInterval: sweepEvery})
}

// metrics stores samples (as the agent endpoint does) and tells the engine.
func (e *env) metrics(samples ...resource.MetricSample) {
	e.t.Helper()
	for i := range samples {
		e.now = e.now.Add(5 * time.Minute)
		samples[i].CapturedAt = resource.T(e.now)
	}
	e.clock.Set(e.now.Add(time.Second)) // stored a second after capture
	storetest.Metrics(e.t, e.s.Agent, e.agent, samples...)
	e.engine.MetricsStored(context.Background(), e.dev, samples)
}

func cpu(v float64) resource.MetricSample {
	return resource.MetricSample{CPUPct: v, MemPct: 30, DiskUsedPct: 40, TempCPU: 50}
}
func disk(v float64) resource.MetricSample {
	return resource.MetricSample{CPUPct: 10, MemPct: 30, DiskUsedPct: v, TempCPU: 50}
}

func (e *env) alerts(state resource.AlertState) []resource.Alert {
	e.t.Helper()
	return listAlerts(e.t, e.s.Store, e.org.ID, state)
}

// listAlerts returns the organization's alerts in state (the first 100),
// as the API lists them.
func listAlerts(t *testing.T, s cloud.Store, orgID string, state resource.AlertState) []resource.Alert {
	t.Helper()
	l, err := s.Alerts().ListAlerts(context.Background(), orgID, cloud.AlertFilter{Page: cloud.Page{Limit: 100}, State: state})
	if err != nil {
		t.Fatal(err)
	}
	return l.Data
}

func (e *env) events(typ string) []resource.Event {
	e.t.Helper()
	l, err := e.s.Store.Devices().Events(context.Background(), e.org.ID, e.dev.ID, cloud.EventFilter{Page: cloud.Page{Limit: 200}, Type: typ})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Data
}

func (e *env) ruleID(name string) string {
	return storetest.Rule(e.t, e.s.Engine, e.org.ID, name).ID
}

// hook waits for the next alert webhook.
func (e *env) hook() resource.AlertWebhook {
	e.t.Helper()
	select {
	case h := <-e.hooks.ch:
		e.hooks.mu.Lock()
		bad := e.hooks.bad
		e.hooks.mu.Unlock()
		if bad > 0 {
			e.t.Fatal("alert webhook with a bad signature")
		}
		return h
	case <-time.After(5 * time.Second):
		e.t.Fatal("no alert webhook")
	}
	return resource.AlertWebhook{}
}

func (e *env) noHook() {
	e.t.Helper()
	select {
	case h := <-e.hooks.ch:
		e.t.Fatalf("unexpected alert webhook %s %s", h.Event, h.Alert.Message)
	case <-time.After(200 * time.Millisecond):
	}
}

// TestCPUOpensAfterForAndClearsWithHysteresis: the default high_cpu
// (>= 90 % for 10m, clear 80 %) with a sample every 5 minutes opens on the
// third sample over the threshold in a row (10 minutes after the first)
// and resolves on the first sample under 80 %.
func TestCPUOpensAfterForAndClearsWithHysteresis(t *testing.T) {
	stores.Run(t, testCPUOpensAfterForAndClearsWithHysteresis)
}

func testCPUOpensAfterForAndClearsWithHysteresis(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.metrics(cpu(95), cpu(96))
	e.metrics(cpu(50)) // breaks the run
	e.metrics(cpu(95))
	e.metrics(cpu(97))
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatalf("%d alerts after 5 minutes over 90%%, want 0", n)
	}
	e.noHook()
	e.metrics(cpu(99))
	as := e.alerts(resource.AlertActive)
	if len(as) != 1 || as[0].RuleID != e.ruleID("high_cpu") || as[0].Severity != resource.SeverityWarning || as[0].DeviceID != e.dev.ID {
		t.Fatalf("alerts after 10 minutes over 90%%: %+v", as)
	}
	if want := "CPU usage 99.0% >= 90.0% for 10m"; as[0].Message != want {
		t.Errorf("message %q, want %q", as[0].Message, want)
	}
	if evs := e.events("alert.high_cpu"); len(evs) != 1 || evs[0].Severity != resource.SeverityWarning {
		t.Errorf("alert.high_cpu events: %+v", evs)
	}
	if h := e.hook(); h.Event != "alert.opened" || h.Alert.ID != as[0].ID || h.DeviceID != e.dev.ID || h.Alert.State != resource.AlertActive {
		t.Errorf("webhook %+v", h)
	}
	e.metrics(cpu(85), cpu(99), cpu(82)) // between clear (80) and threshold: stays open, no second alert
	if n := len(e.alerts(resource.AlertActive)); n != 1 {
		t.Fatalf("%d active alerts in the hysteresis band, want 1", n)
	}
	e.noHook()
	e.metrics(cpu(79))
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatalf("still %d active after a sample below the clear threshold", n)
	}
	res := e.alerts(resource.AlertResolved)
	if len(res) != 1 || res[0].ResolvedAt == nil {
		t.Fatalf("resolved: %+v", res)
	}
	if evs := e.events("alert.resolved"); len(evs) != 1 {
		t.Errorf("alert.resolved events: %d, want 1", len(evs))
	}
	if h := e.hook(); h.Event != "alert.resolved" || h.Alert.ID != as[0].ID || h.Alert.ResolvedAt == nil {
		t.Errorf("webhook %+v", h)
	}
}

// TestForSurvivesRestart: a run over the threshold that began before a
// restart counts towards `for` after it (read back from the stored
// history).
func TestForSurvivesRestart(t *testing.T) {
	stores.Run(t, testForSurvivesRestart)
}

func testForSurvivesRestart(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.metrics(cpu(95), cpu(95))
	e.restart()
	e.metrics(cpu(95))
	if n := len(e.alerts(resource.AlertActive)); n != 1 {
		t.Fatalf("%d alerts after 10 minutes over the threshold across a restart, want 1", n)
	}
	e.restart()
	e.metrics(cpu(60))
	if n := len(e.alerts(resource.AlertResolved)); n != 1 {
		t.Fatalf("the open alert did not resolve after a restart")
	}
}

func TestFullDiskAndSpooledBatch(t *testing.T) { stores.Run(t, testFullDiskAndSpooledBatch) }

func testFullDiskAndSpooledBatch(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.metrics(disk(96)) // disk_full (for 0s): one sample is enough
	as := e.alerts(resource.AlertActive)
	if len(as) != 1 || as[0].RuleID != e.ruleID("disk_full") || as[0].Severity != resource.SeverityError {
		t.Fatalf("alerts: %+v", as)
	}
	var payload map[string]any
	json.Unmarshal(as[0].Payload, &payload)
	if payload["rule"] != "disk_full" || payload["ruleId"] != as[0].RuleID || payload["source"] != "metric.diskUsedPct" || payload["op"] != ">=" ||
		payload["value"] != 96.0 || payload["threshold"] != 90.0 || payload["clear"] != 85.0 || payload["for"] != "0s" || payload["unit"] != "%" ||
		payload["capturedAt"] == nil {
		t.Errorf("payload %s", as[0].Payload)
	}
	if want := "Disk usage 96.0% >= 90.0%"; as[0].Message != want {
		t.Errorf("message %q, want %q", as[0].Message, want)
	}
	e.metrics(disk(70))
	// A spooled hour arriving at once: full, freed, full again.
	e.metrics(disk(50), disk(97), disk(60), disk(98))
	if a, r := len(e.alerts(resource.AlertActive)), len(e.alerts(resource.AlertResolved)); a != 1 || r != 2 {
		t.Fatalf("after the batch: %d active, %d resolved; want 1, 2", a, r)
	}
	if n := len(e.events("alert.disk_full")); n != 3 {
		t.Errorf("%d alert.disk_full events, want 3", n)
	}
}

// TestManualResolveNeedsNewSamples: an alert resolved through the API
// while the condition still holds opens again only once it held for `for`
// over samples captured after the resolution.
func TestManualResolveNeedsNewSamples(t *testing.T) { stores.Run(t, testManualResolveNeedsNewSamples) }

func testManualResolveNeedsNewSamples(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.metrics(cpu(95), cpu(95), cpu(95))
	as := e.alerts(resource.AlertActive)
	if len(as) != 1 {
		t.Fatal("no alert")
	}
	if _, err := e.s.Store.Alerts().Resolve(context.Background(), e.org.ID, as[0].ID); err != nil {
		t.Fatal(err)
	}
	e.metrics(cpu(95), cpu(95))
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatalf("reopened 5 minutes after a manual resolve")
	}
	e.metrics(cpu(95))
	if n := len(e.alerts(resource.AlertActive)); n != 1 {
		t.Fatalf("%d active after 10 minutes of new samples over the threshold, want 1", n)
	}
}

func TestAgentSilentOpensDeviceOffline(t *testing.T) {
	stores.Run(t, testAgentSilentOpensDeviceOffline)
}

func testAgentSilentOpensDeviceOffline(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	lastSeen := e.clock.Now()
	storetest.Offline(t, e.s.Agent, e.agent, lastSeen, 30*time.Second)
	// The agent disconnected 10 s after its last heartbeat (interval 30 s):
	// not yet three intervals.
	e.clock.Set(lastSeen.Add(10 * time.Second))
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOnline, resource.StatusOffline)
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatalf("%d alerts 10 s after the last heartbeat, want 0", n)
	}
	e.noHook()
	// The sweep opens it once three intervals (90 s) passed.
	e.clock.Set(lastSeen.Add(91 * time.Second))
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { e.engine.Run(runCtx); close(done) }()
	defer func() { stop(); <-done }()
	if h := e.hook(); h.Event != "alert.opened" {
		t.Fatalf("webhook %s", h.Event)
	}
	as := e.alerts(resource.AlertActive)
	if len(as) != 1 || as[0].RuleID != e.ruleID("device_offline") || as[0].Severity != resource.SeverityError {
		t.Fatalf("alerts: %+v", as)
	}
	if n := len(e.events("alert.device_offline")); n != 1 {
		t.Errorf("%d alert.device_offline events, want 1", n)
	}
	// Resolved by hand while still offline: not opened again, not even by a
	// restarted engine.
	if _, err := e.s.Store.Alerts().Resolve(ctx, e.org.ID, as[0].ID); err != nil {
		t.Fatal(err)
	}
	if h := e.hook(); h.Event != "alert.resolved" { // queued with the change, sent at the dispatcher's next poll
		t.Fatalf("webhook %s after the resolve by hand", h.Event)
	}
	e.restart()
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOnline, resource.StatusOffline)
	e.noHook()
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatalf("device_offline reopened for the same outage")
	}
	// Back online, then silent again: a new alert, resolved when it returns.
	e.clock.Set(lastSeen.Add(10 * time.Minute))
	storetest.Offline(t, e.s.Agent, e.agent, lastSeen.Add(10*time.Minute), 30*time.Second)
	e.clock.Set(lastSeen.Add(12 * time.Minute))
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOnline, resource.StatusOffline)
	if h := e.hook(); h.Event != "alert.opened" {
		t.Fatalf("webhook %s", h.Event)
	}
	e.engine.StatusChanged(ctx, e.dev, resource.StatusOffline, resource.StatusOnline)
	if n := len(e.alerts(resource.AlertActive)); n != 0 {
		t.Fatal("device_offline not resolved when the device came back")
	}
	if h := e.hook(); h.Event != "alert.resolved" {
		t.Errorf("webhook %s", h.Event)
	}
}

func TestTunnelDown(t *testing.T) { stores.Run(t, testTunnelDown) }

func testTunnelDown(t *testing.T, open storetest.Opener) {
	for _, tc := range []struct {
		name string
		up   func(e *env)
	}{
		{"resolved by a heartbeat", func(e *env) {
			e.engine.HeartbeatStored(context.Background(), e.dev, cloud.Heartbeat{At: time.Now(), Status: resource.StatusOnline,
				VPN: &cloud.VPNState{Up: true, InterfaceName: "wg0"}})
		}},
		{"resolved by a vpn.up event", func(e *env) {
			up := []resource.Event{{Type: "vpn.up", Severity: resource.SeverityInfo, Message: "tunnel up"}}
			up = storetest.Events(e.t, e.s.Agent, e.agent, up...)
			e.engine.EventsStored(context.Background(), e.dev, up)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			ctx := context.Background()
			// A heartbeat with the tunnel up while nothing is open changes nothing.
			e.engine.HeartbeatStored(ctx, e.dev, cloud.Heartbeat{At: time.Now(), VPN: &cloud.VPNState{Up: true}})
			down := []resource.Event{{Type: "alert.vpn_down", Severity: resource.SeverityError, Message: "VPN tunnel wg0 down",
				Data: json.RawMessage(`{"interfaceName":"wg0","endpoint":"vpn.example.com:51820","peerCount":0}`)}}
			down = storetest.Events(t, e.s.Agent, e.agent, down...) // stored by the agent endpoint
			e.engine.EventsStored(ctx, e.dev, down)
			e.engine.EventsStored(ctx, e.dev, down) // a resend: still one alert
			as := e.alerts(resource.AlertActive)
			if len(as) != 1 || as[0].RuleID != e.ruleID("vpn_down") || as[0].Message != "VPN tunnel wg0 down" {
				t.Fatalf("alerts: %+v", as)
			}
			var p struct {
				InterfaceName string
				Endpoint      string
				PeerCount     *int
			}
			if err := json.Unmarshal(as[0].Payload, &p); err != nil || p.InterfaceName != "wg0" || p.Endpoint != "vpn.example.com:51820" || p.PeerCount == nil {
				t.Errorf("payload %s", as[0].Payload)
			}
			if n := len(e.events("alert.vpn_down")); n != 1 {
				t.Errorf("%d alert.vpn_down events, want the agent's one only", n)
			}
			if h := e.hook(); h.Event != "alert.opened" || h.Alert.ID != as[0].ID {
				t.Errorf("webhook %+v", h)
			}
			tc.up(e)
			if n := len(e.alerts(resource.AlertActive)); n != 0 {
				t.Fatal("vpn_down not resolved")
			}
			if n := len(e.events("alert.resolved")); n != 1 {
				t.Errorf("%d alert.resolved events, want 1", n)
			}
			if h := e.hook(); h.Event != "alert.resolved" {
				t.Errorf("webhook %s", h.Event)
			}
		})
	}
}

func TestAtMostOneOpenAlertUnderConcurrency(t *testing.T) {
	stores.Run(t, testAtMostOneOpenAlertUnderConcurrency)
}

func testAtMostOneOpenAlertUnderConcurrency(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	e.metrics(disk(95))
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			e.engine.MetricsStored(context.Background(), e.dev, []resource.MetricSample{{CapturedAt: resource.T(e.now), DiskUsedPct: 95}})
		}()
	}
	wg.Wait()
	if n := len(e.alerts(resource.AlertActive)); n != 1 {
		t.Errorf("%d open alerts, want 1", n)
	}
}
