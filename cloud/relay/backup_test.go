package relay

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/sqlitetest"
)

// TestBackupWhileServing backs up the database of a running relay whose
// writer keeps committing, then checks the copy as an operator restoring
// it would: it opens, passes integrity_check and holds what was committed
// before the backup; a second backup to the same file is refused.
func TestBackupWhileServing(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "relay.db")
	m := startMain(t, db)
	ctx := context.Background()
	var before []string
	for i := 0; i < 20; i++ {
		o, err := m.DB.CreateOrg(ctx, fmt.Sprintf("before-%d", i))
		if err != nil {
			t.Fatal(err)
		}
		before = append(before, o.ID)
	}
	writes := 0
	stop := storetest.WriteLoop(t, func(i int) error {
		if _, err := m.DB.CreateOrg(ctx, fmt.Sprintf("during-%d", i)); err != nil {
			return err
		}
		writes++
		return nil
	})
	time.Sleep(50 * time.Millisecond)
	out := filepath.Join(dir, "backup", "relay-copy.db")
	if err := os.Mkdir(filepath.Dir(out), 0o700); err != nil {
		t.Fatal(err)
	}
	var got struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}
	mustJSON(t, &got, "backup", "--db", db, "--out", out)
	stop()
	if writes == 0 {
		t.Fatal("no writes during the backup")
	}
	st, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	if got.Path != out || got.Bytes != st.Size() {
		t.Fatalf("printed %+v; file is %d bytes", got, st.Size())
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %o, want 600", st.Mode().Perm())
	}
	cp := sqlitetest.OpenCopy(t, out)
	for _, id := range before {
		if _, err := cp.Org(ctx, id); err != nil {
			t.Fatalf("org %s committed before the backup: %v", id, err)
		}
	}

	_, errOut, code := cli(t, "backup", "--db", db, "--out", out)
	if code != 1 || !strings.Contains(errOut, "already exists") {
		t.Fatalf("second backup to the same file: exit %d, %q", code, errOut)
	}
	if _, errOut, code := cli(t, "backup", "--db", db); code != 2 || !strings.Contains(errOut, "--out is required") {
		t.Fatalf("no --out: exit %d, %q", code, errOut)
	}
	out2, _, code := cli(t, "backup", "--db", db, "--out", filepath.Join(dir, "b2.db"))
	if code != 0 || !strings.HasPrefix(out2, "Backup written: ") {
		t.Fatalf("human output: exit %d, %q", code, out2)
	}
}

func TestHealthcheck(t *testing.T) {
	m := startMain(t, filepath.Join(t.TempDir(), "relay.db"))
	sick := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "down", http.StatusServiceUnavailable)
	}))
	defer sick.Close()
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	tests := []struct {
		name string
		url  string
		code int
		msg  string
	}{
		{"running relay", "http://" + m.Addr() + "/healthz", 0, ""},
		{"503", sick.URL, 1, "503"},
		{"nothing listening", closed.URL, 1, "unhealthy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, errOut, code := cli(t, "healthcheck", "--url", tt.url, "--timeout", "2s")
			if code != tt.code || !strings.Contains(errOut, tt.msg) {
				t.Fatalf("exit %d (want %d), stdout %q, stderr %q", code, tt.code, out, errOut)
			}
		})
	}
}
