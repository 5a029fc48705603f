// Package iomgr is the agent's channel manager: it opens every channel of
// the gateway model's catalog layout through an hw.Backend, applies the
// desired configuration the relay sends live (hw.Port.Apply, no restart),
// reports each channel's state for the heartbeat, and rechecks channels whose
// device is missing so that a USB adapter plugged in later comes up by
// itself. One channel's failure never stops another: it shows in that
// channel's telemetry error and as a serial.error event.
package iomgr

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/fleet/fleet/hw"
	"github.com/fleet/fleet/hw/catalog"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
)

// Event is something the manager reports; the agent spools it.
type Event struct {
	Type     string
	Severity resource.Severity
	Message  string
	Data     map[string]any
}

// Binding is one channel handed to the passthrough server.
type Binding struct {
	Channel catalog.Channel
	Device  string
	// Port is the channel's open port, nil when it is unavailable or the
	// serial port is disabled.
	Port hw.Port
}

// Passthrough exposes channels raw over TCP (agent/passthrough). Sync is
// called after every change with the device's mode (managed, passthrough or
// both) and every channel; it returns the "host:port" address of each
// exposed channel.
type Passthrough interface {
	Sync(ctx context.Context, mode string, enabled bool, channels []Binding) map[string]string
}

// Options configures a Manager.
type Options struct {
	Backend hw.Backend
	Model   catalog.Model
	// Devices overrides a channel's catalog device (--port CHANNEL=DEVICE).
	Devices map[string]string
	// RecheckInterval is how often missing devices are looked for and open
	// ones checked (default 5s).
	RecheckInterval time.Duration
	// Emit receives events; it must not block for long.
	Emit func(Event)
	// Passthrough, if set, is kept in step with mode and channels.
	Passthrough Passthrough
	// DevRoot, if set, is watched for USB serial adapters (see USBWatcher)
	// every RecheckInterval.
	DevRoot string
	Logger  *slog.Logger
}

// Disabled is every channel's telemetry error while the serial I/O switch
// is off (the configuration's enabled false): every port is closed, and
// nothing is polled, sent or read into points.
const Disabled = "disabled"

type channel struct {
	cat       catalog.Channel
	device    string
	desired   serialcfg.Config
	applied   []byte // JSON of the config the port runs
	running   serialcfg.Config
	port      hw.Port
	available bool
	err       string // apply or open failure; "" when fine
	ptAddr    string
}

// Manager owns the channels. It is safe for concurrent use.
type Manager struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	chans    []*channel
	enabled  bool
	mode     string
	version  int64
	closed   bool
	started  bool
	usb      *USBWatcher
	stop     chan struct{}
	loopDone chan struct{}
}

// New returns a Manager for opts.Model; Start opens the channels.
func New(opts Options) (*Manager, error) {
	if opts.Backend == nil {
		return nil, errors.New("iomgr: no backend")
	}
	if opts.RecheckInterval <= 0 {
		opts.RecheckInterval = 5 * time.Second
	}
	if opts.Emit == nil {
		opts.Emit = func(Event) {}
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	m := &Manager{opts: opts, log: opts.Logger, enabled: true, mode: resource.ModeManaged, stop: make(chan struct{}), loopDone: make(chan struct{})}
	for id := range opts.Devices {
		if _, ok := opts.Model.Channel(id); !ok {
			return nil, fmt.Errorf("iomgr: --port %s: model %s has no channel %q", id, opts.Model.Name, id)
		}
	}
	for _, c := range opts.Model.Channels {
		dev := c.Device
		if d, ok := opts.Devices[c.ID]; ok && d != "" {
			dev = d
		}
		m.chans = append(m.chans, &channel{cat: c, device: dev, desired: c.DefaultConfig()})
	}
	return m, nil
}

// Start opens every channel with its default configuration and starts the
// recheck loop, which runs until Close.
func (m *Manager) Start(ctx context.Context) {
	m.mu.Lock()
	for _, c := range m.chans {
		m.openLocked(ctx, c, false)
	}
	m.syncPassthroughLocked(ctx)
	m.started = true
	if m.opts.DevRoot != "" {
		m.usb = NewUSBWatcher(m.opts.DevRoot, m.opts.Emit, m.log)
		m.usb.Scan()
	}
	m.mu.Unlock()
	go m.loop()
}

func (m *Manager) loop() {
	defer close(m.loopDone)
	t := time.NewTicker(m.opts.RecheckInterval)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			if m.usb != nil {
				m.usb.Scan()
			}
			m.Recheck(context.Background())
		}
	}
}

