package alert_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/linktest"
)

// relay runs the real agent endpoint (cloud/agentlink) over a real store
// (each test runs on SQLite and on PostgreSQL), with the alert engine and the webhook notifier as its observers and
// the webhook dispatcher sending to a real HTTPS receiver.
type relay struct {
	t      *testing.T
	s      storetest.Stores
	org    cloud.Org
	base   string // the agent endpoint's http://host:port
	hooks  chan received
	hookSv *httptest.Server
	// skew moves the engine's clock ahead of the agents' (nanoseconds):
	// offline rules wait at least 30 s (condition.after), which the
	// tests skip.
	skew atomic.Int64
}

type received struct {
	Path   string
	Event  string
	Device string
	Body   []byte
	SigOK  bool
}

func newRelay(t *testing.T, open storetest.Opener) *relay {
	t.Helper()
	ctx := context.Background()
	s := open(t, nil) // closed last, after the cleanup below
	org := storetest.Org(t, s.Store, "acme")
	r := &relay{t: t, s: s, org: org, hooks: make(chan received, 1000)}
	r.hookSv = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		var ev struct{ Event, DeviceID string }
		json.Unmarshal(body, &ev)
		r.hooks <- received{Path: req.URL.Path, Event: ev.Event, Device: ev.DeviceID, Body: body, SigOK: signedBoth(org.WebhookSecret, req, body)}
		w.WriteHeader(http.StatusOK)
	}))
	disp := startDispatcher(t, s, org.ID, r.hookSv, 20*time.Millisecond, r.now)
	notifier := webhook.NewNotifier(disp)
	engine := alert.New(alert.Config{Store: s.Engine, Observer: notifier, SweepInterval: 50 * time.Millisecond,
		Now: r.now})
	ectx, cancel := context.WithCancel(ctx)
	go engine.Run(ectx)
	t.Cleanup(func() { // after the agent endpoint (below) shut down: no more observer calls
		cancel()
		disp.Close()
		r.hookSv.Close()
	})
	_, r.base = linktest.Serve(t, agentlink.Config{Store: s.Agent, Observers: []cloud.Observer{engine, notifier}, SweepInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.DiscardHandler)})
	return r
}

// now is the engine's clock (and its notifications'): the agents' moved
// by skew.
func (r *relay) now() time.Time { return time.Now().Add(time.Duration(r.skew.Load())) }

func (r *relay) addDevice(serial string) (string, string) {
	r.t.Helper()
	d, tok := storetest.Device(r.t, r.s.Store, cloud.NewDevice{OrgID: r.org.ID, Name: serial, SerialNumber: serial, Model: "IG-500"})
	return d.ID, tok
}

// hook waits for the next webhook of device whose event is event.
func (r *relay) hook(device, event string) received {
	r.t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case h := <-r.hooks:
			if !h.SigOK {
				r.t.Fatalf("webhook %s with a bad signature", h.Event)
			}
			if h.Event == event && h.Device == device {
				return h
			}
		case <-deadline:
			r.t.Fatalf("no %s webhook", event)
		}
	}
}

