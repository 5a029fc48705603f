// Package ingestq is the queue in front of a store's ingest writer: many
// goroutines put jobs in; one writer goroutine takes them out in batches,
// every job queued while it was busy up to a bound, a small batch waiting
// a moment for more so that many jobs share one transaction. Both stores'
// agent endpoints write through one.
package ingestq

import (
	"context"
	"sync"
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
}

// New returns a queue of up to size jobs (Put blocks beyond it); closed is
// the error of a Put after the writer stopped.
func New[T any](size int, closed error) *Queue[T] {
	return &Queue[T]{closed: closed, jobs: make(chan T, size), quit: make(chan struct{}), done: make(chan struct{})}
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

// fill takes what is queued; a small batch waits up to Linger for more.
func (q *Queue[T]) fill(batch []T) []T {
	var linger <-chan time.Time
	for len(batch) < q.Max {
		select {
		case j := <-q.jobs:
			batch = append(batch, j)
			continue
		default:
		}
		if len(batch) >= q.LingerBelow {
			return batch
		}
		if linger == nil {
			linger = time.After(q.Linger)
		}
		select {
		case j := <-q.jobs:
			batch = append(batch, j)
		case <-linger:
			return batch
		case <-q.quit:
			return batch
		}
	}
	return batch
}

// Close stops Run after its last batch and waits for it.
func (q *Queue[T]) Close() {
	q.once.Do(func() { close(q.quit) })
	<-q.done
}
