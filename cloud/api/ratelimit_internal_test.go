package api

import (
	"testing"
	"time"

	"github.com/go-chi/httprate"
)

// TestRateLimiterSlidingWindow: a bucket gets its budget per window, a
// refused request is not counted, buckets are apart, and the previous
// window's count weighs by the share of it the sliding window still covers
// (httprate's arithmetic, on its counter).
func TestRateLimiterSlidingWindow(t *testing.T) {
	for _, shared := range []bool{false, true} {
		var counter httprate.LimitCounter
		if shared {
			counter = httprate.NewLocalLimitCounter(time.Minute) // as a shared counter is configured
		}
		l := newRateLimiter(4, time.Minute, counter)
		start := time.Now().Add(-l.offset).Truncate(time.Minute).Add(l.offset) // a window's first instant
		for i, want := range []rateCharge{{false, 3, 0}, {false, 2, 0}, {false, 1, 0}, {false, 0, 0}, {true, 0, 0}, {true, 0, 0}} {
			c, err := l.charge("k:a", start.Add(time.Second))
			if err != nil {
				t.Fatal(err)
			}
			if c.limited != want.limited || c.remaining != want.remaining || c.reset != start.Add(time.Minute).Unix() {
				t.Fatalf("shared %v, charge %d: %+v, want %+v and reset %d", shared, i+1, c, want, start.Add(time.Minute).Unix())
			}
		}
		if c, _ := l.charge("a:127.0.0.1", start.Add(time.Second)); c.limited || c.remaining != 3 {
			t.Fatalf("shared %v: another bucket: %+v", shared, c)
		}
		// A quarter into the next window, three quarters of the previous
		// window's 4 still count: 3 of 4, one request left.
		next := start.Add(time.Minute + 15*time.Second)
		if c, _ := l.charge("k:a", next); c.limited || c.remaining != 0 {
			t.Fatalf("shared %v: next window: %+v", shared, c)
		}
		if c, _ := l.charge("k:a", next); !c.limited {
			t.Fatalf("shared %v: next window, over budget: %+v", shared, c)
		}
	}
}
