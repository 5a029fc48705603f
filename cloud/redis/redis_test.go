package redis_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/httprate"

	"github.com/fleet/fleet/cloud/redis"
	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/redistest"
)

// relay is one relay's limiter: an httprate.RateLimiter on its own
// Counter, as the API builds it.
type relay struct {
	c  *redis.Counter
	rl *httprate.RateLimiter
}

func newRelay(t *testing.T, url string, limit int, logs *logbuf.Buffer) relay {
	t.Helper()
	c, err := redis.New(redis.Options{URL: url, ProbeInterval: 50 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return relay{c: c, rl: httprate.NewRateLimiter(limit, time.Minute, httprate.WithLimitCounter(c))}
}

// spend makes n requests of bucket and returns how many were allowed.
func (r relay) spend(bucket string, n int) int {
	ok := 0
	for range n {
		w := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		if !r.rl.OnLimit(w, req, bucket) {
			ok++
		}
	}
	return ok
}

// TestSharedBudget: three relays on one Redis share one budget per key.
func TestSharedBudget(t *testing.T) {
	srv := redistest.Start(t)
	logs := &logbuf.Buffer{}
	var relays []relay
	for range 3 {
		relays = append(relays, newRelay(t, srv.URL(), 30, logs))
	}
	allowed := 0
	for i := range 30 { // 60 requests spread over the three relays
		allowed += relays[i%3].spend("k:key1", 2)
	}
	if allowed != 30 {
		t.Fatalf("%d of 60 requests allowed across three relays, want the budget of 30", allowed)
	}
	// Another key has a budget of its own.
	if n := relays[0].spend("k:key2", 5); n != 5 {
		t.Fatalf("other key: %d of 5 allowed", n)
	}
	if strings.Contains(logs.String(), "unreachable") {
		t.Fatalf("fell back with Redis up: %s", logs)
	}
}

// TestRedisDownFailsOpenToLocalCounts: with Redis gone, every relay counts
// alone (so each enforces the whole budget by itself), requests are not
// refused for Redis's sake, and shared counting resumes when Redis is back.
func TestRedisDownFailsOpenToLocalCounts(t *testing.T) {
	srv := redistest.Start(t)
	logs := &logbuf.Buffer{}
	a, b := newRelay(t, srv.URL(), 10, logs), newRelay(t, srv.URL(), 10, logs)
	if n := a.spend("k:x", 4); n != 4 {
		t.Fatalf("allowed %d of 4", n)
	}
	srv.Stop()
	start := time.Now()
	// Each relay alone: a full budget of 10 each, then 429s.
	if n := a.spend("k:y", 15); n != 10 {
		t.Errorf("relay a with Redis down: %d of 15 allowed, want 10", n)
	}
	if n := b.spend("k:y", 15); n != 10 {
		t.Errorf("relay b with Redis down: %d of 15 allowed, want 10", n)
	}
	if a.c.Shared() || b.c.Shared() {
		t.Error("counter says shared while Redis is down")
	}
	// One round trip at most waited on the dead Redis per relay.
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("30 requests took %s with Redis down", d)
	}
	if !strings.Contains(logs.String(), "redis unreachable: rate limits counted by this relay alone") {
		t.Errorf("no log line for the fallback: %s", logs)
	}

	srv.Restart() // empty: no persistence
	deadline := time.Now().Add(5 * time.Second)
	for !(a.c.Shared() && b.c.Shared()) {
		if time.Now().After(deadline) {
			t.Fatal("counters did not go back to Redis")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(logs.String(), "redis reachable again") {
		t.Errorf("no log line for the return: %s", logs)
	}
	if n := a.spend("k:z", 6) + b.spend("k:z", 6); n != 10 {
		t.Errorf("after Redis came back: %d of 12 allowed across two relays, want 10", n)
	}
}

func TestBadURL(t *testing.T) {
	_, err := redis.New(redis.Options{URL: "http://user:hunter2@example.com"})
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Fatalf("bad URL: %v", err)
	}
}
