// Package refusallog logs refused requests (a bad token, a wrong key or
// password, a throttled client) without letting a flood fill the disk: per
// interval, each client address has at most one line of its own and at
// most MaxLines addresses do; the rest are counted, and the interval ends
// with one summary line stating the count, the addresses, the reasons and
// the busiest addresses. The agent endpoint, the public API and the panel's
// sign-in use it.
package refusallog

import (
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"time"
)

const (
	// MaxLines bounds the individual lines per interval.
	MaxLines = 10
	// maxAddrs bounds the addresses counted per interval (the rest are
	// counted in the total only).
	maxAddrs = 1024
)

// Log counts refusals and logs them in summary. Its interval ends when
// Flush is called, or by itself interval after its first refusal that was
// not logged on its own line (so a caller needs no ticker).
type Log struct {
	log        *slog.Logger
	line, summ string // messages of a refusal's own line and of the summary
	interval   time.Duration

	mu       sync.Mutex
	byAddr   map[string]int // refusals per address this interval
	byReason map[string]int
	total    int
	logged   int         // individual lines this interval
	timer    *time.Timer // ends the interval unless Flush does first
}

// New returns a Log writing to log: a refusal's own line with message line
// (attributes reason and remote), the summary with message summary.
// interval <= 0 means a minute.
func New(log *slog.Logger, line, summary string, interval time.Duration) *Log {
	if interval <= 0 {
		interval = time.Minute
	}
	return &Log{log: log, line: line, summ: summary, interval: interval, byAddr: map[string]int{}, byReason: map[string]int{}}
}

// Note counts one refusal of addr for reason, logging it on its own line
// while the interval has fewer than MaxLines such lines and the address
// had none yet.
func (l *Log) Note(addr, reason string) {
	l.mu.Lock()
	l.total++
	l.byReason[reason]++
	n, seen := l.byAddr[addr]
	if seen || len(l.byAddr) < maxAddrs {
		l.byAddr[addr] = n + 1
	}
	line := !seen && l.logged < MaxLines
	if line {
		l.logged++
	} else if l.timer == nil {
		l.timer = time.AfterFunc(l.interval, l.Flush)
	}
	l.mu.Unlock()
	if line {
		l.log.Warn(l.line, "reason", reason, "remote", addr)
	}
}

// Flush ends the interval: it logs the summary when there were refusals
// beyond the individual lines, and starts a new interval.
func (l *Log) Flush() {
	l.mu.Lock()
	total, logged, byAddr, byReason := l.total, l.logged, l.byAddr, l.byReason
	l.total, l.logged, l.byAddr, l.byReason = 0, 0, map[string]int{}, map[string]int{}
	if l.timer != nil {
		l.timer.Stop()
		l.timer = nil
	}
	l.mu.Unlock()
	if total == 0 || total == logged {
		return
	}
	type ac struct {
		addr string
		n    int
	}
	top := make([]ac, 0, len(byAddr))
	for a, n := range byAddr {
		top = append(top, ac{a, n})
	}
	sort.Slice(top, func(i, j int) bool { return top[i].n > top[j].n || top[i].n == top[j].n && top[i].addr < top[j].addr })
	reasons := make([]string, 0, len(byReason))
	for r := range byReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	attrs := []any{"count", total, "addresses", len(byAddr), "interval", l.interval.String()}
	for _, r := range reasons {
		attrs = append(attrs, r, byReason[r])
	}
	for i, a := range top[:min(len(top), 5)] {
		attrs = append(attrs, "top"+strconv.Itoa(i+1), a.addr+"="+strconv.Itoa(a.n))
	}
	l.log.Warn(l.summ, attrs...)
}
