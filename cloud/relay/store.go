package relay

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"strings"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/sqlite"
)

// storeOptions are how openStore treats a missing database.
type storeOptions struct {
	// Create lets a missing SQLite file be created (serve, org create);
	// otherwise a missing file is an error, so that a mistyped --db does
	// not silently start an empty database.
	Create bool
}

// isPostgresURL reports whether --db names a PostgreSQL database
// (postgres:// or postgresql://) rather than a SQLite file.
func isPostgresURL(db string) bool {
	l := strings.ToLower(db)
	return strings.HasPrefix(l, "postgres://") || strings.HasPrefix(l, "postgresql://")
}

// openStore opens the store named by db (a PostgreSQL URL or a SQLite file
// path), applying pending migrations: serve and every admin subcommand open
// it so, and nothing else in the relay knows the dialect.
func openStore(ctx context.Context, db string, o storeOptions) (*cloud.Stores, error) {
	if isPostgresURL(db) {
		s, err := postgres.Open(ctx, db)
		if err != nil {
			return nil, err
		}
		st := s.Stores(relayID())
		return &st, nil
	}
	if !o.Create {
		if _, err := os.Stat(db); errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("database %s does not exist (create an organization first, or check --db / FLEET_DB)", db)
		}
	}
	s, err := sqlite.Open(ctx, db)
	if err != nil {
		return nil, err
	}
	st := s.Stores()
	return &st, nil
}

// relayID names this relay process in the cluster (the devices' presence,
// webhook leases): host name, process id and a random suffix.
func relayID() string {
	host, _ := os.Hostname()
	var b [4]byte
	rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}

// redactDB returns --db as it may be logged: a PostgreSQL URL without its
// password.
func redactDB(db string) string {
	if !isPostgresURL(db) {
		return db
	}
	u, err := url.Parse(db)
	if err != nil {
		return "postgres://(unparsable URL)"
	}
	return u.Redacted()
}
