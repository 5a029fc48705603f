package tick_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/fleet/fleet/shared/tick"
)

func TestCallsRepeatUntilContextEnds(t *testing.T) {
	for name, run := range map[string]func(context.Context, time.Duration, func()){
		"Every":       tick.Every,
		"NowAndEvery": tick.NowAndEvery,
	} {
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			calls := 0
			run(ctx, time.Millisecond, func() {
				calls++
				if calls == 3 {
					cancel()
				}
			})
			// A tick already due when the context ended may still be served.
			if calls < 3 {
				t.Fatalf("calls = %d, want 3 before the context ended", calls)
			}
		})
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

func TestNowAndEveryCallsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, interval := range []time.Duration{time.Hour, 0} {
		calls := 0
		tick.NowAndEvery(ctx, interval, func() { calls++ })
		if calls != 1 {
			t.Errorf("interval %v on an ended context: calls = %d, want the first call only", interval, calls)
		}
	}
}

func TestEveryWithoutIntervalReturnsAtOnce(t *testing.T) {
	for _, interval := range []time.Duration{0, -time.Second} {
		tick.Every(context.Background(), interval, func() { t.Errorf("interval %v: f called", interval) })
	}
}
