package api_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/relaymetrics"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/dialects"
)

// BenchmarkHandler measures the server side of an authenticated request
// in process (no network): CPU and allocations per request. The end-to-end
// figures against the targets come from `make bench-api`.
func BenchmarkHandler(b *testing.B) {
	ctx := context.Background()
	s := dialects.SQLite(b, nil)
	org := storetest.Org(b, s.Store, "bench")
	for i := 0; i < 500; i++ {
		d, _ := storetest.Device(b, s.Store, cloud.NewDevice{OrgID: org.ID, Name: fmt.Sprintf("gw-%d", i), SerialNumber: fmt.Sprintf("SN-%d", i), Model: "IG-500"})
		if i < 100 {
			storetest.Alert(b, s.Engine, s.Store.Alerts(), storetest.NewAlert{OrgID: org.ID, DeviceID: d.ID, Rule: "high_cpu", Message: "cpu"})
		}
	}
	_, key, err := s.Store.CreateKey(ctx, org.ID, "bench", cloud.AllScopes, 0)
	if err != nil {
		b.Fatal(err)
	}
	devices := s.Store.Devices()
	auth := apikey.NewAuthenticator(s.Store.Keys(), time.Now, 100)
	srv := api.NewServer(api.Config{
		Devices: devices, Serial: s.Store.Serial(), Alerts: s.Store.Alerts(),
		Auth: auth, Versioner: s.Store.Versioner(), RateLimit: 1 << 30,
		Logger: slog.New(slog.NewJSONHandler(io.Discard, nil)),
	})
	// The store and the authenticator alone, for comparison: what the API
	// layer adds is the difference.
	b.Run("store-devices", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := devices.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 25}}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("auth", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := auth.Authenticate(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The same server counting requests for /metrics, as the relay runs it.
	measured := api.NewServer(api.Config{
		Devices: devices, Serial: s.Store.Serial(), Alerts: s.Store.Alerts(),
		Auth: auth, Versioner: s.Store.Versioner(), RateLimit: 1 << 30,
		Logger:   slog.New(slog.NewJSONHandler(io.Discard, nil)),
		Requests: relaymetrics.New().Requests(),
	})
	for _, path := range []string{"/devices", "/alerts", "/devices+metrics"} {
		srv := srv
		if p, ok := strings.CutSuffix(path, "+metrics"); ok {
			path, srv = p, measured
		}
		name := strings.TrimPrefix(path, "/")
		if srv == measured {
			name += "-with-metrics"
		}
		b.Run(name, func(b *testing.B) {
			req := httptest.NewRequest(http.MethodGet, api.Prefix+path, nil)
			req.Header.Set("Authorization", "Bearer "+key)
			req.RemoteAddr = "127.0.0.1:5555"
			b.ReportAllocs()
			for b.Loop() {
				w := httptest.NewRecorder()
				srv.ServeHTTP(w, req)
				if w.Code != http.StatusOK {
					b.Fatalf("%d %s", w.Code, w.Body)
				}
			}
		})
	}
}
