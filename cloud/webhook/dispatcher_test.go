package webhook_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/alert"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
)

func TestSignalForwardedOnceWithChangedChannelsOnly(t *testing.T) {
	stores.Run(t, testSignalForwardedOnceWithChangedChannelsOnly)
}

// forwarding is a device forwarding its signals to a receiver through a
// notifier, and the time of the heartbeats the tests give it.
type forwarding struct {
	e   *env
	rcv *receiver
	n   *webhook.Notifier
	dev cloud.DeviceRef
	at  time.Time
}

func newForwarding(t *testing.T, open storetest.Opener) forwarding {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	e.forward(t, e.device, rcv.URL("/hook"))
	n := webhook.NewNotifier(newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile}))
	return forwarding{e: e, rcv: rcv, n: n, dev: cloud.DeviceRef{ID: e.device, OrgID: e.org.ID, Model: "IG-500"},
		at: time.Date(2026, 11, 22, 3, 0, 0, 123_000_000, time.UTC)}
}

func testSignalForwardedOnceWithChangedChannelsOnly(t *testing.T, open storetest.Opener) {
	f := newForwarding(t, open)
	e, rcv, n, dev, at := f.e, f.rcv, f.n, f.dev, f.at
	ctx := context.Background()

	n.HeartbeatStored(ctx, dev, cloud.Heartbeat{At: at, Status: resource.StatusOnline}) // nothing changed
	changed := []resource.SignalChannel{{ID: "rs485-1", Live: "17 42", TxOn: true}, {ID: "canfd-1", Live: "0x123#DEADBEEF", Error: "bus-off"}}
	n.HeartbeatStored(ctx, dev, cloud.Heartbeat{At: at, Status: resource.StatusOnline, Changed: changed})

	h := rcv.wait(t, 1, 5*time.Second)[0]
	rcv.quiet(t, 300*time.Millisecond)
	if !h.SigOK || !h.StdOK {
		t.Errorf("signatures: X-Service-Signature ok=%v, webhook-signature ok=%v", h.SigOK, h.StdOK)
	}
	if h.Attempt != 1 || h.DeliveryID == "" || h.Header.Get("Content-Type") != "application/json" || h.Header.Get("User-Agent") == "" {
		t.Errorf("headers: %v", h.Header)
	}
	want := `{"event":"serial.signal","deviceId":"` + e.device + `","at":"2026-11-22T03:00:00.123Z","channels":[{"id":"rs485-1","live":"17 42","txOn":true,"error":""},{"id":"canfd-1","live":"0x123#DEADBEEF","txOn":false,"error":"bus-off"}]}`
	if string(h.Body) != want {
		t.Errorf("body\n got %s\nwant %s", h.Body, want)
	}
	di := e.waitState(t, h.DeliveryID, "delivered", 5*time.Second)
	if len(di.Attempts) != 1 || di.Attempts[0].StatusCode != 200 {
		t.Errorf("attempts = %+v", di.Attempts)
	}
}

// TestSignalCarriesChangedPoints: a heartbeat where only points changed
// sends one serial.signal whose channels are an empty array (the spec's
// shape) and whose points are the changed ones; with channels and points
// both, one carries both.
func TestSignalCarriesChangedPoints(t *testing.T) {
	stores.Run(t, testSignalCarriesChangedPoints)
}