// waitAlert waits until the device has an alert of rule in state.
func (r *relay) waitAlert(device, rule string, state resource.AlertState) resource.Alert {
	r.t.Helper()
	ruleID := storetest.Rule(r.t, r.s.Engine, r.org.ID, rule).ID
	deadline := time.Now().Add(10 * time.Second)
	for {
		for _, a := range listAlerts(r.t, r.s.Store, r.org.ID, state) {
			if a.DeviceID == device && a.RuleID == ruleID {
				return a
			}
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("device %s: no %s alert in state %s", device, rule, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// simAgent speaks shared/protocol to the relay, as fleet-agent does.
type simAgent struct {
	t   *testing.T
	ws  *websocket.Conn
	seq uint64
	mu  sync.Mutex
}

func (r *relay) connect(t *testing.T, token string, heartbeat time.Duration) *simAgent {
	t.Helper()
	ctx := context.Background()
	ws := linktest.MustDial(t, r.base, token)
	a := &simAgent{t: t, ws: ws}
	a.send(protocol.Message{Type: protocol.TypeHello, Hello: &protocol.Hello{AgentVersion: "sim", Model: "IG-500",
		HeartbeatInterval: protocol.Duration{Duration: heartbeat}}})
	go func() {
		for {
			if _, _, err := ws.Read(ctx); err != nil {
				return
			}
		}
	}()
	return a
}

func (a *simAgent) send(m protocol.Message) {
	a.t.Helper()
	b, _ := json.Marshal(m)
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ws.Write(context.Background(), websocket.MessageText, b); err != nil {
		a.t.Fatal(err)
	}
}

func (a *simAgent) heartbeat(vpn *protocol.VPN, channels ...protocol.ChannelState) {
	a.send(protocol.Message{Type: protocol.TypeHeartbeat, Heartbeat: &protocol.Heartbeat{At: resource.T(time.Now()), Status: resource.StatusOnline,
		VPN: vpn, Channels: channels}})
}

func (a *simAgent) metrics(samples ...resource.MetricSample) {
	var items []protocol.Record
	for i := range samples {
		a.seq++
		items = append(items, protocol.Record{Seq: a.seq, Metric: &samples[i]})
	}
	a.send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: items}})
}

func (a *simAgent) event(typ string, sev resource.Severity, msg string, data string) {
	a.seq++
	a.send(protocol.Message{Type: protocol.TypeRecords, Records: &protocol.Records{Items: []protocol.Record{{Seq: a.seq,
		Event: &protocol.Event{ID: ids.New(), Type: typ, Severity: sev, Message: msg, Data: json.RawMessage(data), CreatedAt: resource.T(time.Now())}}}}})
}

func sample(at time.Time, cpu, disk float64) resource.MetricSample {
	return resource.MetricSample{CapturedAt: resource.T(at), CPUPct: cpu, MemPct: 40, DiskUsedPct: disk, TempCPU: 55, LoadAvg1: 0.5}
}

// TestAgentsEndToEnd drives simulated agents through the real agent
// endpoint: a CPU spike, a full disk, a tunnel that goes down and up, an
// agent that goes silent and comes back, and signal forwarding.
func TestAgentsEndToEnd(t *testing.T) { stores.Run(t, testAgentsEndToEnd) }

func testAgentsEndToEnd(t *testing.T, open storetest.Opener) {
	r := newRelay(t, open)
	now := time.Now().Add(-time.Hour)

	t.Run("cpu spike", func(t *testing.T) {
		dev, tok := r.addDevice("CPU1")
		a := r.connect(t, tok, time.Minute)
		// high_cpu holds for 10 minutes: samples 5 minutes apart.
		a.metrics(sample(now, 97, 40), sample(now.Add(5*time.Minute), 98, 40))
		a.metrics(sample(now.Add(10*time.Minute), 99, 40))
		al := r.waitAlert(dev, "high_cpu", resource.AlertActive)
		h := r.hook(dev, "alert.opened")
		var body resource.AlertWebhook
		json.Unmarshal(h.Body, &body)
		if body.Alert.ID != al.ID || body.DeviceID != dev || h.Path != "/alerts" {
			t.Errorf("alert.opened webhook %s", h.Body)
		}
		a.metrics(sample(now.Add(15*time.Minute), 30, 40))
		r.waitAlert(dev, "high_cpu", resource.AlertResolved)
		r.hook(dev, "alert.resolved")
	})

	t.Run("full disk", func(t *testing.T) {
		dev, tok := r.addDevice("DISK1")
		a := r.connect(t, tok, time.Minute)
		a.metrics(sample(now, 10, 97))
		al := r.waitAlert(dev, "disk_full", resource.AlertActive)
		if al.Severity != resource.SeverityError {
			t.Errorf("severity %s", al.Severity)
		}
		r.hook(dev, "alert.opened")
	})

	t.Run("tunnel down", func(t *testing.T) {
		dev, tok := r.addDevice("VPN1")
		a := r.connect(t, tok, time.Minute)
		a.event(protocol.EventVPNDown, resource.SeverityError, "VPN tunnel wg0 down", `{"interfaceName":"wg0","endpoint":"vpn.example.com:51820","peerCount":0}`)
		al := r.waitAlert(dev, "vpn_down", resource.AlertActive)
		if !strings.Contains(string(al.Payload), `"interfaceName":"wg0"`) {
			t.Errorf("payload %s", al.Payload)
		}
		r.hook(dev, "alert.opened")
		a.heartbeat(&protocol.VPN{Up: true, InterfaceName: "wg0", Endpoint: "vpn.example.com:51820", PeerCount: 1})
		r.waitAlert(dev, "vpn_down", resource.AlertResolved)
		r.hook(dev, "alert.resolved")
		evs, err := r.s.Store.Devices().Events(context.Background(), r.org.ID, dev, cloud.EventFilter{Page: cloud.Page{Limit: 50}, Type: "alert.vpn_down"})
		if err != nil || len(evs.Data) != 1 {
			t.Errorf("alert.vpn_down events: %d %v, want the agent's one", len(evs.Data), err)
		}
	})

	t.Run("agent goes silent", func(t *testing.T) {
		dev, tok := r.addDevice("SILENT1")
		a := r.connect(t, tok, 100*time.Millisecond)
		a.heartbeat(nil)
		// No more heartbeats: OFFLINE after 3 intervals, and silent for
		// device_offline's 30 s (the engine's clock runs ahead).
		r.skew.Store(int64(31 * time.Second))
		defer r.skew.Store(0)
		r.waitAlert(dev, "device_offline", resource.AlertActive)
		r.hook(dev, "alert.opened")
		a = r.connect(t, tok, time.Minute) // the agent comes back
		a.heartbeat(nil)
		r.waitAlert(dev, "device_offline", resource.AlertResolved)
		r.hook(dev, "alert.resolved")
	})

	t.Run("agent disconnects", func(t *testing.T) {
		dev, tok := r.addDevice("DISC1")
		a := r.connect(t, tok, 200*time.Millisecond)
		a.heartbeat(nil)
		time.Sleep(50 * time.Millisecond)
		a.ws.Close(websocket.StatusNormalClosure, "restarting") // OFFLINE at once
		a = r.connect(t, tok, 200*time.Millisecond)             // back within an interval
		for i := 0; i < 10; i++ {
			a.heartbeat(nil)
			time.Sleep(100 * time.Millisecond)
		}
		for _, al := range listAlerts(r.t, r.s.Store, r.org.ID, resource.AlertActive) {
			if al.DeviceID == dev {
				t.Fatalf("device_offline opened for a quick reconnect: %s", al.Message)
			}
		}
		r.skew.Store(int64(31 * time.Second)) // device_offline's 30 s pass at once
		defer r.skew.Store(0)
		a.ws.Close(websocket.StatusNormalClosure, "gone") // and now gone for good
		al := r.waitAlert(dev, "device_offline", resource.AlertActive)
		if !strings.Contains(al.Message, "no heartbeat since") {
			t.Errorf("message %q", al.Message)
		}
		r.hook(dev, "alert.opened")
	})

	t.Run("signal forwarding", func(t *testing.T) {
		dev, tok := r.addDevice("SIG1")
		url, on := r.hookSv.URL+"/signals", true
		if _, err := r.s.Store.Serial().PatchSerial(context.Background(), r.org.ID, dev, cloud.SerialPatch{WebhookURL: &url, WebhookEnabled: &on}); err != nil {
			t.Fatal(err)
		}
		a := r.connect(t, tok, time.Minute)
		a.heartbeat(nil, protocol.ChannelState{ID: "rs485-1", Available: true, Live: "1 2"}, protocol.ChannelState{ID: "gpio-1", Available: true, Live: "0"})
		r.hook(dev, "serial.signal") // the first report
		a.heartbeat(nil, protocol.ChannelState{ID: "rs485-1", Available: true, Live: "1 2"}, protocol.ChannelState{ID: "gpio-1", Available: true, Live: "0"})
		a.heartbeat(nil, protocol.ChannelState{ID: "rs485-1", Available: true, Live: "1 2"}, protocol.ChannelState{ID: "gpio-1", Available: true, Live: "1"})
		h := r.hook(dev, "serial.signal")
		var body resource.SignalWebhook
		json.Unmarshal(h.Body, &body)
		if h.Path != "/signals" || body.DeviceID != dev || len(body.Channels) != 1 || body.Channels[0] != (resource.SignalChannel{ID: "gpio-1", Live: "1"}) {
			t.Errorf("signal webhook %s: want only gpio-1 changed", h.Body)
		}
		deadline := time.After(300 * time.Millisecond)
		for done := false; !done; {
			select {
			case extra := <-r.hooks:
				if extra.Event == "serial.signal" {
					t.Errorf("a heartbeat without change caused a webhook: %s", extra.Body)
				}
			case <-deadline:
				done = true
			}
		}
	})
}
