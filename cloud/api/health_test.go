package api_test

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestHealthAndReadiness checks what a load balancer and a monitor see:
// /healthz and /readyz answer without a key and outside the rate limit,
// and /readyz turns 503 with a reason while Config.Ready refuses.
func TestHealthAndReadiness(t *testing.T) { stores.Run(t, testHealthAndReadiness) }

func testHealthAndReadiness(t *testing.T, open storetest.Opener) {
	var refuse atomic.Pointer[error]
	e := newEnv(t, open, withRateLimit(2), func(c *api.Config) {
		c.Ready = func(context.Context) error {
			if p := refuse.Load(); p != nil {
				return *p
			}
			return nil
		}
	})
	for i := 0; i < 10; i++ { // five times the budget: never limited
		for _, p := range []string{"/healthz", "/readyz"} {
			r := e.req(http.MethodGet, p, "", nil)
			r.want(t, http.StatusOK, "")
			if string(r.body) != `{"status":"ok"}`+"\n" || r.header.Get("Content-Type") != "application/json" {
				t.Fatalf("%s: %q %q", p, r.body, r.header.Get("Content-Type"))
			}
			if r.header.Get("X-RateLimit-Limit") != "" {
				t.Fatalf("%s carries rate-limit headers", p)
			}
		}
	}
	// The budget of this address is untouched by the probes above.
	e.req(http.MethodGet, "/api/v1/public/devices", "", nil).want(t, http.StatusUnauthorized, "unauthorized")

	draining := errors.New("draining")
	refuse.Store(&draining)
	r := e.req(http.MethodGet, "/readyz", "", nil)
	r.want(t, http.StatusServiceUnavailable, "")
	if string(r.body) != `{"status":"unavailable","reason":"draining"}`+"\n" || r.header.Get("Retry-After") == "" {
		t.Fatalf("readyz while draining: %q, Retry-After %q", r.body, r.header.Get("Retry-After"))
	}
	// Liveness is not readiness: the process still answers.
	e.req(http.MethodGet, "/healthz", "", nil).want(t, http.StatusOK, "")
	refuse.Store(nil)
	e.req(http.MethodGet, "/readyz", "", nil).want(t, http.StatusOK, "")
}
