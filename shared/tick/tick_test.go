package tick_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/tick"
)

func TestEveryCallsUntilContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := 0
	tick.Every(ctx, time.Millisecond, func() {
		calls++
		if calls == 3 {
			cancel()
		}
	})
	if calls != 3 {
		t.Fatalf("calls = %d after the context ended on the third, want 3", calls)
	}
}

func TestEveryUntilStopsAtTheFirstError(t *testing.T) {
	boom := errors.New("boom")
	calls := 0
	err := tick.EveryUntil(context.Background(), time.Millisecond, func() error {
		calls++
		if calls == 2 {
			return boom
		}
		return nil
	})
	if !errors.Is(err, boom) || calls != 2 {
		t.Fatalf("EveryUntil = %v after %d calls, want boom after 2", err, calls)
	}
}

func TestEveryUntilReturnsNilWhenContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tick.EveryUntil(ctx, time.Hour, func() error { return errors.New("called") }); err != nil {
		t.Fatalf("EveryUntil on an ended context = %v, want nil without a call", err)
	}
}

func TestEveryWithoutIntervalReturnsAtOnce(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second} {
		tick.Every(context.Background(), interval, func() { t.Errorf("interval %v: f called", interval) })
	}
}
