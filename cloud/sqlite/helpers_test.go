package sqlite_test

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

// MustOpen opens a store on a fresh file in a temp dir.
func MustOpen(tb testing.TB) *sqlite.DB {
	tb.Helper()
	db, err := sqlite.Open(context.Background(), filepath.Join(tb.TempDir(), "fleet.db"))
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { db.Close() })
	return db
}

// MustOrg creates an organization.
func MustOrg(tb testing.TB, db *sqlite.DB, name string) cloud.Org {
	tb.Helper()
	o, err := db.CreateOrg(context.Background(), name)
	if err != nil {
		tb.Fatal(err)
	}
	return o
}

// MustDevice adds a device of model to the organization.
func MustDevice(tb testing.TB, db *sqlite.DB, orgID, model string) resource.DeviceDetail {
	tb.Helper()
	d, _, err := db.AddDevice(context.Background(), sqlite.NewDevice{OrgID: orgID, Name: "dev", SerialNumber: fmt.Sprintf("SN-%d", time.Now().UnixNano()), Model: model})
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// fakeClock is a settable clock.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time      { return c.t }
func (c *fakeClock) Add(d time.Duration) { c.t = c.t.Add(d) }