// Recheck opens channels whose device appeared and marks channels whose
// device vanished as unavailable. The loop calls it every RecheckInterval.
func (m *Manager) Recheck(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	changed := false
	for _, c := range m.chans {
		present := m.opts.Backend.Present(c.cat, c.device)
		switch {
		case c.port == nil && present && m.enabled:
			// A new device, or one that failed to open: (re)try. A
			// repeated failure is not reported again.
			m.openLocked(ctx, c, !c.available)
			changed = changed || c.port != nil
		case c.port == nil && !c.available && present:
			c.available = true
			m.emitAvailable(c)
			changed = true
		case c.available && !present:
			m.closePortLocked(c)
			c.available = false
			c.err = ""
			m.opts.Emit(Event{Type: protocol.EventChannelUnavailable, Severity: resource.SeverityWarning,
				Message: fmt.Sprintf("%s: device %s disappeared", c.cat.ID, c.device),
				Data:    map[string]any{"channelId": c.cat.ID, "device": c.device}})
			changed = true
		}
	}
	if changed {
		m.syncPassthroughLocked(ctx)
	}
}

func (m *Manager) emitAvailable(c *channel) {
	m.opts.Emit(Event{Type: protocol.EventChannelAvailable, Severity: resource.SeverityInfo,
		Message: fmt.Sprintf("%s: device %s available", c.cat.ID, c.device),
		Data:    map[string]any{"channelId": c.cat.ID, "device": c.device}})
}

// openLocked opens c with its desired configuration; a missing device marks
// it unavailable, any other failure is reported as a serial.error.
func (m *Manager) openLocked(ctx context.Context, c *channel, announce bool) {
	if !m.enabled {
		return
	}
	p, err := m.opts.Backend.Open(ctx, c.cat, c.device, c.desired)
	switch {
	case errors.Is(err, hw.ErrDeviceMissing):
		c.available = false
		c.err = ""
		m.log.Info("channel device missing", "channel", c.cat.ID, "device", c.device)
		return
	case err != nil:
		msg := shortErr(err)
		if msg != c.err {
			m.serialError(c, "open", err)
		}
		c.err = msg
		c.available = m.opts.Backend.Present(c.cat, c.device)
		if !c.available {
			return
		}
		// The device is there but did not open with the desired
		// configuration: try the catalog default so the channel still
		// reports (the error stays shown until a config applies).
		def := c.cat.DefaultConfig()
		if string(mustJSON(def)) == string(mustJSON(c.desired)) {
			return
		}
		if p2, err2 := m.opts.Backend.Open(ctx, c.cat, c.device, def); err2 == nil {
			c.port = p2
			c.applied, c.running = mustJSON(def), def
		}
		return
	}
	c.port = p
	c.available = true
	c.err = ""
	c.applied, c.running = mustJSON(c.desired), c.desired
	if announce {
		m.emitAvailable(c)
	}
}

func (m *Manager) closePortLocked(c *channel) {
	if c.port == nil {
		return
	}
	if err := c.port.Close(); err != nil {
		m.log.Warn("close channel", "channel", c.cat.ID, "err", err)
	}
	c.port = nil
	c.applied, c.running = nil, serialcfg.Config{}
}

