package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/dialects"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// env is a relay API on a real store (each test runs on SQLite and on
// PostgreSQL, see stores) behind a real HTTP server on loopback, with two
// organizations and a full-scope key for each.
type env struct {
	t      *testing.T
	s      storetest.Stores
	api    *api.Server
	srv    *httptest.Server
	client *http.Client
	tr     *specTransport
	logs   *logbuf.Buffer
	auth   *apikey.Authenticator
	// ago moves the store's clock into the past (see newEnvOn).
	ago atomic.Int64

	orgA, orgB cloud.Org
	keyA, keyB string
	serial     atomic.Int64
	mu         sync.Mutex
	devices    map[string]agentlink.Device // by id, as the agents write
}

// stores are the dialects every test of the API runs on.
var stores dialects.Each

func TestMain(m *testing.M) { stores.Main(m) }

type envOption func(*api.Config)

func withRateLimit(n int) envOption { return func(c *api.Config) { c.RateLimit = n } }

func newEnv(t *testing.T, open storetest.Opener, opts ...envOption) *env {
	t.Helper()
	e := &env{}
	return newEnvOn(t, e, open(t, e.now), opts...)
}

// now is the store's clock: the time, or ago before it.
func (e *env) now() time.Time { return time.Now().Add(-time.Duration(e.ago.Load())) }

// newEnvOn is newEnv on stores s opened with e's clock.
func newEnvOn(t *testing.T, e *env, s storetest.Stores, opts ...envOption) *env {
	t.Helper()
	e.t, e.s, e.logs, e.devices = t, s, &logbuf.Buffer{}, map[string]agentlink.Device{}
	e.auth = apikey.NewAuthenticator(s.Store.Keys(), time.Now, 1000)
	cfg := api.Config{
		Devices:   s.Store.Devices(),
		Serial:    s.Store.Serial(),
		Alerts:    s.Store.Alerts(),
		Points:    s.Store.Points(),
		Rules:     s.Store.Rules(),
		Rollouts:  s.Store.Rollouts(),
		Auth:      e.auth,
		Versioner: s.Store.Versioner(),
		RateLimit: 1_000_000,
		Logger:    slog.New(slog.NewJSONHandler(e.logs, nil)),
		// The request lines as fleet-relay serve writes them.
		AccessLogTo: e.logs,
	}
	for _, o := range opts {
		o(&cfg)
	}
	e.api = api.NewServer(cfg)
	e.srv = httptest.NewServer(e.api)
	t.Cleanup(e.srv.Close)
	e.tr = &specTransport{tb: t, base: http.DefaultTransport, v: loadSpec(t)}
	e.client = &http.Client{Transport: e.tr, Timeout: 30 * time.Second}
	t.Cleanup(func() {
		if strings.Contains(e.logs.String(), "svc_sk_") {
			t.Errorf("an API key reached the log")
		}
	})
	e.orgA = storetest.Org(t, s.Store, "Org A")
	e.orgB = storetest.Org(t, s.Store, "Org B")
	e.keyA = e.key(e.orgA.ID, cloud.AllScopes...)
	e.keyB = e.key(e.orgB.ID, cloud.AllScopes...)
	return e
}

// key creates an API key of org with scopes and returns the full key.
func (e *env) key(orgID string, scopes ...string) string {
	e.t.Helper()
	_, k, err := e.s.Store.CreateKey(context.Background(), orgID, "test key", scopes, 24*time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return k
}

// device adds a device of model to org.
func (e *env) device(orgID, model string) resource.DeviceDetail {
	e.t.Helper()
	n := e.serial.Add(1)
	d, _ := storetest.Device(e.t, e.s.Store, cloud.NewDevice{OrgID: orgID, Name: fmt.Sprintf("gw-%d", n), SerialNumber: fmt.Sprintf("SN-%06d", n), Model: model, Location: "Hall 1"})
	e.mu.Lock()
	e.devices[d.ID] = agentlink.Device{ID: d.ID, OrgID: orgID, Model: model}
	e.mu.Unlock()
	return d
}

// agent is the device of id (made by device) as its agent writes.
func (e *env) agent(id string) agentlink.Device {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.devices[id]
}

// alert opens an alert of rule on the device at at (zero: now) and moves it
// to state.
func (e *env) alert(deviceID, rule string, state resource.AlertState, at time.Time) resource.Alert {
	e.t.Helper()
	return storetest.Alert(e.t, e.s.Engine, e.s.Store.Alerts(), storetest.NewAlert{OrgID: e.agent(deviceID).OrgID, DeviceID: deviceID, Rule: rule, State: state,
		Message: rule + " on " + deviceID, At: at, Payload: json.RawMessage(`{"value":97.5}`)})
}

// resp is a decoded response.
type resp struct {
	status int
	header http.Header
	body   []byte
}

func (r resp) errCode() string {
	var b resource.ErrorBody
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Code
}

func (r resp) errMessage() string {
	var b resource.ErrorBody
	_ = json.Unmarshal(r.body, &b)
	return b.Error.Message
}

func (r resp) decode(tb testing.TB, v any) {
	tb.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		tb.Fatalf("decode %s: %v", r.body, err)
	}
}

// req is one request: headers beyond Authorization in hdr (pairs).
func (e *env) req(method, path, key string, body any, hdr ...string) resp {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(j)
	}
	r, err := http.NewRequest(method, e.srv.URL+path, rd)
	if err != nil {
		e.t.Fatal(err)
	}
	if body != nil {
		r.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		r.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			r.Header.Del(hdr[i])
		} else {
			r.Header.Set(hdr[i], hdr[i+1])
		}
	}
	res, err := e.client.Do(r)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp{status: res.StatusCode, header: res.Header, body: b}
}

func (e *env) get(path, key string) resp { return e.req(http.MethodGet, api.Prefix+path, key, nil) }

// want asserts status and, for errors, the code.
func (r resp) want(tb testing.TB, status int, code string) {
	tb.Helper()
	if r.status != status {
		tb.Fatalf("status %d, want %d; body %s", r.status, status, r.body)
	}
	if code != "" && r.errCode() != code {
		tb.Fatalf("code %q, want %q; body %s", r.errCode(), code, r.body)
	}
}
