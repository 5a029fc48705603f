package relay

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"sort"

	"github.com/fleet/fleet/cloud/postgres"
	"github.com/fleet/fleet/cloud/sqlite"
)

// runStoreCopy is `fleet-relay store copy --from relay.db --to
// postgres://...`: a whole SQLite deployment moves into an empty
// PostgreSQL database, in one transaction (postgres.Copy); a database
// that holds data is refused, and nothing is written. Run it while the
// SQLite relay is stopped; then start the relays on the PostgreSQL URL.
func runStoreCopy(ctx context.Context, args []string, stdout io.Writer) error {
	f := newAdminFlags("store copy")
	f.FS.Lookup("db").Usage = "unused: see --from and --to"
	from := f.String("from", "SQLite database file to copy (the relay on it stopped)", true)
	to := f.String("to", "PostgreSQL URL of an empty database (FLEET_TO keeps its password out of ps)", true)
	if err := f.parse(args); err != nil {
		return err
	}
	if isPostgresURL(*from) || !isPostgresURL(*to) {
		return fmt.Errorf("%w: --from is a SQLite file and --to a postgres:// URL", ErrUsage)
	}
	if _, err := os.Stat(*from); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("database %s does not exist", *from)
	}
	src, err := sqlite.Open(ctx, *from)
	if err != nil {
		return err
	}
	defer src.Close()
	snap, err := src.Export(ctx)
	if err != nil {
		return err
	}
	defer snap.Close()
	dst, err := postgres.Open(ctx, *to)
	if err != nil {
		return err
	}
	defer dst.Close()
	res, err := dst.Copy(ctx, sqliteSource{snap})
	if err != nil {
		return err
	}
	tables := make([]string, 0, len(res))
	var total int64
	for t, n := range res {
		tables = append(tables, t)
		total += n
	}
	sort.Strings(tables)
	return f.print(stdout, map[string]any{"tables": res, "rows": total}, func(w io.Writer) {
		printTable(w, "TABLE\tROWS", func(tw io.Writer) {
			for _, t := range tables {
				fmt.Fprintf(tw, "%s\t%d\n", t, res[t])
			}
		})
		fmt.Fprintf(w, "Copied %d rows from %s into %s. Start the relays with --db set to that URL.\n", total, *from, redactDB(*to))
	})
}

// sqliteSource is a SQLite snapshot as postgres.Copy reads it.
type sqliteSource struct{ *sqlite.Export }

func (s sqliteSource) Rows(ctx context.Context, table string) ([]string, postgres.Rows, error) {
	cols, rows, err := s.Export.Rows(ctx, table)
	if err != nil {
		return nil, nil, err
	}
	return cols, rows, nil
}
