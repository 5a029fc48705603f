package api_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

var (
	ietfRateLimit = regexp.MustCompile(`^"default";r=([0-9]+);t=([0-9]+)$`)
)

func checkRateHeaders(t *testing.T, r resp, limit int) (remaining int) {
	t.Helper()
	if got := r.header.Get("X-RateLimit-Limit"); got != strconv.Itoa(limit) {
		t.Fatalf("X-RateLimit-Limit = %q, want %d", got, limit)
	}
	rem, err := strconv.Atoi(r.header.Get("X-RateLimit-Remaining"))
	if err != nil || rem < 0 || rem > limit {
		t.Fatalf("X-RateLimit-Remaining = %q", r.header.Get("X-RateLimit-Remaining"))
	}
	reset, err := strconv.ParseInt(r.header.Get("X-RateLimit-Reset"), 10, 64)
	now := time.Now().Unix()
	if err != nil || reset < now-1 || reset > now+61 {
		t.Fatalf("X-RateLimit-Reset = %q (now %d)", r.header.Get("X-RateLimit-Reset"), now)
	}
	if got, want := r.header.Get("RateLimit-Policy"), `"default";q=`+strconv.Itoa(limit)+`;w=60`; got != want {
		t.Fatalf("RateLimit-Policy = %q, want %q", got, want)
	}
	m := ietfRateLimit.FindStringSubmatch(r.header.Get("RateLimit"))
	if m == nil || m[1] != strconv.Itoa(rem) {
		t.Fatalf("RateLimit = %q, remaining %d", r.header.Get("RateLimit"), rem)
	}
	return rem
}

func TestRateLimit(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRateLimit)
}

func testRateLimit(t *testing.T, open storetest.Opener) {
	t.Parallel()
	const limit = 5
	e := newEnv(t, open, withRateLimit(limit))
	// Every kind of response carries the headers: 200, 401, 404, 405.
	r := e.get("/devices", e.keyA)
	r.want(t, http.StatusOK, "")
	if rem := checkRateHeaders(t, r, limit); rem != limit-1 {
		t.Fatalf("remaining after one request = %d", rem)
	}
	r = e.get("/nope", e.keyA)
	r.want(t, http.StatusNotFound, cloud.ENOTFOUND)
	checkRateHeaders(t, r, limit)
	r = e.req(http.MethodDelete, "/api/v1/public/devices", e.keyA, nil)
	r.want(t, http.StatusMethodNotAllowed, "method_not_allowed")
	checkRateHeaders(t, r, limit)
	r = e.get("/devices/nosuchdevice000000000000", e.keyA)
	r.want(t, http.StatusNotFound, cloud.ENOTFOUND)
	if rem := checkRateHeaders(t, r, limit); rem != 1 {
		t.Fatalf("remaining after four requests = %d", rem)
	}
	e.get("/devices", e.keyA).want(t, http.StatusOK, "")
	r = e.get("/devices", e.keyA)
	r.want(t, http.StatusTooManyRequests, "rate_limited")
	checkRateHeaders(t, r, limit)
	if ra, err := strconv.Atoi(r.header.Get("Retry-After")); err != nil || ra < 1 || ra > 61+60/limit {
		t.Fatalf("Retry-After = %q", r.header.Get("Retry-After"))
	}
	if r.header.Get("X-RateLimit-Remaining") != "0" {
		t.Fatalf("remaining on 429 = %q", r.header.Get("X-RateLimit-Remaining"))
	}
	// Another key has its own budget.
	r = e.get("/devices", e.keyB)
	r.want(t, http.StatusOK, "")
	if rem := checkRateHeaders(t, r, limit); rem != limit-1 {
		t.Fatalf("key B remaining = %d", rem)
	}
	// Requests that fail authentication are counted per client address,
	// which paid for the first request of each key too (charged before
	// the key was verified).
	for i := 0; i < limit-2; i++ {
		r = e.get("/devices", "svc_sk_nosuchkey000000000000000_"+strings.Repeat("x", 43))
		r.want(t, http.StatusUnauthorized, cloud.EUNAUTHORIZED)
		checkRateHeaders(t, r, limit)
	}
	e.get("/devices", "").want(t, http.StatusTooManyRequests, "rate_limited")
	// ... without touching the keys' budgets.
	e.get("/devices", e.keyB).want(t, http.StatusOK, "")
}

