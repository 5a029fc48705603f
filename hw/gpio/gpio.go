// Package gpio drives a GPIO channel through periph.io: an input with pull
// and software debounce feeds live ("0" or "1"); an output is driven by tx,
// each send setting the line to tx.value, every intervalMs or once.
//
// The driver runs on periph's gpio.PinIO, so tests use periph's gpiotest
// fakes. On Linux, OpenLine resolves a catalog device "gpiochipN:LINE"
// (chip name as in /dev, line offset on that chip) to a line of the GPIO
// character device through periph.io/x/host/v3/gpioioctl; elsewhere it
// returns errors.ErrUnsupported.
package gpio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	pgpio "periph.io/x/conn/v3/gpio"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/shared/tick"
)

// pollInterval bounds how long the input loop waits for an edge before it
// reads the line again; it also bounds how long Apply and Close wait for
// the loop to stop.
const pollInterval = 50 * time.Millisecond

// ErrClosed is returned by Apply after Close.
var ErrClosed = errors.New("gpio port closed")

// ParseDevice splits a catalog device "gpiochip0:5" into chip name and
// line offset.
func ParseDevice(dev string) (chip string, line int, err error) {
	c, l, ok := strings.Cut(dev, ":")
	if !ok || c == "" || l == "" {
		return "", 0, fmt.Errorf("gpio device %q: want CHIP:LINE (for example gpiochip0:5)", dev)
	}
	if strings.ContainsAny(c, "/.") {
		return "", 0, fmt.Errorf("gpio device %q: chip must be a name under /dev, not a path", dev)
	}
	n, err := strconv.Atoi(l)
	if err != nil || n < 0 || n > 511 {
		return "", 0, fmt.Errorf("gpio device %q: line must be a number 0..511", dev)
	}
	return c, n, nil
}

// Options configure a Port.
type Options struct {
	// Name names the channel in errors and logs ("gpio-1").
	Name string
	// Device is the catalog device ("gpiochip0:5"), for messages.
	Device string
	// Pin is the line.
	Pin pgpio.PinIO
	// Release, if set, releases the line on Close.
	Release func() error
	// Logger receives debug records; nil discards.
	Logger *slog.Logger
	// Now replaces time.Now for the debounce (tests); nil is time.Now.
	Now func() time.Time
}

// Port is a running GPIO channel. It implements hw.Port.
type Port struct {
	opt Options
	log *slog.Logger
	now func() time.Time

	guard hw.Guard // serialises Apply and Close
	stop  context.CancelFunc
	done  chan struct{}

	mu     sync.Mutex
	live   string
	txOn   bool
	err    string
	writes int
	// driven is set while the line is an output the port drove, to
	// level: reading an output back is not portable (periph's Linux
	// line turns itself into a pulled-up input to read).
	driven bool
	level  pgpio.Level
	// input is set while the line is an input; readAt is when the input
	// loop last read it (the level point's time).
	input  bool
	readAt time.Time
}

var (
	_ hw.Port        = (*Port)(nil)
	_ hw.PointReader = (*Port)(nil)
)

