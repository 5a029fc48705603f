package webhook_test

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/test/rig/dialects"
)

// env is a real store (each test runs on SQLite and on PostgreSQL) with
// one organization and one device.
type env struct {
	s      storetest.Stores
	store  webhook.Store
	org    cloud.Org
	device string
}

// stores are the dialects every test of the sender runs on.
var stores dialects.Each

func TestMain(m *testing.M) { stores.Main(m) }

func newEnv(t testing.TB, open storetest.Opener) *env {
	t.Helper()
	return newEnvOn(t, open(t, nil))
}

// newEnvOn is newEnv on stores s.
func newEnvOn(t testing.TB, s storetest.Stores) *env {
	t.Helper()
	org := storetest.Org(t, s.Store, "acme")
	dev, _ := storetest.Device(t, s.Store, cloud.NewDevice{OrgID: org.ID, Name: "gw-1", SerialNumber: "SN1", Model: "IG-500"})
	return &env{s: s, store: s.Outbox, org: org, device: dev.ID}
}

func (e *env) addDevice(t testing.TB, serial string) string {
	t.Helper()
	dev, _ := storetest.Device(t, e.s.Store, cloud.NewDevice{OrgID: e.org.ID, Name: serial, SerialNumber: serial, Model: "IG-500"})
	return dev.ID
}

// forward enables signal forwarding of device to url.
func (e *env) forward(t testing.TB, device, url string) {
	t.Helper()
	on := true
	if _, err := e.s.Store.Serial().PatchSerial(context.Background(), e.org.ID, device, cloud.SerialPatch{WebhookURL: &url, WebhookEnabled: &on}); err != nil {
		t.Fatal(err)
	}
}

// hit is one request a receiver saw, with both signatures checked.
type hit struct {
	Path       string
	DeliveryID string
	Attempt    int
	Body       []byte
	SigOK      bool // X-Service-Signature
	StdOK      bool // webhook-signature
	Header     http.Header
	At         time.Time
}

// receiver is a real HTTPS server that records and checks every request and
// answers with script(hit) (status, or -1 to close the connection).
type receiver struct {
	srv    *httptest.Server
	caFile string
	secret func() string

	mu     sync.Mutex
	hits   []hit
	script func(h hit, w http.ResponseWriter) int
	notify chan hit
}

func newReceiver(t testing.TB, secret func() string, script func(h hit, w http.ResponseWriter) int) *receiver {
	t.Helper()
	r := &receiver{secret: secret, script: script, notify: make(chan hit, 100000)}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	t.Cleanup(r.srv.Close)
	r.caFile = writeCA(t, r.srv)
	return r
}

// writeCA writes the certificate of a TLS test server to a PEM file (for
// --webhook-ca) and returns its path.
func writeCA(t testing.TB, srv *httptest.Server) string {
	t.Helper()
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	path := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(path, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func (r *receiver) URL(path string) string { return r.srv.URL + path }

func (r *receiver) serve(w http.ResponseWriter, req *http.Request) {
	body, _ := io.ReadAll(req.Body)
	h := hit{Path: req.URL.Path, DeliveryID: req.Header.Get(webhook.HeaderDeliveryID), Body: body, Header: req.Header.Clone(), At: time.Now()}
	h.Attempt, _ = strconv.Atoi(req.Header.Get(webhook.HeaderAttempt))
	secret := r.secret()
	h.SigOK = webhook.Verify(secret, body, req.Header.Get(webhook.HeaderSignature))
	ts, _ := strconv.ParseInt(req.Header.Get("webhook-timestamp"), 10, 64)
	h.StdOK = req.Header.Get("webhook-id") == h.DeliveryID &&
		webhook.VerifyStandard(secret, req.Header.Get("webhook-id"), ts, body, req.Header.Get("webhook-signature"))
	r.mu.Lock()
	r.hits = append(r.hits, h)
	script := r.script
	r.mu.Unlock()
	r.notify <- h
	status := http.StatusOK
	if script != nil {
		status = script(h, w)
	}
	if status < 0 {
		hj, ok := w.(http.Hijacker)
		if ok {
			if c, _, err := hj.Hijack(); err == nil {
				c.Close()
				return
			}
		}
		panic(http.ErrAbortHandler)
	}
	w.WriteHeader(status)
}

func (r *receiver) Hits() []hit {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]hit(nil), r.hits...)
}

// wait waits for n more requests.
func (r *receiver) wait(t testing.TB, n int, d time.Duration) []hit {
	t.Helper()
	var out []hit
	deadline := time.After(d)
	for len(out) < n {
		select {
		case h := <-r.notify:
			out = append(out, h)
		case <-deadline:
			t.Fatalf("receiver: got %d requests, want %d", len(out), n)
		}
	}
	return out
}

// quiet asserts that no request arrives within d.
func (r *receiver) quiet(t testing.TB, d time.Duration) {
	t.Helper()
	select {
	case h := <-r.notify:
		t.Fatalf("unexpected request: %s attempt %d %s", h.DeliveryID, h.Attempt, h.Body)
	case <-time.After(d):
	}
}

type dispOpts struct {
	backoff      []time.Duration
	timeout      time.Duration
	allowPrivate bool
	caFile       string
	perEndpoint  int
	maxQueue     int
	store        webhook.Store // instead of the env's
	mail         *notify.SMTP
	publicURL    string
}

func newDispatcher(t testing.TB, e *env, o dispOpts) *webhook.Dispatcher {
	t.Helper()
	if o.backoff == nil {
		o.backoff = []time.Duration{20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond, 20 * time.Millisecond}
	}
	client, err := webhook.NewClient(webhook.ClientConfig{AllowPrivate: o.allowPrivate, CAFile: o.caFile})
	if err != nil {
		t.Fatal(err)
	}
	var store webhook.Store = e.store
	if o.store != nil {
		store = o.store
	}
	d, err := webhook.New(webhook.Config{
		Store: store, Client: client, Backoff: o.backoff, Timeout: o.timeout, PerEndpoint: o.perEndpoint, MaxQueue: o.maxQueue,
		PollInterval: 50 * time.Millisecond, SecretTTL: 50 * time.Millisecond, Logger: slog.New(slog.DiscardHandler),
		Mail: o.mail, PublicURL: o.publicURL,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// deliveries reads the organization's deliveries (newest first).
func (e *env) deliveries(t testing.TB) []cloud.DeliveryInfo {
	t.Helper()
	ds, err := e.s.Store.WebhookDeliveries(context.Background(), e.org.ID, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return ds
}

// waitState waits until delivery id has state.
func (e *env) waitState(t testing.TB, id, state string, d time.Duration) cloud.DeliveryInfo {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, di := range e.deliveries(t) {
			if di.ID == id && di.State == state {
				return di
			}
		}
		if time.Now().After(deadline) {
			b, _ := json.Marshal(e.deliveries(t))
			t.Fatalf("delivery %s never reached %s: %s", id, state, b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