func testSignalCarriesChangedPoints(t *testing.T, open storetest.Opener) {
	f := newForwarding(t, open)
	e, rcv, n, dev, at := f.e, f.rcv, f.n, f.dev, f.at
	ctx := context.Background()
	read := resource.T(at.Add(-200 * time.Millisecond))
	temp := resource.PointRef{ID: "rs485-1.boiler_temp", Value: 21.5, Unit: "°C", Quality: "good", At: &read}
	pump := resource.PointRef{ID: "rs485-1.pump", Value: false, Quality: "good", At: &read}
	bad := resource.PointRef{ID: "rs485-1.pressure", Unit: "bar", Quality: "bad", At: &read}

	n.HeartbeatStored(ctx, dev, cloud.Heartbeat{At: at, Status: resource.StatusOnline, ChangedPoints: []resource.PointRef{temp, pump}})
	first := rcv.wait(t, 1, 5*time.Second)[0]
	n.HeartbeatStored(ctx, dev, cloud.Heartbeat{At: at, Status: resource.StatusOnline,
		Changed: []resource.SignalChannel{{ID: "rs485-1", Live: "16812 0"}}, ChangedPoints: []resource.PointRef{bad}})
	second := rcv.wait(t, 1, 5*time.Second)[0]
	rcv.quiet(t, 300*time.Millisecond)

	head := `{"event":"serial.signal","deviceId":"` + e.device + `","at":"2026-11-22T03:00:00.123Z",`
	if want := head + `"channels":[],"points":[{"id":"rs485-1.boiler_temp","value":21.5,"unit":"°C","quality":"good","at":"2026-11-22T02:59:59.923Z"},` +
		`{"id":"rs485-1.pump","value":false,"unit":"","quality":"good","at":"2026-11-22T02:59:59.923Z"}]}`; string(first.Body) != want {
		t.Errorf("points only: body\n got %s\nwant %s", first.Body, want)
	}
	if want := head + `"channels":[{"id":"rs485-1","live":"16812 0","txOn":false,"error":""}],` +
		`"points":[{"id":"rs485-1.pressure","value":null,"unit":"bar","quality":"bad","at":"2026-11-22T02:59:59.923Z"}]}`; string(second.Body) != want {
		t.Errorf("channels and points: body\n got %s\nwant %s", second.Body, want)
	}
	if !first.SigOK || !first.StdOK || !second.SigOK || !second.StdOK {
		t.Error("a signal with points is not signed as the others")
	}
}

func TestNoSignalWhenForwardingDisabled(t *testing.T) {
	stores.Run(t, testNoSignalWhenForwardingDisabled)
}

func testNoSignalWhenForwardingDisabled(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	e.forward(t, e.device, rcv.URL("/hook"))
	off := false
	if _, err := patchSerial(e, cloud.SerialPatch{WebhookEnabled: &off}); err != nil {
		t.Fatal(err)
	}
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	webhook.NewNotifier(d).HeartbeatStored(context.Background(), cloud.DeviceRef{ID: e.device, OrgID: e.org.ID},
		cloud.Heartbeat{At: time.Now(), Changed: []resource.SignalChannel{{ID: "gpio-1", Live: "1"}}})
	rcv.quiet(t, 300*time.Millisecond)
	if n := len(e.deliveries(t)); n != 0 {
		t.Errorf("%d deliveries stored, want 0", n)
	}
}

// TestForwardingReadOnceUntilItChanges: a device's forwarding is read from
// the store at its first changed heartbeat, not at every one (on a shared
// store each read is a round trip to the database), and a PATCH /serial
// (the serial service tells the notifier) takes effect at the very next
// heartbeat: forwarding off, then on to another URL.
func TestForwardingReadOnceUntilItChanges(t *testing.T) {
	stores.Run(t, testForwardingReadOnceUntilItChanges)
}

func testForwardingReadOnceUntilItChanges(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	e.forward(t, e.device, rcv.URL("/a"))
	reads := &countingStore{Store: e.store}
	n := webhook.NewNotifier(newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile, store: reads}))
	serial := e.s.Store.Serial()
	e.s.Store.Observe(n, nil)
	ctx := context.Background()
	beat := func(live string) {
		n.HeartbeatStored(ctx, cloud.DeviceRef{ID: e.device, OrgID: e.org.ID, Model: "IG-500"},
			cloud.Heartbeat{At: time.Now(), Status: resource.StatusOnline, Changed: []resource.SignalChannel{{ID: "gpio-1", Live: live}}})
	}
	for i := range 5 {
		beat(strconv.Itoa(i % 2))
	}
	for _, h := range rcv.wait(t, 5, 5*time.Second) {
		if h.Path != "/a" {
			t.Errorf("signal went to %s, want /a", h.Path)
		}
	}
	if got := reads.n.Load(); got != 1 {
		t.Errorf("5 changed heartbeats read the forwarding %d times, want once", got)
	}

	off := false
	if _, err := serial.PatchSerial(ctx, e.org.ID, e.device, cloud.SerialPatch{WebhookEnabled: &off}); err != nil {
		t.Fatal(err)
	}
	beat("1")
	rcv.quiet(t, 300*time.Millisecond)

	on, url := true, rcv.URL("/b")
	if _, err := serial.PatchSerial(ctx, e.org.ID, e.device, cloud.SerialPatch{WebhookURL: &url, WebhookEnabled: &on}); err != nil {
		t.Fatal(err)
	}
	beat("0")
	if h := rcv.wait(t, 1, 5*time.Second)[0]; h.Path != "/b" {
		t.Errorf("signal after the URL changed went to %s, want /b", h.Path)
	}
	if got := reads.n.Load(); got != 3 {
		t.Errorf("forwarding read %d times over two changes, want 3", got)
	}
}