func (m *Manager) serialError(c *channel, op string, err error) {
	m.log.Warn("channel "+op+" failed", "channel", c.cat.ID, "device", c.device, "err", err)
	m.opts.Emit(Event{Type: protocol.EventSerialError, Severity: resource.SeverityError,
		Message: fmt.Sprintf("%s: %s failed: %s", c.cat.ID, op, shortErr(err)),
		Data:    map[string]any{"channelId": c.cat.ID, "device": c.device, "error": err.Error()}})
}

// Apply applies a desired configuration live. Channels absent from cfg get
// their catalog default; channels whose configuration did not change are left
// alone; enabled=false closes every port (each channel then reports the
// error Disabled, and Points none) until a configuration enables them. It returns nil when every channel
// applied, otherwise an error naming each failure (each also emitted as a
// serial.error event; the channel keeps its previous configuration). A
// serial.config_applied event reports the outcome.
func (m *Manager) Apply(ctx context.Context, cfg protocol.Config) error {
	return m.apply(ctx, cfg, true)
}

// Restore applies a configuration saved by an earlier run, as Apply does
// but without the serial.config_applied event (it was reported when it
// first applied).
func (m *Manager) Restore(ctx context.Context, cfg protocol.Config) error {
	return m.apply(ctx, cfg, false)
}

func (m *Manager) apply(ctx context.Context, cfg protocol.Config, announce bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return errors.New("iomgr: closed")
	}
	var errs []string
	desired := map[string]serialcfg.Config{}
	rejected := map[string]string{}
	for _, cc := range cfg.Channels {
		cat, ok := m.opts.Model.Channel(cc.ID)
		switch {
		case !ok:
			errs = append(errs, fmt.Sprintf("%s: no such channel on %s", cc.ID, m.opts.Model.Name))
			continue
		case !cat.Configurable:
			continue // fixed channels keep their catalog configuration
		case cc.Config.Kind != cat.Group:
			msg := fmt.Sprintf("config kind %q on a %s channel", cc.Config.Kind, cat.Group)
			errs = append(errs, cc.ID+": "+msg)
			rejected[cc.ID] = msg
			m.emitConfigError(cc.ID, errors.New(msg))
			continue
		}
		desired[cc.ID] = cc.Config
	}
	m.enabled = cfg.Enabled
	if cfg.Mode != "" {
		m.mode = cfg.Mode
	}
	for _, c := range m.chans {
		want, ok := desired[c.cat.ID]
		msg, failed := rejected[c.cat.ID]
		switch {
		case ok:
		case failed:
			want = c.desired // keep the running config
		default:
			want = c.cat.DefaultConfig()
		}
		c.desired = want
		if !m.enabled {
			m.closePortLocked(c)
			c.err = ""
			continue
		}
		if failed {
			c.err = msg
			continue
		}
		if c.port == nil {
			if m.opts.Backend.Present(c.cat, c.device) {
				c.err = "" // a failure under a new config is reported again
				m.openLocked(ctx, c, false)
				if c.err != "" {
					errs = append(errs, c.cat.ID+": "+c.err)
				}
			} else {
				c.available = false
			}
			continue
		}
		js := mustJSON(want)
		if string(js) == string(c.applied) {
			c.err = ""
			continue
		}
		if err := c.port.Apply(ctx, want); err != nil {
			c.err = shortErr(err)
			errs = append(errs, c.cat.ID+": "+c.err)
			m.serialError(c, "apply", err)
			continue
		}
		c.applied, c.running = js, want
		c.err = ""
	}
	m.version = cfg.Version
	m.syncPassthroughLocked(ctx)
	var out error
	if len(errs) > 0 {
		out = errors.New(strings.Join(errs, "; "))
	}
	if !announce {
		return out
	}
	data := map[string]any{"version": cfg.Version, "enabled": cfg.Enabled, "mode": m.mode}
	msg := fmt.Sprintf("serial configuration version %d applied", cfg.Version)
	sev := resource.SeverityInfo
	if out != nil {
		data["error"] = out.Error()
		msg = fmt.Sprintf("serial configuration version %d applied with errors: %s", cfg.Version, out)
		sev = resource.SeverityWarning
	}
	m.opts.Emit(Event{Type: protocol.EventConfigApplied, Severity: sev, Message: msg, Data: data})
	return out
}

