package sqlite

import (
	"context"
	"runtime"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestDataVersion, for the WAL-index path and the pragma path: the number
// stays while nothing is committed (reads do not move it) and changes
// after a commit by this store's writer, after one by another handle on the
// same file (the admin CLI's case, here a key revocation), and after a
// checkpoint that restarts the WAL followed by a commit.
func TestDataVersion(t *testing.T) {
	for _, tc := range []struct {
		name  string
		noShm bool
	}{{"wal-index", false}, {"pragma", true}} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			db, _ := openTemp(t)
			db.ver.noShm = tc.noShm
			org, err := db.CreateOrg(ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
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
			same := func(what string) uint64 {
				t.Helper()
				a, b := v(), v()
				if a != b {
					t.Fatalf("%s: no commit, yet version %d then %d", what, a, b)
				}
				return a
			}
			changed := func(what string, before uint64) uint64 {
				t.Helper()
				n := v()
				if n == before {
					t.Fatalf("%s did not change the version (%d)", what, n)
				}
				return n
			}
			v1 := same("start")
			if _, err := db.KeyByID(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
			if v2 := same("after a read"); v2 != v1 {
				t.Fatalf("a read changed the version %d -> %d", v1, v2)
			}
			if _, _, err := db.AddDevice(ctx, NewDevice{OrgID: org.ID, Name: "d", SerialNumber: "S1", Model: "IG-500"}); err != nil {
				t.Fatal(err)
			}
			v2 := changed("a commit by the writer", v1)
			same("after the writer's commit")

			other, err := Open(ctx, db.Path())
			if err != nil {
				t.Fatal(err)
			}
			defer other.Close()
			if _, err := other.RevokeKey(ctx, k.ID); err != nil {
				t.Fatal(err)
			}
			v3 := changed("a revocation through another handle", v2)
			same("after the revocation")

			if _, err := db.W.ExecContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`); err != nil {
				t.Fatal(err)
			}
			v4 := v()
			if _, err := other.W.ExecContext(ctx, `UPDATE devices SET name = 'x'`); err != nil {
				t.Fatal(err)
			}
			changed("a commit after a WAL restart", v4)
			_ = v3

			if tc.noShm == false && runtime.GOOS == "linux" && db.ver.shm == nil {
				t.Error("the WAL index was not mapped")
			}
			db.Close()
			if _, err := db.DataVersion(ctx); err == nil {
				t.Error("DataVersion on a closed store: no error")
			}
		})
	}
}