// countingStore counts the forwarding reads of the store it wraps.
type countingStore struct {
	webhook.Store
	n atomic.Int64
}

func (s *countingStore) Forwarding(ctx context.Context, deviceID string) (string, string, error) {
	s.n.Add(1)
	return s.Store.Forwarding(ctx, deviceID)
}

// TestRetryPolicy scripts the receiver's first answer and checks whether the
// delivery is retried (and then delivered) or ends failed after one attempt.
func TestRetryPolicy(t *testing.T) { stores.Run(t, testRetryPolicy) }

func testRetryPolicy(t *testing.T, open storetest.Opener) {
	cases := []struct {
		name    string
		first   func(w http.ResponseWriter) int
		retried bool
	}{
		{"500", func(http.ResponseWriter) int { return 500 }, true},
		{"503", func(http.ResponseWriter) int { return 503 }, true},
		{"408", func(http.ResponseWriter) int { return 408 }, true},
		{"425", func(http.ResponseWriter) int { return 425 }, true},
		{"429", func(w http.ResponseWriter) int { w.Header().Set("Retry-After", "0"); return 429 }, true},
		{"slow reply past the timeout", func(http.ResponseWriter) int { time.Sleep(700 * time.Millisecond); return 200 }, true},
		{"connection closed", func(http.ResponseWriter) int { return -1 }, true},
		{"400", func(http.ResponseWriter) int { return 400 }, false},
		{"404", func(http.ResponseWriter) int { return 404 }, false},
		{"301 not followed", func(w http.ResponseWriter) int { w.Header().Set("Location", "/elsewhere"); return 301 }, false},
		{"410", func(http.ResponseWriter) int { return 410 }, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, open)
			rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(h hit, w http.ResponseWriter) int {
				if h.Path == "/elsewhere" {
					return 200
				}
				if h.Attempt == 1 {
					return tc.first(w)
				}
				return 204
			})
			d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile, timeout: 300 * time.Millisecond})
			dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/hook"), Body: []byte(`{"x":1}`)}
			if err := d.Enqueue(context.Background(), dl); err != nil {
				t.Fatal(err)
			}
			if tc.retried {
				hs := rcv.wait(t, 2, 10*time.Second)
				if hs[0].DeliveryID != dl.ID || hs[1].DeliveryID != dl.ID || hs[0].Attempt != 1 || hs[1].Attempt != 2 {
					t.Errorf("attempts: %s#%d, %s#%d; want %s#1, #2", hs[0].DeliveryID, hs[0].Attempt, hs[1].DeliveryID, hs[1].Attempt, dl.ID)
				}
				for _, h := range hs {
					if !h.SigOK || !h.StdOK {
						t.Errorf("attempt %d: bad signature", h.Attempt)
					}
				}
				di := e.waitState(t, dl.ID, "delivered", 5*time.Second)
				if len(di.Attempts) != 2 || di.Attempts[1].StatusCode != 204 {
					t.Errorf("recorded attempts %+v", di.Attempts)
				}
				if a := di.Attempts[0]; a.StatusCode == 0 && a.Error == "" {
					t.Errorf("first attempt recorded neither status nor error: %+v", a)
				}
			} else {
				rcv.wait(t, 1, 5*time.Second)
				di := e.waitState(t, dl.ID, "failed", 5*time.Second)
				rcv.quiet(t, 300*time.Millisecond)
				if len(di.Attempts) != 1 {
					t.Errorf("recorded attempts %+v, want 1", di.Attempts)
				}
			}
		})
	}
}