func (m *Manager) emitConfigError(id string, err error) {
	m.opts.Emit(Event{Type: protocol.EventSerialError, Severity: resource.SeverityError,
		Message: fmt.Sprintf("%s: %s", id, err), Data: map[string]any{"channelId": id, "error": err.Error()}})
}

func (m *Manager) syncPassthroughLocked(ctx context.Context) {
	if m.opts.Passthrough == nil {
		return
	}
	bs := make([]Binding, len(m.chans))
	for i, c := range m.chans {
		bs[i] = Binding{Channel: c.cat, Device: c.device, Port: c.port}
	}
	addrs := m.opts.Passthrough.Sync(ctx, m.mode, m.enabled, bs)
	for _, c := range m.chans {
		c.ptAddr = addrs[c.cat.ID]
	}
}

// Version returns the version of the last applied configuration (0: none).
func (m *Manager) Version() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.version
}

// States returns every channel's state for the heartbeat, in catalog order.
func (m *Manager) States() []protocol.ChannelState {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]protocol.ChannelState, 0, len(m.chans))
	for _, c := range m.chans {
		st := protocol.ChannelState{ID: c.cat.ID, Available: c.available, PassthroughAddress: c.ptAddr}
		if c.port != nil {
			t := c.port.Telemetry()
			st.Live, st.TxOn, st.Error = t.Live, t.TxOn, t.Error
		}
		if c.err != "" {
			st.Error = c.err
		}
		if !c.available && st.Error == "" {
			st.Error = "device missing"
		}
		if !m.enabled {
			st.Error = Disabled
		}
		out = append(out, st)
	}
	return out
}

// ChannelPoints is one channel's points (serialcfg.Config.PointDefs) and
// its port's latest readings.
type ChannelPoints struct {
	ChannelID string
	Defs      []serialcfg.PointDef
	// Readings is what the port's ReadPoints returned (hw.PointReader);
	// nil when the channel is not open or its port reads no points.
	Readings []hw.PointReading
}

// Points returns, in catalog order, every channel whose configuration
// names points: the points of the configuration its port runs (the
// desired one when it is not open) and the port's readings; none while the
// serial I/O switch is off, so that the sampler records and reports no
// point. The agent's sampler (agent/points) calls it every round.
func (m *Manager) Points() []ChannelPoints {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.enabled {
		return nil
	}
	var out []ChannelPoints
	for _, c := range m.chans {
		cfg := c.desired
		if c.port != nil {
			cfg = c.running
		}
		defs := cfg.PointDefs(c.cat.ID)
		if len(defs) == 0 {
			continue
		}
		cp := ChannelPoints{ChannelID: c.cat.ID, Defs: defs}
		if r, ok := c.port.(hw.PointReader); ok {
			cp.Readings = r.ReadPoints()
		}
		out = append(out, cp)
	}
	return out
}

// Close stops the recheck loop and closes every port.
func (m *Manager) Close() error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	close(m.stop)
	for _, c := range m.chans {
		m.closePortLocked(c)
	}
	started := m.started
	m.mu.Unlock()
	if started {
		<-m.loopDone
	}
	return nil
}

func mustJSON(c serialcfg.Config) []byte {
	b, _ := json.Marshal(c)
	return b
}

// shortErr keeps an error readable in telemetry: one line, at most 120
// characters.
func shortErr(err error) string {
	s := strings.ReplaceAll(err.Error(), "\n", " ")
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}
