package api_test

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/storetest"
)

// requestLog is a RequestObserver that keeps what it heard.
type requestLog struct {
	mu  sync.Mutex
	got []observed
}

type observed struct {
	route, method string
	status        int
	d             time.Duration
}

func (l *requestLog) ObserveRequest(route, method string, status int, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, observed{route, method, status, d})
}

func (l *requestLog) last(t *testing.T) observed {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.got) == 0 {
		t.Fatal("no request observed")
	}
	return l.got[len(l.got)-1]
}

// TestRequestObserverRoutes checks the route, method and status the API
// reports for each request: the route pattern, never the raw path, and ""
// for paths no route matches.
func TestRequestObserverRoutes(t *testing.T) { stores.Run(t, testRequestObserverRoutes) }

func testRequestObserverRoutes(t *testing.T, open storetest.Opener) {
	obs := &requestLog{}
	e := newEnv(t, open, func(c *api.Config) { c.Requests = obs })
	dev := e.device(e.orgA.ID, "IG-500")
	p := api.Prefix
	cases := []struct {
		name, method, path, key string
		status                  int
		route                   string
	}{
		{"found", "GET", p + "/devices/" + dev.ID, e.keyA, 200, p + "/devices/{id}"},
		{"not found in a route", "GET", p + "/devices/dev_missing", e.keyA, 404, p + "/devices/{id}"},
		{"other org's device", "GET", p + "/devices/" + dev.ID, e.keyB, 404, p + "/devices/{id}"},
		{"no key", "GET", p + "/devices/" + dev.ID, "", 401, p + "/devices/{id}"},
		{"two parameters", "GET", p + "/devices/" + dev.ID + "/serial/channels/uart-1", e.keyA, 200, p + "/devices/{id}/serial/channels/{channelId}"},
		{"list", "GET", p + "/devices", e.keyA, 200, p + "/devices"},
		{"point samples", "GET", p + "/devices/" + dev.ID + "/points/gpio-1.level/samples", e.keyA, 200, p + "/devices/{id}/points/{pointId}/samples"},
		{"not a point id", "GET", p + "/devices/" + dev.ID + "/points/gpio-1/samples", e.keyA, 404, p + "/devices/{id}/points/{pointId}/samples"},
		{"unknown API path", "GET", p + "/nothing/here", e.keyA, 404, ""},
		{"unknown root path", "GET", "/metrics", "", 404, ""},
		{"health", "GET", "/healthz", "", 200, "/healthz"},
		{"method not allowed", "DELETE", p + "/devices", e.keyA, 405, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := e.req(c.method, c.path, c.key, nil)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			got := obs.last(t)
			if got.route != c.route || got.method != c.method || got.status != c.status {
				t.Errorf("observed %q %s %d, want %q %s %d", got.route, got.method, got.status, c.route, c.method, c.status)
			}
			if got.d <= 0 || got.d > 10*time.Second {
				t.Errorf("duration %v", got.d)
			}
		})
	}
	// The same pattern list twice: the cached label is the same.
	e.req(http.MethodGet, p+"/devices/"+dev.ID, e.keyA, nil)
	if got := obs.last(t); got.route != p+"/devices/{id}" {
		t.Errorf("cached route %q", got.route)
	}
}