func TestExhaustedAfterFiveRetries(t *testing.T) { stores.Run(t, testExhaustedAfterFiveRetries) }

func testExhaustedAfterFiveRetries(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(hit, http.ResponseWriter) int { return 502 })
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	hs := rcv.wait(t, 6, 10*time.Second)
	for i, h := range hs {
		if h.Attempt != i+1 || h.DeliveryID != dl.ID {
			t.Errorf("request %d: attempt %d of %s", i, h.Attempt, h.DeliveryID)
		}
	}
	di := e.waitState(t, dl.ID, "exhausted", 5*time.Second)
	rcv.quiet(t, 300*time.Millisecond)
	if len(di.Attempts) != 6 {
		t.Errorf("%d attempts recorded, want 6", len(di.Attempts))
	}
}

func TestRetryAfterHonoured(t *testing.T) { stores.Run(t, testRetryAfterHonoured) }

func testRetryAfterHonoured(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(h hit, w http.ResponseWriter) int {
		if h.Attempt == 1 {
			w.Header().Set("Retry-After", "1")
			return 429
		}
		return 200
	})
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	hs := rcv.wait(t, 2, 10*time.Second)
	if gap := hs[1].At.Sub(hs[0].At); gap < 950*time.Millisecond {
		t.Errorf("retry came %v after a 429 with Retry-After: 1 (backoff 20ms)", gap)
	}
}

func TestPrivateAddressRefusedAtDial(t *testing.T) { stores.Run(t, testPrivateAddressRefusedAtDial) }

func testPrivateAddressRefusedAtDial(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	d := newDispatcher(t, e, dispOpts{caFile: rcv.caFile}) // no allow-private
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	di := e.waitState(t, dl.ID, "failed", 5*time.Second)
	rcv.quiet(t, 200*time.Millisecond)
	if len(di.Attempts) != 1 || !strings.Contains(di.Attempts[0].Error, "not allowed") {
		t.Errorf("attempts %+v: want one refused by the address policy", di.Attempts)
	}
}

func TestTLSVerifiedWithoutExtraCA(t *testing.T) { stores.Run(t, testTLSVerifiedWithoutExtraCA) }

func testTLSVerifiedWithoutExtraCA(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, backoff: []time.Duration{time.Hour}}) // CA not trusted
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		ds := e.deliveries(t)
		if len(ds) == 1 && len(ds[0].Attempts) == 1 {
			if !strings.Contains(ds[0].Attempts[0].Error, "certificate") || ds[0].State != "pending" {
				t.Errorf("attempt %+v state %s: want a certificate error, retried later", ds[0].Attempts[0], ds[0].State)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no attempt recorded")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if n := len(rcv.Hits()); n != 0 {
		t.Errorf("receiver got %d requests over an untrusted TLS connection", n)
	}
}

func TestDeliveriesOfOneDeviceKeepTheirOrder(t *testing.T) {
	stores.Run(t, testDeliveriesOfOneDeviceKeepTheirOrder)
}

func testDeliveriesOfOneDeviceKeepTheirOrder(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(h hit, w http.ResponseWriter) int {
		var b struct{ N int }
		json.Unmarshal(h.Body, &b)
		if b.N%3 == 0 && h.Attempt == 1 {
			return 503 // every third fails once
		}
		return 200
	})
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	other := e.addDevice(t, "SN2")
	const n = 30
	for i := 0; i < n; i++ {
		for _, dev := range []string{e.device, other} {
			body, _ := json.Marshal(map[string]any{"n": i, "dev": dev})
			if err := d.Enqueue(context.Background(), &webhook.Delivery{OrgID: e.org.ID, DeviceID: dev, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: body}); err != nil {
				t.Fatal(err)
			}
		}
	}
	hs := rcv.wait(t, 2*n+2*10, 20*time.Second)
	next := map[string]int{}
	for _, h := range hs {
		var b struct {
			N   int
			Dev string
		}
		json.Unmarshal(h.Body, &b)
		if b.N != next[b.Dev] {
			t.Fatalf("device %s: got message %d (attempt %d), want %d", b.Dev, b.N, h.Attempt, next[b.Dev])
		}
		if b.N%3 != 0 || h.Attempt == 2 {
			next[b.Dev]++
		}
	}
}

