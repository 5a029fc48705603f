package cluster_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/test/rig/fleetproc"
)

// TestPanelLiveThroughHAProxy: the panel's live updates on the cluster
// (issue 29): two relays on one PostgreSQL database behind the shipped
// HAProxy configuration; a signed-in viewer's stream (GET /panel/live)
// opened through HAProxy hears, within 2 s of the store holding it, each
// change an agent makes through either relay (so through the relay that
// does not hold the stream too): a device ONLINE, then OFFLINE when its
// agent is killed. The stream outlives HAProxy's 60 s timeouts (the
// relay's keep-alive comments), and SIGTERM ends both relays promptly with
// the stream open.
func TestPanelLiveThroughHAProxy(t *testing.T) {
	dir := t.TempDir()
	env := []string{"FLEET_DB=" + pg.Get(t).CreateDB(t)}
	var relays []*relay
	var addrs []string
	for _, name := range []string{"relay1", "relay2"} {
		r := newRelay(t, dir, name, env)
		relays = append(relays, r)
		addrs = append(addrs, r.Addr)
	}
	for _, r := range relays {
		r.waitListening(t)
	}
	tenant := fleetproc.Provision(t, bins.Relay, env, "Live", 2)
	const password = "live updates through the balancer"
	fleetproc.AdminInput(t, bins.Relay, env, password+"\n", nil, "user", "create", "--org", tenant.OrgID,
		"--email", "viewer@live.example", "--role", "VIEWER", "--password-stdin")
	_, lb := balance(t, addrs, 20*time.Second)

	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.PostForm(lb+"/panel/login", url.Values{"email": {"viewer@live.example"}, "password": {password}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/panel/" {
		t.Fatalf("sign-in through HAProxy: %d %s", resp.StatusCode, resp.Header.Get("Location"))
	}
	stream := openStream(t, hc, lb+"/panel/live")
	time.Sleep(1500 * time.Millisecond) // the reader's first read is its baseline

	// Each change through one relay, then the other: every panel hears it
	// whichever relay holds its stream.
	var agents []*agent
	for i, r := range relays {
		dev := tenant.Devices[i]
		api := fleetproc.NewAPI(t, relays[1-i].URL(), tenant.Key) // the store as the other relay reads it
		agents = append(agents, startAgent(t, dir, i, dev, r.URL()))
		stream.within(t, api, dev.ID, "ONLINE")
	}
	// An idle minute: HAProxy's timeouts (client and server 60 s) must not
	// end the stream.
	time.Sleep(65 * time.Second)
	for i := range agents {
		agents[i].Kill()
		stream.within(t, fleetproc.NewAPI(t, relays[1-i].URL(), tenant.Key), tenant.Devices[i].ID, "OFFLINE")
	}
	if n := stream.count(); n == 0 {
		t.Error("the stream had ended")
	}

	// SIGTERM with the stream open: both relays exit within their drain.
	for _, r := range relays {
		r.Terminate()
	}
	for _, r := range relays {
		if !r.Wait(15 * time.Second) {
			t.Errorf("%s did not exit within 15 s of SIGTERM with a live stream open", r.Name)
		}
	}
}

// liveStream records each device status a live stream reports, with when
// it arrived.
type liveStream struct {
	mu     sync.Mutex
	seen   map[string]time.Time // device id + " " + status → first arrival
	events int
}

func openStream(t *testing.T, hc *http.Client, u string) *liveStream {
	t.Helper()
	resp, err := hc.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("live stream through HAProxy: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &liveStream{seen: map[string]time.Time{}}
	go func() {
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		typ := ""
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: ") && typ == "fleet":
				var v struct{ Devices []cloud.DeviceGlance }
				if json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &v) == nil {
					now := time.Now()
					s.mu.Lock()
					s.events++
					for _, g := range v.Devices {
						if k := g.ID + " " + string(g.Status); s.seen[k].IsZero() {
							s.seen[k] = now
						}
					}
					s.mu.Unlock()
				}
			}
		}
	}()
	return s
}

func (s *liveStream) arrived(id, status string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[id+" "+status]
}

func (s *liveStream) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.events
}

// within waits until api reports the device in status (polled every
// 50 ms: when the store holds the change), then asserts the stream
// reported it no later than 2 s after.
func (s *liveStream) within(t *testing.T, api *fleetproc.API, id, status string) {
	t.Helper()
	var stored time.Time
	fleetproc.Eventually(t, 60*time.Second, func() string {
		if api.Status(id) != status {
			time.Sleep(50 * time.Millisecond)
			return id + " not " + status + " in the store"
		}
		stored = time.Now()
		return ""
	})
	fleetproc.Eventually(t, 3*time.Second, func() string {
		if s.arrived(id, status).IsZero() {
			return "no live event of " + id + " " + status
		}
		return ""
	})
	if lag := s.arrived(id, status).Sub(stored); lag > 2*time.Second {
		t.Errorf("%s %s reached the panel %v after the store held it (bound 2 s)", id, status, lag)
	} else {
		t.Logf("%s %s reached the panel %v after the store held it", id, status, lag.Round(time.Millisecond))
	}
}
