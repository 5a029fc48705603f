package modbus

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
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

	// wanted is the settings last configured, so that an Apply that
	// keeps them does not wait for the transaction in flight.
	wantedMu sync.Mutex
	wanted   serialport.Settings
}

func newBus(s serialport.Settings, responseTimeout, ownerGap time.Duration) *Bus {
	return &Bus{
		sem:             make(chan struct{}, 1),
		lost:            make(chan struct{}, 1),
		settings:        s,
		wanted:          s,
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
// it is complete. A frame that does not answer req (a late reply to an
// earlier request that timed out) is dropped, never taken for the reply.
// A broadcast (slave 0) waits for no reply. A missing reply returns
// serialport.ErrTimeout; a closed port ErrPortClosed.
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
	reply, at, err := readReply(b.port, req, first, silence, onChunk, done)
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
	b.wantedMu.Lock()
	defer b.wantedMu.Unlock()
	if s == b.wanted {
		return nil
	}
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
	b.wanted = s
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

// readReply reads the reply to req from port: it waits up to first for the
// reply to start, then reads until the line is silent for silence, maxFrame
// bytes have arrived, or done reports the reply complete. RTU frames carry
// no transaction id, so a slave's late reply to an earlier request (one
// whose transaction timed out and released the bus) can arrive while the
// next transaction waits for its own: complete frames at the start that do
// not answer req are dropped, and the wait for the reply goes on until
// first has passed. onChunk sees only bytes of a frame that answers req.
// It also returns when the last byte was read (zero when none came).
func readReply(port *serialport.Port, req []byte, first, silence time.Duration,
	onChunk func([]byte), done func([]byte) bool) ([]byte, time.Time, error) {
	end := time.Now().Add(first)
	buf := make([]byte, 0, maxFrame)
	chunk := make([]byte, maxFrame)
	var last time.Time
	shown := 0 // bytes of buf passed to onChunk
	for len(buf) < maxFrame {
		timeout := silence
		if len(buf) == 0 {
			timeout = time.Until(end)
			if timeout <= 0 {
				return nil, last, serialport.ErrTimeout
			}
		}
		k, err := port.Read(chunk[:maxFrame-len(buf)], timeout)
		if k > 0 {
			last = time.Now()
			buf = append(buf, chunk[:k]...)
			if shown == 0 {
				buf = dropStale(req, buf)
			}
			if shown > 0 || answers(req, buf) == yes {
				if onChunk != nil && len(buf) > shown {
					onChunk(buf[shown:])
				}
				shown = len(buf)
				if done != nil && done(buf) {
					break
				}
			}
		}
		if err != nil {
			return buf, last, err
		}
		if k == 0 && len(buf) > 0 {
			break // the line went silent
		}
	}
	return buf, last, nil
}

// dropStale removes complete frames at the start of buf that do not answer
// req.
func dropStale(req, buf []byte) []byte {
	for answers(req, buf) == no {
		n := ResponseLength(buf[1]&^0x80, buf)
		if n == 0 || len(buf) < n || !CheckCRC(buf[:n]) {
			break // not a frame we can cut: the caller judges it whole
		}
		buf = append(buf[:0], buf[n:]...)
	}
	return buf
}

type verdict int

const (
	unknown verdict = iota // too few bytes to tell
	yes
	no
)

// answers tells whether the frame starting reply answers request req: the
// same slave and function (or its exception), and for the functions with
// a fixed layout the byte count or echo that req implies.
func answers(req, reply []byte) verdict {
	if len(reply) < 2 || len(req) < 2 {
		return unknown
	}
	if reply[0] != req[0] || reply[1]&^0x80 != req[1] {
		return no
	}
	if reply[1]&0x80 != 0 || len(req) < 6 {
		return yes
	}
	qty := int(binary.BigEndian.Uint16(req[4:6]))
	switch req[1] {
	case 1, 2, 3, 4:
		want := 2 * qty
		if req[1] <= 2 {
			want = (qty + 7) / 8
		}
		if len(reply) < 3 {
			return unknown
		}
		if int(reply[2]) != want {
			return no
		}
	case 5, 6, 15, 16:
		// The reply echoes the address and the value (5, 6) or quantity.
		if len(reply) < 6 {
			return unknown
		}
		if !bytes.Equal(reply[2:6], req[2:6]) {
			return no
		}
	}
	return yes
}
