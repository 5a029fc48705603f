package webhook

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"syscall"
	"time"
)

// ClientConfig configures the HTTP client deliveries are sent with.
type ClientConfig struct {
	// AllowPrivate lets deliveries reach loopback, private, link-local,
	// CGNAT and metadata addresses (--webhook-allow-private).
	AllowPrivate bool
	// CAFile is a PEM file of extra CA certificates trusted besides the
	// system pool (--webhook-ca); "" for none.
	CAFile string
	// MaxConnsPerHost bounds the connections to one endpoint; 0 means 32.
	MaxConnsPerHost int
}

// blockedPrefixes lists the address ranges refused unless AllowPrivate.
func blockedPrefixes() []netip.Prefix {
	var out []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",      // "this network", unspecified
		"10.0.0.0/8",     // private
		"100.64.0.0/10",  // CGNAT
		"127.0.0.0/8",    // loopback
		"169.254.0.0/16", // link-local, cloud metadata 169.254.169.254
		"172.16.0.0/12",  // private
		"192.0.0.0/24",   // IETF protocol assignments
		"192.168.0.0/16", // private
		"198.18.0.0/15",  // benchmarking
		"224.0.0.0/4",    // multicast
		"240.0.0.0/4",    // reserved, broadcast
		"::/128",         // unspecified
		"::1/128",        // loopback
		"::/96",          // IPv4-compatible (deprecated; embeds any IPv4)
		"64:ff9b::/96",   // NAT64 (could embed a private IPv4)
		"2002::/16",      // 6to4 (embeds an IPv4, private ones included)
		"fc00::/7",       // unique local, includes metadata fd00:ec2::254
		"fe80::/10",      // link-local
		"ff00::/8",       // multicast
		"2001:db8::/32",  // documentation
		"100::/64",       // discard
	} {
		out = append(out, netip.MustParsePrefix(s))
	}
	return out
}

// AddressAllowed reports whether a webhook may be dialled at ip when private
// destinations are not allowed.
func AddressAllowed(ip netip.Addr) bool { return addressAllowed(blockedPrefixes(), ip) }

// A zone (fe80::1%eth0, ::1%lo) is dropped before the check: Prefix.Contains
// is false for every zoned address, and the zone changes only the
// interface, never whether the address is loopback or private.
func addressAllowed(blocked []netip.Prefix, ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if !ip.IsValid() {
		return false
	}
	for _, p := range blocked {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// dialAllowed is the dial-time check: address is the "ip:port" (or
// "[ip%zone]:port") the dialer is about to connect to, after resolution.
func dialAllowed(blocked []netip.Prefix, address string) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", ErrAddressNotAllowed, address)
	}
	if !addressAllowed(blocked, ap.Addr()) {
		return fmt.Errorf("%w: %s", ErrAddressNotAllowed, ap.Addr())
	}
	return nil
}

// NewClient returns the HTTP client deliveries use: TLS verified (system
// roots plus CAFile), redirects never followed, no proxy, and the resolved
// address checked at dial time against the address policy.
func NewClient(cfg ClientConfig) (*http.Client, error) {
	roots, err := x509.SystemCertPool()
	if err != nil || roots == nil {
		roots = x509.NewCertPool()
	}
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("webhook: CA file: %w", err)
		}
		if !roots.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("webhook: CA file %s: no PEM certificate found", cfg.CAFile)
		}
	}
	conns := cfg.MaxConnsPerHost
	if conns <= 0 {
		conns = 32
	}
	d := &net.Dialer{Timeout: DefaultTimeout, KeepAlive: 30 * time.Second}
	if !cfg.AllowPrivate {
		blocked := blockedPrefixes()
		d.Control = func(_, address string, _ syscall.RawConn) error { return dialAllowed(blocked, address) }
	}
	tr := &http.Transport{
		Proxy: nil,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			return d.DialContext(ctx, network, addr)
		},
		TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
		TLSHandshakeTimeout:   DefaultTimeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   conns,
		MaxConnsPerHost:       conns,
		IdleConnTimeout:       90 * time.Second,
		ResponseHeaderTimeout: 0, // the per-attempt context bounds it
		DisableCompression:    true,
	}
	return &http.Client{
		Transport: tr,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}, nil
}
