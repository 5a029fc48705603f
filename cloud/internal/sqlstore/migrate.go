package sqlstore

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// The schema's history is one sequence of migrations, numbered once for
// both stores: migrations/NNNN_name.sql where both stores run the same
// statements, NNNN_name.sqlite.sql and NNNN_name.postgres.sql where their
// DDL differs. A step with a file for the other dialect only has nothing
// to do in this one and is recorded all the same (PostgreSQL's 0001 holds
// what SQLite's 0001-0005 do; 0006 and 0007 tune PostgreSQL alone).
//
//go:embed migrations/*.sql
var migrationFS embed.FS

// Migration is one step of the sequence in one dialect.
type Migration struct {
	// Name is the step's name, recorded in schema_migrations: 0002_agentlink.
	Name string
	// SQL is what the step runs; "" when it has nothing to do in the
	// dialect.
	SQL string
	// Legacy is the name under which a relay recorded the step before the
	// sequence was numbered once ("" for none): a database made by such a
	// relay holds it and must not run the step again.
	Legacy string
}

// legacyNames are the names each store recorded for the steps before the
// stores shared one sequence (SQLite with its embed path).
var legacyNames = map[string]map[string]string{
	"sqlite": {
		"0001_initial":                 "migrations/0001_initial.sql",
		"0002_agentlink":               "migrations/0020_agentlink.sql",
		"0003_webhook_outbox":          "migrations/0040_webhook_outbox.sql",
		"0004_alert_engine":            "migrations/0041_alert_engine.sql",
		"0005_webhook_secret_rotation": "migrations/0042_webhook_secret_rotation.sql",
		"0008_panel":                   "migrations/0060_panel.sql",
	},
	"postgres": {
		"0001_initial":             "0001_initial.sql",
		"0006_shared_outbox":       "0002_shared_outbox.sql",
		"0007_heartbeats_in_place": "0003_heartbeats_in_place.sql",
		"0008_panel":               "0060_panel.sql",
	},
}

// Migrations returns the sequence in dialect ("sqlite" or "postgres"), in
// order.
func Migrations(dialect string) ([]Migration, error) {
	files, err := fs.Glob(migrationFS, "migrations/*.sql")
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []Migration
	for _, f := range files {
		name, only, _ := strings.Cut(strings.TrimSuffix(path.Base(f), ".sql"), ".")
		if len(out) == 0 || out[len(out)-1].Name != name {
			out = append(out, Migration{Name: name, Legacy: legacyNames[dialect][name]})
		}
		if only != "" && only != dialect {
			continue
		}
		body, err := migrationFS.ReadFile(f)
		if err != nil {
			return nil, err
		}
		out[len(out)-1].SQL = string(body)
	}
	return out, nil
}

// Pending reports whether a step of the sequence is missing from the
// names a database recorded.
func Pending(steps []Migration, recorded []string) bool {
	have := map[string]bool{}
	for _, n := range recorded {
		have[n] = true
	}
	for _, m := range steps {
		if !have[m.Name] && (m.Legacy == "" || !have[m.Legacy]) {
			return true
		}
	}
	return false
}

// Migrate runs m in tx, a transaction of its own, unless the database
// recorded it (under its name or its legacy name), and records it; the
// check is in the transaction, so that two processes opening one database
// at once run it once. applied is the time to record, in Unix ms.
func Migrate(ctx context.Context, tx Querier, m Migration, applied int64) error {
	var n int
	if err := tx.QueryRow(ctx, `SELECT COUNT(*) FROM schema_migrations WHERE name = ? OR name = ?`, m.Name, m.Legacy).Scan(&n); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	if n > 0 {
		return nil
	}
	if m.SQL != "" {
		if _, err := tx.Exec(ctx, m.SQL); err != nil {
			return fmt.Errorf("migration %s: %w", m.Name, err)
		}
	}
	if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (name, applied_at) VALUES (?, ?)`, m.Name, applied); err != nil {
		return fmt.Errorf("migration %s: %w", m.Name, err)
	}
	return nil
}
