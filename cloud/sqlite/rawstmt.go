package sqlite

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// rawStmts runs the writer's heartbeat statements at the driver level, on
// the connection of the ingest transaction (sql.Conn.Raw). database/sql
// converts the arguments of every call into a new []driver.NamedValue (a
// statement of 1,024 rows of 7 columns: 287 KB); here one slice is reused.
// That allocation, on the single writer goroutine, was two thirds of what
// the relay allocated per heartbeat, and during a GC mark phase the writer
// paid GC assists in proportion, stalling every queued heartbeat behind it
// (docs/benchmarks.md). Writer goroutine only.
type rawStmts struct {
	conn  any // the driver connection the statements belong to
	stmts map[string]driver.Stmt
	nv    []driver.NamedValue
}

// exec runs query (prepared once per driver connection, under key) in t
// with args, which must be driver values (nil, int64, float64, bool,
// string, []byte, time.Time), and returns the rows it changed.
func (r *rawStmts) exec(t *ingestTx, key, query string, args []any) (changed int64, err error) {
	err = t.conn.Raw(func(dc any) error {
		if dc != r.conn {
			r.close()
			r.conn = dc
		}
		st := r.stmts[key]
		if st == nil {
			c, ok := dc.(driver.Conn)
			if !ok {
				return fmt.Errorf("sqlite: driver connection %T cannot prepare", dc)
			}
			if st, err = c.Prepare(query); err != nil {
				return err
			}
			if r.stmts == nil {
				r.stmts = make(map[string]driver.Stmt)
			}
			r.stmts[key] = st
		}
		ex, ok := st.(driver.StmtExecContext)
		if !ok {
			return fmt.Errorf("sqlite: driver statement %T has no ExecContext", st)
		}
		nv := r.nv[:0]
		for i, a := range args {
			nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: a})
		}
		r.nv = nv
		// A context that cannot be cancelled: mattn/go-sqlite3 then runs
		// the statement without a watcher goroutine.
		res, err := ex.ExecContext(context.Background(), nv)
		clear(nv) // keep no argument alive until the next call
		if err != nil {
			return err
		}
		changed, err = res.RowsAffected()
		return err
	})
	return changed, err
}

// close finalizes the statements; the writer must be stopped or be the
// caller.
func (r *rawStmts) close() {
	for k, st := range r.stmts {
		st.Close()
		delete(r.stmts, k)
	}
	r.conn = nil
}

// txConn is the connection an ingest transaction runs on.
func txConn(ctx context.Context, db *sql.DB) (*sql.Conn, *sql.Tx, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, nil, err
	}
	tx, err := conn.BeginTx(ctx, nil)
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, tx, nil
}
