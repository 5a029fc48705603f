package apibench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"slices"
	"sort"
	"time"
)

// CeilingTarget is issue 31's target for GET /devices (limit 25): at least
// 0.9 of the requests per second of a bare net/http server answering the
// same bytes and headers.
const CeilingTarget = 0.9

// Alternation is one round of the ceiling comparison: the relay's API,
// then the bare server, each for Config.Duration after Config.Warmup.
type Alternation struct {
	Relay, Bare Result
}

// Ratio is the relay's requests per second over the bare server's.
func (a Alternation) Ratio() float64 {
	if a.Bare.RPS() == 0 {
		return 0
	}
	return a.Relay.RPS() / a.Bare.RPS()
}

// CPURatio is the bare server's process CPU per request over the relay's
// (each with the same load generator's share): on a machine shared with
// other work it moves less than the requests per second.
func (a Alternation) CPURatio() float64 {
	if a.Relay.CPU == 0 {
		return 0
	}
	return float64(a.Bare.CPU) / float64(a.Relay.CPU)
}

// Ceiling is the comparison of GET /devices?limit=25 with net/http alone.
type Ceiling struct {
	Alternations []Alternation
	// Bytes is the size of the response (header and body) both answer,
	// Header its header names as the relay sent them.
	Bytes  int
	Header []string
}

// MedianRatio is the median of the alternations' ratios (the mean of the
// middle two for an even count).
func (c Ceiling) MedianRatio() float64 { return c.median(Alternation.Ratio) }

// MedianCPURatio is the median of the alternations' CPU ratios.
func (c Ceiling) MedianCPURatio() float64 { return c.median(Alternation.CPURatio) }

func (c Ceiling) median(of func(Alternation) float64) float64 {
	if len(c.Alternations) == 0 {
		return 0
	}
	r := make([]float64, len(c.Alternations))
	for i, a := range c.Alternations {
		r[i] = of(a)
	}
	sort.Float64s(r)
	n := len(r)
	if n%2 == 1 {
		return r[n/2]
	}
	return (r[n/2-1] + r[n/2]) / 2
}

// captured is one response of the relay, as the bare server repeats it.
type captured struct {
	header http.Header
	body   []byte
}

// capture asks addr for path with the key over a raw connection and keeps
// the response's header (but Date, which net/http writes itself) and body.
func capture(addr, path, key string) (captured, int, error) {
	var c captured
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return c, 0, err
	}
	defer nc.Close()
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nAuthorization: Bearer " + key + "\r\nUser-Agent: fleet-apibench\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(nc, req); err != nil {
		return c, 0, err
	}
	_ = nc.SetDeadline(time.Now().Add(10 * time.Second))
	raw, err := io.ReadAll(nc)
	if err != nil {
		return c, 0, err
	}
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		return c, 0, fmt.Errorf("%s: no end of header in %d bytes", path, len(raw))
	}
	lines := bytes.Split(head, []byte("\r\n"))
	if len(lines[0]) < 12 || string(lines[0][9:12]) != "200" {
		return c, 0, fmt.Errorf("%s: %q", path, lines[0])
	}
	// The names as sent: net/http writes a header map's keys as they are,
	// so the relay's spelling (X-RateLimit-Limit) reaches the wire again.
	c.header = http.Header{}
	for _, l := range lines[1:] {
		name, value, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			return c, 0, fmt.Errorf("%s: header line %q", path, l)
		}
		if n := string(name); n != "Date" && n != "Connection" {
			c.header[n] = append(c.header[n], string(bytes.TrimSpace(value)))
		}
	}
	c.body = body
	return c, len(raw), nil
}

// bareHandler answers every request with what the relay answered: the
// simplest net/http handler, its header values built once.
func bareHandler(c captured) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range c.header {
			h[k] = v
		}
		w.WriteHeader(http.StatusOK)
		_, _ = w.Write(c.body)
	})
}

// runCeiling captures the relay's answer to path, starts a bare net/http
// server on loopback answering it to every request, checks that both
// answer the same, then alternates the two under the same load.
func runCeiling(ctx context.Context, cfg Config, relayAddr, path, key string, newServer func(http.Handler) *http.Server) (Ceiling, error) {
	var out Ceiling
	c, size, err := capture(relayAddr, path, key)
	if err != nil {
		return out, fmt.Errorf("capture: %w", err)
	}
	out.Bytes = size
	out.Header = slices.Sorted(maps.Keys(c.header))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return out, err
	}
	hs := newServer(bareHandler(c))
	go hs.Serve(ln)
	defer hs.Close()
	bareAddr := ln.Addr().String()
	b, bareSize, err := capture(bareAddr, path, key)
	if err != nil {
		return out, fmt.Errorf("bare server: %w", err)
	}
	if !bytes.Equal(b.body, c.body) || bareSize != size || !slices.Equal(slices.Sorted(maps.Keys(b.header)), out.Header) {
		return out, fmt.Errorf("the bare server answers %d bytes with header %v, the relay %d with %v", bareSize, slices.Sorted(maps.Keys(b.header)), size, out.Header)
	}
	for i := 0; i < cfg.Alternations && ctx.Err() == nil; i++ {
		var a Alternation
		cfg.Log.Info("ceiling", "alternation", i+1, "side", "relay")
		a.Relay = Load(ctx, relayAddr, []string{path}, key, cfg.Clients, cfg.Warmup, cfg.Duration)
		cfg.Log.Info("ceiling", "alternation", i+1, "side", "bare net/http")
		a.Bare = Load(ctx, bareAddr, []string{path}, key, cfg.Clients, cfg.Warmup, cfg.Duration)
		out.Alternations = append(out.Alternations, a)
	}
	return out, ctx.Err()
}

// printCeiling writes the comparison, each alternation and the median.
func printCeiling(w io.Writer, c Ceiling) {
	if len(c.Alternations) == 0 {
		return
	}
	fmt.Fprintf(w, "  GET /devices (limit 25) against bare net/http answering the same %d bytes (header: %v):\n", c.Bytes, c.Header)
	for i, a := range c.Alternations {
		fmt.Fprintf(w, "    alternation %d: relay %8.0f req/s (CPU %3.0f µs/req), bare %8.0f req/s (CPU %3.0f µs/req), ratio %.2f\n",
			i+1, a.Relay.RPS(), us(a.Relay.CPU), a.Bare.RPS(), us(a.Bare.CPU), a.Ratio())
	}
	fmt.Fprintf(w, "    median ratio %.2f (target >= %.1f); CPU per request, bare / relay: median %.2f\n", c.MedianRatio(), CeilingTarget, c.MedianCPURatio())
}

func us(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
