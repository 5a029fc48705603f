package relay

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
)

// pinger is the store's cheap liveness check (a round trip to the
// database). /readyz asks it at most once per readinessTTL.
type pinger interface {
	Ping(ctx context.Context) error
}

// Phases of a relay process, as /readyz reports them.
const (
	phaseStarting int32 = iota // store opening, migrations running
	phaseServing
	phaseDraining // SIGTERM received
)

// Reasons /readyz gives with its 503.
var (
	errStarting    = errors.New("starting")
	errDraining    = errors.New("draining")
	errUnreachable = errors.New("store unreachable")
)

const (
	// readinessTTL is how long a store ping's answer is reused, so that
	// /readyz (no key, no rate limit) never costs more than one round
	// trip to the database a second.
	readinessTTL = time.Second
	// pingTimeout bounds one store ping.
	pingTimeout = 2 * time.Second
)

// readiness decides /readyz: ready while serving and the store answers.
type readiness struct {
	phase atomic.Int32
	log   *slog.Logger
	now   func() time.Time

	mu      sync.Mutex
	store   pinger
	checked time.Time
	err     error // last ping's outcome (nil or errUnreachable)
}

func newReadiness(log *slog.Logger) *readiness {
	return &readiness{log: log, now: time.Now}
}

// serving marks the relay ready for traffic once store answers pings.
func (r *readiness) serving(store pinger) {
	r.mu.Lock()
	r.store = store
	r.mu.Unlock()
	r.phase.CompareAndSwap(phaseStarting, phaseServing)
}

// drain turns readiness off for good. It reports whether the relay was
// serving (and so may have a load balancer to wait for).
func (r *readiness) drain() bool {
	return r.phase.Swap(phaseDraining) == phaseServing
}

// Ready returns nil when the relay should get traffic, or the reason it
// should not.
func (r *readiness) Ready(ctx context.Context) error {
	switch r.phase.Load() {
	case phaseStarting:
		return errStarting
	case phaseDraining:
		return errDraining
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.store == nil {
		return nil
	}
	if now := r.now(); now.Sub(r.checked) >= readinessTTL {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := r.store.Ping(pctx)
		cancel()
		if err != nil && ctx.Err() != nil {
			return errUnreachable // the asker gave up; nothing learned
		}
		r.checked = r.now()
		switch {
		case err != nil && r.err == nil:
			r.log.Warn("store unreachable: /readyz answers 503", "err", err)
			r.err = errUnreachable
		case err == nil && r.err != nil:
			r.log.Info("store reachable again: /readyz answers 200")
			r.err = nil
		}
	}
	return r.err
}

// startingHandler answers while the store opens: /healthz 200, /readyz and
// everything else 503.
func startingHandler(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/healthz":
		api.WriteHealth(w, nil)
	case "/readyz":
		api.WriteHealth(w, errStarting)
	default:
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":{"code":"service_unavailable","message":"relay starting; retry shortly"}}` + "\n"))
	}
}

// swapHandler serves through the handler stored last (startingHandler until
// the store is open, then the relay's mux).
type swapHandler struct{ h atomic.Pointer[http.Handler] }

func (s *swapHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}

// storePinger asks the store whether it can serve (cloud.Store.Ready: the
// database answers and holds every migration this relay knows).
func storePinger(s cloud.Store) pinger { return readyPing{s} }

// readyPing is the store's Ready as a pinger.
type readyPing struct{ s cloud.Store }

func (p readyPing) Ping(ctx context.Context) error { return p.s.Ready(ctx) }
