// Package canfd drives a CAN-FD channel: it sets the interface's bit timing
// (nominal and data bitrate, sample point, listen-only, FD mode) through a
// Link, sends the configured frame periodically or once over a Bus, and
// turns received frames and error frames into the channel's telemetry.
//
// The driver's logic runs on two small interfaces. On Linux, Bus is a
// SocketCAN raw socket with CAN_RAW_FD_FRAMES and an error filter, and Link
// sets IFLA_CAN_* attributes over rtnetlink (socketcan_linux.go,
// link_linux.go); elsewhere OpenSocketCAN returns errors.ErrUnsupported.
// Package canfdtest provides an in-process bus with error injection so the
// logic is tested without a kernel.
//
// Telemetry: live is "<canId>#<dataHex>" of the last data frame received
// (canId as serialcfg.FormatCANID, dataHex uppercase without spaces, for
// example "123#DEADBEEF" or "18DAF110#0102"); error is "" or a short cause
// ("bus-off", "error-passive", "no ack ...", "send failed: ..."). An error
// from the bus is cleared by the next data frame received or by a restart
// notice; a send error is cleared by the next successful send.
//
// Points (hw.PointReader): each configured canfd point is a Signal, decoded
// with DBC semantics from every data frame of its id, classic or 64-byte
// FD (signal.go); ReadPoints returns the latest value of each, At the time
// its frame was received, or "frame 0x123 too short for signal (2 bytes)"
// as its error when the last frame of its id did not carry it.
package canfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/shared/tick"
)

// Bus is an open CAN-FD socket (or an in-process endpoint).
type Bus interface {
	// Send transmits one frame.
	Send(f Frame) error
	// Recv blocks until a frame or an error frame arrives; after Close it
	// returns an error wrapping ErrClosed.
	Recv() (Frame, error)
	// Close releases the socket and unblocks Recv.
	Close() error
}

// ErrClosed is returned by Recv and Send after Close.
var ErrClosed = errors.New("bus closed")

// ErrDeviceGone is returned (wrapped) by Recv when the interface was
// removed under the socket (a USB adapter unplugged). The Port then
// reconfigures the link and reopens the socket until the interface is back
// or the Port is closed.
var ErrDeviceGone = errors.New("CAN interface went away")

// Recovery backoff after ErrDeviceGone.
const (
	recoverMin = 200 * time.Millisecond
	recoverMax = 5 * time.Second
)

// Settings are the interface settings a Link applies.
type Settings struct {
	NominalBitrate uint32
	DataBitrate    uint32
	// SamplePoint of the nominal phase, 0.5 to 0.95; the data phase uses the
	// kernel's default (CiA 301 recommendation).
	SamplePoint float64
	ListenOnly  bool
}

// Link configures the CAN interface behind a channel.
type Link interface {
	// Configure sets the bit timing and modes, FD on, and brings the link
	// up. It returns an error wrapping ErrBitTimingUnsupported when the
	// interface has no bit timing at all (a virtual vcan interface).
	Configure(ctx context.Context, s Settings) error
}

// ErrBitTimingUnsupported reports that the interface has no bit timing to
// set (vcan); the driver keeps running and notes it in telemetry.
var ErrBitTimingUnsupported = errors.New("interface has no bit timing (virtual CAN?)")

// ErrNotPermitted reports that the agent may not configure the link (no
// CAP_NET_ADMIN). The driver keeps running on the interface as the system
// configured it and notes it in telemetry.
var ErrNotPermitted = errors.New("not permitted to configure the CAN link (needs CAP_NET_ADMIN)")

// Options configure a Port.
type Options struct {
	// Name names the channel in errors and logs ("canfd-1").
	Name string
	// Device is the interface name ("can0").
	Device string
	// Open opens a fresh Bus on the interface.
	Open func() (Bus, error)
	// Link sets the interface; nil leaves the interface as it is.
	Link Link
	// Logger receives debug and warning records; nil discards.
	Logger *slog.Logger
}

