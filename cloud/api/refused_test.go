package api_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/ids"
)

// clientFrom is an HTTP client whose connections come from ip (another
// loopback address: 127.0.0.0/8 is all this host's), so that the API sees
// ip as the client's address.
func clientFrom(ip string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 10 * time.Second}
	return &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 200}}
}

// status sends GET path with key as the bearer ("" none) and returns the
// status, 0 when the request failed.
func status(ctx context.Context, c *http.Client, url, key string) int {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// TestRefusedRequestsLoggedInSummary: 3,000 requests refused without a key
// (401, then 429 once the address's budget is spent) from two addresses
// write a line for each address and one summary that states the count, not
// 3,000 lines.
func TestRefusedRequestsLoggedInSummary(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRefusedRequestsLoggedInSummary)
}

func testRefusedRequestsLoggedInSummary(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open, withRateLimit(100))
	e.api.HoldRefusedSummary()
	url := e.srv.URL + "/api/v1/public/devices"
	got := map[int]int{}
	for _, ip := range []string{"127.0.0.2", "127.0.0.3"} {
		c := clientFrom(ip)
		for i := range 1500 {
			key := ""
			if i%2 == 1 {
				key = "svc_sk_nosuchkey000000000000000_" + strings.Repeat("x", 43)
			}
			got[status(context.Background(), c, url, key)]++
		}
	}
	if got[http.StatusUnauthorized] == 0 || got[http.StatusTooManyRequests] == 0 || got[http.StatusUnauthorized]+got[http.StatusTooManyRequests] != 3000 {
		t.Fatalf("answers %v, want 401s then 429s", got)
	}
	e.api.FlushRefused()
	var own, summary, other []string
	for _, l := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		switch {
		case strings.Contains(l, `"msg":"request refused"`):
			own = append(own, l)
		case strings.Contains(l, `"msg":"requests refused"`):
			summary = append(summary, l)
		case strings.Contains(l, `"msg":"request"`):
			other = append(other, l)
		}
	}
	if len(own) != 2 || len(summary) != 1 || len(other) != 0 {
		t.Fatalf("3000 refused requests from 2 addresses logged %d lines of their own, %d summaries and %d access lines; want 2, 1 and 0", len(own), len(summary), len(other))
	}
	for _, want := range []string{`"count":3000`, `"addresses":2`, fmt.Sprintf(`"unauthorized":%d`, got[http.StatusUnauthorized]), fmt.Sprintf(`"rate_limited":%d`, got[http.StatusTooManyRequests])} {
		if !strings.Contains(summary[0], want) {
			t.Errorf("summary lacks %s: %s", want, summary[0])
		}
	}
	t.Logf("3000 refused requests: %d lines, %d bytes of log", strings.Count(e.logs.String(), "\n"), len(e.logs.String()))
	if n := len(e.logs.String()); n > 4096 {
		t.Errorf("3000 refused requests wrote %d bytes of log", n)
	}
}

// TestNewKeyAnsweredDuringAFlood: while 100 connections from one address
// send random well-formed keys (each costs a bcrypt comparison), a new
// valid key's first request from another address is answered 200 after at
// most the flood's one place in the verification queue.
func TestNewKeyAnsweredDuringAFlood(t *testing.T) {
	t.Parallel()
	stores.Run(t, testNewKeyAnsweredDuringAFlood)
}

func testNewKeyAnsweredDuringAFlood(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	url := e.srv.URL + "/api/v1/public/devices"
	key := e.key(e.orgA.ID, "devices:read")
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	flooder := clientFrom("127.0.0.2")
	var flood sync.WaitGroup
	for range 100 {
		flood.Add(1)
		go func() {
			defer flood.Done()
			for i := 0; ctx.Err() == nil; i++ {
				status(ctx, flooder, url, fmt.Sprintf("svc_sk_%s_%043d", ids.New(), i))
			}
		}()
	}
	for e.auth.BcryptRuns() < 3 { // the flood is under way
		time.Sleep(time.Millisecond)
	}
	before, start := e.auth.BcryptRuns(), time.Now()
	if s := status(context.Background(), clientFrom("127.0.0.1"), url, key); s != http.StatusOK {
		t.Fatalf("the new key during the flood: %d, want 200", s)
	}
	// The flood's one place ahead of it, its own run, and the flood's runs
	// (one at a time) while the answer travels back: a handful, where a
	// queue shared by all ran the whole flood (100) first.
	n, bound := e.auth.BcryptRuns()-before, int64(10)
	t.Logf("the new key was answered after %d bcrypt comparisons, in %s", n, time.Since(start).Round(time.Millisecond))
	if n > bound {
		t.Errorf("the new key was answered after %d bcrypt comparisons, want at most %d", n, bound)
	}
	stop()
	flood.Wait()
}
