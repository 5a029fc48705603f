// Package rawstmt runs prepared statements at the driver level, on the
// connection of a database/sql transaction (sql.Conn.Raw), reusing one
// argument slice from one call to the next. database/sql converts the
// arguments of every call into a new []driver.NamedValue (a statement of
// 1,024 rows of 7 columns: 287 KB). That allocation, on cloud/sqlite's
// single writer goroutine, was two thirds of what the relay allocated per
// heartbeat, and during a GC mark phase the writer paid GC assists in
// proportion, stalling every queued heartbeat behind it
// (docs/benchmarks.md). The writer's heartbeat statements run through it.
package rawstmt

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"
)

// Stmts holds statements prepared on one driver connection, by key, and
// the argument slice they share. The zero value is ready to use; it is not
// safe for concurrent use (cloud/sqlite: the writer goroutine only).
type Stmts struct {
	conn  any // the driver connection the statements belong to
	stmts map[string]driver.Stmt
	nv    []driver.NamedValue
}

// Exec runs query on conn (prepared once per driver connection, under key:
// one key, one query) with args, which must be driver values (nil, int64,
// float64, bool, string, []byte, time.Time), and returns the rows it
// changed. conn is the connection of the caller's transaction (Begin), so
// the statement runs inside it. When conn's driver connection is not the
// one the statements were prepared on, they are closed and prepared again.
// No argument is kept once Exec returns.
func (r *Stmts) Exec(conn *sql.Conn, key, query string, args []any) (changed int64, err error) {
	return r.ExecEach(conn, key, query, args, len(args))
}

// ExecEach runs query as Exec does, once for every width arguments of args
// in turn (a row of its parameters after another: args holds a multiple of
// width), inside one call of conn's driver connection, and returns the
// rows the runs changed in all. It stops at the first error (the rows
// before it stay run: the caller's transaction decides).
func (r *Stmts) ExecEach(conn *sql.Conn, key, query string, args []any, width int) (changed int64, err error) {
	rows := 1 // a statement without parameters runs once
	switch {
	case width > 0 && len(args)%width == 0:
		rows = len(args) / width
	case width != 0 || len(args) != 0:
		return 0, fmt.Errorf("rawstmt: %d arguments are not rows of %d", len(args), width)
	}
	err = conn.Raw(func(dc any) error {
		if dc != r.conn {
			r.Close()
			r.conn = dc
		}
		st := r.stmts[key]
		if st == nil {
			c, ok := dc.(driver.Conn)
			if !ok {
				return fmt.Errorf("rawstmt: driver connection %T cannot prepare", dc)
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
			return fmt.Errorf("rawstmt: driver statement %T has no ExecContext", st)
		}
		defer clear(r.nv) // keep no argument alive until the next call
		for k := range rows {
			nv := r.nv[:0]
			for i, a := range args[k*width : (k+1)*width] {
				nv = append(nv, driver.NamedValue{Ordinal: i + 1, Value: a})
			}
			r.nv = nv
			// A context that cannot be cancelled: mattn/go-sqlite3 then
			// runs the statement without a watcher goroutine.
			res, err := ex.ExecContext(context.Background(), nv)
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			changed += n
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return changed, nil
}

// Close finalizes the statements; their driver connection must not be in
// use by anyone else (cloud/sqlite: the writer is stopped or is the
// caller). The Stmts remains usable: the next Exec prepares again.
func (r *Stmts) Close() {
	for k, st := range r.stmts {
		st.Close()
		delete(r.stmts, k)
	}
	r.conn = nil
}

// Begin starts a transaction on a connection of db taken for it alone, and
// returns both: Exec runs statements inside the transaction on that
// connection. Close the connection after the transaction ends.
func Begin(ctx context.Context, db *sql.DB) (*sql.Conn, *sql.Tx, error) {
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
