// Package serialport opens the serial ttys behind the gateway's uart and
// rs485 channels over go.bug.st/serial, with what that library leaves out:
// RS485 mode through the TIOCSRS485 ioctl (with a clean fallback on ttys that
// do not support it, such as a pseudo-terminal), RTS/CTS flow control, reads
// that end on a line silence (the Modbus RTU 3.5-character rule), and
// pseudo-terminal pairs for tests and simulators.
package serialport

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"go.bug.st/serial"

	"github.com/fleet/fleet/hw"
)

// ErrClosed is returned when the port was closed or the device went away.
var ErrClosed = errors.New("port closed")

// ErrTimeout is returned by ReadFrame when nothing arrived in time.
var ErrTimeout = errors.New("no reply")

// Settings are the line settings of a port.
type Settings struct {
	BaudRate int
	DataBits int
	// Parity is "none", "even" or "odd".
	Parity   string
	StopBits int
	// RTSCTS enables hardware flow control.
	RTSCTS bool
	// RS485 asks the driver to drive the transceiver's RTS/DE line
	// (TIOCSRS485). Ttys without RS485 support log once and carry on.
	RS485 bool
}

// CharBits is the number of bits one character occupies on the wire: start
// bit, data bits, parity bit, stop bits.
func (s Settings) CharBits() int {
	n := 1 + s.DataBits + s.StopBits
	if s.Parity == "even" || s.Parity == "odd" {
		n++
	}
	return n
}

// CharTime is the wire time of one character at the configured settings.
func (s Settings) CharTime() time.Duration {
	if s.BaudRate <= 0 {
		return 0
	}
	return time.Duration(s.CharBits()) * time.Second / time.Duration(s.BaudRate)
}

// Silence returns the Modbus RTU inter-frame silence t3.5: 3.5 characters of
// 11 bits at the baud rate, and the specification's fixed 1.75 ms above
// 19200 baud.
func Silence(baud int) time.Duration {
	if baud > 19200 || baud <= 0 {
		return 1750 * time.Microsecond
	}
	return time.Duration(35*11) * time.Second / time.Duration(10*baud)
}

func (s Settings) mode() (*serial.Mode, error) {
	m := &serial.Mode{BaudRate: s.BaudRate, DataBits: s.DataBits}
	switch s.Parity {
	case "none", "":
		m.Parity = serial.NoParity
	case "even":
		m.Parity = serial.EvenParity
	case "odd":
		m.Parity = serial.OddParity
	default:
		return nil, fmt.Errorf("parity %q: must be none, even or odd", s.Parity)
	}
	switch s.StopBits {
	case 1:
		m.StopBits = serial.OneStopBit
	case 2:
		m.StopBits = serial.TwoStopBits
	default:
		return nil, fmt.Errorf("stop bits %d: must be 1 or 2", s.StopBits)
	}
	return m, nil
}

// Port is an open serial port. Read and Write may run concurrently; reads
// must come from one goroutine at a time.
type Port struct {
	device string
	log    *slog.Logger
	sp     serial.Port
	ctl    control // OS-specific handle for ioctls (RS485, flow control)

	mu       sync.Mutex
	settings Settings
	closed   bool
	warned   map[string]bool
	rs485Err error
}

// OpenDevice opens a serial channel's tty for its driver: a device that
// does not exist returns an error wrapping hw.ErrDeviceMissing, and log
// comes back scoped with the device, for the driver's own records (one
// that discards when log is nil).
func OpenDevice(device string, s Settings, log *slog.Logger) (*Port, *slog.Logger, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(device); errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%s: %w", device, hw.ErrDeviceMissing)
	}
	p, err := Open(device, s, log)
	if err != nil {
		return nil, nil, err
	}
	return p, log.With("device", device), nil
}

// Reopen opens device again, for a driver whose tty went away, with the
// settings that settings returns at each attempt, until it succeeds or ctx
// ends (nil). Between attempts it waits lo (100 ms when 0), then twice as
// long each time, up to hi (5 s when 0).
func Reopen(ctx context.Context, device string, settings func() Settings, lo, hi time.Duration, log *slog.Logger) *Port {
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 5 * time.Second
	}
	for backoff := lo; ctx.Err() == nil; backoff = min(2*backoff, hi) {
		p, err := Open(device, settings(), log)
		if err == nil {
			log.Info("port reopened")
			return p
		}
		log.Debug("reopen failed", "err", err, "retry", backoff)
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
	return nil
}

// Open opens device with s. The returned error wraps ErrClosed when the
// device does not exist.
func Open(device string, s Settings, log *slog.Logger) (*Port, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m, err := s.mode()
	if err != nil {
		return nil, err
	}
	p := &Port{device: device, log: log.With("device", device), warned: map[string]bool{}}
	// The control handle is opened before go.bug.st/serial takes the tty
	// exclusively (TIOCEXCL), so ioctls keep working afterwards.
	ctl, err := openControl(device)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w: %w", device, ErrClosed, err)
	}
	p.ctl = ctl
	sp, err := serial.Open(device, m)
	if err != nil {
		ctl.close()
		return nil, fmt.Errorf("open %s: %w: %w", device, ErrClosed, err)
	}
	p.sp = sp
	if err := p.applyExtras(s); err != nil {
		p.Close()
		return nil, err
	}
	p.settings = s
	return p, nil
}

