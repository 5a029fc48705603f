// Package modbustest is a Modbus RTU slave simulator for tests, benchmarks
// and the qemu rig. It serves one or several slave ids on a serial line (the
// controller side of a pseudo-terminal pair, or a real tty), answers
// functions 1, 2 (coils, discrete inputs), 3, 4 (holding, input registers)
// and 6 from per-slave maps, answers exception 2 for registers a test made
// unavailable, counts requests per slave and function, and injects faults
// per slave: no reply (a silent slave), a bad CRC, an exception, a slow
// reply, a reply split in two chunks. Because a pseudo-terminal moves bytes instantly, the
// simulator can pace its side of the wire at the configured baud rate:
// it treats the request as occupying its wire time, waits the 3.5-character
// silence, and writes each reply byte when it would have finished arriving
// on a real line, so a master's transaction time can be compared with the
// wire-time formula.
package modbustest

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

	"github.com/fleet/fleet/hw/modbus"
	"github.com/fleet/fleet/hw/serialport"
)

// Line is a serial line the simulator serves: a Read that gives up after
// timeout (returning 0, nil) and a Write. *serialport.Port is a Line; so is
// FileLine.
type Line interface {
	Read(b []byte, timeout time.Duration) (int, error)
	Write(b []byte) (int, error)
}

// FileLine adapts a non-blocking *os.File (the controller side of a pty
// from serialport.OpenPTY) to Line. While no one holds the terminal side
// open, reads wait instead of failing.
type FileLine struct{ F *os.File }

// Read implements Line.
func (l FileLine) Read(b []byte, timeout time.Duration) (int, error) {
	if timeout >= 0 {
		if err := l.F.SetReadDeadline(time.Now().Add(timeout)); err != nil {
			return 0, err
		}
	}
	n, err := l.F.Read(b)
	switch {
	case errors.Is(err, os.ErrDeadlineExceeded):
		return n, nil
	case errors.Is(err, syscall.EIO):
		// The terminal side is closed (the master is reopening): wait.
		time.Sleep(min(timeout, 10*time.Millisecond))
		return 0, nil
	}
	return n, err
}

// Write implements Line.
func (l FileLine) Write(b []byte) (int, error) { return l.F.Write(b) }

// ConnLine adapts a net.Conn to Line: the host end of a qemu socket
// chardev wired to a guest's UART, for instance.
type ConnLine struct{ C net.Conn }

// Read implements Line.
func (l ConnLine) Read(b []byte, timeout time.Duration) (int, error) {
	var dl time.Time
	if timeout >= 0 {
		dl = time.Now().Add(timeout)
	}
	if err := l.C.SetReadDeadline(dl); err != nil {
		return 0, err
	}
	n, err := l.C.Read(b)
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return n, nil
	}
	return n, err
}

// Write implements Line.
func (l ConnLine) Write(b []byte) (int, error) { return l.C.Write(b) }

// Fault is what a slave does wrong.
type Fault struct {
	// NoReply drops every request.
	NoReply bool
	// BadCRC corrupts the reply's CRC.
	BadCRC bool
	// Exception answers with this exception code (1 illegal function, 2
	// illegal data address, ...).
	Exception byte
	// Delay postpones the reply (a slow slave).
	Delay time.Duration
	// SplitGap sends the reply in two halves with this much silence
	// between them.
	SplitGap time.Duration
}

// Options configure a Sim.
type Options struct {
	// IDs lists the slave ids served; empty serves every id 1..247.
	IDs []int
	// Baud, when set, paces the simulator's side of the wire: each reply
	// byte is written when it would have finished arriving at this rate,
	// after the request's own wire time and a 3.5-character silence.
	Baud int
	// CharBits is the wire bits per character for pacing (default 11:
	// start, 8 data, parity, stop).
	CharBits int
	// FrameByLength ends a request as soon as it is complete by its
	// function's layout and CRC, instead of waiting for the 3.5-character
	// silence (for measuring what lies in front of the simulator).
	FrameByLength bool
	// Log, when set, receives a debug line per request.
	Log *slog.Logger
}

