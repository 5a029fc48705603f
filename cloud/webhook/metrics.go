package webhook

import (
	"strings"
	"time"
)

// Delivery kinds: signal forwarding and alert webhooks. Each kind has its
// own FIFO per device and endpoint.
const (
	KindSignal = "signal"
	KindAlert  = "alert"
)

// KindOf returns the kind of a delivery's event.
func KindOf(event string) string {
	if strings.HasPrefix(event, "alert.") {
		return KindAlert
	}
	return KindSignal
}

// AttemptResult is what an Observer hears about one attempt.
type AttemptResult struct {
	Kind string // KindSignal or KindAlert
	// State is the delivery's state after the attempt: StatePending means
	// it will be retried.
	State State
	// Duration is the attempt's HTTP exchange (connect, TLS, request,
	// response).
	Duration time.Duration
	// Age is the time from the delivery's creation to the attempt's end.
	Age time.Duration
}

// Observer hears how attempts end and which deliveries a full queue dropped,
// for metrics. It is called from the dispatcher's goroutines, sometimes
// under its lock: it must be quick and must not call the Dispatcher.
type Observer interface {
	AttemptEnded(AttemptResult)
	Dropped(kind string)
}

func (d *Dispatcher) observeAttempt(dl *Delivery, state State, took time.Duration, end time.Time) {
	if d.cfg.Observer == nil {
		return
	}
	d.cfg.Observer.AttemptEnded(AttemptResult{Kind: KindOf(dl.Event), State: state, Duration: took, Age: end.Sub(dl.CreatedAt)})
}

func (d *Dispatcher) observeDrop(dl *Delivery) {
	if d.cfg.Observer != nil {
		d.cfg.Observer.Dropped(KindOf(dl.Event))
	}
}

// Backlog returns the number of deliveries the dispatcher holds that have
// not ended (waiting to be written, queued, waiting for a retry or in
// flight: every pending delivery of the outbox is held) and the number of
// attempts in flight. It takes the dispatcher's lock briefly (for scrapes).
func (d *Dispatcher) Backlog() (pending, inflight int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, ep := range d.eps {
		inflight += ep.inflight
	}
	return len(d.known), inflight
}
