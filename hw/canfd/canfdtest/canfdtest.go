// Package canfdtest is an in-process CAN-FD bus for tests and simulators:
// several endpoints share one bus, a frame sent on one is delivered to all
// the others (as on a real bus, the sender does not receive its own frame),
// and a test injects error frames (bus-off, error-passive) or makes sends
// fail. It also provides a Link that records the settings it is given and
// can refuse them. Nothing leaves the process.
package canfdtest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fleet/fleet/hw/canfd"
)

// QueueLen is how many frames an endpoint buffers; further frames are
// dropped (and counted), as a kernel socket's receive queue overflows.
const QueueLen = 1024

// Bus is a virtual CAN-FD bus. The zero value is not usable; call NewBus.
type Bus struct {
	mu        sync.Mutex
	endpoints map[*Endpoint]struct{}
	sendErr   error
	unplugged bool
}

// ErrUnplugged is returned by Open while the bus is unplugged.
var ErrUnplugged = errors.New("canfdtest: no such device (unplugged)")

// NewBus returns an empty bus.
func NewBus() *Bus { return &Bus{endpoints: make(map[*Endpoint]struct{})} }

// Endpoint is one node's socket on the bus; it implements canfd.Bus.
type Endpoint struct {
	bus     *Bus
	ch      chan canfd.Frame
	done    chan struct{}
	gone    chan struct{}
	once    sync.Once
	mu      sync.Mutex
	dropped int
}

var _ canfd.Bus = (*Endpoint)(nil)

// Open attaches a new endpoint.
func (b *Bus) Open() *Endpoint {
	e := &Endpoint{bus: b, ch: make(chan canfd.Frame, QueueLen), done: make(chan struct{}), gone: make(chan struct{})}
	b.mu.Lock()
	b.endpoints[e] = struct{}{}
	b.mu.Unlock()
	return e
}

// Opener returns a function suitable for canfd.Options.Open; it fails
// while the bus is unplugged.
func (b *Bus) Opener() func() (canfd.Bus, error) {
	return func() (canfd.Bus, error) {
		b.mu.Lock()
		gone := b.unplugged
		b.mu.Unlock()
		if gone {
			return nil, ErrUnplugged
		}
		return b.Open(), nil
	}
}

// Unplug stands for the interface being removed (a USB adapter pulled):
// every open endpoint's Recv returns an error wrapping canfd.ErrDeviceGone,
// and Opener fails until Plug.
func (b *Bus) Unplug() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unplugged = true
	for e := range b.endpoints {
		select {
		case <-e.gone:
		default:
			close(e.gone)
		}
	}
}

// Plug makes the interface available again.
func (b *Bus) Plug() {
	b.mu.Lock()
	b.unplugged = false
	b.mu.Unlock()
}

// Endpoints returns how many endpoints are open.
func (b *Bus) Endpoints() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.endpoints)
}

// FailSends makes every Send return err (nil restores normal sends); it
// stands for a controller whose transmit queue is stuck (ENOBUFS) or a link
// that is down (ENETDOWN).
func (b *Bus) FailSends(err error) {
	b.mu.Lock()
	b.sendErr = err
	b.mu.Unlock()
}

// InjectError delivers an error frame with the given classes and data to
// every endpoint, as the controller reports it to every socket with an
// error filter.
func (b *Bus) InjectError(classes uint32, data []byte) {
	d := make([]byte, 8)
	copy(d, data)
	b.deliver(nil, canfd.Frame{Err: true, ID: classes, Data: d})
}

// InjectBusOff reports bus-off.
func (b *Bus) InjectBusOff() { b.InjectError(canfd.ErrClassBusOff, nil) }

// InjectRestarted reports that the controller restarted after bus-off.
func (b *Bus) InjectRestarted() { b.InjectError(canfd.ErrClassRestarted, nil) }

