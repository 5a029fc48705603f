package agentlink

import (
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/go-chi/httprate"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/refusallog"
)

// Refusals of the agent endpoint (a missing, unknown or revoked token) are
// counted per client address (IPv6 by /64): an address over its budget is
// answered 429 without its token being looked up, and the log holds one
// line per address and interval at most (the first few addresses by name,
// then one summary line per interval with the counts), so that a flood of
// bad tokens neither fills the disk with log lines nor costs a store
// lookup each.
type refusals struct {
	limit   int
	window  time.Duration
	limiter *httprate.RateLimiter
	lines   *refusallog.Log
}

// Refusal reasons, as the summary line names them.
const (
	refusedNoToken   = "missing_token"
	refusedBadToken  = "unknown_or_revoked_token"
	refusedOverLimit = "over_limit"
)

// maxRefusalLines bounds the individual refusal log lines per interval.
const maxRefusalLines = refusallog.MaxLines

func newRefusals(limit int, window, interval time.Duration, log *slog.Logger) *refusals {
	return &refusals{
		limit: limit, window: window,
		limiter: httprate.NewRateLimiter(limit, window),
		lines:   refusallog.New(log, "agent refused", "agent refusals", interval),
	}
}

// exhausted reports whether addr used up its refusals in the window.
func (f *refusals) exhausted(addr string) bool {
	_, rate, err := f.limiter.Status(addr)
	return err == nil && rate >= float64(f.limit)
}

// bearer returns r's bearer token, or "" when it answered r: 429 for an
// address over its budget (the token not looked at), 401 saying that what
// ("a device token") is required when r has none.
func (f *refusals) bearer(w http.ResponseWriter, r *http.Request, addr, what string) string {
	if f.exhausted(addr) {
		f.note(addr, refusedOverLimit)
		f.tooMany(w, r, addr)
		return ""
	}
	tok := bearer(r)
	if tok == "" {
		f.refuse(w, r, addr, refusedNoToken, what+" is required as a bearer token")
	}
	return tok
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

// note counts one refusal (refusallog: a line of its own for the first few
// addresses of an interval, then the summary).
func (f *refusals) note(addr, reason string) { f.lines.Note(addr, reason) }

// flush ends the log's interval, with its summary.
func (f *refusals) flush() { f.lines.Flush() }
