package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/fleet/fleet/cloud/internal/ingestq"
	"github.com/fleet/fleet/cloud/sqlite/rawstmt"
)

// ErrIngestClosed is returned by writes queued after the ingest writer
// stopped.
var ErrIngestClosed = errors.New("sqlite: ingest writer closed")

// maxJobsPerTx bounds the jobs one ingest transaction coalesces, and so
// the time a transaction takes: when a burst queued more (a reconnect
// storm, a stall), it goes in several transactions, each committing, and
// its jobs completing, before the next is taken. In steady state at 20,000
// heartbeats/s a transaction holds a few hundred; the bound matters when
// the writer catches up after a stall, and large transactions catch up
// fastest (heartbeats share pages): 4,096 took the initial backlog of a
// 20,000-agent run 39 s to drain where 16,000 took 2-8 s (runs minutes
// apart on a shared machine).
const maxJobsPerTx = 16000

// A batch smaller than lingerBelow waits up to lingerTime for more jobs,
// since every transaction writes each page it touched to the WAL once:
// many heartbeats per transaction share the pages of the device table.
const (
	lingerBelow = 512
	lingerTime  = 5 * time.Millisecond
)

// ingestWriter is the single goroutine that applies the agent endpoint's
// writes: it takes every job queued while the previous transaction ran and
// applies them in one transaction, each inside its own savepoint so that a
// failing job rolls back alone, then completes each job after the commit.
// Many connections' heartbeats thus share one commit.
type ingestWriter struct {
	db  *DB
	log *slog.Logger
	q   *ingestq.Queue[*ingestJob]
	// completions carries the callbacks of each committed transaction to
	// the completion goroutine, which runs them in order (complete).
	completions *ingestq.Completions[completion]
	// errs, hbs and hbErrs are the writer goroutine's buffers: with the
	// completions' reused slices they keep a transaction from allocating
	// per job.
	errs   []error
	hbs    []*ingestJob
	hbErrs []error

	// savepoint statements, prepared once
	spBegin, spRollback, spRelease *sql.Stmt

	// bulk applies the heartbeat jobs of a transaction, setting errs[i] for
	// jobs[i]; an error it returns fails the whole transaction.
	bulk func(t *ingestTx, jobs []*ingestJob, errs []error) error

	mu    sync.Mutex
	stats IngestStats
}

// IngestStats counts the ingest writer's work since start.
type IngestStats struct {
	Transactions int64
	Jobs         int64
	// MaxBatch is the largest number of jobs one transaction held.
	MaxBatch int
	// Busy is the time spent in transactions; Commit the part of it spent
	// committing.
	Busy, Commit time.Duration
}

type ingestJob struct {
	apply func(t *ingestTx) error
	// atomic jobs run inside a savepoint, so that a failure leaves nothing
	// of them; the others (heartbeats: idempotent state updates that the
	// next heartbeat rewrites) skip the two extra statements.
	atomic bool
	// At most one of done and after is set: done receives the outcome (the
	// caller waits); after is called with it on the completion goroutine
	// (the caller does not wait). A heartbeat has neither: its hbJob's done
	// is called on the completion goroutine.
	done  chan error
	after func(error)
	// hb, when set, makes this a heartbeat, applied in bulk with the
	// transaction's other heartbeats (after its other jobs) by the writer's
	// bulk function instead of apply.
	hb *hbJob
}

// ingestTx is one batch transaction with its prepared statements bound.
type ingestTx struct {
	ctx   context.Context
	tx    *sql.Tx
	conn  *sql.Conn // the connection tx runs on (rawstmt)
	bound map[*sql.Stmt]*sql.Stmt
	local map[string]*sql.Stmt // prepared for this transaction only
}

// prepare returns q prepared in this transaction (once per transaction).
func (t *ingestTx) prepare(q string) (*sql.Stmt, error) {
	if st, ok := t.local[q]; ok {
		return st, nil
	}
	st, err := t.tx.PrepareContext(t.ctx, q)
	if err != nil {
		return nil, err
	}
	if t.local == nil {
		t.local = make(map[string]*sql.Stmt)
	}
	t.local[q] = st
	return st, nil
}

func (t *ingestTx) stmt(s *sql.Stmt) *sql.Stmt {
	if b, ok := t.bound[s]; ok {
		return b
	}
	b := t.tx.Stmt(s)
	t.bound[s] = b
	return b
}

func newIngestWriter(db *DB, log *slog.Logger) (*ingestWriter, error) {
	var stmts [3]*sql.Stmt
	for i, q := range []string{"SAVEPOINT j", "ROLLBACK TO j", "RELEASE j"} {
		s, err := db.W.Prepare(q)
		if err != nil {
			return nil, fmt.Errorf("sqlite: prepare %q: %w", q, err)
		}
		stmts[i] = s
	}
	w := &ingestWriter{
		spBegin: stmts[0], spRollback: stmts[1], spRelease: stmts[2],
		db:  db,
		log: log,
		q:   ingestq.New[*ingestJob](16384, ErrIngestClosed),

		completions: ingestq.NewCompletions(complete),
	}
	w.q.Max, w.q.LingerBelow, w.q.Linger = maxJobsPerTx, lingerBelow, lingerTime
	go w.loop()
	return w, nil
}

