package sqlite_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// TestSecretsNotStoredInClear reads the rows themselves: an API key's
// secret and a device token are kept only as hashes (the shared suite
// checks the behaviour; this checks the file).
func TestSecretsNotStoredInClear(t *testing.T) {
	ctx := context.Background()
	db := sqlitetest.Open(t)
	o := sqlitetest.Org(t, db, "acme")
	k, key, err := db.CreateKey(ctx, o.ID, "ci", []string{"devices:read"}, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	_, secret, _ := apikey.Parse(key)
	var stored []byte
	if err := db.R.QueryRowContext(ctx, `SELECT hash FROM api_keys WHERE id = ?`, k.ID).Scan(&stored); err != nil || strings.Contains(string(stored), secret) {
		t.Errorf("stored hash %q, %v", stored, err)
	}
	_, token, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: o.ID, Name: "press 4", SerialNumber: "SN1", Model: "IG-500"})
	if err != nil {
		t.Fatal(err)
	}
	var n int
	db.R.QueryRowContext(ctx, `SELECT COUNT(*) FROM devices WHERE token_hash = ? OR CAST(token_hash AS TEXT) LIKE ?`, []byte(token), "%"+token[len(apikey.DeviceTokenPrefix):]+"%").Scan(&n)
	if n != 0 {
		t.Error("token stored in clear")
	}
}