// TestSlowEndpointDoesNotDelayOthers keeps one endpoint's requests hanging
// and checks that another endpoint's deliveries all arrive meanwhile.
func TestSlowEndpointDoesNotDelayOthers(t *testing.T) {
	stores.Run(t, testSlowEndpointDoesNotDelayOthers)
}

func testSlowEndpointDoesNotDelayOthers(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	release := make(chan struct{})
	slow := newReceiver(t, func() string { return e.org.WebhookSecret }, func(hit, http.ResponseWriter) int { <-release; return 200 })
	defer close(release)
	fast := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	ca := slow.caFile // both httptest servers share one certificate
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: ca, perEndpoint: 4, timeout: 30 * time.Second})
	ctx := context.Background()
	for i := 0; i < 50; i++ {
		dev := e.addDevice(t, "S"+string(rune('A'+i/26))+string(rune('a'+i%26)))
		if err := d.Enqueue(ctx, &webhook.Delivery{OrgID: e.org.ID, DeviceID: dev, Event: webhook.EventSignal, URL: slow.URL("/"), Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		if err := d.Enqueue(ctx, &webhook.Delivery{OrgID: e.org.ID, DeviceID: dev, Event: webhook.EventSignal, URL: fast.URL("/"), Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
	}
	fast.wait(t, 50, 10*time.Second)
	if n := len(slow.Hits()); n > 4 {
		t.Errorf("slow endpoint had %d concurrent requests, want at most 4", n)
	}
}

func TestAlertWebhook(t *testing.T) { stores.Run(t, testAlertWebhook) }

// testAlertWebhook: an alert opened and acknowledged through the store
// reaches the organization's alert URL once per change, signed, with the
// spec's body; the notifier told of a change (as often as it is) only
// wakes the dispatcher, which sends what the store queued with the change.
func testAlertWebhook(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	ctx := context.Background()
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, nil)
	if err := e.s.Store.SetOrgAlertWebhook(ctx, e.org.ID, rcv.URL("/alerts")); err != nil {
		t.Fatal(err)
	}
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	n := webhook.NewNotifier(d)
	a, opened, err := e.s.Engine.OpenAlert(ctx, alert.Opening{OrgID: e.org.ID, DeviceID: e.device, Rule: storetest.Rule(t, e.s.Engine, e.org.ID, "high_cpu"),
		Message: "CPU high", At: time.Now()})
	if err != nil || !opened {
		t.Fatalf("open: %v, %v", opened, err)
	}
	n.AlertChanged(ctx, webhook.EventAlertOpened, a)
	if a, err = e.s.Store.Alerts().Acknowledge(ctx, e.org.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	n.AlertChanged(ctx, webhook.EventAlertAcknowledged, a)
	n.AlertChanged(ctx, webhook.EventAlertAcknowledged, a) // told twice: still one delivery
	hits := rcv.wait(t, 2, 5*time.Second)
	for i, want := range []string{"alert.opened", "alert.acknowledged"} {
		h := hits[i]
		if !h.SigOK || !h.StdOK || h.Path != "/alerts" {
			t.Errorf("hit %+v", h)
		}
		var got resource.AlertWebhook
		if err := json.Unmarshal(h.Body, &got); err != nil {
			t.Fatal(err)
		}
		if got.Event != want || got.DeviceID != e.device || got.Alert.ID != a.ID || got.Alert.Message != "CPU high" {
			t.Errorf("webhook %d: body %s, want event %s", i, h.Body, want)
		}
		if i == 1 && got.Alert.State != resource.AlertAcknowledged {
			t.Errorf("acknowledged webhook: state %s", got.Alert.State)
		}
	}
	e.waitState(t, hits[1].DeliveryID, "delivered", 5*time.Second)
	if ds := e.deliveries(t); len(ds) != 2 {
		t.Errorf("%d deliveries in the outbox, want 2: %+v", len(ds), ds)
	}
}

func TestRotatedSecretSignsRetries(t *testing.T) { stores.Run(t, testRotatedSecretSignsRetries) }

func testRotatedSecretSignsRetries(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	secret := e.org.WebhookSecret
	var cur = func() string { return secret }
	rotated := make(chan string, 1)
	rcv := newReceiver(t, func() string {
		select {
		case s := <-rotated:
			secret = s
		default:
		}
		return cur()
	}, func(h hit, w http.ResponseWriter) int {
		if h.Attempt == 1 {
			return 500
		}
		return 200
	})
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile, backoff: []time.Duration{time.Second}}) // secrets cached 50 ms
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	if h := rcv.wait(t, 1, 5*time.Second)[0]; !h.SigOK {
		t.Fatal("first attempt not signed with the original secret")
	}
	ns, err := e.s.Store.RotateOrgSecret(context.Background(), e.org.ID, 0)
	if err != nil || !strings.HasPrefix(ns, "whsec_") {
		t.Fatalf("rotate: %q %v", ns, err)
	}
	rotated <- ns
	if h := rcv.wait(t, 1, 10*time.Second)[0]; !h.SigOK || !h.StdOK {
		t.Error("retry after rotation not signed with the new secret")
	}
}

func TestRedeliver(t *testing.T) { stores.Run(t, testRedeliver) }

func testRedeliver(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	var seen atomic.Int32
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(h hit, w http.ResponseWriter) int {
		if seen.Add(1) == 1 {
			return 400
		}
		return 200
	})
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{"a":1}`)}
	if err := d.Enqueue(context.Background(), dl); err != nil {
		t.Fatal(err)
	}
	e.waitState(t, dl.ID, "failed", 5*time.Second)
	rcv.wait(t, 1, time.Second)
	// As the admin CLI does, from outside the dispatcher: a new outbox row.
	id, err := e.s.Store.RedeliverWebhook(context.Background(), dl.ID)
	if err != nil {
		t.Fatal(err)
	}
	h := rcv.wait(t, 1, 5*time.Second)[0]
	if h.DeliveryID != id || string(h.Body) != `{"a":1}` || h.Attempt != 1 {
		t.Errorf("redelivery hit %s#%d %s, want %s#1", h.DeliveryID, h.Attempt, h.Body, id)
	}
	e.waitState(t, id, "delivered", 5*time.Second)
}

func patchSerial(e *env, p cloud.SerialPatch) (resource.SerialPatchResult, error) {
	return e.s.Store.Serial().PatchSerial(context.Background(), e.org.ID, e.device, p)
}

// TestShutdownLetsAttemptsFinish checks that Shutdown waits for an attempt
// in flight (recorded delivered) while Close aborts one (left pending).
func TestShutdownLetsAttemptsFinish(t *testing.T) { stores.Run(t, testShutdownLetsAttemptsFinish) }

func testShutdownLetsAttemptsFinish(t *testing.T, open storetest.Opener) {
	for _, graceful := range []bool{true, false} {
		t.Run(map[bool]string{true: "Shutdown", false: "Close"}[graceful], func(t *testing.T) {
			e := newEnv(t, open)
			rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(hit, http.ResponseWriter) int {
				time.Sleep(400 * time.Millisecond)
				return 200
			})
			d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
			dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}
			if err := d.Enqueue(context.Background(), dl); err != nil {
				t.Fatal(err)
			}
			rcv.wait(t, 1, 5*time.Second) // the request is in flight
			if graceful {
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				d.Shutdown(ctx)
			} else {
				d.Close()
			}
			want := map[bool]string{true: "delivered", false: "pending"}[graceful]
			if ds := e.deliveries(t); len(ds) != 1 || ds[0].State != want {
				t.Errorf("after %v: %+v, want %s", map[bool]string{true: "Shutdown", false: "Close"}[graceful], ds, want)
			}
			if err := d.Enqueue(context.Background(), &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}); err != webhook.ErrClosed {
				t.Errorf("Enqueue after shutdown = %v, want ErrClosed", err)
			}
		})
	}
}

// TestFullQueueDropsOldestWaiting holds a device's first delivery at a
// hanging receiver and checks that the queue behind it stays bounded: the
// oldest waiting deliveries end failed ("dropped"), the newest are sent, in
// order.
func TestFullQueueDropsOldestWaiting(t *testing.T) { stores.Run(t, testFullQueueDropsOldestWaiting) }

func testFullQueueDropsOldestWaiting(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	release := make(chan struct{})
	var first atomic.Bool
	rcv := newReceiver(t, func() string { return e.org.WebhookSecret }, func(hit, http.ResponseWriter) int {
		if first.CompareAndSwap(false, true) {
			<-release
		}
		return 200
	})
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile, maxQueue: 5, timeout: 30 * time.Second})
	var ids []string
	for i := 0; i < 20; i++ {
		dl := &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{"n":` + strconv.Itoa(i) + `}`)}
		if err := d.Enqueue(context.Background(), dl); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, dl.ID)
		if i == 0 {
			rcv.wait(t, 1, 5*time.Second) // the head is in flight
		}
	}
	close(release)
	hs := rcv.wait(t, 4, 5*time.Second)
	for i, h := range hs {
		if want := `{"n":` + strconv.Itoa(16+i) + `}`; string(h.Body) != want {
			t.Errorf("request %d: %s, want %s", i+2, h.Body, want)
		}
	}
	rcv.quiet(t, 200*time.Millisecond)
	for i, id := range ids {
		want := "delivered"
		if i >= 1 && i <= 15 {
			want = "failed"
		}
		di := e.waitState(t, id, want, 5*time.Second)
		if want == "failed" && (len(di.Attempts) != 0 || !strings.Contains(di.LastError, "dropped")) {
			t.Errorf("dropped delivery %d has attempts %+v", i, di.Attempts)
		}
	}
	if st := d.Stats(); st.Dropped != 15 {
		t.Errorf("Stats().Dropped = %d, want 15", st.Dropped)
	}
}

