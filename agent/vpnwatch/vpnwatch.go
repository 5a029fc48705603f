// Package vpnwatch watches the gateway's WireGuard tunnel. It reads the
// device and its peers through wgctrl and the link state through
// net.InterfaceByName, decides whether the tunnel is up, reports the state
// for heartbeats (*protocol.VPN), and emits an alert.vpn_down event when
// the tunnel goes down and a vpn.up event when it recovers.
//
// The tunnel is down when the interface is missing, is administratively
// down, is not a WireGuard device, has no peer, or no peer has completed a
// handshake within HandshakeTimeout (3 minutes, WireGuard rekeys every 2).
// A tunnel that has never handshaken is given HandshakeTimeout from the
// moment the watcher first sees it before it counts as down, so an agent
// starting next to a tunnel that is still coming up does not raise a false
// alarm. A missing or down interface is CRITICAL; a stale handshake ERROR.
package vpnwatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/tick"
)

// Defaults.
const (
	DefaultInterface        = "wg0"
	DefaultHandshakeTimeout = 3 * time.Minute
	DefaultInterval         = 10 * time.Second
)

// Client is the part of wgctrl the watcher uses; *wgctrl.Client
// implements it.
type Client interface {
	Device(name string) (*wgtypes.Device, error)
}

var _ Client = (*wgctrl.Client)(nil)

// Config configures a Watcher.
type Config struct {
	// Interface is the WireGuard interface; "" is wg0.
	Interface string
	// Client reads WireGuard devices; nil opens a wgctrl client (Open).
	Client Client
	// InterfaceByName reads the link; nil is net.InterfaceByName.
	InterfaceByName func(name string) (*net.Interface, error)
	// Now is the clock; nil is time.Now.
	Now func() time.Time
	// HandshakeTimeout; 0 is 3 minutes.
	HandshakeTimeout time.Duration
	// Interval between checks in Run; 0 is 10 s.
	Interval time.Duration
	// Emit receives the events; it must not block for long. nil drops them.
	Emit func(protocol.Event)
	// Logger; nil discards.
	Logger *slog.Logger
}

// Watcher tracks the tunnel's state.
type Watcher struct {
	cfg    Config
	log    *slog.Logger
	closer func() error

	mu         sync.Mutex
	state      protocol.VPN
	reason     string
	checked    bool
	firstSeen  time.Time // when the interface was first seen up with peers
	lastChange time.Time
}

// New returns a Watcher; cfg.Client must be set (see Open).
func New(cfg Config) (*Watcher, error) {
	if cfg.Client == nil {
		return nil, errors.New("vpnwatch: Config.Client is required (or use Open)")
	}
	if cfg.Interface == "" {
		cfg.Interface = DefaultInterface
	}
	if cfg.InterfaceByName == nil {
		cfg.InterfaceByName = net.InterfaceByName
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.HandshakeTimeout <= 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w := &Watcher{cfg: cfg, log: log.With("component", "vpnwatch", "interface", cfg.Interface)}
	w.state = protocol.VPN{InterfaceName: cfg.Interface}
	return w, nil
}

// Open is New with a wgctrl client opened when cfg.Client is nil; Close
// releases it.
func Open(cfg Config) (*Watcher, error) {
	var closer func() error
	if cfg.Client == nil {
		c, err := wgctrl.New()
		if err != nil {
			return nil, fmt.Errorf("vpnwatch: wgctrl: %w", err)
		}
		cfg.Client, closer = c, c.Close
	}
	w, err := New(cfg)
	if err != nil {
		if closer != nil {
			_ = closer()
		}
		return nil, err
	}
	w.closer = closer
	return w, nil
}

// Close releases the wgctrl client Open made.
func (w *Watcher) Close() error {
	if w.closer != nil {
		return w.closer()
	}
	return nil
}

// State returns the last observed state, for heartbeats.
func (w *Watcher) State() *protocol.VPN {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := w.state
	return &s
}

// Reason returns why the tunnel counts as down ("" when up).
func (w *Watcher) Reason() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.reason
}

// Run checks every Interval until ctx ends.
func (w *Watcher) Run(ctx context.Context) error {
	tick.NowAndEvery(ctx, w.cfg.Interval, func() { w.Check() })
	return ctx.Err()
}

// observation is one reading of the tunnel.
type observation struct {
	vpn      protocol.VPN
	reason   string
	severity resource.Severity
}

