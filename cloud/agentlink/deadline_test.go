package agentlink

import (
	"context"
	"testing"
	"time"
)

// TestSharedDeadline: every context handed out has its deadline at least
// the timeout after it was asked for; those asked for within
// deadlineShare of the first are one context, and the next share is a new
// one; a context ends at its deadline, not before.
func TestSharedDeadline(t *testing.T) {
	// The clock starts at the real time: the contexts' timers are real.
	t0 := time.Now()
	now := t0
	s := sharedDeadline{d: time.Hour, now: func() time.Time { return now }}
	first := s.get()
	for _, step := range []time.Duration{0, deadlineShare / 2, deadlineShare - time.Nanosecond} {
		now = t0.Add(step)
		ctx := s.get()
		if ctx != first {
			t.Fatalf("at +%s: a new context within the share", step)
		}
		if dl, ok := ctx.Deadline(); !ok || dl.Before(now.Add(time.Hour)) {
			t.Fatalf("at +%s: deadline %v, want at least %v", step, dl, now.Add(time.Hour))
		}
	}
	now = t0.Add(deadlineShare)
	next := s.get()
	if next == first {
		t.Fatal("the same context after its share ended")
	}
	if dl, _ := next.Deadline(); dl.Before(now.Add(time.Hour)) {
		t.Fatalf("next share's deadline %v, want at least %v", dl, now.Add(time.Hour))
	}
	if first.Err() != nil {
		t.Fatalf("a shared context ended before its deadline: %v", first.Err())
	}

	// A real one ends by its deadline.
	short := sharedDeadline{d: 10 * time.Millisecond}
	ctx := short.get()
	<-ctx.Done()
	if ctx.Err() != context.DeadlineExceeded {
		t.Fatalf("err %v, want the deadline's", ctx.Err())
	}
}
