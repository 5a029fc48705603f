package sqlite_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// TestBackupUnderWriteLoad takes a backup while a writer keeps committing
// organizations: the copy opens, passes integrity_check, holds every row
// committed before the backup began, and is a working store.
func TestBackupUnderWriteLoad(t *testing.T) {
	ctx := context.Background()
	db := sqlitetest.Open(t)
	for i := 0; i < 50; i++ {
		sqlitetest.Org(t, db, fmt.Sprintf("seed-%d", i))
	}
	var committed atomic.Int64 // orgs committed so far
	committed.Store(50)
	stop := storetest.WriteLoop(t, func(i int) error {
		if _, err := db.CreateOrg(ctx, fmt.Sprintf("load-%d", i)); err != nil {
			return err
		}
		committed.Add(1)
		return nil
	})
	// Let the writer get going, then back up while it runs.
	for committed.Load() < 200 {
		if t.Failed() { // the writer failed
			t.FailNow()
		}
		time.Sleep(time.Millisecond)
	}
	before := committed.Load()
	out := filepath.Join(t.TempDir(), "copy.db")
	res, err := sqlite.Backup(ctx, db.Path(), out)
	after := committed.Load()
	stop()
	if err != nil {
		t.Fatal(err)
	}
	if after == before {
		t.Fatalf("no write committed during the backup: not a test under load")
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if res.Path != out || res.Bytes != st.Size() || res.Bytes == 0 {
		t.Fatalf("result %+v, file size %d", res, st.Size())
	}
	if m := st.Mode().Perm(); m != 0o600 {
		t.Fatalf("backup mode %o, want 600", m)
	}
	leftovers, _ := filepath.Glob(filepath.Join(filepath.Dir(out), ".copy.db.tmp-*"))
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}

	cp := sqlitetest.OpenCopy(t, out)
	orgs, err := cp.ListOrgs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := int64(len(orgs)); n < before || n > after {
		t.Fatalf("copy holds %d organizations; %d were committed before the backup began, %d when it ended", n, before, after)
	}
	names := map[string]bool{}
	for _, o := range orgs {
		names[o.Name] = true
	}
	for i := 0; i < 50; i++ {
		if !names[fmt.Sprintf("seed-%d", i)] {
			t.Fatalf("seed-%d missing from the copy", i)
		}
	}
	for i := int64(0); i < before-50; i++ {
		if !names[fmt.Sprintf("load-%d", i)] {
			t.Fatalf("load-%d (committed before the backup) missing from the copy", i)
		}
	}
	// The copy is a working store.
	if _, err := cp.CreateOrg(ctx, "after-restore"); err != nil {
		t.Fatal(err)
	}
	t.Logf("backup of %d bytes with %d organizations (%d committed before, %d after)", res.Bytes, len(orgs), before, after)
}

func TestBackupRefusals(t *testing.T) {
	ctx := context.Background()
	db := sqlitetest.Open(t)
	sqlitetest.Org(t, db, "acme")
	dir := t.TempDir()
	existing := filepath.Join(dir, "existing.db")
	if err := os.WriteFile(existing, []byte("keep me"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		src, out string
		is       error
	}{
		{"existing output", db.Path(), existing, sqlite.ErrBackupExists},
		{"missing source", filepath.Join(dir, "nope.db"), filepath.Join(dir, "a.db"), os.ErrNotExist},
		{"missing output directory", db.Path(), filepath.Join(dir, "no", "b.db"), os.ErrNotExist},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := sqlite.Backup(ctx, tt.src, tt.out)
			if !errors.Is(err, tt.is) {
				t.Fatalf("err = %v, want %v", err, tt.is)
			}
		})
	}
	if b, _ := os.ReadFile(existing); string(b) != "keep me" {
		t.Fatalf("existing file changed: %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.db")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("output created for a missing source: %v", err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*")); len(m) != 0 {
		t.Fatalf("temporary files left: %v", m)
	}
}
