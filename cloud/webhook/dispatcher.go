package webhook

import (
	"bytes"
	"container/heap"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/internal/orgcache"
	"github.com/fleet/fleet/cloud/notify"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// Config configures a Dispatcher.
type Config struct {
	Store  Store
	Client *http.Client // from NewClient
	// Backoff is the retry schedule (ParseBackoff); nil means DefaultBackoff().
	Backoff []time.Duration
	// Timeout bounds one attempt; 0 means DefaultTimeout.
	Timeout time.Duration
	// PerEndpoint bounds concurrent attempts to one endpoint (URL host);
	// 0 means DefaultPerEndpoint.
	PerEndpoint int
	// MaxQueue bounds the deliveries held for one device and kind at one
	// endpoint (the FIFO behind a failing receiver); beyond it the oldest
	// waiting one is dropped (state failed). 0 means DefaultMaxQueue.
	MaxQueue int
	// SecretTTL is how long an organization's secrets are cached; a rotated
	// secret signs every attempt made after it. 0 means DefaultSecretTTL.
	SecretTTL time.Duration
	// Lease is how long a shared outbox (Shared) leases this relay's
	// deliveries, renewed every PollInterval; 0 means MaxLease, and it is
	// at most MaxLease.
	Lease time.Duration
	// PollInterval is how often the outbox is read for deliveries added by
	// another process (webhook redeliver); 0 means DefaultPollInterval.
	PollInterval time.Duration
	// Retention is how long ended deliveries are kept; 0 means
	// DefaultRetention.
	Retention time.Duration
	// UserAgent is sent with every attempt; "" means DefaultUserAgent.
	UserAgent string
	// Mail sends the deliveries of kind "email" (notify.Message bodies);
	// nil when no SMTP server is configured: they fail, saying so.
	Mail *notify.SMTP
	// PublicURL is the relay's public URL (--public-url): e-mail and chat
	// messages link to PublicURL/panel/alerts/<alert id>.
	PublicURL string
	// Observer, when set, hears how every attempt ends (for metrics).
	Observer Observer
	Logger   *slog.Logger
	Now      func() time.Time
}

// The defaults of Config (with DefaultBackoff, DefaultTimeout and
// MaxLease), which the relay's flags show.
const (
	DefaultPerEndpoint  = 16
	DefaultMaxQueue     = 1000
	DefaultSecretTTL    = 5 * time.Second
	DefaultPollInterval = time.Second
	DefaultRetention    = 7 * 24 * time.Hour
	DefaultUserAgent    = "fleet-relay-webhook/1"
)

// Stats counts what a Dispatcher did since it started.
type Stats struct {
	Enqueued, Attempts, Delivered, Failed, Exhausted int64
	// Dropped counts deliveries dropped from a full queue (MaxQueue).
	Dropped int64
}

// Dispatcher sends the outbox's deliveries. Deliveries are grouped into
// per-endpoint queues (URL host), each with its own concurrency bound and a
// round-robin over its ordering queues, so one slow or dead endpoint only
// uses its own slots. Within an endpoint, the deliveries of one device and
// kind (signals, alerts) form a FIFO: the next is sent only after the
// previous ended (delivered, failed or exhausted).
type Dispatcher struct {
	cfg Config
	log *slog.Logger

	ctx      context.Context // cancelled to abort in-flight attempts
	cancel   context.CancelFunc
	loops    context.Context // cancelled to stop the timer and poll loops
	stopLoop context.CancelFunc
	draining bool // under mu: no new attempt starts
	ops      chan op
	wake     chan struct{}
	closed   atomic.Bool
	started  atomic.Bool
	opsMu    sync.RWMutex   // held for reading while sending on ops; Close closes ops under the write lock
	bg       sync.WaitGroup // scheduler goroutines
	sends    sync.WaitGroup // in-flight attempts
	wdone    chan struct{}  // writer finished

	mu     sync.Mutex
	eps    map[string]*endpoint
	queues map[string]*queue
	known  map[string]bool // ids in memory, until their final state is stored
	// ended holds deliveries whose final state is stored (id -> seq) until
	// the poller's cursor passes them: a poll that read the outbox before
	// that write must not take them for new.
	ended  map[string]int64
	timers timerHeap
	cursor int64 // highest outbox Seq seen by the poller
	// shared is the outbox as several relays share it (nil: this relay's
	// alone); lost holds ids of deliveries whose lease another relay took,
	// dropped from the queues instead of attempted.
	shared Shared
	lost   map[string]bool
	poke   chan struct{}

	secrets orgcache.Cache[Secrets]

	stats struct{ enq, att, ok, fail, exh, drop atomic.Int64 }
}

type op struct {
	ins  *Delivery
	att  *Attempt
	seq  int64 // of the attempt's delivery
	done chan error
}

type endpoint struct {
	key      string
	inflight int
	queues   int
	ready    []*queue
}

type queue struct {
	key   string
	ep    *endpoint
	items []*Delivery
	due   time.Time
	index int // in the timer heap, -1 when not there
}

// New returns a Dispatcher; Start starts it.
func New(cfg Config) (*Dispatcher, error) {
	if cfg.Store == nil || cfg.Client == nil {
		return nil, errors.New("webhook: Store and Client are required")
	}
	if cfg.Backoff == nil {
		cfg.Backoff = DefaultBackoff()
	}
	if len(cfg.Backoff) == 0 || len(cfg.Backoff) > MaxRetries {
		return nil, fmt.Errorf("webhook: backoff needs 1 to %d steps", MaxRetries)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.PerEndpoint <= 0 {
		cfg.PerEndpoint = DefaultPerEndpoint
	}
	if cfg.MaxQueue <= 0 {
		cfg.MaxQueue = DefaultMaxQueue
	}
	if cfg.MaxQueue < 2 {
		cfg.MaxQueue = 2
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = DefaultPollInterval
	}
	if cfg.Lease <= 0 || cfg.Lease > MaxLease {
		cfg.Lease = MaxLease
	}
	if cfg.SecretTTL <= 0 {
		cfg.SecretTTL = DefaultSecretTTL
	}
	if cfg.Retention <= 0 {
		cfg.Retention = DefaultRetention
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = DefaultUserAgent
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	ctx, cancel := context.WithCancel(context.Background())
	loops, stopLoop := context.WithCancel(ctx)
	shared, _ := cfg.Store.(Shared)
	if shared != nil {
		shared.SetLease(cfg.Lease)
	}
	return &Dispatcher{
		shared:   shared,
		lost:     map[string]bool{},
		poke:     make(chan struct{}, 1),
		cfg:      cfg,
		log:      cfg.Logger.With("component", "webhook"),
		ctx:      ctx,
		cancel:   cancel,
		loops:    loops,
		stopLoop: stopLoop,
		ops:      make(chan op, 8192),
		wake:     make(chan struct{}, 1),
		wdone:    make(chan struct{}),
		eps:      map[string]*endpoint{},
		queues:   map[string]*queue{},
		known:    map[string]bool{},
		ended:    map[string]int64{},
		secrets:  orgcache.Cache[Secrets]{TTL: cfg.SecretTTL, Now: cfg.Now, Load: cfg.Store.OrgSecrets},
	}, nil
}

// Start loads every pending delivery of the outbox (those a previous run
// left) and starts sending.
func (d *Dispatcher) Start(ctx context.Context) error {
	d.started.Store(true)
	go d.writer()
	if err := d.poll(ctx); err != nil {
		d.Close()
		return fmt.Errorf("webhook: resume outbox: %w", err)
	}
	d.bg.Add(2)
	go d.timerLoop()
	go d.pollLoop()
	return nil
}

// Close stops the dispatcher at once: in-flight attempts are aborted (they
// stay pending and resume at the next Start). See Shutdown.
func (d *Dispatcher) Close() error {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return d.Shutdown(ctx)
}

// Shutdown stops the dispatcher: no new deliveries are accepted and no new
// attempt starts; attempts in flight may finish until ctx ends, then they
// are aborted (an aborted attempt is not recorded: its delivery stays
// pending and resumes at the next Start). The results known are written to
// the outbox before it returns.
func (d *Dispatcher) Shutdown(ctx context.Context) error {
	if d.closed.Swap(true) {
		return nil
	}
	if !d.started.Load() {
		d.cancel()
		return nil
	}
	d.mu.Lock()
	d.draining = true
	d.mu.Unlock()
	d.stopLoop()
	d.bg.Wait()
	sent := make(chan struct{})
	go func() { d.sends.Wait(); close(sent) }()
	select {
	case <-sent:
	case <-ctx.Done():
		d.cancel()
		<-sent
	}
	d.cancel()
	d.opsMu.Lock()
	close(d.ops)
	d.opsMu.Unlock()
	<-d.wdone
	return nil
}

// Stats returns the counters.
func (d *Dispatcher) Stats() Stats {
	return Stats{
		Enqueued:  d.stats.enq.Load(),
		Attempts:  d.stats.att.Load(),
		Delivered: d.stats.ok.Load(),
		Failed:    d.stats.fail.Load(),
		Exhausted: d.stats.exh.Load(),
		Dropped:   d.stats.drop.Load(),
	}
}

// ErrClosed is returned by Enqueue after Close.
var ErrClosed = errors.New("webhook: dispatcher closed")

// Enqueue writes a delivery to the outbox and, once it is stored, queues its
// first attempt; it returns after the write. ID, State, CreatedAt and
// NextAttemptAt are set here when empty. Writes are batched: concurrent
// callers share one transaction.
func (d *Dispatcher) Enqueue(ctx context.Context, dl *Delivery) error {
	done := make(chan error, 1)
	if err := d.submit(ctx, dl, done); err != nil {
		return err
	}
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		// The delivery may still be stored and sent; the caller gave up waiting.
		return ctx.Err()
	}
}

// Submit hands a delivery to the outbox writer and returns without waiting
// for the write (it waits only while the writer's queue is full). The first
// attempt is still made only after the delivery is stored; a failed write is
// logged. Deliveries submitted one after the other keep their order.
func (d *Dispatcher) Submit(ctx context.Context, dl *Delivery) error {
	return d.submit(ctx, dl, nil)
}

func (d *Dispatcher) submit(ctx context.Context, dl *Delivery, done chan error) error {
	if dl.ID == "" {
		dl.ID = ids.New()
	}
	now := d.cfg.Now()
	if dl.CreatedAt.IsZero() {
		dl.CreatedAt = now
	}
	if dl.NextAttemptAt.IsZero() {
		dl.NextAttemptAt = now
	}
	dl.State = StatePending
	d.mu.Lock()
	d.known[dl.ID] = true
	d.mu.Unlock()
	d.opsMu.RLock()
	defer d.opsMu.RUnlock()
	if d.closed.Load() {
		d.forget(dl.ID)
		return ErrClosed
	}
	select {
	case d.ops <- op{ins: dl, done: done}:
		return nil
	case <-ctx.Done():
		d.forget(dl.ID)
		return ctx.Err()
	}
}

func (d *Dispatcher) forget(id string) {
	d.mu.Lock()
	delete(d.known, id)
	d.mu.Unlock()
}

// writer batches outbox writes: each transaction takes every operation
// queued at the time, up to 2048.
func (d *Dispatcher) writer() {
	defer close(d.wdone)
	var retry []op // attempt records whose write failed
	for {
		var batch []op
		batch = append(batch, retry...)
		retry = nil
		if len(batch) == 0 {
			o, ok := <-d.ops
			if !ok {
				return
			}
			batch = append(batch, o)
		}
		open := true
	drain:
		for len(batch) < 2048 {
			select {
			case o, ok := <-d.ops:
				if !ok {
					open = false
					break drain
				}
				batch = append(batch, o)
			default:
				break drain
			}
		}
		var follow []op
		retry, follow = d.commit(batch)
		if !open {
			if rest := append(retry, follow...); len(rest) > 0 {
				d.commit(rest) // one last try; what fails stays pending in the outbox
			}
			return
		}
		if len(retry) > 0 {
			time.Sleep(200 * time.Millisecond)
		}
		retry = append(retry, follow...)
	}
}

// commit writes one batch and returns the attempt records to try again and
// the records of deliveries it dropped from full queues.
func (d *Dispatcher) commit(batch []op) (again, follow []op) {
	var ins []*Delivery
	var atts []Attempt
	for _, o := range batch {
		if o.ins != nil {
			ins = append(ins, o.ins)
		} else {
			atts = append(atts, *o.att)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	insErr := d.cfg.Store.WriteOutbox(ctx, ins, atts)
	attErr := insErr
	if insErr != nil && len(ins) > 0 && len(atts) > 0 {
		// Write them apart, so that records are not held back by inserts.
		insErr = d.cfg.Store.WriteOutbox(ctx, ins, nil)
		attErr = d.cfg.Store.WriteOutbox(ctx, nil, atts)
	}
	if insErr != nil && len(ins) > 0 {
		d.log.Error("outbox insert failed", "err", insErr, "deliveries", len(ins))
	}
	if attErr != nil && len(atts) > 0 {
		d.log.Error("outbox attempt record failed", "err", attErr, "attempts", len(atts))
	}
	d.mu.Lock()
	for _, o := range batch {
		switch {
		case o.ins != nil && insErr == nil && d.shared != nil && !o.ins.Claimed:
			// Its queue is another relay's: that relay sends it.
			delete(d.known, o.ins.ID)
		case o.ins != nil && insErr == nil:
			delete(d.lost, o.ins.ID)
			if dropped := d.add(o.ins); dropped != nil {
				follow = append(follow, *dropped)
			}
		case o.ins != nil:
			delete(d.known, o.ins.ID)
			if o.done == nil {
				d.log.Error("webhook delivery lost: outbox write failed", "delivery", o.ins.ID, "org", o.ins.OrgID, "event", o.ins.Event, "err", insErr)
			}
		case attErr != nil:
			again = append(again, o)
		case o.att.State != StatePending:
			delete(d.known, o.att.DeliveryID)
			d.ended[o.att.DeliveryID] = o.seq
		}
	}
	d.mu.Unlock()
	for _, o := range batch {
		if o.ins == nil {
			continue
		}
		if insErr == nil {
			d.stats.enq.Add(1)
		}
		if o.done == nil {
			continue
		}
		if insErr != nil {
			o.done <- fmt.Errorf("webhook: store delivery: %w", insErr)
			continue
		}
		o.done <- nil
	}
	return again, follow
}

// endpointKey is the scheduling key of a delivery: its URL's host (with
// port), or for e-mail the SMTP server.
func (d *Dispatcher) endpointKey(dl *Delivery) string {
	if dl.Kind == KindEmail {
		if d.cfg.Mail == nil {
			return "smtp:none"
		}
		return "smtp:" + d.cfg.Mail.Server().Addr()
	}
	u, err := url.Parse(dl.URL)
	if err != nil || u.Host == "" {
		return "invalid"
	}
	return strings.ToLower(u.Host)
}

// orderKey groups the deliveries that must keep their order.
func orderKey(dl *Delivery) string {
	kind := "signal"
	if strings.HasPrefix(dl.Event, "alert.") {
		kind = "alert"
	}
	return dl.DeviceID + "|" + kind
}

// add queues dl; d.mu is held. When the queue is full, the oldest waiting
// delivery (not the head, which may be in flight) is dropped and the record
// of its end returned, for the caller to write.
func (d *Dispatcher) add(dl *Delivery) *op {
	ek := d.endpointKey(dl)
	qk := ek + "|" + orderKey(dl)
	q := d.queues[qk]
	if q == nil {
		ep := d.eps[ek]
		if ep == nil {
			ep = &endpoint{key: ek}
			d.eps[ek] = ep
		}
		ep.queues++
		q = &queue{key: qk, ep: ep, index: -1}
		d.queues[qk] = q
	}
	var dropped *op
	if len(q.items) >= d.cfg.MaxQueue {
		old := q.items[1]
		copy(q.items[1:], q.items[2:])
		q.items[len(q.items)-1] = nil
		q.items = q.items[:len(q.items)-1]
		d.stats.drop.Add(1)
		d.observeDrop(old)
		if d.stats.drop.Load()%1000 == 1 {
			d.log.Warn("webhook queue full: dropping the oldest waiting deliveries", "org", old.OrgID, "device", old.DeviceID,
				"limit", d.cfg.MaxQueue, "dropped_total", d.stats.drop.Load())
		}
		dropped = &op{seq: old.Seq, att: &Attempt{DeliveryID: old.ID, Number: 0, At: d.cfg.Now(), State: StateFailed,
			Error: fmt.Sprintf("dropped: more than %d deliveries waiting for this device at this endpoint", d.cfg.MaxQueue)}}
	}
	// Seq order: a shared outbox may hand over an earlier delivery of the
	// queue after a later one (never before the head, which may be in
	// flight).
	i := len(q.items)
	for i > 1 && dl.Seq != 0 && q.items[i-1].Seq > dl.Seq {
		i--
	}
	q.items = slices.Insert(q.items, i, dl)
	if len(q.items) == 1 {
		d.arm(q)
	}
	return dropped
}

// arm makes q's head ready now or at its due time; d.mu is held.
func (d *Dispatcher) arm(q *queue) {
	h := q.items[0]
	if !h.NextAttemptAt.After(d.cfg.Now()) {
		q.ep.ready = append(q.ep.ready, q)
		d.pump(q.ep)
		return
	}
	q.due = h.NextAttemptAt
	heap.Push(&d.timers, q)
	if q.index == 0 {
		d.kick()
	}
}

// dropLost removes the deliveries at the head of q that another relay
// took over (a shared outbox) and reports whether it removed any; q then
// waits again for its new head (if any); d.mu is held.
func (d *Dispatcher) dropLost(q *queue) bool {
	if len(d.lost) == 0 {
		return false
	}
	dropped := false
	for len(q.items) > 0 && d.lost[q.items[0].ID] {
		delete(d.lost, q.items[0].ID)
		delete(d.known, q.items[0].ID)
		q.items[0] = nil
		q.items = q.items[1:]
		dropped = true
	}
	if !dropped {
		return false
	}
	if len(q.items) == 0 {
		delete(d.queues, q.key)
		q.ep.queues--
		return true
	}
	if h := q.items[0]; h.NextAttemptAt.After(d.cfg.Now()) {
		q.due = h.NextAttemptAt
		heap.Push(&d.timers, q)
		if q.index == 0 {
			d.kick()
		}
	} else {
		q.ep.ready = append(q.ep.ready, q) // the pump loop that called this takes it
	}
	return true
}

// kick wakes the scheduler.
func (d *Dispatcher) kick() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// pump starts attempts of ep's ready queues while it has free slots, in
// round-robin order; d.mu is held.
func (d *Dispatcher) pump(ep *endpoint) {
	if d.draining {
		return
	}
	for ep.inflight < d.cfg.PerEndpoint && len(ep.ready) > 0 {
		q := ep.ready[0]
		ep.ready[0] = nil
		ep.ready = ep.ready[1:]
		if d.dropLost(q) {
			continue
		}
		ep.inflight++
		d.sends.Add(1)
		go d.attempt(q, q.items[0])
	}
}

func (d *Dispatcher) timerLoop() {
	defer d.bg.Done()
	t := time.NewTimer(time.Hour)
	defer t.Stop()
	for {
		d.mu.Lock()
		now := d.cfg.Now()
		for d.timers.Len() > 0 && !d.timers[0].due.After(now) {
			q := heap.Pop(&d.timers).(*queue)
			q.ep.ready = append(q.ep.ready, q)
			d.pump(q.ep)
		}
		wait := time.Hour
		if d.timers.Len() > 0 {
			wait = d.timers[0].due.Sub(now)
		}
		d.mu.Unlock()
		t.Reset(wait)
		select {
		case <-t.C:
		case <-d.wake:
		case <-d.loops.Done():
			return
		}
	}
}

func (d *Dispatcher) pollLoop() {
	defer d.bg.Done()
	tick := time.NewTicker(d.cfg.PollInterval)
	defer tick.Stop()
	lastPrune := time.Time{}
	for {
		select {
		case <-tick.C:
			if err := d.renew(d.loops); err != nil && d.loops.Err() == nil {
				d.log.Error("outbox lease renewal failed", "err", err)
			}
		case <-d.poke:
		case <-d.loops.Done():
			return
		}
		if err := d.poll(d.loops); err != nil && d.loops.Err() == nil {
			d.log.Error("outbox poll failed", "err", err)
		}
		if now := d.cfg.Now(); now.Sub(lastPrune) > time.Hour {
			lastPrune = now
			if n, err := d.cfg.Store.Prune(d.loops, now.Add(-d.cfg.Retention)); err != nil && d.loops.Err() == nil {
				d.log.Error("outbox prune failed", "err", err)
			} else if n > 0 {
				d.log.Info("outbox pruned", "deliveries", n)
			}
		}
	}
}

// Poke makes the dispatcher read the outbox now rather than at its next
// poll: another relay queued deliveries this one may hold.
func (d *Dispatcher) Poke() {
	select {
	case d.poke <- struct{}{}:
	default:
	}
}

// poll queues the pending deliveries of the outbox that are not in memory:
// at Start, those left by a previous run; later, those another process
// added (webhook redeliver). A shared outbox hands over what this relay
// may take (Claim) instead.
func (d *Dispatcher) poll(ctx context.Context) error {
	if d.shared != nil {
		return d.claim(ctx)
	}
	for {
		d.mu.Lock()
		after := d.cursor
		d.mu.Unlock()
		page, maxSeq, err := d.cfg.Store.Pending(ctx, after, 1000)
		if err != nil {
			return err
		}
		var drops []op
		d.mu.Lock()
		n := 0
		if len(page) < 1000 && maxSeq > d.cursor {
			// Every pending delivery up to maxSeq is in this page (one
			// snapshot), and later ones get a higher Seq.
			d.cursor = maxSeq
		}
		for _, dl := range page {
			if dl.Seq > d.cursor {
				d.cursor = dl.Seq
			}
			if _, ended := d.ended[dl.ID]; ended || d.known[dl.ID] {
				continue
			}
			d.known[dl.ID] = true
			if dropped := d.add(dl); dropped != nil {
				drops = append(drops, *dropped)
			}
			n++
		}
		for id, seq := range d.ended {
			if seq <= d.cursor {
				delete(d.ended, id)
			}
		}
		d.mu.Unlock()
		for _, o := range drops {
			d.ops <- o // the writer runs; the loop is stopped before ops closes
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

// claim takes the deliveries a shared outbox leases to this relay and
// queues those not in memory.
func (d *Dispatcher) claim(ctx context.Context) error {
	for {
		page, err := d.shared.Claim(ctx, 1000, d.cfg.Lease)
		if err != nil {
			return err
		}
		var drops []op
		d.mu.Lock()
		for _, dl := range page {
			delete(d.lost, dl.ID)
			if d.known[dl.ID] {
				continue
			}
			d.known[dl.ID] = true
			if dropped := d.add(dl); dropped != nil {
				drops = append(drops, *dropped)
			}
		}
		d.mu.Unlock()
		for _, o := range drops {
			d.ops <- o
		}
		if len(page) < 1000 {
			return nil
		}
	}
}

// renew extends a shared outbox's leases of this relay; deliveries whose
// lease another relay took meanwhile (this relay could not renew in time)
// are dropped from memory, not attempted again here.
func (d *Dispatcher) renew(ctx context.Context) error {
	if d.shared == nil {
		return nil
	}
	// Only what was in memory before the renewal can have been lost: a
	// delivery claimed while it ran is held, though not in its answer.
	d.mu.Lock()
	var before []*Delivery
	for _, q := range d.queues {
		before = append(before, q.items...)
	}
	d.mu.Unlock()
	held, err := d.shared.Renew(ctx, d.cfg.Lease)
	if err != nil {
		return err
	}
	h := make(map[string]bool, len(held))
	for _, id := range held {
		h[id] = true
	}
	d.mu.Lock()
	for _, dl := range before {
		if !h[dl.ID] && d.known[dl.ID] {
			d.lost[dl.ID] = true
		}
	}
	d.mu.Unlock()
	return nil
}

// attempt makes one attempt of dl, the head of q, and moves q on.
func (d *Dispatcher) attempt(q *queue, dl *Delivery) {
	defer d.sends.Done()
	n := dl.Attempts + 1
	rec, err := d.try(d.ctx, dl, n)
	if d.ctx.Err() != nil && err != nil {
		// Shutting down: the attempt was cut short; the delivery stays
		// pending in the outbox and resumes at the next start.
		d.mu.Lock()
		q.ep.inflight--
		d.mu.Unlock()
		return
	}
	d.stats.att.Add(1)
	state, status := rec.State, rec.StatusCode
	switch state {
	case StateDelivered:
		d.stats.ok.Add(1)
	case StateFailed:
		d.stats.fail.Add(1)
	case StateExhausted:
		d.stats.exh.Add(1)
	}
	end := rec.At.Add(rec.Duration)
	d.observeAttempt(dl, state, rec.Duration, end)
	switch state {
	case StatePending:
		d.log.Debug("webhook attempt failed, will retry", "delivery", dl.ID, "org", dl.OrgID, "attempt", n,
			"status", status, "err", rec.Error, "next", rec.NextAttemptAt)
	case StateFailed, StateExhausted:
		d.log.Warn("webhook delivery ended without success", "delivery", dl.ID, "org", dl.OrgID, "event", dl.Event,
			"attempt", n, "status", status, "err", rec.Error, "state", state)
	}

	d.mu.Lock()
	q.ep.inflight--
	dl.Attempts = n
	dl.State = state
	if state == StatePending {
		dl.NextAttemptAt = rec.NextAttemptAt
		d.arm(q)
	} else {
		q.items[0] = nil
		q.items = q.items[1:]
		if len(q.items) > 0 {
			d.arm(q)
		} else {
			delete(d.queues, q.key)
			q.ep.queues--
			if q.ep.queues == 0 && q.ep.inflight == 0 {
				delete(d.eps, q.ep.key)
			}
		}
	}
	d.pump(q.ep)
	d.mu.Unlock()
	d.ops <- op{att: &rec, seq: dl.Seq}
}

// try makes attempt n of dl and returns its record: the delivery's state
// after it and, when pending, when the next attempt is due; err is the
// attempt's error (also in the record's Error).
func (d *Dispatcher) try(ctx context.Context, dl *Delivery, n int) (Attempt, error) {
	start := d.cfg.Now()
	status, retryAfter, err := d.send(ctx, dl, n)
	end := d.cfg.Now()
	rec := Attempt{DeliveryID: dl.ID, Number: n, At: start, StatusCode: status, Duration: end.Sub(start)}
	state := StatePending
	switch {
	case err != nil && (errors.Is(err, ErrAddressNotAllowed) || errors.Is(err, notify.ErrPermanent) || errors.Is(err, ErrUnsendable)):
		state = StateFailed
	case err != nil:
	case status >= 200 && status <= 299:
		state = StateDelivered // for e-mail: the server's 250
	case !Retryable(status):
		state = StateFailed
	}
	if err != nil {
		rec.Error = describe(err, d.cfg.Timeout)
	}
	if state == StatePending && n > len(d.cfg.Backoff) {
		state = StateExhausted
	}
	if state == StatePending {
		rec.NextAttemptAt = end.Add(Delay(d.cfg.Backoff, n, retryAfter, jitterRand()))
	}
	rec.State = state
	return rec, err
}

// SendNow makes dl's next attempt at once, outside the queues, and returns
// its record without writing it (the caller writes it with WriteOutbox):
// `fleet-relay notify test` sends its test message so when no relay runs.
// The Dispatcher need not be started.
func (d *Dispatcher) SendNow(ctx context.Context, dl *Delivery) Attempt {
	rec, _ := d.try(ctx, dl, dl.Attempts+1)
	return rec
}

// ErrUnsendable marks a delivery that no attempt can send (an unknown
// kind, an unreadable message, e-mail without an SMTP server): it fails.
var ErrUnsendable = errors.New("cannot be sent")

// Delivery kinds (OutboxDelivery.Kind); "" is KindWebhook.
const (
	KindWebhook = resource.ChannelWebhook
	KindSlack   = resource.ChannelSlack
	KindEmail   = resource.ChannelEmail
)

// send makes one attempt and returns the status (the HTTP status, or the
// SMTP reply code; 0 without response) and the Retry-After delay asked
// for.
func (d *Dispatcher) send(ctx context.Context, dl *Delivery, n int) (int, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	switch dl.Kind {
	case "", KindWebhook:
	case KindSlack:
		m, err := notify.Decode(dl.Body)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: message: %v", ErrUnsendable, err)
		}
		body, err := m.Chat(d.cfg.PublicURL)
		if err != nil {
			return 0, 0, fmt.Errorf("%w: message: %v", ErrUnsendable, err)
		}
		return d.post(ctx, dl, body, nil)
	case KindEmail:
		return d.sendEmail(ctx, dl)
	default:
		return 0, 0, fmt.Errorf("%w: unknown kind %q", ErrUnsendable, dl.Kind)
	}
	secrets, err := d.secrets.Get(ctx, dl.OrgID)
	if err != nil {
		return 0, 0, fmt.Errorf("signing secret: %w", err)
	}
	ts := d.cfg.Now().Unix()
	return d.post(ctx, dl, dl.Body, func(h http.Header) {
		h.Set(HeaderSignature, Sign(secrets.Current, dl.Body))
		h.Set(HeaderDeliveryID, dl.ID)
		h.Set(HeaderAttempt, strconv.Itoa(n))
		h[HeaderWebhookID] = []string{dl.ID}
		h[HeaderWebhookTime] = []string{strconv.FormatInt(ts, 10)}
		sig := SignStandard(secrets.Current, dl.ID, ts, dl.Body)
		if secrets.Previous != "" {
			sig += " " + SignStandard(secrets.Previous, dl.ID, ts, dl.Body)
		}
		h[HeaderWebhookSig] = []string{sig}
	})
}

// post POSTs body (JSON) to dl.URL with the headers sign adds.
func (d *Dispatcher) post(ctx context.Context, dl *Delivery, body []byte, sign func(http.Header)) (int, time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dl.URL, bytes.NewReader(body))
	if err != nil {
		return 0, 0, fmt.Errorf("%w: bad URL", ErrAddressNotAllowed)
	}
	if req.URL.Scheme != "https" {
		return 0, 0, fmt.Errorf("%w: not https", ErrAddressNotAllowed)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", d.cfg.UserAgent)
	if sign != nil {
		sign(req.Header)
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	ra, _ := RetryAfter(resp.Header.Get("Retry-After"), d.cfg.Now())
	return resp.StatusCode, ra, nil
}

// sendEmail sends an "email" delivery through the SMTP server: the status
// is the server's reply code; a 5xx fails the delivery (notify.ErrPermanent).
func (d *Dispatcher) sendEmail(ctx context.Context, dl *Delivery) (int, time.Duration, error) {
	if d.cfg.Mail == nil {
		return 0, 0, fmt.Errorf("%w: e-mail is not configured on this relay (--smtp-url)", ErrUnsendable)
	}
	m, err := notify.Decode(dl.Body)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: message: %v", ErrUnsendable, err)
	}
	rcpt := strings.TrimPrefix(dl.URL, "mailto:")
	if u, err := url.PathUnescape(rcpt); err == nil {
		rcpt = u
	}
	to, err := cloud.ParseRecipients(rcpt)
	if err != nil {
		return 0, 0, fmt.Errorf("%w: recipients: %v", ErrUnsendable, err)
	}
	code, err := d.cfg.Mail.SendMessage(ctx, dl.ID, to, m, d.cfg.PublicURL, d.cfg.Now())
	return code, 0, err
}

// describe turns a send error into a short, secret-free cause for the
// attempt record.
func describe(err error, timeout time.Duration) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout after " + timeout.String()
	case errors.Is(err, ErrAddressNotAllowed):
		var s = err.Error()
		if i := strings.Index(s, ErrAddressNotAllowed.Error()); i >= 0 {
			s = s[i:]
		}
		return s
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// timerHeap orders queues waiting for a retry by due time.
type timerHeap []*queue

func (h timerHeap) Len() int           { return len(h) }
func (h timerHeap) Less(i, j int) bool { return h[i].due.Before(h[j].due) }
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *timerHeap) Push(x any) {
	q := x.(*queue)
	q.index = len(*h)
	*h = append(*h, q)
}
func (h *timerHeap) Pop() any {
	old := *h
	q := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	q.index = -1
	return q
}
