package relay

import (
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/fleet/fleet/test/rig/logbuf"
)

// TestPostgresRelaysStartTogether starts three relays at once on an empty
// database: the migrations run once, under the advisory lock, and every
// relay serves.
func TestPostgresRelaysStartTogether(t *testing.T) {
	ctx := context.Background()
	url := pg.Get(t).CreateDB(t)
	var wg sync.WaitGroup
	mains := make([]*Main, 3)
	errs := make([]error, 3)
	for i := range mains {
		m := NewMain(io.Discard)
		if err := m.ParseFlags([]string{"--db", url, "--listen", "127.0.0.1:0"}); err != nil {
			t.Fatal(err)
		}
		mains[i] = m
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = m.Run(ctx)
		}()
	}
	wg.Wait()
	for i, m := range mains {
		t.Cleanup(func() { m.Close() })
		if errs[i] != nil {
			t.Fatalf("relay %d: %v", i, errs[i])
		}
		resp, err := http.Get("http://" + m.Addr() + "/healthz")
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("relay %d healthz: %v %v", i, resp, err)
		}
		resp.Body.Close()
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n, distinct int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*), COUNT(DISTINCT name) FROM schema_migrations`).Scan(&n, &distinct); err != nil || n == 0 || n != distinct {
		t.Errorf("schema_migrations: %d rows, %d names, %v", n, distinct, err)
	}
	// What one relay's API writes, the others read.
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", url, "--name", "Acme")
	var key struct{ Key string }
	mustJSON(t, &key, "key", "create", "--db", url, "--org", org.ID, "--name", "k", "--scopes", "devices:read")
	var dev struct{ ID string }
	mustJSON(t, &dev, "device", "add", "--db", url, "--org", org.ID, "--name", "gw", "--serial", "S1", "--model", "IG-500")
	for i, m := range mains {
		if code, body := get(t, "http://"+m.Addr()+"/api/v1/public/devices/"+dev.ID, key.Key); code != 200 {
			t.Errorf("relay %d: GET device = %d %s", i, code, body)
		}
	}
}

// TestPostgresAdminMigratesEmptyDatabase: an admin subcommand on an empty
// database creates the schema, as it creates the file on SQLite.
func TestPostgresAdminMigratesEmptyDatabase(t *testing.T) {
	url := pg.Get(t).CreateDB(t)
	var orgs []struct{ ID string }
	mustJSON(t, &orgs, "org", "list", "--db", url)
	if len(orgs) != 0 {
		t.Errorf("org list on an empty database = %+v", orgs)
	}
}

// TestPostgresWrongPassword: serve and an admin command with a wrong
// password fail at once with an error that names the server, database and
// user, and never show a password (the wrong one or the right one).
func TestPostgresWrongPassword(t *testing.T) {
	srv := pg.Get(t)
	url := srv.CreateDB(t)
	const wrong = "Wr0ngPassw0rd-do-not-print"
	bad := strings.Replace(url, srv.Password, wrong, 1)
	for _, args := range [][]string{
		{"serve", "--db", bad, "--listen", "127.0.0.1:0"},
		{"org", "list", "--db", bad},
	} {
		var out, errOut strings.Builder
		code := run(context.Background(), args, &out, &errOut)
		text := out.String() + errOut.String()
		if code != 1 || !strings.Contains(text, "password authentication failed") || !strings.Contains(text, `user "fleet"`) || !strings.Contains(text, "127.0.0.1") {
			t.Errorf("%s: exit %d, output %q", args[0], code, text)
		}
		if strings.Contains(text, wrong) || strings.Contains(text, srv.Password) {
			t.Errorf("%s printed a password: %q", args[0], text)
		}
	}
	// The same through FLEET_DB, as the systemd unit passes it.
	t.Setenv("FLEET_DB", bad)
	var errOut strings.Builder
	if code := run(context.Background(), []string{"org", "list"}, io.Discard, &errOut); code != 1 || strings.Contains(errOut.String(), wrong) ||
		!strings.Contains(errOut.String(), "password authentication failed") {
		t.Errorf("FLEET_DB: exit %d, %q", code, errOut.String())
	}
}

// TestPostgresURLParameters: parameters pgx accepts pass through (here
// connect_timeout, application_name and the pool's own pool_max_conns), and
// the relay's log names the database without the password.
func TestPostgresURLParameters(t *testing.T) {
	ctx := context.Background()
	srv := pg.Get(t)
	url := srv.CreateDB(t) + "&connect_timeout=5&application_name=fleet-url-test&pool_max_conns=3"
	log := &logbuf.Buffer{}
	m := NewMain(log)
	if err := m.ParseFlags([]string{"--db", url, "--listen", "127.0.0.1:0"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(ctx); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	conn, err := pgx.Connect(ctx, srv.CreateDB(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, `SELECT COUNT(*) FROM pg_stat_activity WHERE application_name = 'fleet-url-test'`).Scan(&n); err != nil || n < 2 || n > 4 {
		t.Errorf("connections named by application_name: %d, want the pool's (pool_max_conns 3) and the listener's one, %v", n, err)
	}
	text := log.String()
	if strings.Contains(text, srv.Password) || !strings.Contains(text, "fleet-url-test") {
		t.Errorf("relay log: %s", text)
	}
}
