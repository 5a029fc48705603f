package ingestq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

var errClosed = errors.New("closed")

// TestRunBatchesAndDrains queues more than a batch before the writer
// starts, then closes the queue: the jobs come out in order, in batches of
// at most Max, every one queued before the close is run, and a Put after
// it fails with the queue's error.
func TestRunBatchesAndDrains(t *testing.T) {
	q := New[int](100, errClosed)
	q.Max, q.LingerBelow, q.Linger = 8, 4, time.Millisecond
	ctx := context.Background()
	for i := range 20 {
		if err := q.Put(ctx, i); err != nil {
			t.Fatal(err)
		}
	}
	var got []int
	var sizes []int
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		q.Run(nil, func(b []int) {
			sizes = append(sizes, len(b))
			got = append(got, b...)
		})
	}()
	for len(q.jobs) > 0 {
		time.Sleep(time.Millisecond)
	}
	if err := q.Put(ctx, 20); err != nil {
		t.Fatal(err)
	}
	q.Close()
	<-ran
	if want := []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}; !slices.Equal(got, want) {
		t.Errorf("jobs run %v, want %v", got, want)
	}
	for _, n := range sizes {
		if n > q.Max {
			t.Errorf("a batch of %d jobs, more than Max %d (batches %v)", n, q.Max, sizes)
		}
	}
	if err := q.Put(ctx, 21); !errors.Is(err, errClosed) {
		t.Errorf("Put after Close: %v, want %v", err, errClosed)
	}
}

// TestFillLingers checks that a batch smaller than LingerBelow waits for
// jobs put meanwhile, so that they share it.
func TestFillLingers(t *testing.T) {
	q := New[int](10, errClosed)
	q.Max, q.LingerBelow, q.Linger = 8, 4, 10*time.Second
	batches := make(chan []int, 4)
	go q.Run(nil, func(b []int) { batches <- slices.Clone(b) })
	defer q.Close()
	ctx := context.Background()
	for i := range 4 {
		if err := q.Put(ctx, i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if b := <-batches; !slices.Equal(b, []int{0, 1, 2, 3}) {
		t.Errorf("first batch %v, want the 4 jobs put one by one while it lingered", b)
	}
}

// TestFillWakesWhenEnough: a lingering batch is run as soon as the queue
// holds what it lacks, not at the end of its (here very long) linger, and
// not before.
func TestFillWakesWhenEnough(t *testing.T) {
	q := New[int](100, errClosed)
	q.Max, q.LingerBelow, q.Linger = 64, 10, time.Hour
	batches := make(chan []int, 4)
	go q.Run(nil, func(b []int) { batches <- slices.Clone(b) })
	defer q.Close()
	ctx := context.Background()
	for i := range 9 {
		if err := q.Put(ctx, i); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case b := <-batches:
		t.Fatalf("batch %v run with 9 jobs queued, before LingerBelow (10) or the linger", b)
	case <-time.After(50 * time.Millisecond):
	}
	if err := q.Put(ctx, 9); err != nil {
		t.Fatal(err)
	}
	select {
	case b := <-batches:
		if !slices.Equal(b, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}) {
			t.Errorf("batch %v, want the 10 jobs", b)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no batch 10 s after the queue held LingerBelow jobs")
	}
}

// TestConcurrentPutsLingering: many goroutines put jobs while batches
// linger (each woken by the Put that makes it large enough, or by its
// linger's end): every job runs exactly once, no Put blocks on the
// writer's wake-up, and no batch exceeds Max.
func TestConcurrentPutsLingering(t *testing.T) {
	const putters, each = 8, 5000
	q := New[int](256, errClosed)
	q.Max, q.LingerBelow, q.Linger = 300, 40, 200*time.Microsecond
	seen := make([]int, putters*each)
	var over []int
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		q.Run(nil, func(b []int) {
			if len(b) > q.Max {
				over = append(over, len(b))
			}
			for _, j := range b {
				seen[j]++
			}
		})
	}()
	ctx := context.Background()
	errs := make(chan error, putters)
	for p := range putters {
		go func() {
			for i := range each {
				if err := q.Put(ctx, p*each+i); err != nil {
					errs <- err
					return
				}
				if i%97 == 0 {
					time.Sleep(50 * time.Microsecond)
				}
			}
			errs <- nil
		}()
	}
	for range putters {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	q.Close()
	<-ran
	for j, n := range seen {
		if n != 1 {
			t.Fatalf("job %d ran %d times, want once", j, n)
		}
	}
	if len(over) > 0 {
		t.Errorf("batches over Max (%d): %v", q.Max, over)
	}
}

// TestPutWait: the caller gets the outcome the writer sent for its job,
// and after Close the queue's closed error.
func TestPutWait(t *testing.T) {
	type job struct {
		n    int
		done chan error
	}
	q := New[job](4, errClosed)
	q.Max, q.LingerBelow, q.Linger = 4, 1, time.Millisecond
	go q.Run(nil, func(b []job) {
		for _, j := range b {
			if j.n%2 == 1 {
				j.done <- fmt.Errorf("job %d failed", j.n)
			} else {
				j.done <- nil
			}
		}
	})
	ctx := context.Background()
	for n := range 4 {
		j := job{n, make(chan error, 1)}
		err := q.PutWait(ctx, j, j.done)
		if (err != nil) != (n%2 == 1) {
			t.Errorf("job %d: %v", n, err)
		}
	}
	q.Close()
	j := job{4, make(chan error, 1)}
	if err := q.PutWait(ctx, j, j.done); !errors.Is(err, errClosed) {
		t.Errorf("after Close: %v, want %v", err, errClosed)
	}
}

// TestCompletions sends batches of outcomes: they are completed in the
// order sent, Close returns once all were, and an emptied slice comes back
// from Slice for the next batch.
func TestCompletions(t *testing.T) {
	var got []int
	c := NewCompletions(func(cs []int) { got = append(got, cs...) })
	for i := 0; i < 100; i += 10 {
		cs := c.Slice()
		for j := i; j < i+10; j++ {
			cs = append(cs, j)
		}
		c.Send(cs)
	}
	c.Send(nil)
	c.Close()
	want := make([]int, 100)
	for i := range want {
		want[i] = i
	}
	if !slices.Equal(got, want) {
		t.Errorf("completed %v, want %v", got, want)
	}
	if cs := c.Slice(); cs == nil || len(cs) != 0 || cap(cs) < 10 {
		t.Errorf("Slice after the batches: len %d cap %d, want an emptied slice of a batch", len(cs), cap(cs))
	}
}
