// Package testwait is how tests wait for what the code under test does
// in its own goroutines or processes: they poll a condition (every 10ms
// unless told) and fail, saying what they waited for, when it does not
// come in time.
package testwait

import (
	"fmt"
	"testing"
	"time"
)

// poll is how often a condition is checked.
const poll = 10 * time.Millisecond

// For waits up to d for cond to hold, then fails tb with "timed out
// waiting for <what>".
func For(tb testing.TB, what string, d time.Duration, cond func() bool) {
	tb.Helper()
	Until(tb, d, func() string {
		if cond() {
			return ""
		}
		return "timed out waiting for " + what
	})
}

// Until retries f until it returns "" or d passes, then fails tb with f's
// last message (what is still wrong).
func Until(tb testing.TB, d time.Duration, f func() string) {
	tb.Helper()
	UntilEvery(tb, d, poll, f)
}

// Value polls get every interval until ok holds for what it returns, and
// returns that value; after d it fails tb with what it waited for and the
// last value.
func Value[T any](tb testing.TB, what string, d, every time.Duration, get func() T, ok func(T) bool) T {
	tb.Helper()
	var v T
	UntilEvery(tb, d, every, func() string {
		if v = get(); ok(v) {
			return ""
		}
		return fmt.Sprintf("timed out waiting for %s: %+v", what, v)
	})
	return v
}

// UntilEvery is Until calling f every interval: a harness whose f costs
// requests to real servers polls less often.
func UntilEvery(tb testing.TB, d, every time.Duration, f func() string) {
	tb.Helper()
	deadline := time.Now().Add(d)
	for {
		msg := f()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("after %s: %s", d, msg)
		}
		time.Sleep(every)
	}
}
