package vpnwatch_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fleet/fleet/agent/vpnwatch"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// fakeWG stands for the kernel's WireGuard devices.
type fakeWG struct {
	mu   sync.Mutex
	devs map[string]*wgtypes.Device
	err  error
}

func (f *fakeWG) Device(name string) (*wgtypes.Device, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	d, ok := f.devs[name]
	if !ok {
		return nil, os.ErrNotExist
	}
	c := *d
	c.Peers = append([]wgtypes.Peer(nil), d.Peers...)
	return &c, nil
}

// env is a fake tunnel: links, WireGuard devices, clock and the events.
type env struct {
	wg     *fakeWG
	mu     sync.Mutex
	links  map[string]net.Flags
	now    time.Time
	events []protocol.Event
	w      *vpnwatch.Watcher
}

var t0 = time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)

func newEnv(t *testing.T, iface string) *env {
	t.Helper()
	e := &env{wg: &fakeWG{devs: map[string]*wgtypes.Device{}}, links: map[string]net.Flags{}, now: t0}
	w, err := vpnwatch.New(vpnwatch.Config{
		Interface: iface,
		Client:    e.wg,
		InterfaceByName: func(name string) (*net.Interface, error) {
			e.mu.Lock()
			defer e.mu.Unlock()
			f, ok := e.links[name]
			if !ok {
				return nil, fmt.Errorf("route ip+net: no such network interface")
			}
			return &net.Interface{Name: name, Flags: f, MTU: 1420}, nil
		},
		Now: func() time.Time { e.mu.Lock(); defer e.mu.Unlock(); return e.now },
		Emit: func(ev protocol.Event) {
			e.mu.Lock()
			e.events = append(e.events, ev)
			e.mu.Unlock()
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	e.w = w
	return e
}

func (e *env) advance(d time.Duration) {
	e.mu.Lock()
	e.now = e.now.Add(d)
	e.mu.Unlock()
}

func (e *env) clock() time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.now
}

func (e *env) setLink(name string, f net.Flags, present bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if present {
		e.links[name] = f
	} else {
		delete(e.links, name)
	}
}

func (e *env) setDevice(name string, peers ...wgtypes.Peer) {
	e.wg.mu.Lock()
	defer e.wg.mu.Unlock()
	e.wg.devs[name] = &wgtypes.Device{Name: name, Type: wgtypes.LinuxKernel, ListenPort: 51820, Peers: peers}
}

func (e *env) takeEvents() []protocol.Event {
	e.mu.Lock()
	defer e.mu.Unlock()
	ev := e.events
	e.events = nil
	return ev
}

func peer(endpoint string, handshake time.Time) wgtypes.Peer {
	addr, err := net.ResolveUDPAddr("udp", endpoint)
	if err != nil {
		panic(err)
	}
	return wgtypes.Peer{Endpoint: addr, LastHandshakeTime: handshake}
}

type data struct {
	InterfaceName *string `json:"interfaceName"`
	Endpoint      *string `json:"endpoint"`
	PeerCount     *int    `json:"peerCount"`
	Reason        string  `json:"reason"`
}

func decodeData(t *testing.T, ev protocol.Event) data {
	t.Helper()
	var d data
	if err := json.Unmarshal(ev.Data, &d); err != nil {
		t.Fatalf("event data %s: %v", ev.Data, err)
	}
	if d.InterfaceName == nil || d.Endpoint == nil || d.PeerCount == nil {
		t.Fatalf("event data %s lacks interfaceName, endpoint or peerCount", ev.Data)
	}
	return d
}

func oneEvent(t *testing.T, e *env, typ string, sev resource.Severity) protocol.Event {
	t.Helper()
	evs := e.takeEvents()
	if len(evs) != 1 {
		t.Fatalf("events %+v, want one %s", evs, typ)
	}
	ev := evs[0]
	if ev.Type != typ || ev.Severity != sev {
		t.Fatalf("event %s %s, want %s %s", ev.Type, ev.Severity, typ, sev)
	}
	if !ids.Valid(ev.ID) || ev.CreatedAt.Time != e.clock() || ev.Message == "" {
		t.Fatalf("event id %q createdAt %v message %q", ev.ID, ev.CreatedAt, ev.Message)
	}
	return ev
}

func noEvents(t *testing.T, e *env) {
	t.Helper()
	if evs := e.takeEvents(); len(evs) != 0 {
		t.Fatalf("unexpected events %+v", evs)
	}
}

func TestUpWithRecentHandshake(t *testing.T) {
	e := newEnv(t, "")
	e.setLink("wg0", net.FlagUp|net.FlagRunning, true)
	e.setDevice("wg0", peer("203.0.113.7:51820", t0.Add(-90*time.Second)), peer("198.51.100.2:51820", time.Time{}))
	st := e.w.Check()
	if !st.Up || st.InterfaceName != "wg0" || st.Endpoint != "203.0.113.7:51820" || st.PeerCount != 2 {
		t.Fatalf("state %+v", st)
	}
	if st.LastHandshake == nil || !st.LastHandshake.Equal(t0.Add(-90*time.Second)) {
		t.Fatalf("lastHandshake %v", st.LastHandshake)
	}
	if got := e.w.State(); !got.Up || e.w.Reason() != "" {
		t.Fatalf("State() %+v reason %q", got, e.w.Reason())
	}
	noEvents(t, e)
}

func TestDownCases(t *testing.T) {
	tests := []struct {
		name     string
		setup    func(e *env)
		severity resource.Severity
		reason   string
	}{
		{"interface missing", func(e *env) {}, resource.SeverityCritical, "interface wg0 missing"},
		{"interface down", func(e *env) {
			e.setLink("wg0", 0, true)
			e.setDevice("wg0", peer("203.0.113.7:51820", t0))
		}, resource.SeverityCritical, "interface wg0 is down"},
		{"not wireguard", func(e *env) { e.setLink("wg0", net.FlagUp, true) }, resource.SeverityCritical, "interface wg0 is not a WireGuard device"},
		{"wgctrl error", func(e *env) {
			e.setLink("wg0", net.FlagUp, true)
			e.wg.err = errors.New("permission denied")
		}, resource.SeverityCritical, "reading WireGuard device wg0: permission denied"},
		{"no peers", func(e *env) {
			e.setLink("wg0", net.FlagUp, true)
			e.setDevice("wg0")
		}, resource.SeverityError, "no peer configured on wg0"},
		{"stale handshake", func(e *env) {
			e.setLink("wg0", net.FlagUp, true)
			e.setDevice("wg0", peer("203.0.113.7:51820", t0.Add(-3*time.Minute-time.Second)))
		}, resource.SeverityError, "no handshake for 3m1s (last 2026-11-22T02:56:59Z)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := newEnv(t, "wg0")
			tt.setup(e)
			if st := e.w.Check(); st.Up {
				t.Fatalf("state %+v, want down", st)
			}
			ev := oneEvent(t, e, protocol.EventVPNDown, tt.severity)
			d := decodeData(t, ev)
			if *d.InterfaceName != "wg0" || d.Reason != tt.reason {
				t.Fatalf("data %s, want reason %q", ev.Data, tt.reason)
			}
			if e.w.Reason() != tt.reason || e.w.State().Up {
				t.Fatalf("reason %q", e.w.Reason())
			}
			// Still down: no second event.
			e.advance(time.Minute)
			e.w.Check()
			noEvents(t, e)
		})
	}
}

func TestHandshakeTimeoutBoundary(t *testing.T) {
	e := newEnv(t, "wg0")
	e.setLink("wg0", net.FlagUp, true)
	e.setDevice("wg0", peer("203.0.113.7:51820", t0))
	e.advance(3 * time.Minute)
	if st := e.w.Check(); !st.Up {
		t.Fatal("down at exactly 3 minutes since the handshake; the limit is 'within 3 minutes'")
	}
	e.advance(time.Second)
	if st := e.w.Check(); st.Up {
		t.Fatal("still up 3m1s after the last handshake")
	}
	d := decodeData(t, oneEvent(t, e, protocol.EventVPNDown, resource.SeverityError))
	if *d.Endpoint != "203.0.113.7:51820" || *d.PeerCount != 1 {
		t.Fatalf("data %+v", d)
	}
}

func TestDownThenUpThenDown(t *testing.T) {
	e := newEnv(t, "wg0")
	e.setLink("wg0", net.FlagUp, true)
	e.setDevice("wg0", peer("203.0.113.7:51820", t0.Add(-10*time.Second)))
	e.w.Check()
	noEvents(t, e)

	// The interface disappears.
	e.advance(10 * time.Second)
	e.setLink("wg0", 0, false)
	e.w.Check()
	oneEvent(t, e, protocol.EventVPNDown, resource.SeverityCritical)

	// It comes back with a fresh handshake.
	e.advance(time.Minute)
	e.setLink("wg0", net.FlagUp, true)
	e.setDevice("wg0", peer("203.0.113.7:51820", e.clock().Add(-time.Second)))
	if st := e.w.Check(); !st.Up {
		t.Fatalf("state %+v after recovery", st)
	}
	ev := oneEvent(t, e, protocol.EventVPNUp, resource.SeverityInfo)
	d := decodeData(t, ev)
	if *d.Endpoint != "203.0.113.7:51820" || *d.PeerCount != 1 || !strings.Contains(string(ev.Data), `"downSince":"2026-11-22T03:00:10.000Z"`) {
		t.Fatalf("vpn.up data %s", ev.Data)
	}

	// Peer removed.
	e.advance(time.Second)
	e.setDevice("wg0")
	e.w.Check()
	oneEvent(t, e, protocol.EventVPNDown, resource.SeverityError)
}

func TestNeverHandshakenGetsGracePeriod(t *testing.T) {
	e := newEnv(t, "wg0")
	e.setLink("wg0", net.FlagUp, true)
	e.setDevice("wg0", peer("203.0.113.7:51820", time.Time{}))
	if st := e.w.Check(); !st.Up {
		t.Fatal("a tunnel just seen, without a handshake yet, counts as down at once")
	}
	e.advance(2 * time.Minute)
	e.w.Check()
	noEvents(t, e)
	e.advance(time.Minute)
	if st := e.w.Check(); st.Up {
		t.Fatal("no handshake after 3 minutes, still up")
	}
	ev := oneEvent(t, e, protocol.EventVPNDown, resource.SeverityError)
	if d := decodeData(t, ev); !strings.HasPrefix(d.Reason, "no handshake with any peer since") {
		t.Fatalf("reason %q", d.Reason)
	}
	// The handshake completes.
	e.advance(time.Second)
	e.setDevice("wg0", peer("203.0.113.7:51820", e.clock()))
	e.w.Check()
	oneEvent(t, e, protocol.EventVPNUp, resource.SeverityInfo)
}

func TestConfigurableInterface(t *testing.T) {
	e := newEnv(t, "tun-fleet")
	e.setLink("wg0", net.FlagUp, true)
	e.setDevice("wg0", peer("203.0.113.7:51820", t0))
	if st := e.w.Check(); st.Up || st.InterfaceName != "tun-fleet" {
		t.Fatalf("state %+v: watching the wrong interface", st)
	}
	d := decodeData(t, oneEvent(t, e, protocol.EventVPNDown, resource.SeverityCritical))
	if *d.InterfaceName != "tun-fleet" {
		t.Fatalf("interfaceName %q", *d.InterfaceName)
	}
}

func TestRunChecksUntilCancelled(t *testing.T) {
	var mu sync.Mutex
	var got []protocol.Event
	w, err := vpnwatch.New(vpnwatch.Config{
		Client:          &fakeWG{devs: map[string]*wgtypes.Device{}},
		InterfaceByName: func(string) (*net.Interface, error) { return nil, errors.New("no such interface") },
		Interval:        10 * time.Millisecond,
		Emit:            func(ev protocol.Event) { mu.Lock(); got = append(got, ev); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := w.Run(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run = %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0].Type != protocol.EventVPNDown {
		t.Fatalf("events %+v, want one vpn_down", got)
	}
}

func TestNewRequiresClient(t *testing.T) {
	if _, err := vpnwatch.New(vpnwatch.Config{}); err == nil {
		t.Fatal("New without a client succeeded")
	}
}
