package freshread

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// stepReads is a read whose calls block until released, each answering
// its own number (1, 2, ...), so a caller's answer says which read it got.
type stepReads struct {
	mu      sync.Mutex
	n       int
	started chan int
	release chan struct{}
}

func newStepReads() *stepReads {
	return &stepReads{started: make(chan int, 16), release: make(chan struct{})}
}

func (s *stepReads) read(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	s.n++
	i := s.n
	s.mu.Unlock()
	s.started <- i
	select {
	case <-s.release:
		return uint64(i), nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (s *stepReads) reads() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

// waitFor polls cond (under f.mu) until it holds.
func waitFor(t *testing.T, f *Reads, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f.mu.Lock()
		ok := cond()
		f.mu.Unlock()
		if ok {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("timed out waiting until %s", what)
}

type answer struct {
	v   uint64
	err error
}

// A caller that arrives while a read is under way gets a later read, never
// that one (its snapshot may predate a revocation committed just before the
// caller's request), and the callers that arrive together share it.
func TestFreshReadNeverAnswersWithAnEarlierRead(t *testing.T) {
	s := newStepReads()
	f := New(s.read, time.Minute)
	ctx := context.Background()
	do := func() chan answer {
		c := make(chan answer, 1)
		go func() { v, err := f.Do(ctx); c <- answer{v, err} }()
		return c
	}

	a := do()
	if got := <-s.started; got != 1 {
		t.Fatalf("first read started as %d", got)
	}
	// Read 1 is under way; three more callers arrive.
	b, c, d := do(), do(), do()
	waitFor(t, f, "the three later callers wait for the next read", func() bool { return f.next != nil && f.next.callers == 3 })
	s.release <- struct{}{}
	if got := <-a; got.err != nil || got.v != 1 {
		t.Fatalf("first caller got %+v, want read 1", got)
	}
	if got := <-s.started; got != 2 {
		t.Fatalf("second read started as %d", got)
	}
	s.release <- struct{}{}
	for _, ch := range []chan answer{b, c, d} {
		if got := <-ch; got.err != nil || got.v != 2 {
			t.Fatalf("a caller that arrived during read 1 got %+v, want read 2", got)
		}
	}
	if n := s.reads(); n != 2 {
		t.Fatalf("%d reads for four callers, want 2", n)
	}

	// Nothing under way: the next caller starts a read of its own.
	e := do()
	if got := <-s.started; got != 3 {
		t.Fatalf("third read started as %d", got)
	}
	s.release <- struct{}{}
	if got := <-e; got.v != 3 {
		t.Fatalf("a lone caller got %+v, want read 3", got)
	}
}

// Callers ready to run together (requests one network poll woke) share one
// read that starts after the last of them arrived: with no read under way,
// the first to arrive lets the others run (here: waits until they have
// joined) before it reads.
func TestFreshReadGathersCallersReadyTogether(t *testing.T) {
	s := newStepReads()
	f := New(s.read, time.Minute)
	f.yield = func() {
		waitFor(t, f, "three more callers join the first one's read", func() bool { return f.next != nil && f.next.callers == 4 })
	}
	answers := make(chan answer, 4)
	for range 4 {
		go func() { v, err := f.Do(context.Background()); answers <- answer{v, err} }()
	}
	if got := <-s.started; got != 1 {
		t.Fatalf("first read started as %d", got)
	}
	close(s.release)
	for range 4 {
		if got := <-answers; got.err != nil || got.v != 1 {
			t.Fatalf("a caller got %+v, want read 1", got)
		}
	}
	if n := s.reads(); n != 1 {
		t.Fatalf("%d reads for four callers ready together, want 1", n)
	}
}

// Under concurrent callers, each answer is at least what the source held
// when its caller arrived.
func TestFreshReadConcurrentCallersSeeTheirArrival(t *testing.T) {
	var source atomic.Uint64
	f := New(func(context.Context) (uint64, error) {
		v := source.Load()
		time.Sleep(50 * time.Microsecond) // a round trip, during which commits go on
		return v, nil
	}, time.Minute)
	stop := make(chan struct{})
	var writer sync.WaitGroup
	writer.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				source.Add(1)
				time.Sleep(10 * time.Microsecond)
			}
		}
	})
	var callers sync.WaitGroup
	var stale atomic.Int64
	for range 16 {
		callers.Go(func() {
			for range 300 {
				before := source.Load()
				v, err := f.Do(context.Background())
				if err != nil || v < before {
					stale.Add(1)
				}
			}
		})
	}
	callers.Wait()
	close(stop)
	writer.Wait()
	if n := stale.Load(); n != 0 {
		t.Fatalf("%d of 4800 answers were older than their caller", n)
	}
}

// A read's error reaches every caller it serves; a caller whose request
// ends stops waiting without ending the read the others wait for.
func TestFreshReadErrorsAndCancel(t *testing.T) {
	s := newStepReads()
	f := New(s.read, time.Minute)
	first := make(chan answer, 1)
	go func() { v, err := f.Do(context.Background()); first <- answer{v, err} }()
	<-s.started

	ctx, cancel := context.WithCancel(context.Background())
	leader := make(chan answer, 1)
	go func() { v, err := f.Do(context.Background()); leader <- answer{v, err} }()
	waitFor(t, f, "a caller leads the next read", func() bool { return f.next != nil })
	gone := make(chan answer, 1)
	go func() { v, err := f.Do(ctx); gone <- answer{v, err} }()
	waitFor(t, f, "a second caller joins it", func() bool { return f.next != nil && f.next.callers == 2 })
	cancel()
	if got := <-gone; !errors.Is(got.err, context.Canceled) {
		t.Fatalf("a caller whose request ended got %+v, want context.Canceled", got)
	}
	s.release <- struct{}{}
	<-first
	<-s.started
	s.release <- struct{}{}
	if got := <-leader; got.err != nil || got.v != 2 {
		t.Fatalf("the next read's leader got %+v, want read 2", got)
	}

	boom := errors.New("server gone")
	f = New(func(context.Context) (uint64, error) { return 0, boom }, time.Minute)
	if _, err := f.Do(context.Background()); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the read's error", err)
	}
}