// New applies cfg to the line and starts the channel.
func New(ctx context.Context, opt Options, cfg serialcfg.Config) (*Port, error) {
	if opt.Pin == nil {
		return nil, errors.New("gpio: Options.Pin is required")
	}
	now := opt.Now
	if now == nil {
		now = time.Now
	}
	p := &Port{opt: opt, log: hw.ChannelLogger(opt.Logger, opt.Name, opt.Device), now: now}
	if err := p.Apply(ctx, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

func pullOf(s string) pgpio.Pull {
	switch s {
	case "up":
		return pgpio.PullUp
	case "down":
		return pgpio.PullDown
	}
	return pgpio.Float
}

func levelString(l pgpio.Level) string {
	if l == pgpio.High {
		return "1"
	}
	return "0"
}

// Apply reconfigures the line: direction, pull, debounce and tx take
// effect at once. An invalid configuration, or one the line refuses,
// returns an error; a refused one leaves the line as the error describes.
func (p *Port) Apply(ctx context.Context, cfg serialcfg.Config) error {
	if err := hw.CheckConfig("gpio "+p.opt.Name, serialcfg.KindGPIO, cfg); err != nil {
		return err
	}
	c := *cfg.GPIO

	p.guard.Lock()
	defer p.guard.Unlock()
	if p.guard.Closed() {
		return fmt.Errorf("gpio %s: %w", p.opt.Name, ErrClosed)
	}
	p.stopLoop()

	loopCtx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	if c.Direction == "in" {
		edges := true
		if err := p.opt.Pin.In(pullOf(c.Pull), pgpio.BothEdges); err != nil {
			// Some lines cannot report edges: poll them instead.
			p.log.Debug("edge detection unavailable, polling", "err", err)
			edges = false
			if err := p.opt.Pin.In(pullOf(c.Pull), pgpio.NoEdge); err != nil {
				cancel()
				p.setErr("input setup failed: " + err.Error())
				return fmt.Errorf("gpio %s: %s as input: %w", p.opt.Name, p.opt.Device, err)
			}
		}
		lvl := p.opt.Pin.Read()
		p.mu.Lock()
		p.live, p.txOn, p.err, p.driven = levelString(lvl), false, "", false
		p.input, p.readAt = true, p.now()
		p.mu.Unlock()
		go p.inputLoop(loopCtx, done, edges, lvl, time.Duration(c.DebounceMs)*time.Millisecond)
	} else {
		p.mu.Lock()
		driven, level := p.driven, p.level
		p.input = false
		p.mu.Unlock()
		if !driven {
			level = p.opt.Pin.Read()
		}
		if c.Tx.Enabled && c.Tx.Value == 1 {
			level = pgpio.High
		} else if c.Tx.Enabled {
			level = pgpio.Low
		}
		// Switch to output holding the current level until tx sends.
		if err := p.out(level); err != nil {
			cancel()
			return fmt.Errorf("gpio %s: %s as output: %w", p.opt.Name, p.opt.Device, err)
		}
		p.mu.Lock()
		p.txOn = c.Tx.Enabled
		p.mu.Unlock()
		if c.Tx.Enabled {
			go p.outputLoop(loopCtx, done, level, time.Duration(c.Tx.IntervalMs)*time.Millisecond)
		} else {
			close(done)
		}
	}
	p.stop, p.done = cancel, done
	return nil
}

func (p *Port) setErr(s string) {
	p.mu.Lock()
	p.err = s
	p.mu.Unlock()
}

// out drives the line and records the level in live.
func (p *Port) out(l pgpio.Level) error {
	err := p.opt.Pin.Out(l)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		p.err = "write failed: " + err.Error()
		return err
	}
	p.writes++
	p.live, p.err = levelString(l), ""
	p.driven, p.level = true, l
	return nil
}

// outputLoop sets the line to level now (already done by Apply) and then
// every interval; a single send (interval 0) ends txOn.
func (p *Port) outputLoop(ctx context.Context, done chan struct{}, level pgpio.Level, interval time.Duration) {
	defer close(done)
	tick.Every(ctx, interval, func() {
		if err := p.out(level); err != nil {
			p.log.Warn("write failed", "err", err)
		}
	})
	if interval == 0 {
		p.mu.Lock()
		p.txOn = false
		p.mu.Unlock()
	}
}

// inputLoop waits for edges (or polls), and moves live to a new level
// once the line has held it for debounce.
func (p *Port) inputLoop(ctx context.Context, done chan struct{}, edges bool, stable pgpio.Level, debounce time.Duration) {
	defer close(done)
	cand, since := stable, p.now()
	for ctx.Err() == nil {
		wait := pollInterval
		if cand != stable {
			if rest := debounce - p.now().Sub(since); rest < wait {
				wait = max(rest, time.Millisecond)
			}
		}
		if edges {
			p.opt.Pin.WaitForEdge(wait)
		} else {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		lvl := p.opt.Pin.Read()
		now := p.now()
		if lvl != cand {
			cand, since = lvl, now
		}
		if cand != stable && now.Sub(since) >= debounce {
			stable = cand
		}
		p.mu.Lock()
		p.live, p.readAt = levelString(stable), now
		p.mu.Unlock()
	}
}

// stopLoop stops the running loop and waits for it. guard held.
func (p *Port) stopLoop() {
	if p.stop == nil {
		return
	}
	p.stop()
	<-p.done
	p.stop, p.done = nil, nil
}

// Telemetry returns the channel's current telemetry.
func (p *Port) Telemetry() serialcfg.Telemetry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.guard.Closed() {
		return serialcfg.Telemetry{Live: p.live, Error: "port closed"}
	}
	return serialcfg.Telemetry{Live: p.live, TxOn: p.txOn, Error: p.err}
}

// ReadPoints returns the level point of an input (hw.PointReader): the
// debounced level as 0 or 1, At the time the line was last read; an output
// has no points.
func (p *Port) ReadPoints() []hw.PointReading {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.input {
		return nil
	}
	r := hw.PointReading{Name: serialcfg.GPIOLevelPoint, At: p.readAt}
	switch {
	case p.err != "":
		r.Err = p.err
	case p.live == "1":
		r.Value = 1
	}
	return []hw.PointReading{r}
}

// Writes returns how many times the line was driven; for tests.
func (p *Port) Writes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.writes
}

// Close stops the channel and releases the line.
func (p *Port) Close() error {
	return p.guard.Close(func() error {
		p.stopLoop()
		if p.opt.Release != nil {
			return p.opt.Release()
		}
		return nil
	})
}
