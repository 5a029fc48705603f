package relay

import (
	"context"
	"log/slog"
	"net/http"
	"time"

	"github.com/fleet/fleet/cloud"
)

// The rollout engine's pace: a step every rolloutStep while this relay
// holds the "rollouts" lease (renewed for rolloutLease, so that another
// relay of a cluster takes over within rolloutLease of the holder's
// death); after a failed step the next waits twice as long as the last, up
// to rolloutBackoffMax; a step is bounded by rolloutStepTimeout.
const (
	rolloutStep        = time.Second
	rolloutLease       = 15 * time.Second
	rolloutBackoffMax  = 30 * time.Second
	rolloutStepTimeout = 30 * time.Second
)

// startRollouts runs the rollout engine (DESIGN.md "Agent updates with
// staged rollout and automatic rollback"): every second, on one relay of a
// cluster at a time (the "rollouts" lease), one step of
// cloud.CommandStore.AdvanceRollouts, which fails devices that took too
// long, stops rollouts past maxFailures and starts next waves; the devices
// it gave commands are told to Main.CommandObservers (the agent endpoint,
// which sends them to the agents it holds; on a cluster the store's
// configuration notification reaches the other relays' endpoints). Every
// state lives in the store: a relay that dies mid-rollout loses nothing,
// and the next lease holder goes on. It starts after the agent endpoint, so
// that it stops before it.
func (m *Main) startRollouts(ctx context.Context, _ *http.ServeMux) (func(context.Context) error, error) {
	log := m.Logger.With("component", "rollouts")
	e := &rolloutEngine{store: m.DB.Commands, observer: &m.CommandObservers, now: m.DB.Now, log: log,
		leader: leaseHolder(m.DB, "rollouts", rolloutLease, log)}
	return background(ctx, e.run), nil
}

// rolloutEngine steps the rollouts of every organization.
type rolloutEngine struct {
	store    cloud.CommandStore
	observer cloud.CommandsObserver
	leader   func(ctx context.Context) bool
	now      cloud.Now
	log      *slog.Logger
}

// run steps at once, then every rolloutStep until ctx ends; failed steps
// are logged and retried after a growing wait (rolloutBackoff), never
// fatal.
func (e *rolloutEngine) run(ctx context.Context) {
	t := time.NewTimer(0)
	defer t.Stop()
	failures := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := e.step(ctx)
		switch {
		case ctx.Err() != nil:
			return
		case err != nil:
			failures++
			wait := rolloutBackoff(failures)
			e.log.Error("rollout step failed", "err", err, "failures", failures, "retry_in", wait.String())
			t.Reset(wait)
			continue
		case failures > 0:
			e.log.Info("rollout steps succeed again", "after_failures", failures)
			failures = 0
		}
		t.Reset(rolloutStep)
	}
}

// rolloutBackoff is the wait after failures failed steps in a row:
// rolloutStep doubled each time, at most rolloutBackoffMax.
func rolloutBackoff(failures int) time.Duration {
	return min(rolloutStep<<min(failures, 16), rolloutBackoffMax)
}

// step is one step of the engine while this relay holds the lease: the
// devices given commands are told to the observer, also when the step
// failed after giving some.
func (e *rolloutEngine) step(ctx context.Context) error {
	if !e.leader(ctx) {
		return nil
	}
	sctx, cancel := context.WithTimeout(ctx, rolloutStepTimeout)
	defer cancel()
	ids, err := e.store.AdvanceRollouts(sctx, e.now())
	for _, id := range ids {
		e.observer.CommandsChanged(id)
	}
	return err
}
