package agentlink

import (
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/go-chi/httprate"

	"github.com/fleet/fleet/cloud"
)

// Refusals of the agent endpoint (a missing, unknown or revoked token) are
// counted per client address (IPv6 by /64): an address over its budget is
// answered 429 without its token being looked up, and the log holds one
// line per address and interval at most (the first few addresses by name,
// then one summary line per interval with the counts), so that a flood of
// bad tokens neither fills the disk with log lines nor costs a store
// lookup each.
type refusals struct {
	limit    int
	window   time.Duration
	interval time.Duration
	limiter  *httprate.RateLimiter
	log      *slog.Logger

	mu       sync.Mutex
	byAddr   map[string]int // refusals per address this interval
	byReason map[string]int
	total    int
	logged   int // individual lines this interval
}

// Refusal reasons, as the summary line names them.
const (
	refusedNoToken   = "missing_token"
	refusedBadToken  = "unknown_or_revoked_token"
	refusedOverLimit = "over_limit"
)

const (
	// maxRefusalLines bounds the individual refusal log lines per interval.
	maxRefusalLines = 10
	// maxRefusalAddrs bounds the addresses counted per interval (the rest
	// are counted in the total only).
	maxRefusalAddrs = 1024
)

func newRefusals(limit int, window, interval time.Duration, log *slog.Logger) *refusals {
	return &refusals{
		limit: limit, window: window, interval: interval, log: log,
		limiter: httprate.NewRateLimiter(limit, window),
		byAddr:  map[string]int{}, byReason: map[string]int{},
	}
}

// exhausted reports whether addr used up its refusals in the window.
func (f *refusals) exhausted(addr string) bool {
	_, rate, err := f.limiter.Status(addr)
	return err == nil && rate >= float64(f.limit)
}

// refuse answers a refused upgrade (401, or 429 once addr is over its
// budget) and counts it.
func (f *refusals) refuse(w http.ResponseWriter, r *http.Request, addr, reason, msg string) {
	f.note(addr, reason)
	if f.limiter.OnLimit(w, r, addr) {
		f.tooMany(w, r, addr)
		return
	}
	writeError(w, http.StatusUnauthorized, cloud.EUNAUTHORIZED, msg)
}

// tooMany answers an address over its budget.
func (f *refusals) tooMany(w http.ResponseWriter, _ *http.Request, addr string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(f.window/time.Second)))
	writeError(w, http.StatusTooManyRequests, "rate_limited",
		"too many refused connections from this address; retry after "+strconv.Itoa(int(f.window/time.Second))+" seconds")
}

// note counts one refusal, logging it by itself while the interval has
// fewer than maxRefusalLines such lines and the address had none yet.
func (f *refusals) note(addr, reason string) {
	f.mu.Lock()
	f.total++
	f.byReason[reason]++
	n, seen := f.byAddr[addr]
	if seen || len(f.byAddr) < maxRefusalAddrs {
		f.byAddr[addr] = n + 1
	}
	line := !seen && f.logged < maxRefusalLines
	if line {
		f.logged++
	}
	f.mu.Unlock()
	if line {
		f.log.Warn("agent refused", "reason", reason, "remote", addr)
	}
}

// flush logs the interval's summary when there were refusals beyond the
// individual lines, and starts a new interval.
func (f *refusals) flush() {
	f.mu.Lock()
	total, logged, byAddr, byReason := f.total, f.logged, f.byAddr, f.byReason
	f.total, f.logged, f.byAddr, f.byReason = 0, 0, map[string]int{}, map[string]int{}
	f.mu.Unlock()
	if total == 0 || total == logged {
		return
	}
	type ac struct {
		addr string
		n    int
	}
	var top []ac
	for a, n := range byAddr {
		top = append(top, ac{a, n})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n || top[i].n == top[j].n && top[i].addr < top[j].addr })
	attrs := []any{"count", total, "addresses", len(byAddr), "interval", f.interval.String()}
	for _, reason := range []string{refusedNoToken, refusedBadToken, refusedBadClaim, refusedOverLimit} {
		if n := byReason[reason]; n > 0 {
			attrs = append(attrs, reason, n)
		}
	}
	for i, a := range top[:min(len(top), 5)] {
		attrs = append(attrs, "top"+strconv.Itoa(i+1), a.addr+"="+strconv.Itoa(a.n))
	}
	f.log.Warn("agent refusals", attrs...)
}