// TestRotationGraceSignsWithBothSecrets rotates with a grace period: the
// Standard Webhooks header carries signatures by the new and the old
// secret, X-Service-Signature the new one only; after the grace, only the
// new one signs.
func TestRotationGraceSignsWithBothSecrets(t *testing.T) {
	stores.Run(t, testRotationGraceSignsWithBothSecrets)
}

func testRotationGraceSignsWithBothSecrets(t *testing.T, open storetest.Opener) {
	e := newEnv(t, open)
	old := e.org.WebhookSecret
	ns, err := e.s.Store.RotateOrgSecret(context.Background(), e.org.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	rcv := newReceiver(t, func() string { return ns }, nil)
	d := newDispatcher(t, e, dispOpts{allowPrivate: true, caFile: rcv.caFile})
	send := func() hit {
		if err := d.Enqueue(context.Background(), &webhook.Delivery{OrgID: e.org.ID, DeviceID: e.device, Event: webhook.EventSignal, URL: rcv.URL("/"), Body: []byte(`{}`)}); err != nil {
			t.Fatal(err)
		}
		return rcv.wait(t, 1, 5*time.Second)[0]
	}
	h := send()
	ts, _ := strconv.ParseInt(h.Header.Get("webhook-timestamp"), 10, 64)
	sigs := h.Header.Get("webhook-signature")
	if !h.SigOK || !h.StdOK || webhook.Verify(old, h.Body, h.Header.Get(webhook.HeaderSignature)) {
		t.Errorf("X-Service-Signature must verify with the new secret only")
	}
	if !webhook.VerifyStandard(old, h.DeliveryID, ts, h.Body, sigs) || len(strings.Fields(sigs)) != 2 {
		t.Errorf("webhook-signature %q: want signatures by the new and the old secret", sigs)
	}
	// Grace over (a rotation without grace clears the previous secret).
	ns2, err := e.s.Store.RotateOrgSecret(context.Background(), e.org.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	ns = ns2
	time.Sleep(100 * time.Millisecond) // the dispatcher caches secrets for 50 ms here
	rcv.secret = func() string { return ns2 }
	h = send()
	if sigs := h.Header.Get("webhook-signature"); !h.StdOK || len(strings.Fields(sigs)) != 1 {
		t.Errorf("after a rotation without grace: %q", sigs)
	}
}
