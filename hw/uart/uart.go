// Package uart is the UART channel driver: a raw serial tty whose received
// bytes are cut into lines for live telemetry (the last line, printable
// characters only, at most 256), which transmits tx.dataHex every
// intervalMs (or once), reopens a tty that went away, and lends the line to
// a raw passthrough client byte for byte.
package uart

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/serialport"
	"github.com/fleet/fleet/shared/serialcfg"
)

// MaxLine is the longest live line, in characters.
const MaxLine = 256

// maxPending bounds an unterminated line kept while waiting for its end.
const maxPending = 4096

// ErrBusy is returned by ServeRaw while another raw client holds the port.
var ErrBusy = errors.New("uart: a raw client is already attached")

// Options tune a Port; zero fields take the defaults.
type Options struct {
	// ReopenMin and ReopenMax bound the backoff between attempts to reopen
	// a tty that went away (defaults 100 ms and 5 s).
	ReopenMin, ReopenMax time.Duration
}

// Port is a UART channel. It implements hw.Port.
type Port struct {
	device string
	log    *slog.Logger
	opts   Options

	loop hw.Loop

	// wmu serializes writes (tx and a raw client) and guards sp swaps.
	wmu sync.Mutex
	sp  *serialport.Port

	mu       sync.Mutex
	settings serialport.Settings
	tx       *txJob
	managed  bool
	live     string
	txOn     bool
	portErr  string
	txErr    string
	pending  []byte
	sink     io.Writer
}

type txJob struct {
	data     []byte
	interval time.Duration
	next     time.Time
}

var _ hw.Port = (*Port)(nil)

