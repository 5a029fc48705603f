package pgtest

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

var srv *Server

func TestMain(m *testing.M) { Main(m, &srv) }

// TestServer: a database per test, password authentication, and a stop and
// start on the same port that the client notices and gets over.
func TestServer(t *testing.T) {
	ctx := context.Background()
	url := srv.CreateDB(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var user, db string
	if err := conn.QueryRow(ctx, `SELECT current_user, current_database()`).Scan(&user, &db); err != nil || user != User || !strings.HasPrefix(db, "t") {
		t.Fatalf("user %q db %q: %v", user, db, err)
	}
	conn.Close(ctx)
	bad := strings.Replace(url, srv.Password, "wrong", 1)
	if c, err := pgx.Connect(ctx, bad); err == nil {
		c.Close(ctx)
		t.Fatal("a wrong password connects")
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	if c, err := pgx.Connect(cctx, url); err == nil {
		c.Close(ctx)
		t.Fatal("connected to a stopped server")
	}
	cancel()
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	conn, err = pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("after restart: %v\n%s", err, srv.Log())
	}
	conn.Close(ctx)
	if info, err := os.Stat(srv.data); err != nil || !info.IsDir() {
		t.Fatalf("data directory: %v", err)
	}
}
