// Package freshread shares one read of a value among callers that arrive
// together, without ever handing a caller a read that started before it
// arrived.
//
// cloud/postgres reads its data version (cloud.Versioner) with it: a round
// trip to the server, once per API request on every relay, so that a key
// revoked through any relay is refused at the very next request. Sharing a
// read already under way (as golang.org/x/sync/singleflight does) would
// break that: its snapshot may predate the caller, and the revocation
// committed just before the caller's request. So a caller that finds a read
// under way waits for the next one, which starts once the one under way is
// done and serves everyone who arrived meanwhile. At most two reads are
// ever outstanding (one under way, one gathering callers), and with N
// requests in flight a relay sends about one read per round trip instead
// of N.
package freshread

import (
	"context"
	"runtime"
	"sync"
	"time"
)

// Reads shares reads of one value (see the package comment). Make it with
// New; it is safe for concurrent use.
type Reads struct {
	read    func(context.Context) (uint64, error)
	timeout time.Duration
	// yield lets the goroutines ready to run reach Do before a read with
	// none under way starts (nil: runtime.Gosched).
	yield func()

	mu      sync.Mutex
	running *readCall // the read under way, if any
	next    *readCall // callers gathered for the read after it, if any
}

// New returns the shared reads of read. Each read runs with a context of
// its own bounded by timeout: it is not cut short when the caller that
// started it goes away, since it serves the others too.
func New(read func(context.Context) (uint64, error), timeout time.Duration) *Reads {
	return &Reads{read: read, timeout: timeout}
}

type readCall struct {
	done    chan struct{}
	callers int // how many Do calls this read serves (under Reads.mu)
	v       uint64
	err     error
}

// Do returns the result of a read that started after Do was called, or
// ctx's error if ctx ends first (the read goes on for the others).
func (f *Reads) Do(ctx context.Context) (uint64, error) {
	f.mu.Lock()
	if c := f.next; c != nil {
		// The next read has not started (its leader starts it under mu, at
		// the moment it clears next): it starts after this call.
		c.callers++
		f.mu.Unlock()
		return c.wait(ctx)
	}
	// Gather the next read and lead it: once the read under way, begun
	// before this call, is done, or, with none under way, once the
	// goroutines ready to run have run (the other requests the same network
	// poll woke reach this point and join instead of each reading).
	c := &readCall{done: make(chan struct{}), callers: 1}
	f.next = c
	prev := f.running
	f.mu.Unlock()
	if prev != nil {
		<-prev.done
	} else if f.yield != nil {
		f.yield()
	} else {
		runtime.Gosched()
	}
	f.mu.Lock()
	f.next, f.running = nil, c
	f.mu.Unlock()
	f.run(ctx, c)
	return c.v, c.err
}

// run reads for c, whose callers may have contexts other than ctx: the read
// is not cut short by the leader's request ending, only by the timeout.
func (f *Reads) run(ctx context.Context, c *readCall) {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), f.timeout)
	c.v, c.err = f.read(rctx)
	cancel()
	f.mu.Lock()
	if f.running == c {
		f.running = nil
	}
	f.mu.Unlock()
	close(c.done)
}

// wait returns c's result, or ctx's error if ctx ends first.
func (c *readCall) wait(ctx context.Context) (uint64, error) {
	select {
	case <-c.done:
		return c.v, c.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}
