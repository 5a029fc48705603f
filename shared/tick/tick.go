// Package tick runs a function on a fixed schedule until a context ends:
// the periodic loops of the agent (spool sync, link pings), of the drivers
// (a channel's periodic tx) and of the relay (panel session sweep).
package tick

import (
	"context"
	"time"
)

// Every calls f every interval until ctx ends, the first call one interval
// after the start; a call that outlasts the interval drops the ticks it
// missed (a time.Ticker). With interval <= 0 it returns at once.
func Every(ctx context.Context, interval time.Duration, f func()) {
	_ = EveryUntil(ctx, interval, func() error {
		f()
		return nil
	})
}

// EveryUntil calls f on the schedule of Every until ctx ends (it returns
// nil) or f returns an error, which it returns.
func EveryUntil(ctx context.Context, interval time.Duration, f func() error) error {
	if interval <= 0 {
		return nil
	}
	t := time.NewTicker(interval)
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
