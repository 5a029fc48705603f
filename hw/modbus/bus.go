package modbus

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/fleet/fleet/hw/serialport"
)

// Owner says who holds the bus for a transaction.
type Owner int

// Bus owners.
const (
	// OwnerManaged is the agent's own polling and tx.
	OwnerManaged Owner = iota
	// OwnerRaw is a passthrough client.
	OwnerRaw
)

// maxFrame is the largest RTU frame (256 bytes); a few more are read so an
// over-long reply is seen as what it is.
const maxFrame = 260

// Bus serializes whole transactions (request frame, reply, trailing
// silence) on one serial line, so that the managed master and a raw
// passthrough client never interleave frames. Before every request it keeps
// the line silent for t3.5 after the previous frame, plus OwnerGap when the
// bus changes hands.
type Bus struct {
	sem chan struct{}
	// lost receives a value when a transaction found the port gone.
	lost chan struct{}

	// Guarded by sem.
	port      *serialport.Port
	settings  serialport.Settings
	lastEnd   time.Time
	lastOwner Owner

	ownerGap        time.Duration
	responseTimeout time.Duration
}

func newBus(s serialport.Settings, responseTimeout, ownerGap time.Duration) *Bus {
	return &Bus{
		sem:             make(chan struct{}, 1),
		lost:            make(chan struct{}, 1),
		settings:        s,
		responseTimeout: responseTimeout,
		ownerGap:        ownerGap,
	}
}

func (b *Bus) lock(ctx context.Context) error {
	select {
	case b.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (b *Bus) unlock() { <-b.sem }

// Exchange sends req and reads the reply until the line is silent for
// t3.5, holding the bus throughout. onChunk (may be nil) sees reply bytes as
// they arrive; done (may be nil) may end the reply before the silence once
// it is complete. A broadcast (slave 0) waits for no reply. A missing reply
// returns serialport.ErrTimeout; a closed port ErrPortClosed.
func (b *Bus) Exchange(ctx context.Context, owner Owner, req []byte, onChunk func([]byte), done func([]byte) bool) ([]byte, error) {
	if len(req) == 0 {
		return nil, nil
	}
	if err := b.lock(ctx); err != nil {
		return nil, err
	}
	defer b.unlock()
	if b.port == nil {
		return nil, ErrPortClosed
	}
	s := b.settings
	silence := serialport.Silence(s.BaudRate)
	gap := silence
	if owner != b.lastOwner {
		gap += b.ownerGap
	}
	if wait := time.Until(b.lastEnd.Add(gap)); wait > 0 {
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		}
	}
	// The line is busy until the last byte of this transaction; the next
	// request waits t3.5 from there (plus OwnerGap on a change of hands).
	lastByte := time.Now()
	defer func() {
		b.lastEnd = lastByte
		b.lastOwner = owner
	}()
	if err := b.port.Flush(); err != nil {
		return nil, b.fail(err)
	}
	if _, err := b.port.Write(req); err != nil {
		return nil, b.fail(err)
	}
	lastByte = time.Now().Add(time.Duration(len(req)) * s.CharTime())
	if req[0] == 0 {
		// Broadcast: the request's own wire time passes before the line is free.
		time.Sleep(time.Duration(len(req)) * s.CharTime())
		return nil, nil
	}
	// The first byte may arrive only after the request has left the UART.
	first := b.responseTimeout + time.Duration(len(req))*s.CharTime()
	if dl, ok := ctx.Deadline(); ok {
		first = min(first, time.Until(dl))
	}
	if first <= 0 {
		return nil, context.DeadlineExceeded
	}
	reply, at, err := b.port.ReadFrameAt(first, silence, maxFrame, onChunk, done)
	if !at.IsZero() {
		lastByte = at
	} else if err != nil {
		// Nothing came back: a late reply may still be on its way.
		lastByte = time.Now()
	}
	if err != nil && !errors.Is(err, serialport.ErrTimeout) {
		return reply, b.fail(err)
	}
	return reply, err
}

// fail drops a port that went away, so the owner reopens it.
func (b *Bus) fail(err error) error {
	if errors.Is(err, serialport.ErrClosed) {
		b.port.Close()
		b.port = nil
		select {
		case b.lost <- struct{}{}:
		default:
		}
	}
	return err
}

// configure applies s to the bus's port (now or when it reopens).
func (b *Bus) configure(ctx context.Context, s serialport.Settings) error {
	if err := b.lock(ctx); err != nil {
		return err
	}
	defer b.unlock()
	if b.port != nil && b.port.Settings() != s {
		if err := b.port.Configure(s); err != nil {
			return fmt.Errorf("apply serial settings: %w", err)
		}
	}
	b.settings = s
	return nil
}

func (b *Bus) hasPort() bool {
	b.sem <- struct{}{}
	defer b.unlock()
	return b.port != nil
}

func (b *Bus) setPort(p *serialport.Port) {
	b.sem <- struct{}{}
	defer b.unlock()
	if b.port != nil {
		b.port.Close()
	}
	b.port = p
	b.lastEnd = time.Now()
}

func (b *Bus) currentSettings() serialport.Settings {
	b.sem <- struct{}{}
	defer b.unlock()
	return b.settings
}
