package webhook

import (
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// FuzzAddressPolicy spells one address every way the URL syntax and the
// dialer allow (IPv4, IPv4-mapped and -compatible IPv6, with a zone, in
// brackets with a port) and checks that the policy's verdict depends on
// the address only: every spelling the URL check lets through is judged
// at dial time as the plain address is, and an address Go itself calls
// loopback, private, link-local, multicast or unspecified is never allowed.
func FuzzAddressPolicy(f *testing.F) {
	for _, s := range []string{"127.0.0.1", "::1", "10.1.2.3", "169.254.169.254", "fd00:ec2::254", "fe80::1", "::ffff:192.168.1.1",
		"93.184.216.34", "2606:2800:220:1::1", "2002:7f00:1::1", "::7f00:1", "64:ff9b::a00:1", "100.64.0.1", "0.0.0.0"} {
		f.Add(netip.MustParseAddr(s).AsSlice(), "lo", uint16(443))
	}
	blocked := blockedPrefixes()
	f.Fuzz(func(t *testing.T, raw []byte, zone string, port uint16) {
		ip, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		plain := ip.Unmap()
		want := addressAllowed(blocked, plain)
		std := net.IP(plain.AsSlice())
		if want && (std.IsLoopback() || std.IsPrivate() || std.IsLinkLocalUnicast() || std.IsLinkLocalMulticast() ||
			std.IsMulticast() || std.IsUnspecified() || std.IsInterfaceLocalMulticast()) {
			t.Fatalf("%s allowed, but Go calls it loopback, private, link-local, multicast or unspecified", plain)
		}
		spellings := []netip.Addr{plain, ip}
		if plain.Is4() {
			spellings = append(spellings, netip.AddrFrom16(plain.As16()), netip.AddrFrom16(plain.As16()).WithZone(zone))
		} else {
			spellings = append(spellings, plain.WithZone(zone))
		}
		for _, sp := range spellings {
			if !sp.IsValid() {
				continue
			}
			addr := netip.AddrPortFrom(sp, port).String()
			if got := dialAllowed(blocked, addr) == nil; got != want {
				t.Fatalf("dialling %s: allowed %v, but %s is judged %v", addr, got, plain, want)
			}
			host := sp.String()
			if sp.Is6() {
				host = "[" + strings.Replace(host, "%", "%25", 1) + "]"
			}
			u := "https://" + host + ":" + strconv.Itoa(int(port)) + "/hook"
			if err := cloud.ValidateWebhookURL("webhookUrl", u); err == nil {
				pu, perr := url.Parse(u)
				if perr != nil || strings.Contains(pu.Host, "%") {
					t.Fatalf("URL %s accepted with a zone or unparsable (%v)", u, perr)
				}
				hp, perr := netip.ParseAddr(pu.Hostname())
				if perr == nil && addressAllowed(blocked, hp) != want {
					t.Fatalf("URL %s resolves to %s, judged %v, want %v", u, hp, !want, want)
				}
			}
		}
	})
}

// FuzzValidateURL: the URL check never panics, accepts only absolute https
// URLs with a host and no credentials, zone or fragment, and answers a
// validation error otherwise.
func FuzzValidateURL(f *testing.F) {
	for _, s := range []string{"https://hooks.example.com/fleet", "https://[::1%25lo]:8443/x", "https://user:pw@h/", "http://h/",
		"https://h/#f", "https://0x7f.1/", "https://2130706433/", "https://[::ffff:127.0.0.1]/", "HTTPS://H:443/"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		err := ValidateURL("webhookUrl", raw)
		if err != nil {
			if cloud.ErrorCode(err) != cloud.EINVALID {
				t.Fatalf("ValidateURL(%q): %v, want a validation error", raw, err)
			}
			return
		}
		u, perr := url.Parse(raw)
		if perr != nil || !strings.EqualFold(u.Scheme, "https") || u.Hostname() == "" || u.User != nil ||
			u.Fragment != "" || strings.Contains(u.Host, "%") || len(raw) > cloud.MaxWebhookURLLength {
			t.Fatalf("ValidateURL accepted %q (%+v, %v)", raw, u, perr)
		}
	})
}