// Device returns the device path the port was opened on.
func (p *Port) Device() string { return p.device }

// Settings returns the settings in effect.
func (p *Port) Settings() Settings {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settings
}

// Configure applies new line settings to the open port.
func (p *Port) Configure(s Settings) error {
	m, err := s.mode()
	if err != nil {
		return err
	}
	if err := p.sp.SetMode(m); err != nil {
		return fmt.Errorf("configure %s: %w", p.device, mapErr(err))
	}
	if err := p.applyExtras(s); err != nil {
		return err
	}
	p.mu.Lock()
	p.settings = s
	p.mu.Unlock()
	return nil
}

// applyExtras sets what go.bug.st/serial does not: flow control (which
// SetMode always clears) and RS485 mode.
func (p *Port) applyExtras(s Settings) error {
	if err := p.ctl.setRTSCTS(s.RTSCTS); err != nil {
		if !s.RTSCTS {
			p.warnOnce("rtscts", "cannot clear RTS/CTS flow control", err)
			return nil
		}
		return fmt.Errorf("rtscts on %s: %w", p.device, err)
	}
	err := p.ctl.setRS485(s.RS485)
	if err != nil && !errors.Is(err, errors.ErrUnsupported) {
		return fmt.Errorf("rs485 mode on %s: %w", p.device, err)
	}
	p.mu.Lock()
	p.rs485Err = err
	p.mu.Unlock()
	return nil
}

// RS485Unsupported returns why RS485 mode was asked for and is not in
// effect (the tty answered TIOCSRS485 with ENOTTY or EINVAL: a
// pseudo-terminal, a UART without RS485 wiring, an adapter that switches
// direction by itself), or nil. The port works as a plain serial port
// then; the caller decides how often to say so.
func (p *Port) RS485Unsupported() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.rs485Err
}

func (p *Port) warnOnce(key, msg string, err error) {
	p.mu.Lock()
	seen := p.warned[key]
	p.warned[key] = true
	p.mu.Unlock()
	if !seen {
		p.log.Info(msg, "err", err)
	}
}

// Write writes b to the port.
func (p *Port) Write(b []byte) (int, error) {
	n, err := p.sp.Write(b)
	if err != nil {
		return n, fmt.Errorf("write %s: %w", p.device, mapErr(err))
	}
	return n, nil
}

// Read reads whatever is available, waiting at most timeout (a negative
// timeout waits forever). It returns 0, nil on timeout.
func (p *Port) Read(b []byte, timeout time.Duration) (int, error) {
	if timeout < 0 {
		timeout = serial.NoTimeout
	}
	if err := p.sp.SetReadTimeout(timeout); err != nil {
		return 0, fmt.Errorf("read %s: %w", p.device, mapErr(err))
	}
	n, err := p.sp.Read(b)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", p.device, mapErr(err))
	}
	return n, nil
}

// Flush discards unread input.
func (p *Port) Flush() error {
	if err := p.sp.ResetInputBuffer(); err != nil {
		return fmt.Errorf("flush %s: %w", p.device, mapErr(err))
	}
	return nil
}

// ReadFrame reads one frame that ends on a line silence: it waits up to
// first for the first byte, then reads until no byte arrives for silence,
// max bytes have arrived, or done reports the frame complete (done may be
// nil). Every chunk is passed to onChunk (may be nil) as it arrives, so a
// caller can forward bytes before the frame ends. It returns ErrTimeout
// when nothing arrived.
func (p *Port) ReadFrame(first, silence time.Duration, max int, onChunk func([]byte), done func([]byte) bool) ([]byte, error) {
	b, _, err := p.ReadFrameAt(first, silence, max, onChunk, done)
	return b, err
}

// ReadFrameAt is ReadFrame that also returns when the frame's last byte
// was read (the zero time when nothing arrived): the line has been silent
// since then.
func (p *Port) ReadFrameAt(first, silence time.Duration, max int, onChunk func([]byte), done func([]byte) bool) ([]byte, time.Time, error) {
	buf := make([]byte, max)
	n := 0
	timeout := first
	var last time.Time
	for n < max {
		k, err := p.Read(buf[n:], timeout)
		if k > 0 {
			last = time.Now()
			if onChunk != nil {
				onChunk(buf[n : n+k])
			}
			n += k
			if done != nil && done(buf[:n]) {
				break
			}
		}
		if err != nil {
			return buf[:n], last, err
		}
		if k == 0 {
			if n == 0 {
				return nil, last, ErrTimeout
			}
			break
		}
		timeout = silence
	}
	return buf[:n], last, nil
}

// Close closes the port.
func (p *Port) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	var err error
	if p.sp != nil {
		err = p.sp.Close()
	}
	if p.ctl != nil {
		p.ctl.close()
	}
	return err
}

func mapErr(err error) error {
	var pe *serial.PortError
	if errors.As(err, &pe) {
		switch pe.Code() {
		case serial.PortClosed, serial.PortNotFound:
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
	}
	if isGoneErr(err) {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	return err
}