// Port is a running CAN-FD channel. It implements hw.Port.
type Port struct {
	opt Options
	log *slog.Logger

	guard   hw.Guard // serialises Apply, recovery and Close
	closing chan struct{}
	gen     uint64 // counts socket (re)opens; recovery stops when it moves
	bus     Bus
	rxDone  chan struct{}
	txStop  context.CancelFunc
	txDone  chan struct{}
	cfg     *serialcfg.CANFD

	mu      sync.Mutex
	live    string
	busErr  string // from error frames
	sendErr string // from the last failed send
	recvErr string // from the last failed receive (link down)
	goneErr string // the interface went away; recovery running
	note    string // a link setting the interface refused
	txOn    bool
	stats   Stats
	// signals are the configured points, readings their latest values
	// (same order), byID the signals of each frame id.
	signals  []Signal
	readings []hw.PointReading
	byID     map[frameKey][]int
}

// frameKey is a frame identifier with its format.
type frameKey struct {
	id       uint32
	extended bool
}

var (
	_ hw.Port        = (*Port)(nil)
	_ hw.PointReader = (*Port)(nil)
)

// Stats counts frames; for tests and debugging.
type Stats struct {
	Sent, Received, Errors uint64
}

// New opens the bus, applies cfg and starts the channel.
func New(ctx context.Context, opt Options, cfg serialcfg.Config) (*Port, error) {
	if opt.Open == nil {
		return nil, errors.New("canfd: Options.Open is required")
	}
	p := &Port{opt: opt, log: hw.ChannelLogger(opt.Logger, opt.Name, opt.Device), closing: make(chan struct{})}
	if err := p.Apply(ctx, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

func settingsOf(c *serialcfg.CANFD) Settings {
	return Settings{
		NominalBitrate: uint32(c.NominalBitrate),
		DataBitrate:    uint32(c.DataBitrate),
		SamplePoint:    c.SamplePoint,
		ListenOnly:     c.ListenOnly,
	}
}

// Apply reconfigures the channel without closing it. When the bit timing or
// listen-only changes, the socket is closed, the link reconfigured and the
// socket reopened; a refused setting returns an error and the previous
// configuration keeps running (except ErrBitTimingUnsupported, noted in
// telemetry). The tx schedule restarts with the new frame.
func (p *Port) Apply(ctx context.Context, cfg serialcfg.Config) error {
	if err := hw.CheckConfig("canfd "+p.opt.Name, serialcfg.KindCANFD, cfg); err != nil {
		return err
	}
	c := *cfg.CANFD
	frame, err := txFrame(c.Tx)
	if err != nil {
		return fmt.Errorf("canfd %s: %w", p.opt.Name, err)
	}
	signals := make([]Signal, len(c.Points))
	for i, pt := range c.Points {
		if signals[i], err = CompileSignal(pt); err != nil {
			return fmt.Errorf("canfd %s: points[%d].%w", p.opt.Name, i, err)
		}
	}

	p.guard.Lock()
	defer p.guard.Unlock()
	if p.guard.Closed() {
		return fmt.Errorf("canfd %s: %w", p.opt.Name, ErrClosed)
	}
	p.stopTx()

	relink := p.cfg == nil || p.bus == nil || settingsOf(p.cfg) != settingsOf(&c)
	if relink {
		p.stopRx()
		if err := p.relinkLocked(ctx, c); err != nil {
			if p.cfg != nil && p.bus == nil {
				// Keep the previous configuration running.
				if rerr := p.startRx(); rerr != nil {
					p.mu.Lock()
					p.sendErr = "reopen failed: " + rerr.Error()
					p.mu.Unlock()
				} else if p.cfg.Tx.IntervalMs > 0 {
					// A periodic tx resumes; a single send went out
					// when its configuration applied.
					p.startTx(*p.cfg)
				}
			}
			return fmt.Errorf("canfd %s: %s: %w", p.opt.Name, p.opt.Device, err)
		}
	}
	p.cfg = &c
	p.mu.Lock()
	p.setSignalsLocked(signals)
	p.sendErr = ""
	if relink {
		p.recvErr = ""
	}
	p.mu.Unlock()
	if c.Tx.Enabled && !c.ListenOnly {
		p.startTxFrame(c, frame)
	}
	return nil
}

// relinkLocked configures the link for c and opens the socket. A link
// without bit timing (vcan) is noted in telemetry, not refused. guard
// held, no socket open.
func (p *Port) relinkLocked(ctx context.Context, c serialcfg.CANFD) error {
	note := ""
	if p.opt.Link != nil {
		if err := p.opt.Link.Configure(ctx, settingsOf(&c)); err != nil {
			switch {
			case errors.Is(err, ErrBitTimingUnsupported):
				note = "bitrate not applied: " + p.opt.Device + " has no bit timing (virtual interface)"
				p.log.Info("link has no bit timing; frames still flow", "err", err)
			case errors.Is(err, ErrNotPermitted):
				note = "bitrate not applied: no permission to configure " + p.opt.Device + " (CAP_NET_ADMIN); using it as the system set it"
				p.log.Warn("link not configurable; using it as it is", "err", err)
			default:
				p.log.Warn("link settings refused", "err", err)
				return err
			}
		}
	}
	if err := p.startRx(); err != nil {
		return fmt.Errorf("open: %w", err)
	}
	p.mu.Lock()
	p.note, p.recvErr, p.goneErr, p.sendErr = note, "", "", ""
	p.mu.Unlock()
	return nil
}

// recover reopens the channel after its interface went away: it retries
// the link configuration and the socket with backoff until it succeeds,
// the channel is reconfigured (gen moves) or closed.
func (p *Port) recover(gen uint64) {
	wait := recoverMin
	for {
		select {
		case <-p.closing:
			return
		case <-time.After(wait):
		}
		p.guard.Lock()
		if p.guard.Closed() || p.gen != gen || p.cfg == nil {
			p.guard.Unlock()
			return
		}
		p.stopTx()
		p.stopRx()
		err := p.relinkLocked(context.Background(), *p.cfg)
		if err == nil {
			p.startTx(*p.cfg)
			p.guard.Unlock()
			p.log.Info("interface back; channel reopened")
			return
		}
		p.mu.Lock()
		p.goneErr = "interface " + p.opt.Device + " went away; reopening: " + err.Error()
		p.mu.Unlock()
		p.guard.Unlock()
		wait = min(2*wait, recoverMax)
	}
}

// txFrame builds the frame tx sends: a CAN-FD frame with bit rate switch.
func txFrame(tx serialcfg.CANFDTx) (Frame, error) {
	if !tx.Enabled {
		return Frame{}, nil
	}
	id, ext, err := serialcfg.ParseCANID(tx.CanID)
	if err != nil {
		return Frame{}, fmt.Errorf("tx.canId: %w", err)
	}
	data, err := serialcfg.ParseHexBytes(tx.DataHex)
	if err != nil {
		return Frame{}, fmt.Errorf("tx.dataHex: %w", err)
	}
	return Frame{ID: id, Extended: ext, FD: true, BRS: true, Data: data}, nil
}

// startRx opens the bus and starts its receive loop. guard held.
func (p *Port) startRx() error {
	bus, err := p.opt.Open()
	if err != nil {
		return err
	}
	p.bus = bus
	p.gen++
	done := make(chan struct{})
	p.rxDone = done
	go p.rxLoop(bus, p.gen, done)
	return nil
}

// stopRx closes the bus and waits for its receive loop. guard held.
func (p *Port) stopRx() {
	if p.bus == nil {
		return
	}
	_ = p.bus.Close()
	<-p.rxDone
	p.bus, p.rxDone = nil, nil
}

func (p *Port) rxLoop(bus Bus, gen uint64, done chan struct{}) {
	defer close(done)
	for {
		f, err := bus.Recv()
		if err != nil {
			if errors.Is(err, ErrClosed) {
				return
			}
			if errors.Is(err, ErrDeviceGone) {
				p.mu.Lock()
				p.goneErr = "interface " + p.opt.Device + " went away"
				p.mu.Unlock()
				p.log.Warn("interface went away; reopening", "err", err)
				go p.recover(gen)
				return
			}
			p.mu.Lock()
			p.recvErr = "receive failed: " + err.Error()
			p.mu.Unlock()
			p.log.Warn("receive failed", "err", err)
			// A transient error (ENETDOWN while the link is down): back
			// off instead of spinning.
			time.Sleep(100 * time.Millisecond)
			continue
		}
		p.mu.Lock()
		if text, ok := ErrorText(f); ok {
			p.stats.Errors++
			p.busErr = text
			p.mu.Unlock()
			if text != "" {
				p.log.Debug("error frame", "cause", text, "class", fmt.Sprintf("%#x", f.ID))
			}
			continue
		}
		p.stats.Received++
		p.live = f.String()
		p.decodeLocked(f, time.Now())
		p.busErr, p.recvErr = "", ""
		p.mu.Unlock()
	}
}

func (p *Port) startTx(c serialcfg.CANFD) {
	if !c.Tx.Enabled || c.ListenOnly {
		return
	}
	f, err := txFrame(c.Tx)
	if err != nil {
		return
	}
	p.startTxFrame(c, f)
}

// startTxFrame starts the tx schedule: one send now, then one every
// intervalMs, or only the one when intervalMs is 0. guard held.
func (p *Port) startTxFrame(c serialcfg.CANFD, f Frame) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	p.txStop, p.txDone = cancel, done
	bus := p.bus
	interval := time.Duration(c.Tx.IntervalMs) * time.Millisecond
	p.mu.Lock()
	p.txOn = true
	p.mu.Unlock()
	go func() {
		defer close(done)
		p.send(bus, f)
		tick.Every(ctx, interval, func() { p.send(bus, f) })
		if interval == 0 {
			p.mu.Lock()
			p.txOn = false
			p.mu.Unlock()
		}
	}()
}

func (p *Port) send(bus Bus, f Frame) {
	err := bus.Send(f)
	p.mu.Lock()
	defer p.mu.Unlock()
	if err != nil {
		if !errors.Is(err, ErrClosed) {
			p.sendErr = "send failed: " + err.Error()
		}
		return
	}
	p.stats.Sent++
	p.sendErr, p.recvErr = "", ""
}

// stopTx stops the tx schedule and waits for it. guard held.
func (p *Port) stopTx() {
	if p.txStop == nil {
		return
	}
	p.txStop()
	<-p.txDone
	p.txStop, p.txDone = nil, nil
	p.mu.Lock()
	p.txOn = false
	p.mu.Unlock()
}

// Telemetry returns the channel's current telemetry.
func (p *Port) Telemetry() serialcfg.Telemetry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.guard.Closed() {
		return serialcfg.Telemetry{Live: p.live, Error: "port closed"}
	}
	t := serialcfg.Telemetry{Live: p.live, TxOn: p.txOn}
	switch {
	case p.goneErr != "":
		t.Error = p.goneErr
	case p.busErr != "":
		t.Error = p.busErr
	case p.sendErr != "":
		t.Error = p.sendErr
	case p.recvErr != "":
		t.Error = p.recvErr
	default:
		t.Error = p.note
	}
	return t
}