// Stats count what the simulator saw.
type Stats struct {
	// Requests is the number of valid requests addressed to a served id.
	Requests int
	// BadFrames is the number of frames with a wrong CRC or too short:
	// on a shared bus, a sign of interleaved or corrupted frames.
	BadFrames int
	// Replies is the number of replies sent.
	Replies int
}

// Sim is a Modbus RTU slave simulator. Its methods are safe for concurrent
// use.
type Sim struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	ids     map[int]bool
	holding registers
	input   registers
	bits    map[bitKey]bool
	gone    map[int]map[uint16]bool
	counts  map[[2]int]int
	faults  map[int]Fault
	stats   Stats
	timing  Timing
	frames  [][]byte
}

// New returns a simulator.
func New(opts Options) *Sim {
	if opts.CharBits == 0 {
		opts.CharBits = 11
	}
	log := opts.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &Sim{opts: opts, log: log, holding: registers{}, input: registers{}, faults: map[int]Fault{},
		bits: map[bitKey]bool{}, gone: map[int]map[uint16]bool{}, counts: map[[2]int]int{}}
	if len(opts.IDs) > 0 {
		s.ids = map[int]bool{}
		for _, id := range opts.IDs {
			s.ids[id] = true
		}
	}
	return s
}

// Holding returns holding register reg of slave. A register never written
// reads as slave*100 + reg.
func (s *Sim) Holding(slave int, reg uint16) uint16 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.holdingLocked(slave, reg)
}

func (s *Sim) holdingLocked(slave int, reg uint16) uint16 {
	if v, ok := s.holding[slave][reg]; ok {
		return v
	}
	return uint16(slave*100) + reg
}

func (s *Sim) inputLocked(slave int, reg uint16) uint16 {
	if v, ok := s.input[slave][reg]; ok {
		return v
	}
	return 10000 + uint16(slave*100) + reg
}

// SetHolding sets holding register reg of slave.
func (s *Sim) SetHolding(slave int, reg, v uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.holding.set(slave, reg, v)
}

// SetInput sets input register reg of slave. A register never set reads as
// 10000 + slave*100 + reg.
func (s *Sim) SetInput(slave int, reg, v uint16) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.input.set(slave, reg, v)
}

// bitKey names a coil (function 1) or discrete input (function 2).
type bitKey struct {
	slave int
	fc    byte
	addr  uint16
}

// SetCoil sets coil addr of slave; a coil never set reads as off.
func (s *Sim) SetCoil(slave int, addr uint16, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bits[bitKey{slave, modbus.FuncReadCoils, addr}] = on
}

// SetDiscrete sets discrete input addr of slave; one never set reads as
// off.
func (s *Sim) SetDiscrete(slave int, addr uint16, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.bits[bitKey{slave, modbus.FuncReadDiscrete, addr}] = on
}

// SetUnavailable makes holding and input register reg of slave
// unavailable (on) or available again: a read that includes it is
// answered with exception 2 (illegal data address).
func (s *Sim) SetUnavailable(slave int, reg uint16, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.gone[slave] == nil {
		s.gone[slave] = map[uint16]bool{}
	}
	if on {
		s.gone[slave][reg] = true
	} else {
		delete(s.gone[slave], reg)
	}
}

// Requests returns how many valid requests with function code fc slave
// has received (whatever it answered).
func (s *Sim) Requests(slave int, fc byte) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.counts[[2]int{slave, int(fc)}]
}

// registers is a table (holding or input) of the registers set or written
// so far, by slave.
type registers map[int]map[uint16]uint16

func (r registers) set(slave int, reg, v uint16) {
	if r[slave] == nil {
		r[slave] = map[uint16]uint16{}
	}
	r[slave][reg] = v
}

