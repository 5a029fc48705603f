package clientaddr_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/fleet/fleet/cloud/internal/clientaddr"
)

// TestHandler: behind a trusted proxy the client is the address the proxy
// appended to X-Forwarded-For, whatever the client wrote to its left; a peer
// that is not a trusted proxy keeps its own address, headers or not.
func TestHandler(t *testing.T) {
	trusted, err := clientaddr.Parse(" 10.0.0.5, 10.1.0.0/16 ,2001:db8::/32")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"through the proxy", "10.0.0.5:41000", []string{"203.0.113.9"}, "203.0.113.9:0"},
		{"a forged entry to the left", "10.0.0.5:41000", []string{"198.51.100.1, 203.0.113.9"}, "203.0.113.9:0"},
		{"a forged header line before the proxy's", "10.0.0.5:41000", []string{"198.51.100.1", "203.0.113.9"}, "203.0.113.9:0"},
		{"two trusted proxies", "10.0.0.5:41000", []string{"203.0.113.9, 10.1.2.3"}, "203.0.113.9:0"},
		{"an IPv6 client", "[2001:db8::7]:41000", []string{"2001:db9::1"}, "[2001:db9::1]:0"},
		{"no header: the proxy itself (a health check)", "10.0.0.5:41000", nil, "10.0.0.5:41000"},
		{"only trusted addresses in the header", "10.0.0.5:41000", []string{"10.1.0.9"}, "10.0.0.5:41000"},
		{"garbage appended last", "10.0.0.5:41000", []string{"203.0.113.9, not-an-ip"}, "10.0.0.5:41000"},
		{"a client straight to the relay", "198.51.100.7:5000", []string{"203.0.113.9"}, "198.51.100.7:5000"},
		{"a neighbour of the proxy", "10.0.0.6:5000", []string{"203.0.113.9"}, "10.0.0.6:5000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got string
			h := trusted.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got = r.RemoteAddr }))
			r := httptest.NewRequest("GET", "/v1/devices", nil)
			r.RemoteAddr = tc.peer
			for _, v := range tc.xff {
				r.Header.Add("X-Forwarded-For", v)
			}
			h.ServeHTTP(httptest.NewRecorder(), r)
			if got != tc.want {
				t.Errorf("client %q, want %q", got, tc.want)
			}
		})
	}
}

// TestParse: an empty list trusts nothing (the handler is next itself); a
// list with a word that is no address or range is refused, naming it.
func TestParse(t *testing.T) {
	for _, empty := range []string{"", " ", " , "} {
		tr, err := clientaddr.Parse(empty)
		if tr != nil || err != nil {
			t.Errorf("Parse(%q) = %v, %v; want nil, nil", empty, tr, err)
		}
		var seen string
		h := tr.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { seen = r.RemoteAddr }))
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.0.0.5:1"
		r.Header.Set("X-Forwarded-For", "203.0.113.9")
		h.ServeHTTP(httptest.NewRecorder(), r)
		if seen != "10.0.0.5:1" {
			t.Errorf("no proxy trusted, yet the client became %q", seen)
		}
	}
	tr, err := clientaddr.Parse("10.0.0.5,10.0.1.0/24")
	if err != nil || tr.String() != "10.0.0.5/32,10.0.1.0/24" {
		t.Errorf("Parse = %v, %v", tr, err)
	}
	for _, bad := range []string{"10.0.0.5,haproxy", "10.0.0.0/33", "fe80::1%eth0"} {
		if _, err := clientaddr.Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

// TestKey: limits count a client by its address, IPv6 by its /64; logs
// name the address itself.
func TestKey(t *testing.T) {
	for _, tc := range []struct{ remote, host, key string }{
		{"203.0.113.9:41000", "203.0.113.9", "203.0.113.9"},
		{"[2001:db8:1:2:aaaa::1]:41000", "2001:db8:1:2:aaaa::1", "2001:db8:1:2::"},
		{"203.0.113.9", "203.0.113.9", "203.0.113.9"}, // no port
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = tc.remote
		if h, k := clientaddr.Host(r), clientaddr.Key(r); h != tc.host || k != tc.key {
			t.Errorf("%s: Host %q, Key %q; want %q, %q", tc.remote, h, k, tc.host, tc.key)
		}
	}
}