// do queues apply (atomic: inside a savepoint) and waits until its
// transaction committed.
func (w *ingestWriter) do(ctx context.Context, atomic bool, apply func(t *ingestTx) error) error {
	j := &ingestJob{apply: apply, atomic: atomic, done: make(chan error, 1)}
	return w.q.PutWait(ctx, j, j.done)
}

// enqueue queues apply without waiting; after runs with the outcome on the
// completion goroutine once the transaction committed (or failed), in queue
// order. It blocks only while the queue is full.
func (w *ingestWriter) enqueue(ctx context.Context, j *ingestJob) error {
	return w.q.Put(ctx, j)
}

// completion is a job's outcome for the completion goroutine: its after
// callback or, for a heartbeat, its hbJob's done.
type completion struct {
	after func(error)
	hb    *hbJob
	err   error
}

// complete runs the callbacks of a committed transaction.
func complete(cs []completion) {
	for _, c := range cs {
		if c.hb != nil {
			c.hb.done(c.hb.out, c.err)
			c.hb.release()
		} else {
			c.after(c.err)
		}
	}
}

func (w *ingestWriter) close() {
	w.q.Close()
	w.completions.Close()
	w.spBegin.Close()
	w.spRollback.Close()
	w.spRelease.Close()
}

func (w *ingestWriter) loop() {
	if err := raiseWriterPriority(); errors.Is(err, os.ErrPermission) {
		// The expected case without CAP_SYS_NICE: not an error.
		w.log.Info("ingest writer runs at normal priority (a raised one needs CAP_SYS_NICE)")
	} else if err != nil {
		w.log.Info("ingest writer runs at normal priority", "err", err)
	}
	w.q.Run(make([]*ingestJob, 0, 256), w.run)
}

func (w *ingestWriter) run(batch []*ingestJob) {
	errs := w.errs[:0]
	for range batch {
		errs = append(errs, nil)
	}
	w.errs = errs
	defer clear(errs)
	start := time.Now()
	commit, err := w.runTx(batch, errs)
	busy := time.Since(start)
	cs := w.completions.Slice()
	for i, j := range batch {
		e := errs[i]
		if err != nil {
			e = err
		}
		switch {
		case j.after != nil:
			cs = append(cs, completion{after: j.after, err: e})
		case j.done == nil && j.hb != nil:
			cs = append(cs, completion{hb: j.hb, err: e})
		default:
			j.done <- e
		}
	}
	w.completions.Send(cs)
	w.mu.Lock()
	w.stats.Transactions++
	w.stats.Jobs += int64(len(batch))
	w.stats.Busy += busy
	w.stats.Commit += commit
	if len(batch) > w.stats.MaxBatch {
		w.stats.MaxBatch = len(batch)
	}
	w.mu.Unlock()
}

func (w *ingestWriter) runTx(batch []*ingestJob, errs []error) (time.Duration, error) {
	// No deadline: mattn/go-sqlite3 starts a watcher goroutine for every
	// statement run under a context that can be cancelled, which costs more
	// than the statement. A batch is bounded by maxJobsPerTx instead.
	ctx := context.Background()
	conn, tx, err := rawstmt.Begin(ctx, w.db.W)
	if err != nil {
		w.log.Error("ingest: begin", "err", err)
		return 0, fmt.Errorf("sqlite: ingest begin: %w", err)
	}
	defer conn.Close()
	defer tx.Rollback()
	t := &ingestTx{ctx: ctx, tx: tx, conn: conn, bound: make(map[*sql.Stmt]*sql.Stmt, 16)}
	hbs := w.hbs[:0]
	for i, j := range batch {
		if j.hb != nil {
			hbs = append(hbs, j)
			continue
		}
		if len(batch) == 1 || !j.atomic {
			errs[i] = j.apply(t)
			if errs[i] != nil && len(batch) == 1 {
				return 0, errs[i]
			}
			continue
		}
		if _, err := t.stmt(w.spBegin).ExecContext(ctx); err != nil {
			return 0, fmt.Errorf("sqlite: ingest savepoint: %w", err)
		}
		if errs[i] = j.apply(t); errs[i] != nil {
			if _, err := t.stmt(w.spRollback).ExecContext(ctx); err != nil {
				return 0, fmt.Errorf("sqlite: ingest rollback to savepoint: %w", err)
			}
		}
		if _, err := t.stmt(w.spRelease).ExecContext(ctx); err != nil {
			return 0, fmt.Errorf("sqlite: ingest release savepoint: %w", err)
		}
	}
	w.hbs = hbs
	defer clear(hbs)
	if len(hbs) > 0 {
		herrs := w.hbErrs[:0]
		for range hbs {
			herrs = append(herrs, nil)
		}
		w.hbErrs = herrs
		defer clear(herrs)
		if err := w.bulk(t, hbs, herrs); err != nil {
			return 0, err
		}
		k := 0
		for i, j := range batch {
			if j.hb != nil {
				errs[i] = herrs[k]
				k++
			}
		}
	}
	cstart := time.Now()
	if err := tx.Commit(); err != nil {
		w.log.Error("ingest: commit", "err", err, "jobs", len(batch))
		return 0, fmt.Errorf("sqlite: ingest commit: %w", err)
	}
	return time.Since(cstart), nil
}

func (w *ingestWriter) snapshot() IngestStats {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stats
}
