package panel

import (
	"sync"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Throttle bounds failed sign-ins within Window (a sliding window): at most
// PerAccount failures for one account from one client address, PerAddress
// from one address whatever the account, and AccountCeiling for one account
// from all addresses together. An attempt is reserved before the password
// is checked, so concurrent attempts cannot run past a budget; one over a
// budget is refused (429) without being checked. An address from which the
// account signed in before (within KnownFor, in this relay's memory) is not
// held by AccountCeiling: people who guess from many addresses cannot lock
// the account's owner out of their usual place, and from one address they
// lock out only themselves.
type Throttle struct {
	PerAccount, PerAddress int
	// AccountCeiling: 0 means 20 × PerAccount.
	AccountCeiling int
	Window         time.Duration
}

// DefaultThrottle allows 5 failures per account and address, 20 per
// address and 100 per account in 15 minutes.
var DefaultThrottle = Throttle{PerAccount: 5, PerAddress: 20, AccountCeiling: 100, Window: 15 * time.Minute}

// KnownFor is how long an address where an account signed in stays exempt
// from the account's ceiling.
const KnownFor = 30 * 24 * time.Hour

// maxThrottled bounds the counters and the known addresses the throttle
// keeps (a flood of made-up emails or addresses evicts idle ones).
const maxThrottled = 100_000

// throttle counts sign-in attempts in flight and failures, per account and
// address, per address and per account, in this relay's memory. Checking a
// budget and reserving an attempt in it is one step under mu.
type throttle struct {
	cfg Throttle
	now cloud.Now

	mu     sync.Mutex
	counts map[string]*attempts
	known  map[string]time.Time // account|address → last sign-in
}

// attempts is one budget's sliding window: failures in the current fixed
// window and the one before (weighted by how much of it still overlaps),
// and the attempts reserved and not yet decided.
type attempts struct {
	start     time.Time
	prev, cur int
	inflight  int
}

func newThrottle(cfg Throttle, now cloud.Now) *throttle {
	d := DefaultThrottle
	if cfg.PerAccount <= 0 {
		cfg.PerAccount = d.PerAccount
	}
	if cfg.PerAddress <= 0 {
		cfg.PerAddress = d.PerAddress
	}
	if cfg.AccountCeiling <= 0 {
		cfg.AccountCeiling = 20 * cfg.PerAccount
	}
	if cfg.Window <= 0 {
		cfg.Window = d.Window
	}
	if now == nil {
		now = time.Now
	}
	return &throttle{cfg: cfg, now: now, counts: map[string]*attempts{}, known: map[string]time.Time{}}
}

// budget is one counter an attempt is charged to, and its limit.
type budget struct {
	key   string
	limit int
}

// reserve takes one attempt of account (a normalized email; "" when there
// is none) from addr out of every budget it is charged to, before the
// credential is checked. Over a budget it returns how long to wait and a
// nil done. Otherwise the caller checks the credential and calls done once:
// done(true) keeps the attempt as a failure, done(false) gives it back (the
// credential was right, or the check could not run). Sign-in's second step
// reserves the same way.
func (t *throttle) reserve(account, addr string) (done func(failed bool), wait time.Duration) {
	budgets := make([]budget, 0, 3)
	budgets = append(budgets, budget{"a:" + addr, t.cfg.PerAddress})
	pair := ""
	if account != "" {
		pair = account + "|" + addr
		budgets = append(budgets, budget{"p:" + pair, t.cfg.PerAccount})
	}
	now := t.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if account != "" {
		if last, ok := t.known[pair]; !ok || now.Sub(last) >= KnownFor {
			budgets = append(budgets, budget{"u:" + account, t.cfg.AccountCeiling})
		}
	}
	for _, b := range budgets {
		if c := t.counts[b.key]; c != nil && c.rate(now, t.cfg.Window)+float64(c.inflight)+1 > float64(b.limit) {
			return nil, t.cfg.Window
		}
	}
	held := make([]*attempts, len(budgets))
	for i, b := range budgets {
		c := t.counts[b.key]
		if c == nil {
			t.makeRoomLocked(now)
			c = &attempts{start: now.Truncate(t.cfg.Window)}
			t.counts[b.key] = c
		}
		c.inflight++
		held[i] = c
	}
	var once sync.Once
	return func(failed bool) {
		once.Do(func() {
			now := t.now()
			t.mu.Lock()
			defer t.mu.Unlock()
			for _, c := range held {
				c.inflight--
				if failed {
					c.rate(now, t.cfg.Window)
					c.cur++
				}
			}
			if !failed && pair != "" {
				if _, ok := t.known[pair]; !ok && len(t.known) >= maxThrottled {
					for victim := range t.known {
						delete(t.known, victim)
						break
					}
				}
				t.known[pair] = now
			}
		})
	}, 0
}

// makeRoomLocked drops idle counters when the map is full: those whose
// failures decayed, else any one not in flight. t.mu is held.
func (t *throttle) makeRoomLocked(now time.Time) {
	if len(t.counts) < maxThrottled {
		return
	}
	for k, c := range t.counts {
		if c.inflight == 0 && c.rate(now, t.cfg.Window) == 0 {
			delete(t.counts, k)
		}
	}
	for k, c := range t.counts {
		if len(t.counts) < maxThrottled {
			return
		}
		if c.inflight == 0 {
			delete(t.counts, k)
		}
	}
}

// rate returns the failures within the sliding window ending at now,
// moving the fixed windows forward first.
func (c *attempts) rate(now time.Time, w time.Duration) float64 {
	switch d := now.Sub(c.start); {
	case d >= 2*w:
		c.start, c.prev, c.cur = now.Truncate(w), 0, 0
	case d >= w:
		c.start, c.prev, c.cur = c.start.Add(w), c.cur, 0
	}
	left := w - now.Sub(c.start)
	left = min(max(left, 0), w)
	return float64(c.prev)*float64(left)/float64(w) + float64(c.cur)
}
