package webhook

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/fleet/fleet/cloud"
)

// DefaultBackoff returns the retry schedule: the wait before retry 1, 2, ... 5
// (DefaultBackoffFlag).
func DefaultBackoff() []time.Duration {
	b, err := ParseBackoff(DefaultBackoffFlag)
	if err != nil {
		panic(err) // a constant, parsed by every test that sends
	}
	return b
}

// DefaultBackoffFlag is the default retry schedule as the --webhook-backoff
// flag spells it.
const DefaultBackoffFlag = "5s,30s,2m,10m,30m"

// MaxRetries bounds the retries of one delivery (attempts 1 to 6).
const MaxRetries = 5

// MaxRetryAfter caps how long a Retry-After header can push a retry.
const MaxRetryAfter = time.Hour

// DefaultTimeout bounds one attempt (connect, TLS, request and response).
const DefaultTimeout = 10 * time.Second

// Jitter is the relative jitter applied to every backoff step (±20 %).
const Jitter = 0.2

// ValidateURL checks a webhook URL's syntax: it is cloud.ValidateWebhookURL
// (absolute https with a host, no credentials, no fragment, bounded length),
// the one policy the API, the admin CLI and the sender share. The address it
// resolves to is checked only when dialling (ClientConfig.AllowPrivate).
func ValidateURL(field, raw string) error { return cloud.ValidateWebhookURL(field, raw) }

// ParseBackoff parses a retry schedule such as "5s,30s,2m,10m,30m": one to
// MaxRetries positive durations of at most an hour each, the wait before
// retry 1, 2, ...; the number of entries is the number of retries.
func ParseBackoff(s string) ([]time.Duration, error) {
	parts := strings.Split(s, ",")
	if len(parts) == 0 || len(parts) > MaxRetries || strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("webhook backoff %q: want 1 to %d comma-separated durations", s, MaxRetries)
	}
	out := make([]time.Duration, 0, len(parts))
	for _, p := range parts {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil {
			return nil, fmt.Errorf("webhook backoff %q: %w", s, err)
		}
		if d <= 0 || d > time.Hour {
			return nil, fmt.Errorf("webhook backoff %q: %s is not in (0, 1h]", s, d)
		}
		out = append(out, d)
	}
	return out, nil
}

// Retryable reports whether an HTTP status asks for a retry: any 5xx, 408,
// 425 and 429.
func Retryable(status int) bool {
	return status >= 500 && status <= 599 || status == http.StatusRequestTimeout ||
		status == http.StatusTooEarly || status == http.StatusTooManyRequests
}

// RetryAfter parses a Retry-After header (delay in seconds or an HTTP date)
// relative to now; ok is false when it is absent or malformed.
func RetryAfter(h string, now time.Time) (d time.Duration, ok bool) {
	h = strings.TrimSpace(h)
	if h == "" {
		return 0, false
	}
	if n, err := strconv.ParseInt(h, 10, 64); err == nil {
		if n < 0 {
			return 0, false
		}
		if n > int64(MaxRetryAfter/time.Second) {
			n = int64(MaxRetryAfter / time.Second)
		}
		return time.Duration(n) * time.Second, true
	}
	t, err := http.ParseTime(h)
	if err != nil {
		return 0, false
	}
	d = t.Sub(now)
	if d < 0 {
		d = 0
	}
	return d, true
}

// Delay returns the wait before the next attempt after attempt number
// attempt (1-based) failed transiently: schedule[attempt-1] with ±Jitter,
// or retryAfter when that is longer, capped at MaxRetryAfter. r in [0, 1)
// picks the jitter.
func Delay(schedule []time.Duration, attempt int, retryAfter time.Duration, r float64) time.Duration {
	i := attempt - 1
	if i >= len(schedule) {
		i = len(schedule) - 1
	}
	if i < 0 {
		i = 0
	}
	base := schedule[i]
	d := time.Duration(float64(base) * (1 - Jitter + 2*Jitter*r))
	if retryAfter > d {
		d = retryAfter
	}
	if d > MaxRetryAfter {
		d = MaxRetryAfter
	}
	return d
}

func jitterRand() float64 { return rand.Float64() }

// ErrAddressNotAllowed is returned when a webhook host resolves to an address
// the dial policy refuses (loopback, private, link-local, metadata ...).
var ErrAddressNotAllowed = errors.New("webhook: destination address not allowed")
