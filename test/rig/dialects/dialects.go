// Package dialects opens the relay's store on each of its dialects for the
// tests of the packages above the store (the API, the agent endpoint, the
// alert engine, the webhook sender, the panel): a SQLite file in the test's
// temporary directory and a PostgreSQL database on a throwaway server
// (test/rig/pgtest) started once per test binary, a fresh database per
// test copied from a template migrated once. It is the one place those
// tests open a store; they seed it through the contract (storetest's seed
// helpers), so that every test runs unchanged on both.
package dialects

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/pgtest"
)

// Each is the dialects of one test binary: declare one in the test
// package, call Run in the tests and Close from TestMain after m.Run. The
// PostgreSQL server starts with the first test that runs on it; the
// database of the next test is made while a test runs, and a test's
// database is dropped after it in the background.
type Each struct {
	pg       pgtest.Shared
	once     sync.Once
	template string // the migrated database every test's database copies
	err      error
	next     chan database // the next test's database, made ahead
	drops    sync.WaitGroup
}

// database is a fresh copy of the template (or why there is none).
type database struct {
	url  string
	drop func() error
	err  error
}

// Run runs test as the subtests "sqlite" and "postgres", each given an
// opener of fresh stores on an empty database of its dialect.
func (e *Each) Run(t *testing.T, test func(t *testing.T, open storetest.Opener)) {
	t.Run("sqlite", func(t *testing.T) { test(t, SQLite) })
	t.Run("postgres", func(t *testing.T) { test(t, e.Postgres) })
}

// Main runs a test binary's tests (a TestMain's m) and then closes e, and
// exits with their status.
func (e *Each) Main(m *testing.M) {
	code := m.Run()
	e.Close()
	os.Exit(code)
}

// Close drops the databases and stops the PostgreSQL server if a test
// started it.
func (e *Each) Close() {
	e.once.Do(func() {}) // no server is started after Close
	e.drops.Wait()
	if e.next != nil {
		if db := <-e.next; db.err == nil {
			db.drop()
		}
	}
	e.pg.Close()
}

// SQLite opens the stores on a new file in t's temporary directory with
// clock now (time.Now when nil), closed when t ends. Tests that are about
// SQLite itself (a process killed mid-write) use it alone, with SQLiteAt.
func SQLite(t testing.TB, now cloud.Now) storetest.Stores {
	t.Helper()
	return SQLiteAt(t, filepath.Join(t.TempDir(), "fleet.db"), now)
}

// SQLiteAt is SQLite on the file at path.
func SQLiteAt(t testing.TB, path string, now cloud.Now) storetest.Stores {
	t.Helper()
	open := func(t testing.TB) cloud.Stores {
		db, err := sqlite.Open(context.Background(), path)
		if err != nil {
			t.Fatal(err)
		}
		if now != nil {
			db.Now = now
		}
		return db.Stores()
	}
	return storetest.Open(t, open(t), open)
}

// Postgres opens the stores on a fresh database of the binary's PostgreSQL
// server with clock now (time.Now when nil), closed when t ends.
func (e *Each) Postgres(t testing.TB, now cloud.Now) storetest.Stores {
	t.Helper()
	srv := e.pg.Get(t)
	e.once.Do(func() {
		if e.template, e.err = migrate(srv); e.err == nil {
			e.next = make(chan database, 1)
			go e.create(srv)
		}
	})
	if e.err != nil {
		t.Fatal(e.err)
	}
	db := <-e.next
	go e.create(srv)
	if db.err != nil {
		t.Fatal(db.err)
	}
	t.Cleanup(func() {
		e.drops.Add(1)
		go func() {
			defer e.drops.Done()
			db.drop()
		}()
	})
	return PostgresAt(t, db.url, now, "relay-1")
}

// create makes the next test's database.
func (e *Each) create(srv *pgtest.Server) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var db database
	db.url, db.drop, db.err = srv.NewDatabase(ctx, e.template)
	e.next <- db
}

// migrate makes the template database: a new one with every migration
// applied.
func migrate(srv *pgtest.Server) (string, error) {
	ctx := context.Background()
	u, _, err := srv.NewDatabase(ctx, "")
	if err != nil {
		return "", err
	}
	db, err := postgres.Open(ctx, u)
	if err != nil {
		return "", err
	}
	db.Close()
	p, err := url.Parse(u)
	if err != nil {
		return "", err
	}
	return strings.TrimPrefix(p.Path, "/"), nil
}

// PostgresAt opens the stores on the PostgreSQL database at url as relay
// (the name the cluster's leases and outbox know it by) with clock now
// (time.Now when nil), closed when t ends; Reopen opens them as another
// relay.
func PostgresAt(t testing.TB, url string, now cloud.Now, relay string) storetest.Stores {
	t.Helper()
	var n int
	open := func(t testing.TB, relay string) cloud.Stores {
		db, err := postgres.Open(context.Background(), url)
		if err != nil {
			t.Fatal(err)
		}
		if now != nil {
			db.Now = now
		}
		return db.Stores(relay)
	}
	return storetest.Open(t, open(t, relay), func(t testing.TB) cloud.Stores {
		n++
		return open(t, relay+"-"+string(rune('a'+n)))
	})
}

// Exec runs a statement on the database under s directly, with ?
// placeholders on either dialect. It is for the few states the contract
// cannot make (rows a relay that crashed left behind); tests seed through
// the contract everywhere else.
func Exec(t testing.TB, s cloud.Store, query string, args ...any) {
	t.Helper()
	var err error
	switch db := s.(type) {
	case *sqlite.DB:
		_, err = db.W.ExecContext(context.Background(), query, args...)
	case *postgres.DB:
		_, err = db.Pool.Exec(context.Background(), numbered(query), args...)
	default:
		t.Fatalf("dialects: a store of type %T", s)
	}
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// QueryRow reads one row from the database under s directly into dest,
// with ? placeholders on either dialect, for the few facts the contract
// has no reader for (the configuration version an agent applied).
func QueryRow(t testing.TB, s cloud.Store, query string, args []any, dest ...any) {
	t.Helper()
	var err error
	switch db := s.(type) {
	case *sqlite.DB:
		err = db.R.QueryRowContext(context.Background(), query, args...).Scan(dest...)
	case *postgres.DB:
		err = db.Pool.QueryRow(context.Background(), numbered(query), args...).Scan(dest...)
	default:
		t.Fatalf("dialects: a store of type %T", s)
	}
	if err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// numbered rewrites ? placeholders as PostgreSQL's $1, $2, ...
func numbered(query string) string {
	var b strings.Builder
	n := 0
	for _, r := range query {
		if r == '?' {
			n++
			fmt.Fprintf(&b, "$%d", n)
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}
