// Package clientaddr gives the relay its clients' own addresses when it runs
// behind a reverse proxy or load balancer (HAProxy in docs/cluster.md, or
// nginx or Caddy on the same host): there every connection comes from the
// proxy, so the budget of unauthenticated API requests, the panel's sign-in
// throttle per client address, the agents' refusal log and the access log
// would all see one address, the proxy's. For a request that arrives from a
// trusted proxy, the client is the rightmost address of X-Forwarded-For that
// is not itself a trusted proxy (github.com/realclientip/realclientip-go):
// the address the outermost trusted proxy saw, which a client cannot forge,
// since each proxy appends the address it saw. Requests from any other peer
// keep the peer's address, whatever headers they carry. Host and Key are
// the one place the API, the panel and the agent endpoint read a
// request's client from.
package clientaddr

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/go-chi/httprate"
	"github.com/realclientip/realclientip-go"
)

// Host is the host part of r.RemoteAddr: the peer's address, or behind a
// trusted proxy the client's (Handler). It is what logs name.
func Host(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// Key is the client as per-address limits count it (the API's budget of
// unauthenticated requests, the panel's sign-in throttle, the agent
// endpoint's refusals): Host with IPv6 reduced to its /64, since one
// client commonly holds a whole /64.
func Key(r *http.Request) string { return httprate.CanonicalizeIP(Host(r)) }

// Trusted are the proxies whose X-Forwarded-For the relay believes.
type Trusted struct {
	ranges []net.IPNet
	strat  realclientip.RightmostTrustedRangeStrategy
}

// Parse reads a comma-separated list of IP addresses and CIDR ranges
// ("10.0.0.5, 10.0.1.0/24"); an empty list is nil: no proxy is trusted.
func Parse(list string) (*Trusted, error) {
	var items []string
	for _, s := range strings.Split(list, ",") {
		if s = strings.TrimSpace(s); s != "" {
			items = append(items, s)
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	ranges, err := realclientip.AddressesAndRangesToIPNets(items...)
	if err != nil {
		return nil, fmt.Errorf("want IP addresses or CIDR ranges, comma-separated: %w", err)
	}
	strat, err := realclientip.NewRightmostTrustedRangeStrategy("X-Forwarded-For", ranges)
	if err != nil {
		return nil, err
	}
	return &Trusted{ranges: ranges, strat: strat}, nil
}

// String lists the trusted ranges, for the relay's start-up log.
func (t *Trusted) String() string {
	s := make([]string, len(t.ranges))
	for i, r := range t.ranges {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// Handler sets r.RemoteAddr to the client's address (port 0: a proxy does
// not pass the client's port) before next sees a request whose peer is a
// trusted proxy and whose X-Forwarded-For names a client; every other
// request passes as it is. A nil t trusts no proxy and returns next.
func (t *Trusted) Handler(next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ip := t.client(r); ip != "" {
			r.RemoteAddr = net.JoinHostPort(ip, "0")
		}
		next.ServeHTTP(w, r)
	})
}

// client is the client's address by X-Forwarded-For, or "" when r's peer is
// not a trusted proxy or the header names no client.
func (t *Trusted) client(r *http.Request) string {
	if len(r.Header["X-Forwarded-For"]) == 0 {
		return ""
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return ""
	}
	peer := net.ParseIP(host)
	if peer == nil || !t.contains(peer) {
		return ""
	}
	return t.strat.ClientIP(r.Header, r.RemoteAddr)
}

func (t *Trusted) contains(ip net.IP) bool {
	for _, r := range t.ranges {
		if r.Contains(ip) {
			return true
		}
	}
	return false
}
