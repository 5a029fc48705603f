// Package modbus is the RS485 channel driver: a Modbus RTU master on a
// serial tty. Requests are built and replies checked by the goburrow line's
// maintained fork github.com/grid-x/modbus; the transport underneath is our
// own, over go.bug.st/serial (through hw/serialport), and ends a reply frame
// on the 3.5-character line silence rather than after a fixed sleep. The
// port polls registers (functions 3 and 4) of one or several slaves into
// live telemetry, writes a register (function 6) for tx, reads points
// (typed values decoded from registers, coils and discrete inputs in
// planned transactions, points.go), reports timeouts, CRC errors and
// exceptions by name, reopens a port that went away, and shares the bus
// with a raw passthrough client transaction by transaction.
package modbus

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	gridx "github.com/grid-x/modbus"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/serialport"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Options tune a Port; zero fields take the defaults.
type Options struct {
	// ResponseTimeout is how long a slave has to start its reply after the
	// request left the line (default 500 ms).
	ResponseTimeout time.Duration
	// OwnerGap is the extra idle time between the managed master and a raw
	// client when the bus changes hands (default 5 ms).
	OwnerGap time.Duration
	// ReopenMin and ReopenMax bound the backoff between attempts to reopen
	// a port that went away (defaults 100 ms and 5 s).
	ReopenMin, ReopenMax time.Duration
}

func (o Options) withDefaults() Options {
	if o.ResponseTimeout <= 0 {
		o.ResponseTimeout = 500 * time.Millisecond
	}
	if o.OwnerGap <= 0 {
		o.OwnerGap = 5 * time.Millisecond
	}
	return o
}

// Port is an RS485 channel running a Modbus RTU master. It implements
// hw.Port.
type Port struct {
	device string
	log    *slog.Logger
	opts   Options
	bus    *Bus

	loop hw.Loop

	mu       sync.Mutex
	cfg      serialcfg.RS485
	polls    []*pollJob
	tx       *txJob
	managed  bool
	live     string
	txOn     bool
	portErr  string
	slaveErr map[int]slaveErr
	seq      uint64
	// gen is the configuration's generation, advanced by every Apply:
	// each job carries the one it was scheduled under, and a result of an
	// older one (a transaction still in flight when Apply moved the
	// polling elsewhere) is dropped.
	gen uint64
	// points are the configured points with their latest readings; blocks
	// the transactions that read them (points.go); backoff the slaves
	// that stopped answering.
	points  []pointSlot
	blocks  []*block
	backoff map[int]*slaveBackoff
	// rs485Noted is set once the missing RS485 mode has been logged.
	rs485Noted bool
}

type pollJob struct {
	poll serialcfg.ModbusPoll
	next time.Time
}

type txJob struct {
	slave, register, value int
	interval               time.Duration
	next                   time.Time
}

type slaveErr struct {
	cause string
	seq   uint64
}

var _ hw.Port = (*Port)(nil)

// Open opens device as an RS485 Modbus RTU master with cfg. A device that
// does not exist returns an error wrapping hw.ErrDeviceMissing.
func Open(ctx context.Context, device string, cfg serialcfg.Config, log *slog.Logger) (*Port, error) {
	return OpenWith(ctx, device, cfg, log, Options{})
}

// OpenWith is Open with options.
func OpenWith(ctx context.Context, device string, cfg serialcfg.Config, log *slog.Logger, opts Options) (*Port, error) {
	if err := hw.CheckConfig("modbus "+device, serialcfg.KindRS485, cfg); err != nil {
		return nil, err
	}
	opts = opts.withDefaults()
	s := settingsFor(cfg.RS485)
	sp, log, err := serialport.OpenDevice(device, s, log)
	if err != nil {
		return nil, fmt.Errorf("modbus: %w", err)
	}
	p := &Port{
		device:   device,
		log:      log,
		opts:     opts,
		bus:      newBus(s, opts.ResponseTimeout, opts.OwnerGap),
		managed:  true,
		slaveErr: map[int]slaveErr{},
		backoff:  map[int]*slaveBackoff{},
	}
	p.bus.setPort(sp)
	p.noteRS485(sp)
	if err := p.Apply(ctx, cfg); err != nil {
		sp.Close()
		return nil, err
	}
	p.loop.Start(p.run)
	return p, nil
}

func settingsFor(c *serialcfg.RS485) serialport.Settings {
	return serialport.Settings{
		BaudRate: c.BaudRate,
		DataBits: c.DataBits,
		Parity:   c.Parity,
		StopBits: c.StopBits,
		RS485:    true,
	}
}

// Bus returns the port's bus, for raw access.
func (p *Port) Bus() *Bus { return p.bus }

