package relay

import (
	"context"
	"fmt"
	"io"

	"github.com/fleet/fleet/cloud/sqlite"
)

// runBackup is `fleet-relay backup --db PATH --out FILE`: a consistent copy
// of the database, safe while serve runs (sqlite.Backup). It refuses an
// existing --out; the copy is mode 0600. Restore: stop the relay, replace
// the database file with the copy, remove its -wal and -shm files, start
// the relay (docs/deploy.md). A PostgreSQL store is backed up with
// PostgreSQL's own tools (pg_dump, base backups and WAL archiving for
// point-in-time recovery), so backup refuses a postgres:// --db with that
// advice rather than copying half a cluster.
func runBackup(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("backup")
	out := f.FS.String("out", "", "backup file to write (required; never overwritten)")
	if err := f.parse(args); err != nil {
		return err
	}
	if err := required("db", f.DB, "out", *out); err != nil {
		return err
	}
	if isPostgresURL(f.DB) {
		return fmt.Errorf("%w: backup copies a SQLite file; back up a PostgreSQL store with pg_dump, or base backups and WAL archiving for point-in-time recovery (docs/relay.md)", ErrUsage)
	}
	res, err := sqlite.Backup(ctx, f.DB, *out)
	if err != nil {
		return err
	}
	v := struct {
		Path  string `json:"path"`
		Bytes int64  `json:"bytes"`
	}{res.Path, res.Bytes}
	return f.print(stdout, v, func(w io.Writer) {
		fmt.Fprintf(w, "Backup written: %s (%d bytes)\n", res.Path, res.Bytes)
	})
}
