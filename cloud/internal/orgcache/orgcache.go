// Package orgcache keeps one value per organization for a while: what the
// relay reads from its store on every event of an organization (the alert
// engine's rules, the webhook sender's secrets) without a query each time.
// Time is the caller's clock, so tests can move it.
package orgcache

import (
	"context"
	"sync"
	"time"
)

// Cache holds what Load returned for each organization for TTL.
type Cache[V any] struct {
	TTL  time.Duration
	Now  func() time.Time
	Load func(ctx context.Context, orgID string) (V, error)

	mu sync.Mutex
	m  map[string]entry[V]
}

type entry[V any] struct {
	v  V
	at time.Time
}

// Get returns orgID's value: the cached one when younger than TTL, else a
// fresh Load (kept when it succeeds).
func (c *Cache[V]) Get(ctx context.Context, orgID string) (V, error) {
	now := c.Now()
	c.mu.Lock()
	e, ok := c.m[orgID]
	c.mu.Unlock()
	if ok && now.Sub(e.at) < c.TTL {
		return e.v, nil
	}
	v, err := c.Load(ctx, orgID)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	if c.m == nil {
		c.m = make(map[string]entry[V])
	}
	c.m[orgID] = entry[V]{v, now}
	c.mu.Unlock()
	return v, nil
}
