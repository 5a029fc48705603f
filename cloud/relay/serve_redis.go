package relay

import (
	"context"
	"flag"
	"net/http"

	"github.com/fleet/fleet/cloud/redis"
)

// redisExtension shares the API's rate-limit counters between relays
// through Redis with --redis URL. Without it each relay counts alone.
// Redis unreachable (at start or later) fails open to this relay's own
// counts; see cloud/redis and docs/cluster.md.
func redisExtension() extension {
	var url string
	return extension{
		name: "redis",
		flags: func(fs *flag.FlagSet) {
			fs.StringVar(&url, "redis", "", "redis://[:password@]host:port[/db] (or rediss://) sharing the API rate-limit counters between relays; empty: each relay counts alone (keep a password in FLEET_REDIS, not on the command line)")
		},
		start: func(ctx context.Context, m *Main, _ *http.ServeMux) (func(context.Context) error, error) {
			if url == "" {
				return nil, nil
			}
			log := m.Logger.With("component", "ratelimit")
			c, err := redis.New(redis.Options{URL: url, Logger: log})
			if err != nil {
				return nil, err
			}
			if c.Ping(ctx) == nil {
				log.Info("rate limits shared through redis")
			}
			m.rateCounter = c
			return func(context.Context) error { return c.Close() }, nil
		},
	}
}
