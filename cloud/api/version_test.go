package api_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// countedVersion is the real store, counting the reads of its data
// version.
type countedVersion struct {
	*sqlite.DB
	reads atomic.Int64
}

func (c *countedVersion) DataVersion(ctx context.Context) (uint64, error) {
	c.reads.Add(1)
	return c.DB.DataVersion(ctx)
}

// TestOneDataVersionReadPerRequest: a request reads the store's data
// version once, and that one read serves both caches it consults (its key
// row, then its list page; on PostgreSQL each read is a round trip); a
// request that presents no key reads none. Because the version is read
// before the data it tags, what a commit between two requests changes shows
// at the next one: a device added appears in the cached list, a key revoked
// is refused.
func TestOneDataVersionReadPerRequest(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := sqlitetest.Open(t)
	store := &countedVersion{DB: db}
	org := sqlitetest.Org(t, db, "acme")
	k, key, err := db.CreateKey(ctx, org.ID, "k", cloud.AllScopes, 0)
	if err != nil {
		t.Fatal(err)
	}
	dev, _ := sqlitetest.Device(t, db, cloud.NewDevice{OrgID: org.ID, Name: "gw-1", SerialNumber: "SN-1", Model: "IG-500"})
	srv := httptest.NewServer(api.NewServer(api.Config{
		Devices: db.Devices(), Serial: db.Serial(), Alerts: db.Alerts(),
		Auth: apikey.NewAuthenticator(store, time.Now, 0), Versioner: store, RateLimit: 1 << 20,
		Logger: slog.New(slog.DiscardHandler),
	}))
	t.Cleanup(srv.Close)

	get := func(path, key string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL+api.Prefix+path, nil)
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	devices := func() int {
		t.Helper()
		code, b := get("/devices", key)
		var l struct{ Data []struct{ ID string } }
		if code != http.StatusOK || json.Unmarshal(b, &l) != nil {
			t.Fatalf("GET /devices: %d %s", code, b)
		}
		return len(l.Data)
	}
	reads := func(what string, requests int, do func()) {
		t.Helper()
		before := store.reads.Load()
		do()
		if n := store.reads.Load() - before; n != int64(requests) {
			t.Fatalf("%s: %d reads of the data version for %d requests, want one each", what, n, requests)
		}
	}

	reads("GET /devices, three times", 3, func() {
		for range 3 {
			if n := devices(); n != 1 {
				t.Fatalf("%d devices listed, want 1", n)
			}
		}
	})
	reads("GET /devices/{id}", 1, func() {
		if code, b := get("/devices/"+dev.ID, key); code != http.StatusOK {
			t.Fatalf("GET /devices/{id}: %d %s", code, b)
		}
	})
	reads("a request without a key", 0, func() {
		if code, _ := get("/devices", ""); code != http.StatusUnauthorized {
			t.Fatalf("without a key: %d, want 401", code)
		}
	})

	sqlitetest.Device(t, db, cloud.NewDevice{OrgID: org.ID, Name: "gw-2", SerialNumber: "SN-2", Model: "IG-500"})
	reads("GET /devices after a commit", 1, func() {
		if n := devices(); n != 2 {
			t.Fatalf("after a device was added: %d devices listed, want 2", n)
		}
	})
	if _, err := db.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	if code, b := get("/devices", key); code != http.StatusUnauthorized {
		t.Fatalf("after the key was revoked: %d %s, want 401", code, b)
	}
}