// SetFault sets the fault of slave; slave 0 applies to every slave without
// its own. The zero Fault clears it.
func (s *Sim) SetFault(slave int, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f == (Fault{}) {
		delete(s.faults, slave)
		return
	}
	s.faults[slave] = f
}

// Stats returns the counters so far.
func (s *Sim) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stats
}

// LastReplyEnd returns when the last byte of the last reply was written.
func (s *Sim) LastReplyEnd() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timing.ReplyEnd
}

// Timing is when the simulator saw and answered its last request.
type Timing struct {
	// RequestFirst is when the request's first byte was read.
	RequestFirst time.Time
	// ReplyDue is when the reply's last byte was due on the paced wire.
	ReplyDue time.Time
	// ReplyEnd is when the reply's last byte was written.
	ReplyEnd time.Time
}

// LastTiming returns the timing of the last reply.
func (s *Sim) LastTiming() Timing {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timing
}

// Frames returns the request frames received so far (at most the last
// 1000), valid or not.
func (s *Sim) Frames() [][]byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]byte(nil), s.frames...)
}

func (s *Sim) charTime() time.Duration {
	if s.opts.Baud <= 0 {
		return 0
	}
	return time.Duration(s.opts.CharBits) * time.Second / time.Duration(s.opts.Baud)
}

// Serve answers requests on line until ctx ends or the line fails. It
// returns nil when ctx ends.
func (s *Sim) Serve(ctx context.Context, line Line) error {
	silence := serialport.Silence(s.opts.Baud)
	if s.opts.Baud <= 0 {
		silence = serialport.Silence(115200)
	}
	buf := make([]byte, 512)
	for ctx.Err() == nil {
		// Wait for the first byte, waking now and then to check ctx.
		n, err := line.Read(buf, 50*time.Millisecond)
		if err != nil {
			return unlessEnded(ctx, err)
		}
		if n == 0 {
			continue
		}
		first := time.Now()
		for n < len(buf) {
			if s.opts.FrameByLength {
				if l := modbus.RequestLength(buf[:n]); l > 0 && n >= l && modbus.CheckCRC(buf[:l]) {
					break
				}
			}
			k, err := line.Read(buf[n:], silence)
			if err != nil {
				return unlessEnded(ctx, err)
			}
			if k == 0 {
				break
			}
			n += k
		}
		req := append([]byte(nil), buf[:n]...)
		reply, fault := s.handle(req)
		if reply == nil {
			continue
		}
		start := time.Now()
		if ct := s.charTime(); ct > 0 {
			// The request occupied the wire for len(req) characters from
			// its first byte, then the line had to be silent for t3.5.
			start = first.Add(time.Duration(len(req))*ct + silence)
		}
		start = start.Add(fault.Delay)
		if err := s.send(ctx, line, reply, first, start, fault.SplitGap); err != nil {
			return unlessEnded(ctx, err)
		}
	}
	return nil
}

