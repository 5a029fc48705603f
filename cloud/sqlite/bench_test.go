package sqlite_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// benchStore is a store with one organization of 10,000 devices.
func benchStore(b *testing.B) (*sqlite.DB, cloud.Org) {
	b.Helper()
	ctx := context.Background()
	db := sqlitetest.Open(b)
	org := sqlitetest.Org(b, db, "bench")
	for i := 0; i < 10000; i++ {
		if _, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: org.ID, Name: "d", SerialNumber: fmt.Sprintf("B%05d", i), Model: "IG-500"}); err != nil {
			b.Fatal(err)
		}
	}
	return db, org
}

// BenchmarkListDevices25 is the store's share of GET /devices at 25 items
// per page (first page and a middle page), from parallel clients.
func BenchmarkListDevices25(b *testing.B) {
	db, org := benchStore(b)
	svc := db.Devices()
	ctx := context.Background()
	first, err := svc.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 25}})
	if err != nil {
		b.Fatal(err)
	}
	cursor := *first.Pagination.NextCursor
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			c := ""
			if i%2 == 1 {
				c = cursor
			}
			i++
			l, err := svc.ListDevices(ctx, org.ID, cloud.DeviceFilter{Page: cloud.Page{Limit: 25, Cursor: c}})
			if err != nil || len(l.Data) != 25 {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAuthenticateCached is the per-request authentication cost once a
// key's bcrypt verification is cached: one primary-key read.
func BenchmarkAuthenticateCached(b *testing.B) {
	db := sqlitetest.Open(b)
	org := sqlitetest.Org(b, db, "bench")
	_, key, err := db.CreateKey(context.Background(), org.ID, "k", []string{cloud.ScopeDevicesRead}, 0)
	if err != nil {
		b.Fatal(err)
	}
	auth := apikey.NewAuthenticator(db, nil, 0)
	ctx := context.Background()
	if _, err := auth.Authenticate(ctx, key); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := auth.Authenticate(ctx, key); err != nil {
				b.Fatal(err)
			}
		}
	})
	if auth.BcryptRuns() != 1 {
		b.Fatalf("bcrypt ran %d times", auth.BcryptRuns())
	}
}
