package vpnwatch_test

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.zx2c4.com/wireguard/wgctrl"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"github.com/fleet/fleet/agent/vpnwatch"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/kerneltest"
)

// TestKernelWireGuard runs the watcher against two real WireGuard
// interfaces that handshake with each other over loopback. It needs the
// qemu rig (root, wireguard module): FLEET_KERNEL_TEST=1.
func TestKernelWireGuard(t *testing.T) {
	kerneltest.Require(t)
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatalf("lo up: %v", err)
	}
	wg, err := wgctrl.New()
	if err != nil {
		t.Fatalf("wgctrl: %v", err)
	}
	defer wg.Close()

	k0, _ := wgtypes.GeneratePrivateKey()
	k1, _ := wgtypes.GeneratePrivateKey()
	port0, port1 := 51820, 51821
	keepalive := time.Second
	peerCfg := func(pub wgtypes.Key, port int, ip string) wgtypes.PeerConfig {
		_, allowed, _ := net.ParseCIDR(ip)
		return wgtypes.PeerConfig{
			PublicKey:                   pub,
			Endpoint:                    &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port},
			AllowedIPs:                  []net.IPNet{*allowed},
			ReplaceAllowedIPs:           true,
			PersistentKeepaliveInterval: &keepalive,
		}
	}
	mk := func(name string, key wgtypes.Key, port int, peer wgtypes.PeerConfig) {
		t.Helper()
		kerneltest.AddLink(t, &netlink.Wireguard{LinkAttrs: netlink.LinkAttrs{Name: name}}, "wireguard")
		if err := wg.ConfigureDevice(name, wgtypes.Config{PrivateKey: &key, ListenPort: &port, ReplacePeers: true, Peers: []wgtypes.PeerConfig{peer}}); err != nil {
			t.Fatalf("configure %s: %v", name, err)
		}
	}
	// kwg1 first, so kwg0's first initiation finds it listening.
	mk("kwg1", k1, port1, peerCfg(k0.PublicKey(), port0, "10.77.0.1/32"))
	mk("kwg0", k0, port0, peerCfg(k1.PublicKey(), port1, "10.77.0.2/32"))

	var mu sync.Mutex
	var events []protocol.Event
	w, err := vpnwatch.New(vpnwatch.Config{
		Interface: "kwg0",
		Client:    wg,
		Emit:      func(ev protocol.Event) { mu.Lock(); events = append(events, ev); mu.Unlock() },
	})
	if err != nil {
		t.Fatal(err)
	}
	take := func() []protocol.Event {
		mu.Lock()
		defer mu.Unlock()
		e := events
		events = nil
		return e
	}
	// waitFor checks every 100 ms until cond holds, for up to 15 s.
	waitFor := func(what string, cond func(protocol.VPN) bool) protocol.VPN {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for {
			st := w.Check()
			if cond(st) {
				return st
			}
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s: state %+v reason %q", what, st, w.Reason())
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	expect := func(typ string, sev resource.Severity) protocol.Event {
		t.Helper()
		evs := take()
		if len(evs) != 1 || evs[0].Type != typ || evs[0].Severity != sev {
			t.Fatalf("events %+v, want one %s %s", evs, typ, sev)
		}
		if !strings.Contains(string(evs[0].Data), `"interfaceName":"kwg0"`) || !strings.Contains(string(evs[0].Data), `"peerCount":`) ||
			!strings.Contains(string(evs[0].Data), `"endpoint":`) {
			t.Fatalf("event data %s", evs[0].Data)
		}
		return evs[0]
	}

	// 1. The two interfaces handshake: up, with the peer's endpoint.
	st := waitFor("handshake", func(s protocol.VPN) bool { return s.Up && s.LastHandshake != nil })
	if st.PeerCount != 1 || st.Endpoint != "127.0.0.1:51821" {
		t.Fatalf("state %+v", st)
	}
	if evs := take(); len(evs) != 0 {
		t.Fatalf("events while coming up: %+v", evs)
	}

	// 2. Peer removed: down.
	if err := wg.ConfigureDevice("kwg0", wgtypes.Config{ReplacePeers: true}); err != nil {
		t.Fatal(err)
	}
	waitFor("down without peer", func(s protocol.VPN) bool { return !s.Up })
	expect(protocol.EventVPNDown, resource.SeverityError)

	// 3. Peer back: a new handshake, up again.
	if err := wg.ConfigureDevice("kwg0", wgtypes.Config{Peers: []wgtypes.PeerConfig{peerCfg(k1.PublicKey(), port1, "10.77.0.2/32")}}); err != nil {
		t.Fatal(err)
	}
	waitFor("up after the peer returns", func(s protocol.VPN) bool { return s.Up })
	expect(protocol.EventVPNUp, resource.SeverityInfo)

	// 4. Interface down: down, CRITICAL.
	l0, _ := netlink.LinkByName("kwg0")
	if err := netlink.LinkSetDown(l0); err != nil {
		t.Fatal(err)
	}
	waitFor("link down", func(s protocol.VPN) bool { return !s.Up })
	expect(protocol.EventVPNDown, resource.SeverityCritical)
	if !strings.Contains(w.Reason(), "is down") {
		t.Fatalf("reason %q", w.Reason())
	}

	// 5. Interface up again.
	if err := netlink.LinkSetUp(l0); err != nil {
		t.Fatal(err)
	}
	waitFor("link up", func(s protocol.VPN) bool { return s.Up })
	expect(protocol.EventVPNUp, resource.SeverityInfo)

	// 6. The 3-minute rule on the real device, with a clock 4 minutes ahead.
	ahead, err := vpnwatch.New(vpnwatch.Config{Interface: "kwg0", Client: wg, Now: func() time.Time { return time.Now().Add(4 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	if s := ahead.Check(); s.Up || !strings.HasPrefix(ahead.Reason(), "no handshake for") {
		t.Fatalf("4 minutes ahead: state %+v reason %q", s, ahead.Reason())
	}

	// 7. Interface deleted: missing.
	if err := netlink.LinkDel(l0); err != nil {
		t.Fatal(err)
	}
	waitFor("missing", func(s protocol.VPN) bool { return !s.Up })
	expect(protocol.EventVPNDown, resource.SeverityCritical)
}