func (w *Watcher) observe(now time.Time) observation {
	name := w.cfg.Interface
	o := observation{vpn: protocol.VPN{InterfaceName: name}, severity: resource.SeverityCritical}
	ifi, err := w.cfg.InterfaceByName(name)
	if err != nil {
		w.firstSeen = time.Time{}
		o.reason = "interface " + name + " missing"
		return o
	}
	if ifi.Flags&net.FlagUp == 0 {
		w.firstSeen = time.Time{}
		o.reason = "interface " + name + " is down"
		return o
	}
	dev, err := w.cfg.Client.Device(name)
	if err != nil {
		w.firstSeen = time.Time{}
		if errors.Is(err, os.ErrNotExist) {
			o.reason = "interface " + name + " is not a WireGuard device"
		} else {
			o.reason = "reading WireGuard device " + name + ": " + err.Error()
		}
		return o
	}
	o.severity = resource.SeverityError
	o.vpn.PeerCount = len(dev.Peers)
	var latest time.Time
	for _, p := range dev.Peers {
		if p.Endpoint != nil && (o.vpn.Endpoint == "" || p.LastHandshakeTime.After(latest)) {
			o.vpn.Endpoint = p.Endpoint.String()
		}
		if p.LastHandshakeTime.After(latest) {
			latest = p.LastHandshakeTime
		}
	}
	o.vpn.LastHandshake = resource.TP(latest)
	if len(dev.Peers) == 0 {
		w.firstSeen = time.Time{}
		o.reason = "no peer configured on " + name
		return o
	}
	if w.firstSeen.IsZero() {
		w.firstSeen = now
	}
	timeout := w.cfg.HandshakeTimeout
	switch {
	case latest.IsZero() && now.Sub(w.firstSeen) >= timeout:
		o.reason = fmt.Sprintf("no handshake with any peer since %s", w.firstSeen.UTC().Format(time.RFC3339))
		return o
	case latest.IsZero():
		// Still coming up: keep the previous verdict (up unless known down).
		o.vpn.Up = !w.checked || w.state.Up
		if !o.vpn.Up {
			o.reason = w.reason
		}
		return o
	case now.Sub(latest) > timeout:
		o.reason = fmt.Sprintf("no handshake for %s (last %s)", now.Sub(latest).Truncate(time.Second), latest.UTC().Format(time.RFC3339))
		return o
	}
	o.vpn.Up = true
	return o
}

// eventData is the data of alert.vpn_down and vpn.up.
type eventData struct {
	InterfaceName string         `json:"interfaceName"`
	Endpoint      string         `json:"endpoint"`
	PeerCount     int            `json:"peerCount"`
	Reason        string         `json:"reason,omitempty"`
	LastHandshake *resource.Time `json:"lastHandshake,omitempty"`
	DownSince     *resource.Time `json:"downSince,omitempty"`
}

// Check reads the tunnel once, updates the state and emits an event on a
// transition: alert.vpn_down when it goes down (or is down at the first
// check), vpn.up when it comes back. It returns the new state.
func (w *Watcher) Check() protocol.VPN {
	now := w.cfg.Now()
	w.mu.Lock()
	o := w.observe(now)
	wasChecked, wasUp := w.checked, w.state.Up
	prevChange := w.lastChange
	w.state, w.reason, w.checked = o.vpn, o.reason, true
	var ev *protocol.Event
	data := eventData{InterfaceName: o.vpn.InterfaceName, Endpoint: o.vpn.Endpoint, PeerCount: o.vpn.PeerCount, LastHandshake: o.vpn.LastHandshake}
	switch {
	case !o.vpn.Up && (!wasChecked || wasUp):
		w.lastChange = now
		data.Reason = o.reason
		ev = &protocol.Event{Type: protocol.EventVPNDown, Severity: o.severity,
			Message: fmt.Sprintf("VPN tunnel %s down: %s", o.vpn.InterfaceName, o.reason)}
	case o.vpn.Up && wasChecked && !wasUp:
		w.lastChange = now
		data.DownSince = resource.TP(prevChange)
		ev = &protocol.Event{Type: protocol.EventVPNUp, Severity: resource.SeverityInfo,
			Message: fmt.Sprintf("VPN tunnel %s up again (endpoint %s)", o.vpn.InterfaceName, o.vpn.Endpoint)}
	}
	w.mu.Unlock()

	if ev != nil {
		b, err := json.Marshal(data)
		if err != nil {
			w.log.Error("encode event data", "err", err)
		}
		ev.ID, ev.Data, ev.CreatedAt = ids.New(), b, resource.T(now)
		if ev.Type == protocol.EventVPNDown {
			w.log.Warn("tunnel down", "reason", o.reason, "peers", o.vpn.PeerCount)
		} else {
			w.log.Info("tunnel up", "endpoint", o.vpn.Endpoint, "peers", o.vpn.PeerCount)
		}
		if w.cfg.Emit != nil {
			w.cfg.Emit(*ev)
		}
	}
	return o.vpn
}
