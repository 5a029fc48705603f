package panel

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/fleet/fleet/cloud"
)

// liveRoute is the live updates' Server-Sent Events stream (live.js).
const liveRoute = "/panel/live"

const (
	// liveKeepAlive is how often an idle stream sends a comment, which
	// keeps proxies (HAProxy's 60 s timeouts) from closing it.
	liveKeepAlive = 15 * time.Second
	// liveSessionCheck is how often a stream reads its session again: it
	// ends once the session ended (signed out, expired, user disabled).
	liveSessionCheck = time.Minute
	// liveWriteTimeout bounds each write: a browser that stopped reading
	// loses its stream instead of pinning the relay's memory.
	liveWriteTimeout = 10 * time.Second
	// liveRetryMs is the reconnect delay the stream asks of EventSource.
	liveRetryMs = 2000
)

// liveSub is a page's live updates subscription: Query is what
// /panel/live gets after "?" ("" the organization's fleet).
type liveSub struct{ Query string }

// liveSubscription returns page name's subscription: the device page
// watches its device; nil for pages without live values or without live
// updates.
func (s *Server) liveSubscription(name string, data any) *liveSub {
	switch {
	case s.live == nil:
		return nil
	case name != "fleet" && name != "device" && name != "alerts" && name != "point": // the pages with live values
		return nil
	}
	switch d := data.(type) {
	case *deviceData:
		return &liveSub{Query: "device=" + url.QueryEscape(d.Device.ID)}
	case *pointData: // the point's chart appends on its device's events
		return &liveSub{Query: "device=" + url.QueryEscape(d.Device.ID)}
	}
	return &liveSub{}
}

// liveStream serves GET /panel/live[?device=ID]: the organization's live
// updates as Server-Sent Events (docs/panel.md), until the browser leaves,
// the session ends, the hub drops the stream or the relay drains.
func (s *Server) liveStream(w http.ResponseWriter, r *http.Request, rq *request) {
	org := rq.User.OrgID
	device := r.URL.Query().Get("device")
	if device != "" {
		if _, err := s.cfg.Devices.Device(r.Context(), org, device); err != nil {
			s.fail(w, r, rq, err)
			return
		}
	}
	token := s.sessions.Token(r.Context())
	st, err := s.live.join(org, device, token)
	switch {
	case errors.Is(err, errLiveSession):
		http.Error(w, "This session has "+strconv.Itoa(LiveMaxPerSession)+" live pages open already; close one.", http.StatusTooManyRequests)
		return
	case err != nil:
		w.Header().Set("Retry-After", "10")
		http.Error(w, "Live updates are not available on this relay now: "+err.Error()+".", http.StatusServiceUnavailable)
		return
	}
	defer s.live.leave(st)

	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{}) // the request was read: the server's read timeout must not end the stream
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	write := func(b []byte) bool {
		if err := rc.SetWriteDeadline(time.Now().Add(liveWriteTimeout)); err != nil {
			return false
		}
		if _, err := w.Write(b); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	hello := []byte("retry: " + strconv.Itoa(liveRetryMs) + "\n\n")
	if r.Header.Get("Last-Event-ID") != "" {
		// A reconnect: what changed while it was away is unknown, so
		// everything it shows is said to have changed.
		hello = append(hello, s.liveRefresh(r.Context(), org, device)...)
	}
	if !write(hello) {
		return
	}

	var since int64
	since, _ = strconv.ParseInt(s.sessions.GetString(r.Context(), sessSignedIn), 10, 64)
	deadline := time.NewTimer(time.Until(s.sessions.Deadline(r.Context())))
	defer deadline.Stop()
	keep := time.NewTicker(liveKeepAlive)
	defer keep.Stop()
	every := liveSessionCheck
	if s.cfg.LiveSessionCheck > 0 {
		every = s.cfg.LiveSessionCheck
	}
	check := time.NewTicker(every)
	defer check.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-deadline.C:
			return
		case <-st.gone:
			if st.why != "" {
				write([]byte(": " + st.why + "\n\n"))
			}
			return
		case b := <-st.send:
			if !write(b) {
				return
			}
		case <-keep.C:
			if !write([]byte(": keep-alive\n\n")) {
				return
			}
		case <-check.C:
			if !s.stillSignedIn(token, rq.User.ID, since) {
				return
			}
		}
	}
}

// stillSignedIn reads the session token again: false once it ended or
// changed hands, or its user was disabled or changed password since
// signing in (as signedIn decides for a request). A store failure keeps
// the stream.
func (s *Server) stillSignedIn(token, userID string, since int64) bool {
	// A context without the request's session: Load reads the store again
	// only for one that holds none.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	sctx, err := s.sessions.Load(ctx, token)
	if err != nil {
		return true
	}
	if s.sessions.GetString(sctx, sessUser) != userID {
		return false
	}
	u, err := s.cfg.Users.UserByID(ctx, userID)
	if err != nil {
		return cloud.ErrorCode(err) != cloud.ENOTFOUND
	}
	return !u.Disabled() && (u.PasswordChangedAt.IsZero() || u.PasswordChangedAt.UnixMilli() < since)
}

// liveRefresh encodes the events a reconnecting stream gets first: the
// watched device at a glance and its events, or the fleet's summary; the
// alerts in any case.
func (s *Server) liveRefresh(ctx context.Context, org, device string) []byte {
	var out []byte
	add := func(typ string, v any) {
		b, err := json.Marshal(v)
		if err == nil {
			out = append(out, "event: "+typ+"\ndata: "+string(b)+"\n\n"...)
		}
	}
	st, err := s.live.reader.LiveState(ctx, org, nil)
	if err != nil {
		return nil
	}
	if device != "" {
		if gs, err := s.live.glances(ctx, org, []string{device}, st); err == nil {
			if g, ok := gs[device]; ok {
				add("device", g)
			}
		}
		add("events", map[string]string{"device": device})
	} else {
		add("fleet", struct {
			Devices []cloud.DeviceGlance `json:"devices"`
			Summary cloud.FleetSummary   `json:"summary"`
		}{[]cloud.DeviceGlance{}, summarize(st)})
	}
	add("alerts", struct{}{})
	return out
}
