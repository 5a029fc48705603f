package panel_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

// liveHarness is the harness with live updates on, at most maxPerOrg
// streams per organization.
func liveHarness(t *testing.T, open storetest.Opener, maxPerOrg int, more ...func(*panel.Config)) *harness {
	return newHarness(t, open, append([]func(*panel.Config){func(c *panel.Config) {
		c.Live, c.LiveMaxPerOrg = c.Users.(cloud.LiveReader), maxPerOrg
	}}, more...)...)
}

// opened opens a stream as c that must be answered 200.
func (c *client) opened(query string) *sse {
	c.t.Helper()
	s := c.stream(query)
	if s.status != http.StatusOK {
		c.t.Fatalf("stream %q: %d", query, s.status)
	}
	return s
}

// sse is an open live stream as EventSource reads it.
type sse struct {
	t      *testing.T
	status int
	events chan sseEvent // closed when the stream ends
	resp   *http.Response
}

type sseEvent struct{ typ, data string }

// stream opens /panel/live+query as c; a refused stream has its status and
// no events.
func (c *client) stream(query string, header ...string) *sse {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.base+"/panel/live"+query, nil)
	for k, v := range c.header {
		req.Header[k] = v
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	s := &sse{t: c.t, status: resp.StatusCode, events: make(chan sseEvent, 100), resp: resp}
	c.t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		close(s.events)
		return s
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" || resp.Header.Get("X-Accel-Buffering") != "no" {
		c.t.Errorf("stream headers: %v", resp.Header)
	}
	go func() {
		defer close(s.events)
		sc := bufio.NewScanner(resp.Body)
		var ev sseEvent
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if ev.typ != "" {
					s.events <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "event: "):
				ev.typ = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				ev.data = strings.TrimPrefix(line, "data: ")
			case strings.HasPrefix(line, "retry: "):
				s.events <- sseEvent{typ: "retry", data: strings.TrimPrefix(line, "retry: ")}
			}
		}
	}()
	return s
}

// next waits up to 3 s (the push bound of 2 s and a margin) for an event
// of type typ for which ok holds, skipping others.
func (s *sse) next(typ string, ok func(data string) bool) string {
	s.t.Helper()
	deadline := time.After(3 * time.Second)
	for {
		select {
		case ev, open := <-s.events:
			if !open {
				s.t.Fatalf("stream ended waiting for %s", typ)
			}
			if ev.typ == typ && (ok == nil || ok(ev.data)) {
				return ev.data
			}
		case <-deadline:
			s.t.Fatalf("no %s event within 3 s", typ)
		}
	}
}

// ended waits for the stream to end.
func (s *sse) ended(within time.Duration) {
	s.t.Helper()
	deadline := time.After(within)
	for {
		select {
		case _, open := <-s.events:
			if !open {
				return
			}
		case <-deadline:
			s.t.Fatalf("stream still open after %v", within)
		}
	}
}

func glanceOf(t *testing.T, data, id string) (cloud.DeviceGlance, bool) {
	var v struct {
		Devices []cloud.DeviceGlance `json:"devices"`
		Summary cloud.FleetSummary   `json:"summary"`
	}
	if err := json.Unmarshal([]byte(data), &v); err != nil {
		t.Fatalf("fleet event %s: %v", data, err)
	}
	for _, g := range v.Devices {
		if g.ID == id {
			return g, true
		}
	}
	return cloud.DeviceGlance{}, false
}

func TestLiveUpdates(t *testing.T) { stores.Run(t, testLiveUpdates) }

