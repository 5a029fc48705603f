// Package ingestq is the queue in front of a store's ingest writer: many
// goroutines put jobs in; one writer goroutine takes them out in batches,
// every job queued while it was busy up to a bound, a small batch waiting
// a moment for more so that many jobs share one transaction. Both stores'
// agent endpoints write through one.
package ingestq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Queue holds the jobs waiting for the writer. Set Max, LingerBelow and
// Linger before Run.
type Queue[T any] struct {
	// Max bounds the jobs of one batch, and so the time its transaction
	// takes: a larger backlog goes in several batches.
	Max int
	// A batch smaller than LingerBelow waits up to Linger for more jobs.
	LingerBelow int
	Linger      time.Duration

	closed error
	jobs   chan T
	quit   chan struct{}
	done   chan struct{}
	once   sync.Once

	// While a batch lingers, need is how many queued jobs would make it
	// LingerBelow; the Put that queues the job reaching it sets need to 0
	// and sends on enough (it holds one signal, and the writer takes each
	// one before it sets need again). Zero: nothing lingers.
	need   atomic.Int64
	enough chan struct{}
}

// New returns a queue of up to size jobs (Put blocks beyond it); closed is
// the error of a Put after the writer stopped.
func New[T any](size int, closed error) *Queue[T] {
	return &Queue[T]{closed: closed, jobs: make(chan T, size), quit: make(chan struct{}), done: make(chan struct{}), enough: make(chan struct{}, 1)}
}

// Put queues j; it blocks only while the queue is full. After Close it
// fails with the queue's closed error (a job queued then would never run).
func (q *Queue[T]) Put(ctx context.Context, j T) error {
	select {
	case <-q.done:
		return q.closed
	default:
	}
	select {
	case q.jobs <- j:
		if n := q.need.Load(); n > 0 && int64(len(q.jobs)) >= n && q.need.CompareAndSwap(n, 0) {
			q.enough <- struct{}{}
		}
		return nil
	case <-q.done:
		return q.closed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// PutWait queues j and waits for its outcome on done, which the writer
// sends once it ran j (or failed its batch). Once queued, j is waited for
// even when ctx ends: the writer runs or fails every job it took, and j may
// write to the caller's variables. After Close, a job that got no outcome
// fails with the queue's closed error.
func (q *Queue[T]) PutWait(ctx context.Context, j T, done <-chan error) error {
	if err := q.Put(ctx, j); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-q.done:
		select {
		case err := <-done:
			return err
		default:
			return q.closed
		}
	}
}

// Size is how many jobs the queue holds.
func (q *Queue[T]) Size() int { return cap(q.jobs) }

// Done is closed when Run has returned: no job is taken any more.
func (q *Queue[T]) Done() <-chan struct{} { return q.done }

// Run calls run with each batch (in batch's memory, reused) until Close,
// then once more with what was queued before the close (up to Max jobs),
// and closes Done. It is the writer goroutine.
func (q *Queue[T]) Run(batch []T, run func([]T)) {
	defer close(q.done)
	for {
		batch = batch[:0]
		select {
		case j := <-q.jobs:
			batch = append(batch, j)
		case <-q.quit:
			// Finish what was queued before the close.
		drain:
			for len(batch) < q.Max {
				select {
				case j := <-q.jobs:
					batch = append(batch, j)
				default:
					break drain
				}
			}
			if len(batch) > 0 {
				run(batch)
			}
			return
		}
		batch = q.fill(batch)
		run(batch)
	}
}

// fill takes what is queued; a batch smaller than LingerBelow waits up to
// Linger for more. It waits for enough of them, not for each: the writer
// is woken once when the queue holds what the batch lacks (or when Linger
// ends), not by every job put meanwhile. (Woken job by job, the SQLite
// writer, whose goroutine is locked to its thread, parked and resumed
// about 15 times a transaction at 20,000 heartbeats/s, each time handing
// its thread's P over and back: four futex calls and two context
// switches; docs/benchmarks.md.)
func (q *Queue[T]) fill(batch []T) []T {
	var linger <-chan time.Time
	for {
		batch = q.take(batch)
		if len(batch) >= q.Max || len(batch) >= q.LingerBelow {
			return batch
		}
		if linger == nil {
			linger = time.After(q.Linger)
		}
		need := int64(min(q.LingerBelow-len(batch), cap(q.jobs)))
		q.need.Store(need)
		if int64(len(q.jobs)) >= need {
			// Queued before need was set, or a Put claimed the signal.
			q.stopLinger(need)
			continue
		}
		select {
		case <-q.enough:
			// The Put that sent it set need to 0.
		case <-linger:
			q.stopLinger(need)
			return q.take(batch)
		case <-q.quit:
			q.stopLinger(need)
			return q.take(batch)
		}
	}
}

// take appends the jobs queued now to batch, up to Max in all.
func (q *Queue[T]) take(batch []T) []T {
	for len(batch) < q.Max {
		select {
		case j := <-q.jobs:
			batch = append(batch, j)
		default:
			return batch
		}
	}
	return batch
}

// stopLinger clears need, the value the writer set; when a Put cleared it
// first, it takes the signal that Put sends.
func (q *Queue[T]) stopLinger(need int64) {
	if !q.need.CompareAndSwap(need, 0) {
		<-q.enough
	}
}

// Close stops Run after its last batch and waits for it.
func (q *Queue[T]) Close() {
	q.once.Do(func() { close(q.quit) })
	<-q.done
}
