package relay

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// flakyCommands is a real command store whose AdvanceRollouts fails the
// first fail times, recording when each step came.
type flakyCommands struct {
	cloud.CommandStore
	mu    sync.Mutex
	fail  int
	steps []time.Time
}

func (f *flakyCommands) AdvanceRollouts(ctx context.Context, now time.Time) ([]string, error) {
	f.mu.Lock()
	f.steps = append(f.steps, time.Now())
	failing := len(f.steps) <= f.fail
	f.mu.Unlock()
	if failing {
		return nil, errors.New("database is locked")
	}
	return f.CommandStore.AdvanceRollouts(ctx, now)
}

func (f *flakyCommands) taken() []time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]time.Time(nil), f.steps...)
}

// TestRolloutEngineBacksOff: failed steps are logged and retried after a
// wait that doubles (2 s, 4 s, ... 30 s), never stopping the engine; the first
// step that succeeds says so and the pace is back to a step a second; the
// engine stops as soon as its context ends.
func TestRolloutEngineBacksOff(t *testing.T) {
	if got := []time.Duration{rolloutBackoff(1), rolloutBackoff(2), rolloutBackoff(3), rolloutBackoff(5), rolloutBackoff(60)}; got[0] != 2*time.Second ||
		got[1] != 4*time.Second || got[2] != 8*time.Second || got[3] != rolloutBackoffMax || got[4] != rolloutBackoffMax {
		t.Fatalf("backoff %v", got)
	}
	st, err := openStore(context.Background(), filepath.Join(t.TempDir(), "relay.db"), storeOptions{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	store := &flakyCommands{CommandStore: st.Commands, fail: 1}
	logs := &logbuf.Buffer{}
	var heard commandObserverList
	e := &rolloutEngine{store: store, observer: &heard, now: st.Now, log: slog.New(slog.NewJSONHandler(logs, nil)),
		leader: leaseHolder(st, "rollouts", rolloutLease, slog.New(slog.DiscardHandler))}
	stop := background(context.Background(), e.run)
	eventually(t, 15*time.Second, func() bool { return len(store.taken()) >= 3 })
	stopped := time.Now()
	stop(context.Background())
	if d := time.Since(stopped); d > time.Second {
		t.Errorf("the engine took %s to stop", d)
	}
	steps := store.taken()
	for i, min := range []time.Duration{2 * time.Second, time.Second} {
		if gap := steps[i+1].Sub(steps[i]); gap < min {
			t.Errorf("step %d came %s after step %d, want at least %s", i+2, gap, i+1, min)
		}
	}
	out := logs.String()
	if n := strings.Count(out, `"msg":"rollout step failed"`); n != 1 || !strings.Contains(out, `"retry_in":"2s"`) || !strings.Contains(out, "database is locked") {
		t.Errorf("%d failures logged:\n%s", n, out)
	}
	if !strings.Contains(out, `"msg":"rollout steps succeed again","after_failures":1`) {
		t.Errorf("no recovery logged:\n%s", out)
	}
}
