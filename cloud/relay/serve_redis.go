package relay

import (
	"context"
	"net/http"

	"github.com/fleet/fleet/cloud/redis"
)

// startRateLimits shares the API's rate-limit counters between relays
// through Redis with --redis URL. Without it each relay counts alone.
// Redis unreachable (at start or later) fails open to this relay's own
// counts; see cloud/redis and docs/cluster.md.
func (m *Main) startRateLimits(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	if m.Config.Redis == "" {
		return nil, nil
	}
	log := m.Logger.With("component", "ratelimit")
	c, err := redis.New(redis.Options{URL: m.Config.Redis, Logger: log})
	if err != nil {
		return nil, err
	}
	if c.Ping(ctx) == nil {
		log.Info("rate limits shared through redis")
	}
	m.rateCounter = c
	return func(context.Context) error { return c.Close() }, nil
}
