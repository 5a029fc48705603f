package sqlite_test

import (
	"context"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
)

// TestDataVersion: the number stays while nothing is committed and changes
// after a commit by this store's writer and after one by another handle on
// the same file (the admin CLI's case), including a key revocation.
func TestDataVersion(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	org := MustOrg(t, db, "acme")
	k, _, err := db.CreateKey(ctx, org.ID, "k", []string{cloud.ScopeDevicesRead}, 0)
	if err != nil {
		t.Fatal(err)
	}
	v := func() uint64 {
		t.Helper()
		n, err := db.DataVersion(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	v1 := v()
	if v2 := v(); v2 != v1 {
		t.Fatalf("no commit, version %d then %d", v1, v2)
	}
	if _, err := db.R.ExecContext(ctx, `SELECT count(*) FROM devices`); err != nil {
		t.Fatal(err)
	}
	if v2 := v(); v2 != v1 {
		t.Fatalf("a read changed the version %d -> %d", v1, v2)
	}
	MustDevice(t, db, org.ID, "IG-500")
	v2 := v()
	if v2 == v1 {
		t.Fatal("a commit by the writer did not change the version")
	}
	other, err := sqlite.Open(ctx, db.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := other.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	v3 := v()
	if v3 == v2 {
		t.Fatal("a revocation through another handle did not change the version")
	}
	if v4 := v(); v4 != v3 {
		t.Fatalf("no commit, version %d then %d", v3, v4)
	}
	db.Close()
	if _, err := db.DataVersion(ctx); err == nil {
		t.Error("DataVersion on a closed store: no error")
	}
}
