// Package redis shares the public API's rate-limit counters between the
// relays of a cluster through Redis (github.com/redis/go-redis/v9): it is
// an httprate.LimitCounter, so that a key's budget is one budget whichever
// relay its requests reach.
//
// Redis unreachable is a deliberate choice: fail open to a local limiter.
// The counter then counts in the relay's memory (each relay enforces the
// budget alone, as without --redis), logs the change once, probes Redis in
// the background every ProbeInterval, and goes back to the shared counts
// when Redis answers again. No request waits on a Redis that is down for
// more than one OpTimeout: the request that finds it down falls back at
// once, and the next ones never ask it until the probe succeeds.
package redis

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-chi/httprate"
	goredis "github.com/redis/go-redis/v9"
)

// Defaults of Options.
const (
	DefaultOpTimeout     = 250 * time.Millisecond
	DefaultProbeInterval = time.Second
	// KeyPrefix begins every key the counter writes.
	KeyPrefix = "fleet:ratelimit:"
)

// Options configures a Counter.
type Options struct {
	// URL is redis://[user:password@]host:port[/db] or rediss:// (TLS);
	// any option go-redis's ParseURL accepts works (dial_timeout, ...).
	URL string
	// OpTimeout bounds each Redis round trip (default 250ms); past it the
	// request is counted locally.
	OpTimeout time.Duration
	// ProbeInterval is how often a down Redis is tried again (default 1s).
	ProbeInterval time.Duration
	Logger        *slog.Logger
}

// Counter is an httprate.LimitCounter on Redis with a local fallback.
type Counter struct {
	opts   Options
	client *goredis.Client
	log    *slog.Logger

	window time.Duration
	ttl    time.Duration
	local  httprate.LimitCounter

	down    atomic.Bool
	probing atomic.Bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

var _ httprate.LimitCounter = (*Counter)(nil)

// New returns a Counter for opts.URL. It does not contact Redis: an
// unreachable Redis at start is the same fallback as later.
func New(opts Options) (*Counter, error) {
	if err := CheckURL(opts.URL); err != nil {
		return nil, err
	}
	o, _ := goredis.ParseURL(opts.URL)
	if opts.OpTimeout <= 0 {
		opts.OpTimeout = DefaultOpTimeout
	}
	if opts.ProbeInterval <= 0 {
		opts.ProbeInterval = DefaultProbeInterval
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DialTimeout <= 0 || o.DialTimeout > opts.OpTimeout {
		o.DialTimeout = opts.OpTimeout
	}
	o.ReadTimeout, o.WriteTimeout = opts.OpTimeout, opts.OpTimeout
	o.MaxRetries = -1 // a failed round trip falls back at once
	ctx, cancel := context.WithCancel(context.Background())
	return &Counter{
		opts: opts, client: goredis.NewClient(o), log: opts.Logger,
		ctx: ctx, cancel: cancel,
	}, nil
}

// CheckURL returns an error when url is not a Redis URL that New accepts;
// the error does not echo the URL (and so a password).
func CheckURL(url string) error {
	if _, err := goredis.ParseURL(url); err != nil {
		return fmt.Errorf("redis URL: %w", errors.New(redactURLError(err)))
	}
	return nil
}

// redactURLError keeps a URL parse error from echoing the URL (and so a
// password) back.
func redactURLError(error) string {
	return "malformed (want redis://[user:password@]host:port[/db] or rediss://...)"
}

// Config implements httprate.LimitCounter.
func (c *Counter) Config(requestLimit int, windowLength time.Duration) {
	c.window = windowLength
	c.ttl = 3 * windowLength
	c.local = httprate.NewLocalLimitCounter(windowLength)
}

// Shared reports whether the counts are shared through Redis right now
// (false while Redis is unreachable and the relay counts alone).
func (c *Counter) Shared() bool { return !c.down.Load() }

func (c *Counter) key(key string, window time.Time) string {
	return KeyPrefix + key + ":" + strconv.FormatInt(window.Unix(), 10)
}

// Increment implements httprate.LimitCounter.
func (c *Counter) Increment(key string, currentWindow time.Time) error {
	return c.IncrementBy(key, currentWindow, 1)
}

// IncrementBy implements httprate.LimitCounter.
func (c *Counter) IncrementBy(key string, currentWindow time.Time, amount int) error {
	if !c.down.Load() {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.OpTimeout)
		defer cancel()
		k := c.key(key, currentWindow)
		_, err := c.client.Pipelined(ctx, func(p goredis.Pipeliner) error {
			p.IncrBy(ctx, k, int64(amount))
			p.Expire(ctx, k, c.ttl)
			return nil
		})
		if err == nil {
			return nil
		}
		c.fallBack(err)
	}
	return c.local.IncrementBy(key, currentWindow, amount)
}

// Get implements httprate.LimitCounter.
func (c *Counter) Get(key string, currentWindow, previousWindow time.Time) (int, int, error) {
	if !c.down.Load() {
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.OpTimeout)
		defer cancel()
		vals, err := c.client.MGet(ctx, c.key(key, currentWindow), c.key(key, previousWindow)).Result()
		if err == nil {
			return count(vals[0]), count(vals[1]), nil
		}
		c.fallBack(err)
	}
	return c.local.Get(key, currentWindow, previousWindow)
}

func count(v any) int {
	s, ok := v.(string)
	if !ok {
		return 0
	}
	n, _ := strconv.Atoi(s)
	return n
}

// fallBack switches to the local counts after a failed round trip and
// starts the probe that switches back.
func (c *Counter) fallBack(err error) {
	if c.ctx.Err() != nil || !c.down.CompareAndSwap(false, true) {
		return
	}
	c.log.Warn("redis unreachable: rate limits counted by this relay alone until it answers", "err", err)
	if !c.probing.CompareAndSwap(false, true) {
		return
	}
	c.wg.Add(1)
	go c.probe()
}

func (c *Counter) probe() {
	defer c.wg.Done()
	t := time.NewTicker(c.opts.ProbeInterval)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(c.ctx, c.opts.OpTimeout)
		err := c.client.Ping(ctx).Err()
		cancel()
		if err == nil {
			// probing first: a failure right after this starts a new probe.
			c.probing.Store(false)
			c.down.Store(false)
			c.log.Info("redis reachable again: rate limits shared across relays")
			return
		}
	}
}

// Ping checks Redis once (for a start-up log line).
func (c *Counter) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.OpTimeout)
	defer cancel()
	err := c.client.Ping(ctx).Err()
	if err != nil {
		c.fallBack(err)
	}
	return err
}

// Close stops the probe and closes the connections.
func (c *Counter) Close() error {
	c.cancel()
	c.wg.Wait()
	return c.client.Close()
}
