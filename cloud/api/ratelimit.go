package api

import (
	"math"
	"sync"
	"time"

	"github.com/go-chi/httprate"
)

// rateLimiter is the sliding-window limit of go-chi/httprate's
// RateLimiter.OnLimit, on the same httprate.LimitCounter (this process's
// counts, or shared ones such as cloud/redis), with the same windows and
// arithmetic, but answering its outcome instead of setting three response
// headers in Go's canonical spelling (each through Header.Set's key scan
// and two allocations) for the middleware to read back, parse and rename:
// rateLimit writes the headers once, in their documented spelling.
type rateLimiter struct {
	counter httprate.LimitCounter
	limit   int
	window  time.Duration
	// offset aligns this process's windows to its start, as httprate
	// does for its local counter (resets spread out instead of all
	// falling on the minute); shared counters stay on the wall clock.
	offset time.Duration
	mu     sync.Mutex // one charge at a time: read, then count (httprate's lock)
}

// newRateLimiter counts in counter, or in this process's memory when nil.
func newRateLimiter(limit int, window time.Duration, counter httprate.LimitCounter) *rateLimiter {
	l := &rateLimiter{counter: counter, limit: limit, window: window}
	if counter == nil {
		start := time.Now().UTC()
		l.offset = start.Sub(start.Truncate(window))
		l.counter = httprate.NewLocalLimitCounter(window)
	} else {
		counter.Config(limit, window)
	}
	return l
}

// rateCharge is one request charged to a bucket: whether it is over the
// budget, the requests left (0 when over) and when the current window
// ends (Unix seconds).
type rateCharge struct {
	limited   bool
	remaining int
	reset     int64
}

// charge counts one request against bucket at now, unless the bucket is
// over its budget (then it is refused and not counted).
func (l *rateLimiter) charge(bucket string, now time.Time) (rateCharge, error) {
	now = now.UTC()
	cur := now.Add(-l.offset).Truncate(l.window).Add(l.offset)
	c := rateCharge{reset: cur.Add(l.window).Unix()}
	l.mu.Lock()
	defer l.mu.Unlock()
	curCount, prevCount, err := l.counter.Get(bucket, cur, cur.Add(-l.window))
	if err != nil {
		return c, err
	}
	// The previous window's count weighs by the share of it the sliding
	// window still covers.
	rate := int(math.Round(float64(prevCount)*(float64(l.window)-float64(now.Sub(cur)))/float64(l.window) + float64(curCount)))
	if rate+1 > l.limit {
		c.limited = true
		c.remaining = max(0, l.limit-rate)
		return c, nil
	}
	if err := l.counter.IncrementBy(bucket, cur, 1); err != nil {
		return c, err
	}
	c.remaining = l.limit - rate - 1
	return c, nil
}