// Apply changes the configuration live: serial settings are applied to the
// open tty between transactions, polls, tx and points restart on the new
// values. An enabled tx with intervalMs 0 writes once per Apply. What a
// transaction of the previous configuration still in flight returns is
// dropped: errors belong to what the current configuration reads.
func (p *Port) Apply(ctx context.Context, cfg serialcfg.Config) error {
	if err := hw.CheckConfig("modbus "+p.device, serialcfg.KindRS485, cfg); err != nil {
		return err
	}
	c := *cfg.RS485
	c.Polls = append([]serialcfg.ModbusPoll(nil), c.Polls...)
	if c.Poll != nil {
		pp := *c.Poll
		c.Poll = &pp
	}
	c.Points = append([]serialcfg.RS485Point(nil), c.Points...)
	// Results of transactions in flight are stale from here on.
	p.mu.Lock()
	p.gen++
	p.mu.Unlock()
	if err := p.bus.configure(ctx, settingsFor(&c)); err != nil {
		return fmt.Errorf("modbus %s: %w", p.device, err)
	}
	now := time.Now()
	p.mu.Lock()
	p.gen++
	p.cfg = c
	p.polls = p.polls[:0]
	keep := map[int]bool{}
	for _, poll := range c.ActivePolls() {
		p.polls = append(p.polls, &pollJob{poll: poll, next: now})
		keep[poll.SlaveID] = true
	}
	p.tx = nil
	p.txOn = false
	if c.Tx.Enabled {
		p.tx = &txJob{slave: c.SlaveID, register: c.Tx.Register, value: c.Tx.Value,
			interval: time.Duration(c.Tx.IntervalMs) * time.Millisecond, next: now}
		p.txOn = true
		keep[c.SlaveID] = true
	}
	p.setPoints(c, now, keep)
	for id := range p.slaveErr {
		if !keep[id] {
			delete(p.slaveErr, id)
		}
	}
	for id := range p.backoff {
		if !keep[id] {
			delete(p.backoff, id)
		}
	}
	p.mu.Unlock()
	p.loop.Wake()
	return nil
}

// SetManaged starts (true, the default) or pauses (false) the port's own
// polling and tx. The agent pauses them in passthrough mode, where the raw
// client alone uses the bus; in mode both they run and share the bus.
func (p *Port) SetManaged(on bool) {
	p.mu.Lock()
	p.managed = on
	p.mu.Unlock()
	p.loop.Wake()
}

// Telemetry returns live (the last registers read or written, decimal,
// space separated), txOn and error ("" or a short cause).
func (p *Port) Telemetry() serialcfg.Telemetry {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := serialcfg.Telemetry{Live: p.live, TxOn: p.txOn, Error: p.portErr}
	if t.Error == "" {
		var best slaveErr
		for _, e := range p.slaveErr {
			if e.seq > best.seq {
				best = e
			}
		}
		t.Error = best.cause
	}
	return t
}

// Close stops the master and closes the tty.
func (p *Port) Close() error {
	p.loop.Stop()
	p.bus.setPort(nil)
	return nil
}

func (p *Port) run(ctx context.Context) {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for ctx.Err() == nil {
		if !p.bus.hasPort() {
			p.setPortErr("port closed")
			sp := serialport.Reopen(ctx, p.device, p.bus.currentSettings, p.opts.ReopenMin, p.opts.ReopenMax, p.log)
			if sp == nil {
				return
			}
			p.bus.setPort(sp)
			p.noteRS485(sp)
			p.setPortErr("")
		}
		job, wait := p.next(time.Now())
		if job != nil {
			job(ctx)
			continue
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return
		case <-p.loop.Woken():
		case <-p.bus.lost:
		case <-timer.C:
		}
	}
}

// noteRS485 logs once per Port that the tty has no RS485 mode.
func (p *Port) noteRS485(sp *serialport.Port) {
	err := sp.RS485Unsupported()
	if err == nil {
		return
	}
	p.mu.Lock()
	seen := p.rs485Noted
	p.rs485Noted = true
	p.mu.Unlock()
	if !seen {
		p.log.Info("tty has no RS485 mode (TIOCSRS485); using it as a plain serial port", "err", err)
	}
}

// next returns the job due at now, or how long to wait for one.
func (p *Port) next(now time.Time) (func(context.Context), time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	wait := time.Hour
	if !p.managed {
		return nil, wait
	}
	gen := p.gen
	var due *pollJob
	for _, j := range p.polls {
		if d := j.next.Sub(now); d <= 0 {
			if due == nil || j.next.Before(due.next) {
				due = j
			}
		} else {
			wait = min(wait, d)
		}
	}
	blk, bwait := p.dueBlock(now)
	wait = min(wait, bwait)
	if blk != nil && (due == nil || blk.next.Before(due.next)) && (p.tx == nil || blk.next.Before(p.tx.next)) {
		blk.next = now.Add(blk.interval)
		job := *blk
		return func(ctx context.Context) { p.readBlock(ctx, gen, blk, job) }, 0
	}
	if tx := p.tx; tx != nil {
		if d := tx.next.Sub(now); d <= 0 && (due == nil || !due.next.Before(tx.next)) {
			tx.next = hw.NextSend(now, tx.interval)
			job := *tx
			return func(ctx context.Context) { p.write(ctx, gen, tx, job) }, 0
		} else if d > 0 {
			wait = min(wait, d)
		}
	}
	if due != nil {
		due.next = now.Add(time.Duration(due.poll.IntervalMs) * time.Millisecond)
		poll := due.poll
		return func(ctx context.Context) { p.read(ctx, gen, poll) }, 0
	}
	return nil, wait
}

