// Package tick runs a function on a fixed schedule until a context ends:
// the periodic loops of the agent (spool sync, link pings, the VPN watch),
// of the drivers (a channel's periodic tx) and of the relay (the panel's
// session sweep, the offline sweep, retention).
package tick

import (
	"context"
	"time"
)

// Every calls f every interval until ctx ends, the first call one interval
// after the start; a call that outlasts the interval drops the ticks it
// missed (a time.Ticker). With interval <= 0 it returns at once.
func Every(ctx context.Context, interval time.Duration, f func()) {
	_ = EveryUntil(ctx, interval, infallible(f))
}

// EveryUntil calls f on the schedule of Every until ctx ends (it returns
// nil) or f returns an error, which it returns.
func EveryUntil(ctx context.Context, interval time.Duration, f func() error) error {
	if interval <= 0 {
		return nil
	}
	return loop(ctx, time.NewTicker(interval), f)
}

// NowAndEvery calls f at once and then every interval from the start until
// ctx ends (the schedule of Every, plus a first call at the start); with
// interval <= 0 it calls f once.
func NowAndEvery(ctx context.Context, interval time.Duration, f func()) {
	if interval <= 0 {
		f()
		return
	}
	t := time.NewTicker(interval)
	f()
	_ = loop(ctx, t, infallible(f))
}

// loop calls f at each tick of t until ctx ends or f fails, and stops t.
func loop(ctx context.Context, t *time.Ticker, f func() error) error {
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			if err := f(); err != nil {
				return err
			}
		}
	}
}

// infallible is f as a function that never fails, for loop.
func infallible(f func()) func() error {
	return func() error {
		f()
		return nil
	}
}
