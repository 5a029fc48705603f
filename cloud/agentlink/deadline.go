package agentlink

import (
	"context"
	"sync"
	"time"
)

// deadlineShare is how long one shared deadline context is handed out:
// every write that starts within it gets the same context, whose deadline
// is its timeout after the share's end.
const deadlineShare = 100 * time.Millisecond

// sharedDeadline hands out contexts with a deadline at least d ahead,
// shared by the writes that start within deadlineShare of one another,
// instead of a context (and its timer) each.
//
// coder/websocket keeps the context of a connection's last write until the
// next one (and of its last read: the hello's read has none, a timer
// bounds it, conn.handshake): the context of the welcome's write, a timer
// context of about 0.2 KiB, stayed with every agent that sends heartbeats
// and is sent nothing more (docs/benchmarks.md, "Memory per idle agent").
// A shared one is kept once. The library still bounds every write by the
// context: when the deadline passes it closes the connections whose write
// is still under way, as with a context of their own; one that finished
// in time has let it go.
type sharedDeadline struct {
	d   time.Duration
	now func() time.Time // nil: time.Now

	mu  sync.Mutex
	end time.Time       // when cur stops being handed out
	cur context.Context // ends by its deadline; nothing cancels it
	// cancel is cur's: not called while cur may still be in use, which is
	// until its deadline, when the context ends by itself (its timer
	// released).
	cancel context.CancelFunc
}

// get returns a context whose deadline is at least the timeout ahead of now.
func (s *sharedDeadline) get() context.Context {
	now := time.Now()
	if s.now != nil {
		now = s.now()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cur == nil || !now.Before(s.end) {
		s.end = now.Add(deadlineShare)
		s.cur, s.cancel = context.WithDeadline(context.Background(), s.end.Add(s.d))
	}
	return s.cur
}
