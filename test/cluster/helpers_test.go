package cluster_test

import (
	"io"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/fleetproc"
)

// readyz returns the status of GET base/readyz (0 when unreachable).
func readyz(base string) int {
	code, _ := readyzBody(base)
	return code
}

// readyzBody returns the status and body of GET base/readyz (0 when
// unreachable).
func readyzBody(base string) (int, string) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(base + "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func itoa(n int) string { return strconv.Itoa(n) }

// poller is a customer's API client polling GET /devices?limit=25
// through the load balancer all along a test, counting the requests that
// were not answered 200.
type poller struct {
	polls, failures atomic.Int64
	stop            func()
}

// startPoller polls base with key every interval until check (or the end
// of the test).
func startPoller(t *testing.T, base, key string, every time.Duration) *poller {
	p := &poller{}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		api := fleetproc.NewAPI(t, base, key)
		for {
			select {
			case <-done:
				return
			case <-time.After(every):
			}
			p.polls.Add(1)
			if code := api.Do("GET", "/devices?limit=25", nil, nil); code != 200 {
				p.failures.Add(1)
				t.Logf("GET /devices through HAProxy answered %d", code)
			}
		}
	}()
	p.stop = sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(p.stop)
	return p
}

// check stops polling and fails t when any request failed during what
// the test did meanwhile.
func (p *poller) check(t *testing.T, during string) {
	t.Helper()
	p.stop()
	if f := p.failures.Load(); f > 0 {
		t.Errorf("%d of %d API requests through HAProxy failed %s", f, p.polls.Load(), during)
	}
	t.Logf("%d API requests through HAProxy %s, %d failed", p.polls.Load(), during, p.failures.Load())
}
