// Package sim is the simulator backend of hw: every channel gets a simulated
// peer, so an agent started with --hw sim shows moving telemetry without any
// hardware. A Modbus slave answers any slave id and register with values that
// move every second; a CAN peer sends a frame every second; inputs toggle;
// a UART peer prints a line every second. Transmissions are accepted and
// reflected in telemetry (txOn, and the written value for rs485 and gpio).
// Every configured point reads a real-looking value (points.go).
package sim

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Backend is the simulator backend. The zero value is ready to use.
type Backend struct {
	// Now, if set, replaces time.Now (for deterministic tests).
	Now func() time.Time
	// Missing lists devices that report as absent.
	Missing map[string]bool
}

var (
	_ hw.Backend     = (*Backend)(nil)
	_ hw.PointReader = (*port)(nil)
)

// Present reports whether device is simulated as present.
func (b *Backend) Present(ch catalog.Channel, device string) bool { return !b.Missing[device] }

// Open opens a simulated port.
func (b *Backend) Open(ctx context.Context, ch catalog.Channel, device string, cfg serialcfg.Config) (hw.Port, error) {
	if b.Missing[device] {
		return nil, fmt.Errorf("%s: %w", device, hw.ErrDeviceMissing)
	}
	now := b.Now
	if now == nil {
		now = time.Now
	}
	p := &port{ch: ch, now: now}
	if err := p.Apply(ctx, cfg); err != nil {
		return nil, err
	}
	return p, nil
}

type port struct {
	ch  catalog.Channel
	now func() time.Time

	mu       sync.Mutex
	cfg      serialcfg.Config
	applied  time.Time
	lastTx   string
	closed   bool
	txLatch  bool
	gpioOut  int
	uartSeen int
}

func (p *port) Apply(ctx context.Context, cfg serialcfg.Config) error {
	if err := hw.CheckConfig("sim "+p.ch.ID, p.ch.Group, cfg); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cfg = cfg
	p.applied = p.now()
	p.txLatch = false
	switch {
	case cfg.RS485 != nil && cfg.RS485.Tx.Enabled:
		p.lastTx = strconv.Itoa(cfg.RS485.Tx.Value)
		p.txLatch = cfg.RS485.Tx.IntervalMs == 0
	case cfg.GPIO != nil && cfg.GPIO.Direction == "out":
		if cfg.GPIO.Tx.Enabled {
			p.gpioOut = cfg.GPIO.Tx.Value
			p.txLatch = cfg.GPIO.Tx.IntervalMs == 0
		}
	}
	return nil
}

func (p *port) Telemetry() serialcfg.Telemetry {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return serialcfg.Telemetry{Error: "port closed"}
	}
	sec := p.now().Unix()
	c := p.cfg
	switch {
	case c.RS485 != nil:
		polls := c.RS485.ActivePolls()
		var parts []string
		for _, pl := range polls {
			for i := 0; i < pl.Count; i++ {
				reg := pl.Register + i
				parts = append(parts, strconv.Itoa(int((int64(reg)*37+int64(pl.SlaveID)*11+sec)%65536)))
			}
		}
		live := strings.Join(parts, " ")
		if live == "" {
			live = p.lastTx
		}
		return serialcfg.Telemetry{Live: live, TxOn: c.RS485.Tx.Enabled && !p.txDone()}
	case c.CANFD != nil:
		data := []byte{byte(sec >> 8), byte(sec)}
		live := serialcfg.FormatCANID(0x18, false) + "#" + strings.ReplaceAll(serialcfg.FormatHexBytes(data), " ", "")
		return serialcfg.Telemetry{Live: live, TxOn: c.CANFD.Tx.Enabled && !p.txDone()}
	case c.UART != nil:
		return serialcfg.Telemetry{Live: fmt.Sprintf("SIM %d", sec), TxOn: c.UART.Tx.Enabled && !p.txDone()}
	case c.GPIO != nil:
		if c.GPIO.Direction == "out" {
			return serialcfg.Telemetry{Live: strconv.Itoa(p.gpioOut), TxOn: c.GPIO.Tx.Enabled && !p.txDone()}
		}
		return serialcfg.Telemetry{Live: strconv.FormatInt(sec%2, 10)}
	}
	return serialcfg.Telemetry{}
}

// txDone reports whether a single-shot transmission has already happened.
func (p *port) txDone() bool { return p.txLatch && p.now().Sub(p.applied) > 100*time.Millisecond }

func (p *port) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	return nil
}
