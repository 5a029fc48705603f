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