// setSignalsLocked makes signals the configured points. A point whose
// signal did not change keeps its latest reading. mu held.
func (p *Port) setSignalsLocked(signals []Signal) {
	old := map[string]int{}
	for i, s := range p.signals {
		old[s.Name] = i
	}
	readings := make([]hw.PointReading, len(signals))
	byID := map[frameKey][]int{}
	for i, s := range signals {
		readings[i] = hw.PointReading{Name: s.Name}
		if j, ok := old[s.Name]; ok && p.signals[j] == s {
			readings[i] = p.readings[j]
		}
		k := frameKey{s.ID, s.Extended}
		byID[k] = append(byID[k], i)
	}
	p.signals, p.readings, p.byID = signals, readings, byID
}

// decodeLocked updates the points carried by data frame f, received at.
// mu held.
func (p *Port) decodeLocked(f Frame, at time.Time) {
	if f.RTR {
		return
	}
	for _, i := range p.byID[frameKey{f.ID, f.Extended}] {
		s := p.signals[i]
		v, ok := s.Decode(f.Data)
		r := hw.PointReading{Name: s.Name, Value: v, At: at}
		if !ok {
			r.Err = s.TooShort(len(f.Data))
		}
		p.readings[i] = r
	}
}

// ReadPoints returns the latest value of each configured point, decoded
// from the last frame of its id (hw.PointReader); a point whose id was not
// received since it was configured has a zero At.
func (p *Port) ReadPoints() []hw.PointReading {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]hw.PointReading(nil), p.readings...)
}

// Stats returns frame counters.
func (p *Port) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Close stops tx and rx and closes the socket.
func (p *Port) Close() error {
	return p.guard.Close(func() error {
		close(p.closing)
		p.stopTx()
		p.stopRx()
		return nil
	})
}
