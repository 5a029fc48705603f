package postgres

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleet/fleet/cloud/internal/ingestq"
)

// ErrIngestClosed is returned by writes queued after the writer stopped.
var ErrIngestClosed = errors.New("postgres: ingest writer closed")

// The agent endpoint's writes go through one writer goroutine per relay
// process, as on SQLite: it takes every job queued while the previous
// transaction ran (up to maxJobsPerTx) and applies them in one transaction,
// each job inside a savepoint so that a failing one rolls back alone, the
// heartbeats of the batch together with one statement per table (bulk.go);
// then it completes each job. Many connections' heartbeats thus share one
// commit, and the writes of one connection keep their order.
const (
	maxJobsPerTx = 4000
	lingerBelow  = 256
	lingerTime   = 2 * time.Millisecond
)

type ingestJob struct {
	apply func(ctx context.Context, tx pgx.Tx) error
	// days are the partitions the job writes to (table -> Unix ms times),
	// made sure of before its transaction begins.
	metrics, events []int64
	done            chan error
	hb              *hbJob // a heartbeat: applied in bulk, completed through hb.done
	// rec, when set, lets the writer store the job with the other records
	// jobs of its transaction (applyRecords) rather than through apply.
	rec *recJob
}

type ingestWriter struct {
	db  *DB
	log *slog.Logger
	q   *ingestq.Queue[*ingestJob]
	// completions carries the heartbeats of each finished transaction to
	// the completion goroutine, which calls their callbacks in order
	// (complete).
	completions *ingestq.Completions[completion]
	// bulk applies the heartbeats of a transaction, setting errs[i] for
	// hbs[i]; an error it returns fails the whole transaction.
	bulk func(ctx context.Context, tx pgx.Tx, hbs []*hbJob, errs []error) error
}

type completion struct {
	hb  *hbJob
	err error
}

func newIngestWriter(db *DB, log *slog.Logger) *ingestWriter {
	w := &ingestWriter{db: db, log: log, q: ingestq.New[*ingestJob](16384, ErrIngestClosed),
		completions: ingestq.NewCompletions(complete)}
	w.q.Max, w.q.LingerBelow, w.q.Linger = maxJobsPerTx, lingerBelow, lingerTime
	go w.loop()
	return w
}

// do queues apply and waits until its transaction committed or failed.
func (w *ingestWriter) do(ctx context.Context, j *ingestJob) error {
	j.done = make(chan error, 1)
	return w.q.PutWait(ctx, j, j.done)
}

func (w *ingestWriter) enqueue(ctx context.Context, j *ingestJob) error {
	return w.q.Put(ctx, j)
}

// complete calls the heartbeats' callbacks of a finished transaction.
func complete(cs []completion) {
	for _, c := range cs {
		c.hb.done(c.hb.out, c.err)
	}
}

func (w *ingestWriter) close() {
	w.q.Close()
	w.completions.Close()
}

func (w *ingestWriter) loop() {
	w.q.Run(nil, w.run)
}

// run applies batch, trying the whole transaction again after a deadlock,
// a serialization failure or a partition another relay dropped meanwhile.
func (w *ingestWriter) run(batch []*ingestJob) {
	errs := make([]error, len(batch))
	var err error
	bulk := true // records jobs together (applyRecords), until that fails
	for try := 0; try < 3; try++ {
		clear(errs)
		if err = w.ensurePartitions(batch); err != nil {
			break
		}
		err = w.runTx(batch, errs, bulk)
		if bulk && errors.As(err, new(errRecordsBulk)) && !retryable(err) {
			bulk = false
			try--
			continue
		}
		if err == nil || !retryable(err) {
			break
		}
		if isNoPartition(err) {
			w.db.forgetPartitions("metrics")
			w.db.forgetPartitions("events")
		}
	}
	cs := w.completions.Slice()
	for i, j := range batch {
		e := errs[i]
		if err != nil {
			e = err
		}
		if j.hb != nil {
			cs = append(cs, completion{hb: j.hb, err: e})
		} else {
			j.done <- e
		}
	}
	w.completions.Send(cs)
}

// retryable errors are worth running the same transaction again for.
func retryable(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "40P01", "40001": // deadlock_detected, serialization_failure
			return true
		}
	}
	return isNoPartition(err)
}

func (w *ingestWriter) ensurePartitions(batch []*ingestJob) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var metrics, events []int64
	for _, j := range batch {
		metrics = append(metrics, j.metrics...)
		events = append(events, j.events...)
		if j.hb != nil && j.hb.in.Event != nil {
			events = append(events, j.hb.in.Event.CreatedAt.UnixMilli())
		}
		if j.hb != nil && j.hb.in.Status != j.hb.in.PrevStatus {
			events = append(events, j.hb.in.At.UnixMilli()) // its device.status_changed
		}
	}
	if err := w.db.ensureDays(ctx, "metrics", metrics...); err != nil {
		return err
	}
	return w.db.ensureDays(ctx, "events", events...)
}

// runTx applies batch in one transaction: with bulk, the records jobs
// first (applyRecords), then each other job in a savepoint of its own, then
// the heartbeats (w.bulk).
func (w *ingestWriter) runTx(batch []*ingestJob, errs []error, bulk bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tx, err := w.db.Pool.Begin(ctx)
	if err != nil {
		return storeError("postgres: ingest begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	var hbs []*hbJob
	var hbIdx []int
	if bulk {
		var recs []*recJob
		for _, j := range batch {
			if j.rec != nil {
				recs = append(recs, j.rec)
			}
		}
		if len(recs) > 0 {
			if err := applyRecords(ctx, tx, recs); err != nil {
				return err
			}
		}
	}
	for i, j := range batch {
		if j.hb != nil {
			hbs = append(hbs, j.hb)
			hbIdx = append(hbIdx, i)
			continue
		}
		if bulk && j.rec != nil {
			continue
		}
		if _, err := tx.Exec(ctx, "SAVEPOINT j"); err != nil {
			return storeError("postgres: ingest savepoint: %w", err)
		}
		if errs[i] = j.apply(ctx, tx); errs[i] != nil {
			if retryable(errs[i]) {
				return errs[i]
			}
			if _, err := tx.Exec(ctx, "ROLLBACK TO SAVEPOINT j"); err != nil {
				return storeError("postgres: ingest rollback to savepoint: %w", err)
			}
		}
		if _, err := tx.Exec(ctx, "RELEASE SAVEPOINT j"); err != nil {
			return storeError("postgres: ingest release savepoint: %w", err)
		}
	}
	if len(hbs) > 0 {
		herrs := make([]error, len(hbs))
		if err := w.bulk(ctx, tx, hbs, herrs); err != nil {
			return err
		}
		for k, i := range hbIdx {
			errs[i] = herrs[k]
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return storeError("postgres: ingest commit: %w", err)
	}
	return nil
}