func (p *Port) client(slave int) gridx.Client {
	pk := gridx.NewRTUClientHandler("")
	pk.SlaveID = byte(slave)
	return gridx.NewClient2(pk, transport{bus: p.bus})
}

func (p *Port) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, 4*p.opts.ResponseTimeout+time.Second)
}

func (p *Port) read(ctx context.Context, gen uint64, poll serialcfg.ModbusPoll) {
	cctx, cancel := p.callCtx(ctx)
	defer cancel()
	regs, err := p.ReadRegisters(cctx, poll.SlaveID, poll.Function == "input", uint16(poll.Register), uint16(poll.Count))
	if ctx.Err() != nil {
		return
	}
	if err != nil {
		p.fail(gen, poll.SlaveID, err)
		return
	}
	vals := make([]string, len(regs))
	for i, v := range regs {
		vals[i] = strconv.Itoa(int(v))
	}
	p.ok(gen, poll.SlaveID, strings.Join(vals, " "))
}

func (p *Port) write(ctx context.Context, gen uint64, live *txJob, job txJob) {
	cctx, cancel := p.callCtx(ctx)
	defer cancel()
	_, err := p.client(job.slave).WriteSingleRegister(cctx, uint16(job.register), uint16(job.value))
	if ctx.Err() != nil {
		return
	}
	if job.interval == 0 {
		// A single send is done once it has been on the bus; one that
		// found the port closed goes out when the port is back.
		p.mu.Lock()
		if p.tx == live {
			if errors.Is(err, ErrPortClosed) {
				live.next = time.Now()
			} else {
				p.tx, p.txOn = nil, false
			}
		}
		p.mu.Unlock()
	}
	if err != nil {
		p.fail(gen, job.slave, err)
		return
	}
	p.ok(gen, job.slave, strconv.Itoa(job.value))
}

// ok records a transaction of generation gen that slave answered; live
// (when not "") becomes the telemetry's live.
func (p *Port) ok(gen uint64, slave int, live string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return
	}
	if live != "" {
		p.live = live
	}
	delete(p.slaveErr, slave)
}

// fail records the failed transaction of generation gen to slave as the
// channel's error, unless the configuration changed since.
func (p *Port) fail(gen uint64, slave int, err error) {
	err = classify(err, slave)
	if errors.Is(err, ErrPortClosed) {
		p.setPortErr("port closed")
		return
	}
	cause := Cause(err, slave)
	p.mu.Lock()
	if gen != p.gen {
		p.mu.Unlock()
		return
	}
	p.seq++
	prev := p.slaveErr[slave].cause
	p.slaveErr[slave] = slaveErr{cause: cause, seq: p.seq}
	p.mu.Unlock()
	if prev != cause {
		p.log.Info("modbus error", "slave", slave, "err", err)
	}
}

func (p *Port) setPortErr(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.portErr != s {
		if s != "" {
			p.log.Warn("serial port lost")
		}
		p.portErr = s
	}
}

// transport is the grid-x Transporter: one request, one reply frame ended
// by the line silence, CRC checked.
type transport struct{ bus *Bus }

func (t transport) Send(ctx context.Context, req []byte) ([]byte, error) {
	reply, err := t.bus.Exchange(ctx, OwnerManaged, req, nil, nil)
	if errors.Is(err, serialport.ErrTimeout) {
		return nil, &TimeoutError{Slave: int(req[0])}
	}
	if err != nil {
		return nil, err
	}
	if !CheckCRC(reply) {
		return nil, fmt.Errorf("slave %d: %w (% x)", req[0], ErrCRC, reply)
	}
	return reply, nil
}

// SerialSettings returns the line settings the bus runs with.
func (p *Port) SerialSettings() serialport.Settings { return p.bus.currentSettings() }

// ReadRegisters reads count registers from reg of slave with function 3
// (holding) or 4 (input, when input is true), as one transaction on the bus
// (sharing it with polling and raw clients). It is what a poll does, for
// callers that want a value now: tests, benchmarks, diagnostics.
func (p *Port) ReadRegisters(ctx context.Context, slave int, input bool, reg, count uint16) ([]uint16, error) {
	c := p.client(slave)
	var b []byte
	var err error
	if input {
		b, err = c.ReadInputRegisters(ctx, reg, count)
	} else {
		b, err = c.ReadHoldingRegisters(ctx, reg, count)
	}
	if err != nil {
		return nil, classify(err, slave)
	}
	out := make([]uint16, len(b)/2)
	for i := range out {
		out[i] = binary.BigEndian.Uint16(b[2*i:])
	}
	return out, nil
}

// WriteRegister writes value to register reg of slave (function 6) as one
// transaction on the bus.
func (p *Port) WriteRegister(ctx context.Context, slave int, reg, value uint16) error {
	_, err := p.client(slave).WriteSingleRegister(ctx, reg, value)
	return classify(err, slave)
}