// TestHTTPErrors covers the transport-level rows of the error table.
func TestHTTPErrors(t *testing.T) {
	t.Parallel()
	stores.Run(t, testHTTPErrors)
}

func testHTTPErrors(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	serialPath := "/api/v1/public/devices/" + d.ID + "/serial"

	t.Run("405 with Allow", func(t *testing.T) {
		for _, c := range []struct{ method, path, allow string }{
			{http.MethodDelete, "/api/v1/public/devices", "GET"},
			{http.MethodPost, serialPath, "GET, PATCH"},
			{http.MethodGet, "/api/v1/public/alerts/" + d.ID + "/resolve", "POST"},
			{http.MethodPatch, "/api/v1/public/devices/" + d.ID + "/serial/channels/rs485-1", "GET, PUT"},
			{http.MethodPost, "/healthz", "GET"},
		} {
			r := e.req(c.method, c.path, e.keyA, nil)
			r.want(t, http.StatusMethodNotAllowed, "method_not_allowed")
			if got := r.header.Get("Allow"); got != c.allow {
				t.Errorf("%s %s: Allow = %q, want %q", c.method, c.path, got, c.allow)
			}
		}
	})
	t.Run("404 unknown route", func(t *testing.T) {
		for _, p := range []string{"/api/v1/public/nope", "/api/v1/public/devices/" + d.ID + "/nope", "/api/v2/public/devices", "/"} {
			e.req(http.MethodGet, p, e.keyA, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
		}
		// Without a key too: routes are public knowledge (see the document).
		e.req(http.MethodGet, "/api/v1/public/nope", "", nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	})
	t.Run("413 payload too large", func(t *testing.T) {
		big := `{"mode":"both","x":"` + strings.Repeat("a", api.MaxBodyBytes) + `"}`
		e.req(http.MethodPatch, serialPath, e.keyA, big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
		// Just under the limit is read (and rejected for its content).
		ok := `{"webhookUrl":"https://h.example.com/` + strings.Repeat("a", 100) + `", "pad":"` + strings.Repeat("b", api.MaxBodyBytes-300) + `"}`
		e.req(http.MethodPatch, serialPath, e.keyA, ok).want(t, http.StatusBadRequest, cloud.EINVALID)
		// Chunked (no Content-Length) is bounded as well.
		req, _ := http.NewRequest(http.MethodPatch, e.srv.URL+serialPath, struct{ *strings.Reader }{strings.NewReader(big)})
		req.Header.Set("Authorization", "Bearer "+e.keyA)
		req.Header.Set("Content-Type", "application/json")
		res, err := e.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusRequestEntityTooLarge {
			t.Fatalf("chunked: %d", res.StatusCode)
		}
	})
	t.Run("415 media type", func(t *testing.T) {
		for _, ct := range []string{"text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1", "", "application/jsonx"} {
			r := e.req(http.MethodPatch, serialPath, e.keyA, `{"mode":"both"}`, "Content-Type", ct)
			r.want(t, http.StatusUnsupportedMediaType, "unsupported_media_type")
		}
		e.req(http.MethodPatch, serialPath, e.keyA, `{"mode":"both"}`, "Content-Type", "application/json; charset=UTF-8").want(t, http.StatusOK, "")
	})
	t.Run("request id", func(t *testing.T) {
		r := e.req(http.MethodGet, "/api/v1/public/devices", e.keyA, nil, "X-Request-Id", "client-abc.123")
		if r.header.Get("X-Request-Id") != "client-abc.123" {
			t.Fatalf("incoming id not echoed: %q", r.header.Get("X-Request-Id"))
		}
		r = e.req(http.MethodGet, "/api/v1/public/devices", e.keyA, nil, "X-Request-Id", "bad id with spaces<script>")
		got := r.header.Get("X-Request-Id")
		if got == "" || strings.Contains(got, " ") {
			t.Fatalf("unsafe incoming id adopted: %q", got)
		}
		r2 := e.req(http.MethodGet, "/api/v1/public/nope", "", nil)
		if r2.header.Get("X-Request-Id") == "" || r2.header.Get("X-Request-Id") == got {
			t.Fatalf("request ids not unique: %q %q", got, r2.header.Get("X-Request-Id"))
		}
	})
	t.Run("openapi document without auth", func(t *testing.T) {
		r := e.req(http.MethodGet, "/api/v1/public/openapi.json", "", nil)
		r.want(t, http.StatusOK, "")
		if !bytes.Equal(r.body, api.OpenAPI()) || r.header.Get("Content-Type") != "application/json" {
			t.Fatal("served document differs")
		}
	})
	t.Run("healthz", func(t *testing.T) {
		r := e.req(http.MethodGet, "/healthz", "", nil)
		r.want(t, http.StatusOK, "")
	})
	t.Run("access log", func(t *testing.T) {
		e.req(http.MethodGet, "/api/v1/public/devices?status=ONLINE&limit=3", e.keyA, nil, "X-Request-Id", "log-check-1")
		logs := e.logs.String()
		var line string
		for _, l := range strings.Split(logs, "\n") {
			if strings.Contains(l, `"request_id":"log-check-1"`) {
				line = l
			}
		}
		if line == "" {
			t.Fatalf("no access log line: %s", logs)
		}
		id := strings.Split(strings.TrimPrefix(e.keyA, "svc_sk_"), "_")[0]
		for _, want := range []string{`"method":"GET"`, `"path":"/api/v1/public/devices"`, `"status":200`, `"duration_ms"`, `"key_id":"` + id + `"`} {
			if !strings.Contains(line, want) {
				t.Errorf("log line lacks %s: %s", want, line)
			}
		}
		for _, bad := range []string{"status=ONLINE", "Bearer", e.keyA} {
			if strings.Contains(logs, bad) {
				t.Errorf("log holds %q", bad)
			}
		}
	})
}

// TestQueryValidation is the table of every query-parameter rule.
func TestQueryValidation(t *testing.T) {
	t.Parallel()
	stores.Run(t, testQueryValidation)
}

func testQueryValidation(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	dev := "/devices/" + d.ID
	for _, c := range []struct {
		path, code, param string
	}{
		{"/devices?limit=0", cloud.EINVALID, "limit"},
		{"/devices?limit=101", cloud.EINVALID, "limit"},
		{"/devices?limit=-1", cloud.EINVALID, "limit"},
		{"/devices?limit=ten", cloud.EINVALID, "limit"},
		{"/devices?limit=", cloud.EINVALID, "limit"},
		{"/devices?limit=2.5", cloud.EINVALID, "limit"},
		{"/devices?status=online", cloud.EINVALID, "status"},
		{"/devices?status=", cloud.EINVALID, "status"},
		{"/devices?cursor=", cloud.ECURSOR, "cursor"},
		{"/devices?limit=5&limit=6", cloud.EINVALID, "limit"},
		{"/devices?colour=red", cloud.EINVALID, "colour"},
		{"/devices?Limit=5", cloud.EINVALID, "Limit"},
		{"/devices?%zz", cloud.EINVALID, "query"},
		{"/alerts?limit=101", cloud.EINVALID, "limit"},
		{"/alerts?state=OPEN", cloud.EINVALID, "state"},
		{"/alerts?state=active", cloud.EINVALID, "state"},
		{"/alerts?severity=HIGH", cloud.EINVALID, "severity"},
		{"/alerts?deviceId=not%20an%20id", cloud.EINVALID, "deviceId"},
		{"/alerts?cursor=%21%21", cloud.ECURSOR, "cursor"},
		{"/alerts?status=ACTIVE", cloud.EINVALID, "status"},
		{dev + "/events?limit=201", cloud.EINVALID, "limit"},
		{dev + "/events?limit=0", cloud.EINVALID, "limit"},
		{dev + "/events?severity=info", cloud.EINVALID, "severity"},
		{dev + "/events?type=", cloud.EINVALID, "type"},
		{dev + "/events?type=" + strings.Repeat("a", 101), cloud.EINVALID, "type"},
		{dev + "/events?type=a%20b", cloud.EINVALID, "type"},
		{dev + "/events?state=ACTIVE", cloud.EINVALID, "state"},
		{dev + "/metrics?limit=1001", cloud.EINVALID, "limit"},
		{dev + "/metrics?limit=0", cloud.EINVALID, "limit"},
		{dev + "/metrics?from=2026-13-01T00:00:00Z", cloud.EINVALID, "from"},
		{dev + "/metrics?to=1700000000", cloud.EINVALID, "to"},
		{dev + "/metrics?from=2026-01-02", cloud.EINVALID, "from"},
		{dev + "/metrics?from=2026-01-02T00:00:00.000Z&to=2026-01-01T00:00:00.000Z", cloud.EINVALID, "from"},
		{dev + "/metrics?from=" + resource.FormatTime(time.Now().Add(time.Hour)), cloud.EINVALID, "from"},
		{dev + "/metrics?cursor=abc", cloud.EINVALID, "cursor"},
		{dev + "?limit=1", cloud.EINVALID, "limit"},
		{dev + "/serial?x=1", cloud.EINVALID, "x"},
	} {
		t.Run(c.path, func(t *testing.T) {
			r := e.get(c.path, e.keyA)
			r.want(t, http.StatusBadRequest, c.code)
			if !strings.Contains(r.errMessage(), c.param) {
				t.Fatalf("message %q does not name %q", r.errMessage(), c.param)
			}
		})
	}
	// Accepted forms.
	for _, p := range []string{
		"/devices?limit=1", "/devices?limit=100", "/devices?status=UPDATING", "/alerts?state=RESOLVED&severity=CRITICAL&limit=100",
		dev + "/events?limit=200&severity=INFO&type=alert.vpn_down", dev + "/metrics?limit=1000&from=2026-01-01T00:00:00Z&to=2026-01-02T00:00:00%2B02:00",
	} {
		e.get(p, e.keyA).want(t, http.StatusOK, "")
	}
}

// failingDevices wraps a real service and fails or panics on demand.
type failingDevices struct {
	cloud.DeviceService
	mode string
}

func (f failingDevices) ListDevices(ctx context.Context, orgID string, flt cloud.DeviceFilter) (resource.List[resource.Device], error) {
	switch f.mode {
	case "panic":
		panic("boom: secret internals")
	case "error":
		return resource.List[resource.Device]{}, errors.New("sqlite: disk I/O error at /var/lib/secret/path")
	case "unavailable":
		return resource.List[resource.Device]{}, cloud.Unavailable(errors.New("postgres: dial tcp 10.0.0.5:5432: connection refused (secret host)"))
	}
	return f.DeviceService.ListDevices(ctx, orgID, flt)
}

// TestInternalErrors: a failing store or a panicking handler answers 500
// internal_error without its details, logs them, and the server goes on.
func TestInternalErrors(t *testing.T) {
	t.Parallel()
	stores.Run(t, testInternalErrors)
}

func testInternalErrors(t *testing.T, open storetest.Opener) {
	t.Parallel()
	for _, mode := range []string{"error", "panic"} {
		t.Run(mode, func(t *testing.T) {
			var dev cloud.DeviceService
			e := newEnv(t, open, func(c *api.Config) { dev = c.Devices; c.Devices = failingDevices{c.Devices, mode} })
			_ = dev
			r := e.get("/devices", e.keyA)
			r.want(t, http.StatusInternalServerError, cloud.EINTERNAL)
			if strings.Contains(string(r.body), "secret") || strings.Contains(string(r.body), "boom") {
				t.Fatalf("internal details leaked: %s", r.body)
			}
			if !strings.Contains(e.logs.String(), "secret") {
				t.Fatalf("internal error not logged: %s", e.logs.String())
			}
			e.get("/devices/"+e.device(e.orgA.ID, "IG-500").ID, e.keyA).want(t, http.StatusOK, "")
		})
	}
}

// TestStoreUnavailable: a store that cannot reach its database answers
// 503 service_unavailable in the error envelope, with Retry-After, as the
// OpenAPI document says (the spec transport checks it), without the cause,
// which is logged.
func TestStoreUnavailable(t *testing.T) {
	t.Parallel()
	stores.Run(t, testStoreUnavailable)
}

func testStoreUnavailable(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open, func(c *api.Config) { c.Devices = failingDevices{c.Devices, "unavailable"} })
	r := e.get("/devices", e.keyA)
	r.want(t, http.StatusServiceUnavailable, cloud.ESERVICEUNAVAILABLE)
	if r.header.Get("Retry-After") == "" || strings.Contains(string(r.body), "secret") {
		t.Errorf("503: Retry-After %q, body %s", r.header.Get("Retry-After"), r.body)
	}
	if !strings.Contains(e.logs.String(), "secret host") {
		t.Errorf("cause not logged: %s", e.logs.String())
	}
}

// TestSpecValidatorCatchesDrift proves the response validator rejects what
// the document does not describe, so its silence in the other tests means
// something.
func TestSpecValidatorCatchesDrift(t *testing.T) {
	t.Parallel()
	v := loadSpec(t)
	ok := http.Header{}
	for k, val := range map[string]string{"Content-Type": "application/json", "X-RateLimit-Limit": "600", "X-RateLimit-Remaining": "599", "X-RateLimit-Reset": "1700000000",
		"RateLimit": `"default";r=599;t=42`, "RateLimit-Policy": `"default";q=600;w=60`, "X-Request-Id": "abc"} {
		ok.Set(k, val)
	}
	req := httptest.NewRequest(http.MethodGet, "/api/v1/public/devices", nil)
	good := `{"data":[],"pagination":{"nextCursor":null,"hasMore":false}}`
	if err := v.validate(req, 200, ok, []byte(good)); err != nil {
		t.Fatalf("valid response rejected: %v", err)
	}
	noHeader := ok.Clone()
	noHeader.Del("X-RateLimit-Reset")
	for name, c := range map[string]struct {
		status int
		h      http.Header
		body   string
	}{
		"renamed field":       {200, ok, `{"data":[],"pagination":{"next_cursor":null,"hasMore":false}}`},
		"missing header":      {200, noHeader, good},
		"undocumented status": {418, ok, `{"error":{"code":"not_found","message":"x"}}`},
		"unknown error code":  {404, ok, `{"error":{"code":"nope","message":"x"}}`},
		"timestamp precision": {200, ok, `{"data":[{"id":"abc","name":"n","serialNumber":"s","status":"ONLINE","model":"IG-500","firmwareVersion":"","lastSeen":null,"ipAddress":"","location":"","createdAt":"2026-01-02T15:04:05Z"}],"pagination":{"nextCursor":null,"hasMore":false}}`},
		"bad enum":            {200, ok, `{"data":[{"id":"abc","name":"n","serialNumber":"s","status":"SLEEPING","model":"IG-500","firmwareVersion":"","lastSeen":null,"ipAddress":"","location":"","createdAt":"2026-01-02T15:04:05.000Z"}],"pagination":{"nextCursor":null,"hasMore":false}}`},
	} {
		if err := v.validate(req, c.status, c.h, []byte(c.body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// countingAuth counts the verifications that reach the real authenticator.
type countingAuth struct {
	api.Authenticator
	calls atomic.Int64
}

func (c *countingAuth) AuthenticateAt(ctx context.Context, key, addr string, version uint64, versioned bool) (*cloud.APIKey, error) {
	c.calls.Add(1)
	return c.Authenticator.AuthenticateAt(ctx, key, addr, version, versioned)
}

// TestFailedAuthBudget: once an address has used its budget of failed
// authentications, further unknown keys from it are refused without being
// verified (no bcrypt), while a key that verified before keeps working.
func TestFailedAuthBudget(t *testing.T) {
	t.Parallel()
	stores.Run(t, testFailedAuthBudget)
}

func testFailedAuthBudget(t *testing.T, open storetest.Opener) {
	t.Parallel()
	const limit = 4
	var counter *countingAuth
	e := newEnv(t, open, withRateLimit(limit), func(c *api.Config) {
		counter = &countingAuth{Authenticator: c.Auth}
		c.Auth = counter
	})
	e.get("/devices", e.keyA).want(t, http.StatusOK, "")
	id := strings.Split(strings.TrimPrefix(e.keyA, "svc_sk_"), "_")[0]
	// Unknown key ids use up the address's budget (no bcrypt for those),
	// of which keyA's first request took one.
	for i := 0; i < limit-1; i++ {
		unknown := fmt.Sprintf("svc_sk_nosuchkey%08d_%043d", i, i)
		e.get("/devices", unknown).want(t, http.StatusUnauthorized, cloud.EUNAUTHORIZED)
	}
	// Wrong secrets for a real key would each cost a bcrypt run: refused
	// before verification.
	before := counter.calls.Load()
	for i := 0; i < 3; i++ {
		wrong := fmt.Sprintf("svc_sk_%s_%043d", id, 100+i)
		e.get("/devices", wrong).want(t, http.StatusTooManyRequests, "rate_limited")
	}
	if n := counter.calls.Load() - before; n != 0 {
		t.Fatalf("%d verifications after the address's budget was used up", n)
	}
	// The key that verified before still works from the same address.
	e.get("/devices", e.keyA).want(t, http.StatusOK, "")
}