// Open opens device as a UART channel with cfg. A device that does not
// exist returns an error wrapping hw.ErrDeviceMissing.
func Open(ctx context.Context, device string, cfg serialcfg.Config, log *slog.Logger) (*Port, error) {
	return OpenWith(ctx, device, cfg, log, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, device string, cfg serialcfg.Config, log *slog.Logger, opts Options) (*Port, error) {
	if err := hw.CheckConfig("uart "+device, serialcfg.KindUART, cfg); err != nil {
		return nil, err
	}
	s := settingsFor(cfg.UART)
	sp, log, err := serialport.OpenDevice(device, s, log)
	if err != nil {
		return nil, fmt.Errorf("uart: %w", err)
	}
	p := &Port{device: device, log: log, opts: opts, sp: sp, settings: s, managed: true}
	if err := p.Apply(ctx, cfg); err != nil {
		sp.Close()
		return nil, err
	}
	p.loop.Start(p.run)
	return p, nil
}

func settingsFor(c *serialcfg.UART) serialport.Settings {
	return serialport.Settings{BaudRate: c.BaudRate, DataBits: c.DataBits, Parity: c.Parity,
		StopBits: c.StopBits, RTSCTS: c.FlowControl == "rtscts"}
}

// Apply changes the configuration live. An enabled tx with intervalMs 0
// sends once per Apply.
func (p *Port) Apply(ctx context.Context, cfg serialcfg.Config) error {
	if err := hw.CheckConfig("uart "+p.device, serialcfg.KindUART, cfg); err != nil {
		return err
	}
	data, err := serialcfg.ParseHexBytes(cfg.UART.Tx.DataHex)
	if err != nil {
		return fmt.Errorf("uart %s: tx.dataHex: %w", p.device, err)
	}
	s := settingsFor(cfg.UART)
	p.wmu.Lock()
	if p.sp != nil && p.sp.Settings() != s {
		if err := p.sp.Configure(s); err != nil {
			p.wmu.Unlock()
			return fmt.Errorf("uart %s: %w", p.device, err)
		}
	}
	p.wmu.Unlock()
	p.mu.Lock()
	p.settings = s
	p.tx, p.txOn, p.txErr = nil, false, ""
	if cfg.UART.Tx.Enabled && len(data) > 0 {
		p.tx = &txJob{data: data, interval: time.Duration(cfg.UART.Tx.IntervalMs) * time.Millisecond, next: time.Now()}
		p.txOn = true
	}
	p.mu.Unlock()
	p.loop.Wake()
	return nil
}

// SerialSettings returns the line settings in effect.
func (p *Port) SerialSettings() serialport.Settings {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.settings
}

// SetManaged starts (true, the default) or pauses (false) the port's own
// tx; received lines keep feeding live either way.
func (p *Port) SetManaged(on bool) {
	p.mu.Lock()
	p.managed = on
	p.mu.Unlock()
	p.loop.Wake()
}

// Telemetry returns the last line received, txOn and error.
func (p *Port) Telemetry() serialcfg.Telemetry {
	p.mu.Lock()
	defer p.mu.Unlock()
	e := p.portErr
	if e == "" {
		e = p.txErr
	}
	return serialcfg.Telemetry{Live: p.live, TxOn: p.txOn, Error: e}
}

// Close stops the channel and closes the tty.
func (p *Port) Close() error {
	p.loop.Stop()
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.sp != nil {
		p.sp.Close()
		p.sp = nil
	}
	return nil
}

// ServeRaw lends the line to a raw client until rw fails or ctx ends:
// bytes from the client go to the tty (never inside one of tx's writes),
// bytes from the tty go to the client as they arrive (and still feed
// live). One client at a time; a second one gets ErrBusy. It returns nil
// when the client closes.
func (p *Port) ServeRaw(ctx context.Context, rw io.ReadWriter) error {
	p.mu.Lock()
	if p.sink != nil {
		p.mu.Unlock()
		return ErrBusy
	}
	p.sink = rw
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.sink = nil
		p.mu.Unlock()
	}()
	buf := make([]byte, 4096)
	for {
		n, err := rw.Read(buf)
		if n > 0 {
			if werr := p.write(buf[:n]); werr != nil {
				p.log.Debug("raw write dropped", "err", werr)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

func (p *Port) write(b []byte) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	if p.sp == nil {
		return serialport.ErrClosed
	}
	_, err := p.sp.Write(b)
	return err
}

// run reads the tty (in its own goroutine per open) and drives tx, and
// reopens the tty when it goes away.
func (p *Port) run(ctx context.Context) {
	for ctx.Err() == nil {
		p.wmu.Lock()
		sp := p.sp
		p.wmu.Unlock()
		if sp == nil {
			p.setPortErr("port closed")
			if sp = serialport.Reopen(ctx, p.device, p.SerialSettings, p.opts.ReopenMin, p.opts.ReopenMax, p.log); sp == nil {
				return
			}
			p.wmu.Lock()
			p.sp = sp
			p.wmu.Unlock()
			p.setPortErr("")
		}
		lost := make(chan struct{})
		go p.read(ctx, sp, lost)
		p.transmit(ctx, lost)
		<-lost
		p.wmu.Lock()
		if p.sp == sp {
			sp.Close()
			p.sp = nil
		}
		p.wmu.Unlock()
	}
}

// transmit runs tx until ctx ends or the reader reports the tty lost.
func (p *Port) transmit(ctx context.Context, lost chan struct{}) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := time.Hour
		p.mu.Lock()
		tx := p.tx
		var data []byte
		if tx != nil && p.managed {
			if d := time.Until(tx.next); d > 0 {
				wait = d
			} else {
				data = tx.data
				tx.next = hw.NextSend(time.Now(), tx.interval)
			}
		}
		p.mu.Unlock()
		if data != nil {
			err := p.write(data)
			p.mu.Lock()
			if err != nil {
				p.txErr = "write failed"
			} else {
				p.txErr = ""
			}
			if p.tx == tx && tx.interval == 0 {
				if errors.Is(err, serialport.ErrClosed) {
					tx.next = time.Now() // send it once the port is back
				} else {
					p.tx, p.txOn = nil, false
				}
			}
			p.mu.Unlock()
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-lost:
			return
		case <-p.loop.Woken():
		case <-timer.C:
		}
	}
}

func (p *Port) read(ctx context.Context, sp *serialport.Port, lost chan struct{}) {
	defer close(lost)
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		n, err := sp.Read(buf, 100*time.Millisecond)
		if n > 0 {
			p.received(buf[:n])
		}
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("serial port lost", "err", err)
			}
			return
		}
	}
}

// received forwards b to a raw client and cuts it into lines.
func (p *Port) received(b []byte) {
	p.mu.Lock()
	sink := p.sink
	p.mu.Unlock()
	if sink != nil {
		if _, err := sink.Write(b); err != nil {
			p.log.Debug("raw client write", "err", err)
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range b {
		if c == '\n' || c == '\r' {
			if len(p.pending) > 0 {
				p.live = printable(p.pending)
				p.pending = p.pending[:0]
			}
			continue
		}
		if len(p.pending) >= maxPending {
			p.live = printable(p.pending)
			p.pending = p.pending[:0]
		}
		p.pending = append(p.pending, c)
	}
}

// printable keeps the printable characters of b (invalid UTF-8 and control
// characters dropped), at most MaxLine of them.
func printable(b []byte) string {
	out := make([]rune, 0, min(len(b), MaxLine))
	for len(b) > 0 && len(out) < MaxLine {
		r, size := utf8.DecodeRune(b)
		b = b[size:]
		if r == utf8.RuneError && size <= 1 {
			continue
		}
		if unicode.IsPrint(r) {
			out = append(out, r)
		}
	}
	return string(out)
}

func (p *Port) setPortErr(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.portErr = s
}