func testLiveUpdates(t *testing.T, open storetest.Opener) {
	h := liveHarness(t, open, 0)
	viewer := h.signIn(cloud.RoleViewer)
	fleet := viewer.stream("")
	if fleet.status != http.StatusOK {
		t.Fatalf("a viewer's stream: %d", fleet.status)
	}
	if got := fleet.next("retry", nil); got != "2000" {
		t.Errorf("retry hint %q", got)
	}
	dev := viewer.stream("?device=" + h.device.ID)
	dev.next("retry", nil)
	time.Sleep(1200 * time.Millisecond) // the readers' first read is their baseline

	// The agent connects: the fleet sees the device ONLINE, the device
	// page its glance.
	h.online()
	fleet.next("fleet", func(d string) bool {
		g, ok := glanceOf(t, d, h.device.ID)
		return ok && g.Status == resource.StatusOnline && g.LastSeen != nil
	})
	dev.next("device", func(d string) bool {
		var g cloud.DeviceGlance
		return json.Unmarshal([]byte(d), &g) == nil && g.ID == h.device.ID && g.Status == resource.StatusOnline
	})
	dev.next("events", func(d string) bool { return d == `{"device":"`+h.device.ID+`"}` })

	// An alert acknowledged: every page hears of it.
	if _, err := h.db.Alerts().Acknowledge(h.ctx, h.org.ID, h.alerts[0].ID); err != nil {
		t.Fatal(err)
	}
	fleet.next("alerts", nil)
	dev.next("alerts", nil)

	// Another organization's device, or none: 404.
	for _, id := range []string{h.foreign.ID, "nosuchdevice"} {
		if s := viewer.stream("?device=" + id); s.status != http.StatusNotFound {
			t.Errorf("stream of device %s: %d", id, s.status)
		}
	}
	// Signed out: no stream.
	if s := h.anon().stream(""); s.status != http.StatusSeeOther {
		t.Errorf("anonymous stream: %d", s.status)
	}
	// A reconnect (Last-Event-ID) hears first that everything changed.
	re := viewer.stream("?device="+h.device.ID, "Last-Event-ID", "7")
	re.next("device", nil)
	re.next("events", nil)
	re.next("alerts", nil)

	// Draining ends every stream and refuses new ones.
	h.srv.CloseLive()
	fleet.ended(2 * time.Second)
	dev.ended(2 * time.Second)
	if s := viewer.stream(""); s.status != http.StatusServiceUnavailable {
		t.Errorf("stream while draining: %d", s.status)
	}
	if n := h.srv.LiveStreams(); n != 0 {
		t.Errorf("%d streams open after draining", n)
	}
}

func TestLiveBounds(t *testing.T) { stores.Run(t, testLiveBounds) }

func testLiveBounds(t *testing.T, open storetest.Opener) {
	h := liveHarness(t, open, panel.LiveMaxPerSession+1)
	a, b := h.signIn(cloud.RoleViewer), h.signIn(cloud.RoleOwner)
	var first *sse
	for i := range panel.LiveMaxPerSession {
		s := a.stream("")
		if s.status != http.StatusOK {
			t.Fatalf("stream %d of a session: %d", i+1, s.status)
		}
		if first == nil {
			first = s
		}
	}
	if s := a.stream(""); s.status != http.StatusTooManyRequests {
		t.Errorf("stream %d of a session: %d, want 429", panel.LiveMaxPerSession+1, s.status)
	}
	if s := b.stream(""); s.status != http.StatusOK {
		t.Errorf("another session's stream: %d", s.status)
	}
	if s := b.stream(""); s.status != http.StatusServiceUnavailable || s.resp.Header.Get("Retry-After") == "" {
		t.Errorf("a stream over the organization's bound: %d %v", s.status, s.resp.Header)
	}
	// A stream that ends frees its place.
	first.resp.Body.Close()
	deadline := time.Now().Add(2 * time.Second)
	for h.srv.LiveStreams() > panel.LiveMaxPerSession && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if s := a.stream(""); s.status != http.StatusOK {
		t.Errorf("a stream after one closed: %d", s.status)
	}
}

func TestLiveEndsWithSession(t *testing.T) { stores.Run(t, testLiveEndsWithSession) }

// testLiveEndsWithSession: a stream ends when its session's lifetime does,
// and the next one of that session is sent to sign in.
func testLiveEndsWithSession(t *testing.T, open storetest.Opener) {
	h := liveHarness(t, open, 0, func(c *panel.Config) { c.IdleTimeout, c.Lifetime = 2*time.Second, 3*time.Second })
	c := h.signIn(cloud.RoleViewer)
	s := c.opened("")
	s.ended(6 * time.Second)
	if again := c.stream(""); again.status != http.StatusSeeOther {
		t.Errorf("a stream after the session ended: %d", again.status)
	}
}

func TestLiveEndsWithSignOut(t *testing.T) { stores.Run(t, testLiveEndsWithSignOut) }

// testLiveEndsWithSignOut: signing out in one tab ends the session's
// streams in the others (at the next session check).
func testLiveEndsWithSignOut(t *testing.T, open storetest.Opener) {
	h := liveHarness(t, open, 0, func(c *panel.Config) { c.LiveSessionCheck = 200 * time.Millisecond })
	c, other := h.signIn(cloud.RoleViewer), h.signIn(cloud.RoleViewer)
	s, kept := c.opened(""), other.opened("")
	if r := c.post("/panel/logout", nil); r.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", r.status)
	}
	s.ended(3 * time.Second)
	select {
	case _, open := <-kept.events:
		if !open {
			t.Error("another session's stream ended with this one's sign-out")
		}
	case <-time.After(time.Second):
	}
}
