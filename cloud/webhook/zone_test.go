package webhook_test

import (
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/fleet/fleet/cloud/webhook"
)

// TestZonedLoopbackRefusedAtDial sends to a TLS server on [::1] through
// URLs whose host carries an IPv6 zone (%25lo, %25foo, %251): the client
// refuses the address when it dials, and the server sees no connection.
func TestZonedLoopbackRefusedAtDial(t *testing.T) {
	ln, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback here: %v", err)
	}
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	srv.Listener = ln
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	port := ln.Addr().(*net.TCPAddr).Port

	client, err := webhook.NewClient(webhook.ClientConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, zone := range []string{"lo", "foo", "1"} {
		u := "https://[::1%25" + zone + "]:" + strconv.Itoa(port) + "/x"
		resp, err := client.Get(u)
		if err == nil {
			resp.Body.Close()
			t.Errorf("GET %s: status %d, want the address refused", u, resp.StatusCode)
			continue
		}
		if !errors.Is(err, webhook.ErrAddressNotAllowed) {
			t.Errorf("GET %s: %v, want %v", u, err, webhook.ErrAddressNotAllowed)
		}
	}
	if n := conns.Load(); n != 0 {
		t.Errorf("the loopback server saw %d connections, want 0", n)
	}
}

// TestZonedAddressesNotAllowed: the policy judges the address without its
// zone, and refuses the ranges that embed an IPv4 (::/96, 6to4).
func TestZonedAddressesNotAllowed(t *testing.T) {
	for _, addr := range []string{"::1%lo", "::1%foo", "::1%1", "fe80::1%lo", "fe80::1%eth0",
		"fd00:ec2::254%eth0", "::ffff:127.0.0.1%lo",
		"::127.0.0.1", "::10.0.0.1", "::a9fe:a9fe", // IPv4-compatible
		"2002:7f00:1::1", "2002:a00:1::1", "2002:c0a8:101::", // 6to4 around 127/8, 10/8, 192.168/16
	} {
		if webhook.AddressAllowed(netip.MustParseAddr(addr)) {
			t.Errorf("AddressAllowed(%s) = true, want false", addr)
		}
	}
	if !webhook.AddressAllowed(netip.MustParseAddr("2606:2800:220:1::1%eth0")) {
		t.Error("a public address with a zone is refused; only the address decides")
	}
}

// TestValidateURLRefusesZones: a zone in the URL's host is refused when the
// URL is stored, whatever it spells.
func TestValidateURLRefusesZones(t *testing.T) {
	for _, raw := range []string{"https://[::1%25lo]:8443/x", "https://[::1%25foo]/", "https://[::1%251]/",
		"https://[fe80::1%25lo]/x", "https://[2606:2800:220:1::1%25eth0]/"} {
		if err := webhook.ValidateURL("webhookUrl", raw); err == nil {
			t.Errorf("ValidateURL(%q) = nil, want a validation error", raw)
		}
	}
}