// unlessEnded is err, or nil once ctx ended: a line fails when Serve is
// told to stop, and that is no error.
func unlessEnded(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// send writes reply starting at start, each byte when it would have
// arrived at the configured baud rate (all at once without pacing).
func (s *Sim) send(ctx context.Context, line Line, reply []byte, first, start time.Time, splitGap time.Duration) error {
	ct := s.charTime()
	half := len(reply) / 2
	due := func(i int) time.Time { // when byte i has fully arrived
		t := start.Add(time.Duration(i+1) * ct)
		if splitGap > 0 && i >= half {
			t = t.Add(splitGap)
		}
		return t
	}
	for i := 0; i < len(reply); {
		sleepUntil(due(i))
		if ctx.Err() != nil {
			return nil
		}
		j := i + 1
		now := time.Now()
		for j < len(reply) && !due(j).After(now) && !(splitGap > 0 && j == half) {
			j++
		}
		if ct == 0 && splitGap == 0 {
			j = len(reply)
		}
		if _, err := line.Write(reply[i:j]); err != nil {
			return err
		}
		i = j
	}
	s.mu.Lock()
	s.timing = Timing{RequestFirst: first, ReplyDue: due(len(reply) - 1), ReplyEnd: time.Now()}
	s.stats.Replies++
	s.mu.Unlock()
	return nil
}

// sleepUntil sleeps until t, spinning the last stretch: timer wake-ups
// overshoot by tens of microseconds, which at 115200 baud is a character.
func sleepUntil(t time.Time) {
	const spin = 300 * time.Microsecond
	if d := time.Until(t); d > spin {
		time.Sleep(d - spin)
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
}

// handle returns the reply to req (nil for none) and the fault in effect.
func (s *Sim) handle(req []byte) ([]byte, Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.frames) >= 1000 {
		s.frames = s.frames[1:]
	}
	s.frames = append(s.frames, req)
	if len(req) < 4 || !modbus.CheckCRC(req) {
		s.stats.BadFrames++
		s.log.Debug("bad frame", "bytes", len(req))
		return nil, Fault{}
	}
	id := int(req[0])
	if id == 0 || (s.ids != nil && !s.ids[id]) || id > 247 {
		return nil, Fault{}
	}
	s.stats.Requests++
	s.counts[[2]int{id, int(req[1])}]++
	f, ok := s.faults[id]
	if !ok {
		f = s.faults[0]
	}
	if f.NoReply {
		return nil, f
	}
	pdu := s.pdu(id, req[1], req[2:len(req)-2], f)
	reply := modbus.AppendCRC(append([]byte{byte(id)}, pdu...))
	if f.BadCRC {
		reply[len(reply)-1] ^= 0xFF
	}
	s.log.Debug("request", "slave", id, "function", req[1], "reply", len(reply))
	return reply, f
}

func (s *Sim) pdu(id int, fc byte, data []byte, f Fault) []byte {
	exc := func(code byte) []byte { return []byte{fc | 0x80, code} }
	if f.Exception != 0 {
		return exc(f.Exception)
	}
	switch fc {
	case modbus.FuncReadHolding, modbus.FuncReadInput:
		if len(data) != 4 {
			return exc(3)
		}
		reg := binary.BigEndian.Uint16(data)
		count := int(binary.BigEndian.Uint16(data[2:]))
		if count < 1 || count > 125 {
			return exc(3)
		}
		if int(reg)+count > 65536 {
			return exc(2)
		}
		for i := range count {
			if s.gone[id][reg+uint16(i)] {
				return exc(2)
			}
		}
		out := []byte{fc, byte(2 * count)}
		for i := range count {
			var v uint16
			if fc == modbus.FuncReadHolding {
				v = s.holdingLocked(id, reg+uint16(i))
			} else {
				v = s.inputLocked(id, reg+uint16(i))
			}
			out = binary.BigEndian.AppendUint16(out, v)
		}
		return out
	case modbus.FuncReadCoils, modbus.FuncReadDiscrete:
		if len(data) != 4 {
			return exc(3)
		}
		addr := binary.BigEndian.Uint16(data)
		count := int(binary.BigEndian.Uint16(data[2:]))
		if count < 1 || count > 2000 {
			return exc(3)
		}
		if int(addr)+count > 65536 {
			return exc(2)
		}
		out := append([]byte{fc, byte((count + 7) / 8)}, make([]byte, (count+7)/8)...)
		for i := range count {
			if s.bits[bitKey{id, fc, addr + uint16(i)}] {
				out[2+i/8] |= 1 << (i % 8)
			}
		}
		return out
	case modbus.FuncWriteRegister:
		if len(data) != 4 {
			return exc(3)
		}
		s.holding.set(id, binary.BigEndian.Uint16(data), binary.BigEndian.Uint16(data[2:]))
		return append([]byte{fc}, data...)
	}
	return exc(1)
}

var _ Line = FileLine{}
var _ Line = ConnLine{}
var _ Line = (*serialport.Port)(nil)
var _ io.Writer = FileLine{}
