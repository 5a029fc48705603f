package modbus

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Read planning limits (Modbus's own maxima per transaction) and the gaps
// a transaction bridges: reading a few registers nobody asked for costs
// less wire time than a second request (8 bytes, a reply header and
// 2 × t3.5).
const (
	maxReadRegisters = 125
	maxReadBits      = 2000
	maxGapRegisters  = 8
	maxGapBits       = 64
	// maxBackoff bounds the delay of a slave that stopped answering.
	maxBackoff = 30 * time.Second
)

var _ hw.PointReader = (*Port)(nil)

// pointSlot is a configured point (defaults filled) and its latest
// reading.
type pointSlot struct {
	def     serialcfg.RS485Point
	reading hw.PointReading
}

// block is one planned transaction: count registers (or bits) from start
// of slave with function, read every interval, that carries the points
// (indices into Port.points) inside it.
type block struct {
	slave    int
	function string
	start    int
	count    int
	points   []int
	interval time.Duration
	next     time.Time
}

// slaveBackoff delays the transactions of a slave that did not answer:
// the delay doubles from its shortest interval up to maxBackoff and
// resets when it answers again.
type slaveBackoff struct {
	delay time.Duration
	until time.Time
}

func isBits(function string) bool { return function == "coil" || function == "discrete" }

// plan groups points into transactions as Telegraf's modbus input does
// with its max_insert request optimisation (holes of up to 8 registers
// filled where Telegraf fills 50 by default, since a hole may hold
// registers the slave does not map): points of one slave, function and
// interval, sorted by address, share a transaction while it stays within
// Modbus's limits (125 registers, 2,000 coils or discrete inputs) and the
// gap to the next point is at most a few registers (maxGapRegisters) or
// bits (maxGapBits). Points with different intervals are read by
// different transactions, so each point is read exactly every intervalMs.
func plan(points []serialcfg.RS485Point) []*block {
	type key struct {
		slave    int
		function string
		interval int
	}
	var keys []key
	groups := map[key][]int{}
	for i, p := range points {
		k := key{p.SlaveID, p.Function, p.IntervalMs}
		if _, ok := groups[k]; !ok {
			keys = append(keys, k)
		}
		groups[k] = append(groups[k], i)
	}
	var out []*block
	for _, k := range keys {
		idx := groups[k]
		slices.SortStableFunc(idx, func(a, b int) int { return cmp.Compare(points[a].Register, points[b].Register) })
		limit, gap := maxReadRegisters, maxGapRegisters
		if isBits(k.function) {
			limit, gap = maxReadBits, maxGapBits
		}
		var cur *block
		for _, i := range idx {
			lo := points[i].Register
			hi := lo + points[i].Registers() - 1
			if cur != nil && lo-(cur.start+cur.count) <= gap && max(hi, cur.start+cur.count-1)-cur.start+1 <= limit {
				cur.count = max(hi, cur.start+cur.count-1) - cur.start + 1
				cur.points = append(cur.points, i)
				continue
			}
			cur = &block{slave: k.slave, function: k.function, start: lo, count: hi - lo + 1, points: []int{i},
				interval: time.Duration(k.interval) * time.Millisecond}
			out = append(out, cur)
		}
	}
	return out
}

// setPoints installs the points of c (with p.mu held): a point whose
// definition did not change keeps its reading; keep gains the slaves read.
func (p *Port) setPoints(c serialcfg.RS485, now time.Time, keep map[int]bool) {
	// A point's identity: its definition with the bit by value.
	type same struct {
		def serialcfg.RS485Point
		bit int
	}
	key := func(d serialcfg.RS485Point) same {
		k := same{def: d, bit: -1}
		if d.Bit != nil {
			k.bit, k.def.Bit = *d.Bit, nil
		}
		return k
	}
	old := map[same]hw.PointReading{}
	for _, s := range p.points {
		old[key(s.def)] = s.reading
	}
	defs := make([]serialcfg.RS485Point, len(c.Points))
	p.points = make([]pointSlot, len(c.Points))
	for i, pt := range c.Points {
		defs[i] = pt.WithDefaults(c.SlaveID)
		p.points[i] = pointSlot{def: defs[i], reading: hw.PointReading{Name: pt.Name}}
		if r, ok := old[key(defs[i])]; ok {
			p.points[i].reading = r
		}
		keep[defs[i].SlaveID] = true
	}
	p.blocks = plan(defs)
	for _, b := range p.blocks {
		b.next = now
	}
}

// ReadPoints implements hw.PointReader: the latest reading of each
// configured point, in configuration order.
func (p *Port) ReadPoints() []hw.PointReading {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]hw.PointReading, len(p.points))
	for i, s := range p.points {
		out[i] = s.reading
	}
	return out
}

// dueBlock returns the earliest block due at now whose slave is not
// backing off, or how long until one is (with p.mu held).
func (p *Port) dueBlock(now time.Time) (*block, time.Duration) {
	wait := time.Hour
	var due *block
	for _, b := range p.blocks {
		at := b.next
		if bo := p.backoff[b.slave]; bo != nil && bo.until.After(at) {
			at = bo.until
		}
		if d := at.Sub(now); d > 0 {
			wait = min(wait, d)
			continue
		}
		if due == nil || b.next.Before(due.next) {
			due = b
		}
	}
	return due, wait
}

