package hw

import (
	"context"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Loop is the goroutine that runs a serial port (polls, tx, reopening a
// tty that went away), woken when its work changes. The zero Loop is
// ready; a Wake before Start is dropped, since a loop looks at its work
// when it starts.
type Loop struct {
	wake   chan struct{}
	cancel context.CancelFunc
	done   chan struct{}
}

// Start runs run in its own goroutine until Stop.
func (l *Loop) Start(run func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(context.Background())
	l.wake, l.cancel, l.done = make(chan struct{}, 1), cancel, make(chan struct{})
	go func() {
		defer close(l.done)
		run(ctx)
	}()
}

// Wake tells the loop its work changed; it never blocks.
func (l *Loop) Wake() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// Woken is ready after a Wake.
func (l *Loop) Woken() <-chan struct{} { return l.wake }

// Stop cancels the loop's context and waits for run to return.
func (l *Loop) Stop() {
	if l.cancel != nil {
		l.cancel()
		<-l.done
	}
}

// NextSend returns when a tx sent at now is due again: after interval, or
// for a single send (interval 0) not for a day, until Apply or the tty's
// return schedules it again.
func NextSend(now time.Time, interval time.Duration) time.Time {
	if interval > 0 {
		return now.Add(interval)
	}
	return now.Add(24 * time.Hour)
}

// Guard serialises a port's reconfiguration (Apply, recovery) with its
// Close, and closes the port once. Hold it with Lock and Unlock.
type Guard struct {
	sync.Mutex
	closed atomic.Bool
}

// Closed reports whether Close has run; it does not need the lock.
func (g *Guard) Closed() bool { return g.closed.Load() }

// Close runs stop under the lock the first time it is called; later calls
// return nil.
func (g *Guard) Close(stop func() error) error {
	g.Lock()
	defer g.Unlock()
	if !g.closed.CompareAndSwap(false, true) {
		return nil
	}
	return stop()
}

// ChannelLogger scopes log (nil discards) to one channel and its device.
func ChannelLogger(log *slog.Logger, name, device string) *slog.Logger {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return log.With("channel", name, "device", device)
}
