package api_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

func TestAuthentication(t *testing.T) {
	t.Parallel()
	stores.Run(t, testAuthentication)
}

func testAuthentication(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	ctx := context.Background()
	// A key made two days ago for a day.
	e.ago.Store(int64(48 * time.Hour))
	expired := struct{ ID, Key string }{Key: e.key(e.orgA.ID, cloud.AllScopes...)}
	e.ago.Store(0)
	expired.ID, _, _ = apikey.Parse(expired.Key)
	id, _, _ := apikey.Parse(e.keyA)
	wrongSecret := "svc_sk_" + id + "_" + strings.Repeat("A", 43)
	expiredWrong := "svc_sk_" + expired.ID + "_" + strings.Repeat("B", 43)
	for _, c := range []struct {
		name, header, code string
	}{
		{"no header", "", cloud.EUNAUTHORIZED},
		{"basic scheme", "Basic dXNlcjpwdw==", cloud.EUNAUTHORIZED},
		{"bearer without token", "Bearer ", cloud.EUNAUTHORIZED},
		{"garbage token", "Bearer not-a-key", cloud.EUNAUTHORIZED},
		{"unknown key id", "Bearer svc_sk_nosuchkey000000000000000_" + strings.Repeat("x", 43), cloud.EUNAUTHORIZED},
		{"wrong secret", "Bearer " + wrongSecret, cloud.EUNAUTHORIZED},
		{"expired key, wrong secret", "Bearer " + expiredWrong, cloud.EUNAUTHORIZED},
		{"expired key", "Bearer " + expired.Key, cloud.EEXPIRED},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := e.req(http.MethodGet, "/api/v1/public/devices", "", nil, "Authorization", c.header)
			r.want(t, http.StatusUnauthorized, c.code)
			if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
			}
			if r.header.Get("X-RateLimit-Limit") == "" {
				t.Fatal("401 without rate-limit headers")
			}
		})
	}
	// The scheme is case-insensitive.
	e.req(http.MethodGet, "/api/v1/public/devices", "", nil, "Authorization", "bearer "+e.keyA).want(t, http.StatusOK, "")

	// Revocation takes effect on the very next request, cache or not.
	k := e.key(e.orgA.ID, cloud.ScopeDevicesRead)
	e.get("/devices", k).want(t, http.StatusOK, "")
	e.get("/devices", k).want(t, http.StatusOK, "")
	kid, _, _ := apikey.Parse(k)
	if _, err := e.s.Store.RevokeKey(ctx, kid); err != nil {
		t.Fatal(err)
	}
	e.get("/devices", k).want(t, http.StatusUnauthorized, cloud.EREVOKED)
	// A revoked key with a wrong secret stays indistinguishable.
	e.req(http.MethodGet, "/api/v1/public/devices", "", nil, "Authorization", "Bearer svc_sk_"+kid+"_"+strings.Repeat("C", 43)).want(t, http.StatusUnauthorized, cloud.EUNAUTHORIZED)
}

// TestScopes checks every endpoint with a key holding every scope but the
// one it needs (403 naming it) and with a key holding only that one.
func TestScopes(t *testing.T) {
	t.Parallel()
	stores.Run(t, testScopes)
}

func testScopes(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	a := e.alert(d.ID, "high_cpu", resource.AlertActive, time.Time{})
	endpoints := []struct {
		method, path, scope string
		body                any
	}{
		{"GET", "/devices", cloud.ScopeDevicesRead, nil},
		{"GET", "/devices/" + d.ID, cloud.ScopeDevicesRead, nil},
		{"GET", "/devices/" + d.ID + "/metrics", cloud.ScopeMetricsRead, nil},
		{"GET", "/devices/" + d.ID + "/events", cloud.ScopeLogsRead, nil},
		{"GET", "/devices/" + d.ID + "/serial", cloud.ScopeDevicesRead, nil},
		{"PATCH", "/devices/" + d.ID + "/serial", cloud.ScopeDevicesWrite, map[string]any{"mode": "both"}},
		{"GET", "/devices/" + d.ID + "/serial/telemetry", cloud.ScopeDevicesRead, nil},
		{"GET", "/devices/" + d.ID + "/serial/channels/rs485-1", cloud.ScopeDevicesRead, nil},
		{"PUT", "/devices/" + d.ID + "/serial/channels/rs485-1", cloud.ScopeDevicesWrite, rs485Body()},
		{"GET", "/alerts", cloud.ScopeAlertsRead, nil},
		{"POST", "/alerts/" + a.ID + "/acknowledge", cloud.ScopeAlertsWrite, nil},
		{"POST", "/alerts/" + a.ID + "/resolve", cloud.ScopeAlertsWrite, nil},
	}
	only := map[string]string{}
	allBut := map[string]string{}
	for _, s := range cloud.AllScopes {
		only[s] = e.key(e.orgA.ID, s)
		var rest []string
		for _, o := range cloud.AllScopes {
			if o != s {
				rest = append(rest, o)
			}
		}
		allBut[s] = e.key(e.orgA.ID, rest...)
	}
	for _, ep := range endpoints {
		t.Run(ep.method+" "+ep.path, func(t *testing.T) {
			r := e.req(ep.method, "/api/v1/public"+ep.path, allBut[ep.scope], ep.body)
			r.want(t, http.StatusForbidden, cloud.EFORBIDDEN)
			if !strings.Contains(r.errMessage(), ep.scope) {
				t.Fatalf("403 message %q does not name %s", r.errMessage(), ep.scope)
			}
			if !strings.Contains(r.header.Get("WWW-Authenticate"), `scope="`+ep.scope+`"`) {
				t.Fatalf("WWW-Authenticate = %q", r.header.Get("WWW-Authenticate"))
			}
			r = e.req(ep.method, "/api/v1/public"+ep.path, only[ep.scope], ep.body)
			r.want(t, http.StatusOK, "")
		})
	}
}