// readBlock runs the transaction of block b (job is its copy taken when it
// was scheduled under generation gen) and records what it read in its
// points, unless the configuration changed since.
func (p *Port) readBlock(ctx context.Context, gen uint64, b *block, job block) {
	cctx, cancel := p.callCtx(ctx)
	defer cancel()
	var regs []uint16
	var err error
	if isBits(job.function) {
		regs, err = p.ReadBits(cctx, job.slave, job.function == "discrete", uint16(job.start), uint16(job.count))
	} else {
		regs, err = p.ReadRegisters(cctx, job.slave, job.function == "input", uint16(job.start), uint16(job.count))
	}
	if ctx.Err() != nil {
		return
	}
	at := time.Now()
	var exc *ExceptionError
	var te *TimeoutError
	answered := err == nil || errors.As(err, &exc)
	if answered {
		p.ok(gen, job.slave, "")
	} else {
		p.fail(gen, job.slave, err) // the channel's error, as a poll's
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if gen != p.gen {
		return
	}
	if answered || errors.As(err, &te) {
		p.noteAnswer(job, answered, at)
	}
	if exc != nil && len(job.points) > 1 {
		// One bad address must not fail its neighbours: read the
		// block's points one by one from now on.
		p.split(b, at)
		return
	}
	for _, i := range job.points {
		s := &p.points[i]
		s.reading.At = at
		if err != nil {
			s.reading.Value, s.reading.Err = 0, PointCause(err, job.slave)
			continue
		}
		off := s.def.Register - job.start
		if off+s.def.Registers() > len(regs) {
			s.reading.Value, s.reading.Err = 0, fmt.Sprintf("bad reply (slave %d)", job.slave)
			continue
		}
		v, derr := DecodePoint(s.def, regs[off:off+s.def.Registers()])
		if derr != nil {
			s.reading.Value, s.reading.Err = 0, derr.Error()
			continue
		}
		s.reading.Value, s.reading.Err = v, ""
	}
}

// noteAnswer updates the backoff of job's slave (with p.mu held): reset
// when it answered (an exception is an answer), doubled when it timed out.
func (p *Port) noteAnswer(job block, answered bool, now time.Time) {
	if answered {
		delete(p.backoff, job.slave)
		return
	}
	bo := p.backoff[job.slave]
	if bo == nil {
		bo = &slaveBackoff{delay: job.interval}
		p.backoff[job.slave] = bo
	}
	bo.delay = min(2*bo.delay, maxBackoff)
	bo.until = now.Add(bo.delay)
}

// split replaces block b by one block per point, due now (with p.mu held).
func (p *Port) split(b *block, now time.Time) {
	i := slices.Index(p.blocks, b)
	if i < 0 {
		return
	}
	var single []*block
	for _, pi := range b.points {
		d := p.points[pi].def
		single = append(single, &block{slave: b.slave, function: b.function, start: d.Register, count: d.Registers(),
			points: []int{pi}, interval: b.interval, next: now})
	}
	p.blocks = slices.Replace(p.blocks, i, i+1, single...)
	p.loop.Wake()
}

// PointCause is the cause a failed read shows on a point: "modbus
// exception 2: illegal data address (slave 7)", "modbus timeout (slave
// 7)", "crc error (slave 7)", "port closed".
func PointCause(err error, slave int) string {
	err = classify(err, slave)
	var exc *ExceptionError
	var te *TimeoutError
	switch {
	case errors.As(err, &exc):
		return fmt.Sprintf("modbus exception %d: %s (slave %d)", exc.Code, exc.Error(), slave)
	case errors.As(err, &te), errors.Is(err, ErrPortClosed):
		return Cause(err, slave)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Sprintf("modbus timeout (slave %d)", slave)
	}
	if c := Cause(err, slave); c != fmt.Sprintf("bad reply (slave %d)", slave) {
		return fmt.Sprintf("%s (slave %d)", c, slave)
	}
	return Cause(err, slave)
}

// ReadBits reads count coils (function 1) or discrete inputs (function 2,
// when discrete is true) from addr of slave as one transaction on the bus;
// each bit comes back as a word, 0 or 1.
func (p *Port) ReadBits(ctx context.Context, slave int, discrete bool, addr, count uint16) ([]uint16, error) {
	c := p.client(slave)
	var b []byte
	var err error
	if discrete {
		b, err = c.ReadDiscreteInputs(ctx, addr, count)
	} else {
		b, err = c.ReadCoils(ctx, addr, count)
	}
	if err != nil {
		return nil, classify(err, slave)
	}
	if len(b)*8 < int(count) {
		return nil, fmt.Errorf("slave %d: %d bytes for %d bits: %w", slave, len(b), count, errShortReply)
	}
	out := make([]uint16, count)
	for i := range out {
		out[i] = uint16(b[i/8] >> (i % 8) & 1)
	}
	return out, nil
}

var errShortReply = errors.New("short reply")
