package agentlink

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"

	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// Quota bounds what one device may store (issue 30: one device token
// stored 50,000 samples and 9.3 MB of events in seconds). A records
// message beyond it is held, nothing else read from the connection, until
// the device's budget pays for it: the protocol's own backpressure (the
// relay handles a connection's messages one after another), so the agent's
// window fills and its records wait in its spool; nothing is refused or
// lost, and a backlog drains at the quota's pace. The budget is the
// device's across its connections (a reconnect does not refill it) and
// holds ten seconds of Items and one minute of Bytes.
type Quota struct {
	// Items is the metric samples, events and point samples (each one)
	// a device may store per second; 0: no bound.
	Items int
	// Bytes is the bytes of records messages a device may send per
	// minute; 0: no bound.
	Bytes int
}

// DefaultQuota is the relay's default quota (--device-ingest-limit,
// --device-ingest-bytes): forty times the points benchmark's agents (50
// samples a second), an agent at its fastest documented rates, and a
// reconnect's backlog drained in messages that never wait three seconds.
var DefaultQuota = Quota{Items: 2000, Bytes: 8 << 20}

// throttleEventEvery bounds the ingest.throttled events of a device.
const throttleEventEvery = time.Minute

// quotaBurstItems is how many seconds of Items a rested device may send at
// once.
const quotaBurstItems = 10

// budget is one device's budget: its token buckets and when it last got
// an ingest.throttled event.
type budget struct {
	items, bytes *rate.Limiter // nil: no bound
	lastEvent    atomic.Int64  // unix nanos
}

// rested reports whether b is full at now (it holds nothing to remember).
func (b *budget) rested(now time.Time) bool {
	full := func(l *rate.Limiter) bool { return l == nil || l.TokensAt(now) >= float64(l.Burst()) }
	return full(b.items) && full(b.bytes)
}

// reserve takes items and bytes from b and returns how long the message
// must wait for them. A message above a bucket's burst pays the whole
// burst.
func (b *budget) reserve(now time.Time, items, bytes int) time.Duration {
	var d time.Duration
	for _, c := range [...]struct {
		l *rate.Limiter
		n int
	}{{b.items, items}, {b.bytes, bytes}} {
		if c.l != nil && c.n > 0 {
			d = max(d, c.l.ReserveN(now, min(c.n, c.l.Burst())).DelayFrom(now))
		}
	}
	return d
}

// budgets are the devices' budgets, kept while a device has one to
// remember (swept once rested).
type budgets struct {
	q  Quota
	mu sync.Mutex
	m  map[string]*budget
}

func newBudgets(q Quota) *budgets { return &budgets{q: q, m: map[string]*budget{}} }

// of returns the budget of device id; nil without a quota.
func (bs *budgets) of(id string) *budget {
	if bs.q.Items <= 0 && bs.q.Bytes <= 0 {
		return nil
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	b := bs.m[id]
	if b == nil {
		b = &budget{}
		if bs.q.Items > 0 {
			b.items = rate.NewLimiter(rate.Limit(bs.q.Items), bs.q.Items*quotaBurstItems)
		}
		if bs.q.Bytes > 0 {
			b.bytes = rate.NewLimiter(rate.Limit(float64(bs.q.Bytes)/60), max(bs.q.Bytes, protocol.MaxMessageBytes))
		}
		bs.m[id] = b
	}
	return b
}

// sweep forgets the budgets that are full again.
func (bs *budgets) sweep(now time.Time) {
	bs.mu.Lock()
	defer bs.mu.Unlock()
	for id, b := range bs.m {
		if b.rested(now) {
			delete(bs.m, id)
		}
	}
}

// recordItems is what a records message costs in Quota.Items.
func recordItems(items []protocol.Record) int {
	n := 0
	for i := range items {
		if p := items[i].Points; p != nil {
			n += len(p.Samples)
		} else {
			n++
		}
	}
	return n
}

// pace holds a records message of size bytes until the device's budget
// pays for it, and returns the relay's ingest.throttled event to store with
// it (at most one a minute), or nil. It returns early when the connection
// is being closed.
func (c *conn) pace(items []protocol.Record, size int) *protocol.Event {
	b := c.budget
	if b == nil {
		return nil
	}
	now := time.Now()
	wait := b.reserve(now, recordItems(items), size)
	if wait <= 0 {
		return nil
	}
	c.srv.stats.throttled.Add(1)
	// The time the relay holds the connection is not the agent's silence:
	// no ping while it waits, and the three heartbeat intervals of the
	// sweeper's OFFLINE check start again from the end of the wait.
	c.lastMsg.Store(now.Add(wait).UnixNano())
	c.lastBeat.Add(int64(wait))
	t := time.NewTimer(wait)
	select {
	case <-t.C:
	case <-c.quit:
		t.Stop()
	}
	last := b.lastEvent.Load()
	if now.UnixNano()-last < int64(throttleEventEvery) || !b.lastEvent.CompareAndSwap(last, now.UnixNano()) {
		return nil
	}
	q := c.srv.cfg.Quota
	msg := fmt.Sprintf("records arrive faster than this device's ingest quota (%d items a second, %d bytes a minute): the relay stores them at that pace, and the agent keeps the rest in its spool", q.Items, q.Bytes)
	c.log().Warn("device ingest throttled", "itemsPerSecond", q.Items, "bytesPerMinute", q.Bytes, "wait", wait.Round(time.Millisecond))
	ev := NewEvent(protocol.EventIngestThrottled, resource.SeverityWarning, msg,
		map[string]any{"itemsPerSecond": q.Items, "bytesPerMinute": q.Bytes, "waitMs": wait.Milliseconds()}, c.srv.now())
	return &protocol.Event{ID: ev.ID, Type: ev.Type, Severity: ev.Severity, Message: ev.Message, Data: ev.Data, CreatedAt: ev.CreatedAt}
}