// deliver copies f to every endpoint except from.
func (b *Bus) deliver(from *Endpoint, f canfd.Frame) {
	f.Data = append([]byte(nil), f.Data...)
	b.mu.Lock()
	defer b.mu.Unlock()
	for e := range b.endpoints {
		if e == from {
			continue
		}
		select {
		case e.ch <- f:
		default:
			e.mu.Lock()
			e.dropped++
			e.mu.Unlock()
		}
	}
}

// Send delivers f to every other endpoint. It checks f the way the kernel
// checks a write: a CAN-FD frame needs a valid FD length, a classic frame
// at most 8 bytes, and identifiers must fit their format.
func (e *Endpoint) Send(f canfd.Frame) error {
	select {
	case <-e.done:
		return canfd.ErrClosed
	case <-e.gone:
		return fmt.Errorf("canfdtest: no such device or address")
	default:
	}
	if _, err := f.Marshal(); err != nil {
		return fmt.Errorf("canfdtest: %w", err)
	}
	e.bus.mu.Lock()
	err := e.bus.sendErr
	e.bus.mu.Unlock()
	if err != nil {
		return err
	}
	e.bus.deliver(e, f)
	return nil
}

// Recv returns the next frame, or canfd.ErrClosed after Close, or an error
// wrapping canfd.ErrDeviceGone after Unplug (both win over queued frames).
func (e *Endpoint) Recv() (canfd.Frame, error) {
	select {
	case <-e.done:
		return canfd.Frame{}, canfd.ErrClosed
	case <-e.gone:
		return canfd.Frame{}, fmt.Errorf("canfdtest: %w", canfd.ErrDeviceGone)
	default:
	}
	return e.recv(nil, 0)
}

// RecvTimeout returns the next frame, or an error after Close, after
// Unplug or when none came within d.
func (e *Endpoint) RecvTimeout(d time.Duration) (canfd.Frame, error) {
	t := time.NewTimer(d)
	defer t.Stop()
	return e.recv(t.C, d)
}

// recv waits for a frame, Close, Unplug or timeout (which a nil channel
// never brings), the one that fired after d.
func (e *Endpoint) recv(timeout <-chan time.Time, d time.Duration) (canfd.Frame, error) {
	select {
	case f := <-e.ch:
		return f, nil
	case <-e.done:
		return canfd.Frame{}, canfd.ErrClosed
	case <-e.gone:
		return canfd.Frame{}, fmt.Errorf("canfdtest: %w", canfd.ErrDeviceGone)
	case <-timeout:
		return canfd.Frame{}, errors.New("canfdtest: no frame within " + d.String())
	}
}

// Pending returns how many frames wait in the endpoint's queue.
func (e *Endpoint) Pending() int { return len(e.ch) }

// Dropped returns how many frames were dropped because the queue was full.
func (e *Endpoint) Dropped() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dropped
}

// Close detaches the endpoint and unblocks Recv.
func (e *Endpoint) Close() error {
	e.once.Do(func() {
		close(e.done)
		e.bus.mu.Lock()
		delete(e.bus.endpoints, e)
		e.bus.mu.Unlock()
	})
	return nil
}

// Link records the settings it is asked to apply. Set Refuse to make
// Configure fail with that error (wrap canfd.ErrBitTimingUnsupported to
// stand for a vcan interface).
type Link struct {
	mu      sync.Mutex
	refuse  error
	applied []canfd.Settings
}

var _ canfd.Link = (*Link)(nil)

// Refuse makes the following Configure calls fail with err (nil accepts).
func (l *Link) Refuse(err error) {
	l.mu.Lock()
	l.refuse = err
	l.mu.Unlock()
}

// Configure implements canfd.Link.
func (l *Link) Configure(ctx context.Context, s canfd.Settings) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.refuse != nil {
		return l.refuse
	}
	l.applied = append(l.applied, s)
	return nil
}

// Applied returns every accepted Settings, oldest first.
func (l *Link) Applied() []canfd.Settings {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]canfd.Settings(nil), l.applied...)
}
