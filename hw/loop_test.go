package hw_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/fleet/fleet/hw"
)

func TestLoopWakesAndStops(t *testing.T) {
	var l hw.Loop
	l.Wake() // before Start: dropped, never blocks
	woken := make(chan struct{}, 10)
	returned := false
	l.Start(func(ctx context.Context) {
		for {
			select {
			case <-ctx.Done():
				time.Sleep(20 * time.Millisecond) // Stop must wait for this
				returned = true
				return
			case <-l.Woken():
				woken <- struct{}{}
			}
		}
	})
	for range 3 {
		l.Wake() // never blocks, even while the loop is busy
	}
	select {
	case <-woken:
	case <-time.After(5 * time.Second):
		t.Fatal("the loop was not woken")
	}
	l.Stop()
	if !returned {
		t.Fatal("Stop returned before the loop did")
	}
	l.Stop() // a second Stop returns at once
}

func TestGuardClosesOnce(t *testing.T) {
	var g hw.Guard
	calls := 0
	stop := func() error { calls++; return errors.New("release failed") }
	if g.Closed() {
		t.Fatal("Closed before Close")
	}
	if err := g.Close(stop); err == nil || err.Error() != "release failed" {
		t.Fatalf("first Close = %v, want stop's error", err)
	}
	if err := g.Close(stop); err != nil {
		t.Fatalf("second Close = %v, want nil", err)
	}
	if calls != 1 || !g.Closed() {
		t.Fatalf("stop ran %d times, Closed %v; want once, true", calls, g.Closed())
	}
}

func TestNextSend(t *testing.T) {
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	if got := hw.NextSend(now, 250*time.Millisecond); !got.Equal(now.Add(250 * time.Millisecond)) {
		t.Fatalf("periodic next send %v", got)
	}
	if got := hw.NextSend(now, 0); !got.Equal(now.Add(24 * time.Hour)) {
		t.Fatalf("single send's next %v, want a day later", got)
	}
}

func TestChannelLoggerNilDiscards(t *testing.T) {
	log := hw.ChannelLogger(nil, "gpio-1", "gpiochip0:5")
	if log == nil || log.Enabled(context.Background(), slog.LevelError) {
		t.Fatal("a nil logger must come back as one that discards")
	}
}
