// Package webhooksink is a small HTTPS receiver for the relay's signed
// webhooks, used by the one-command demo (`make run`): it checks both
// signatures of every delivery with the organization's secret (through
// cloud/webhook's Verify and VerifyStandard), answers 204 to a valid one and
// 401 to any other, and prints one readable line per delivery. It also makes
// (once) and reuses a self-signed ECDSA certificate for the loopback names,
// which the relay is told to trust with --webhook-ca.
package webhooksink

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/fleet/fleet/cloud/webhook"
)

// MaxBody bounds a delivery's body; a longer one is refused with 413.
const MaxBody = 1 << 20

// DefaultTolerance is how far webhook-timestamp may be from the sink's clock
// (the replay window of docs/webhooks.md).
const DefaultTolerance = 5 * time.Minute

// maxChannels is how many changed channels a printed line shows.
const maxChannels = 5

// seenLimit bounds the delivery ids remembered to spot repeats.
const seenLimit = 1024

// Result is what Check found in a delivery's signature headers.
type Result struct {
	// OK means the delivery is authentic: webhook-signature matches with a
	// timestamp inside the window, or, when the Standard Webhooks headers are
	// absent, X-Service-Signature matches.
	OK bool
	// Service reports whether X-Service-Signature matches.
	Service bool
	// Standard reports whether webhook-signature matches (timestamp in the window).
	Standard bool
	// Reason says why the delivery is refused ("" when OK).
	Reason string
}

// Check verifies a delivery's signatures with secret. Both are checked when
// both are present. During a secret rotation's grace period the relay signs
// webhook-signature with the new and the previous secret but
// X-Service-Signature with the new one only (docs/webhooks.md), so a
// receiver still holding the previous secret is told the truth by
// webhook-signature: that one decides.
func Check(secret string, h http.Header, body []byte, now time.Time, tolerance time.Duration) Result {
	r := Result{Service: webhook.Verify(secret, body, h.Get(webhook.HeaderSignature))}
	sig := h.Get(webhook.HeaderWebhookSig)
	if sig == "" {
		r.OK = r.Service
		if !r.OK {
			r.Reason = "X-Service-Signature does not match"
		}
		return r
	}
	ts, err := strconv.ParseInt(h.Get(webhook.HeaderWebhookTime), 10, 64)
	switch {
	case err != nil:
		r.Reason = "webhook-timestamp is not Unix seconds"
	case now.Sub(time.Unix(ts, 0)).Abs() > tolerance:
		r.Reason = fmt.Sprintf("webhook-timestamp is %s away from this clock (window %s)",
			now.Sub(time.Unix(ts, 0)).Abs().Round(time.Second), tolerance)
	case !webhook.VerifyStandard(secret, h.Get(webhook.HeaderWebhookID), ts, body, sig):
		r.Reason = "webhook-signature does not match"
		if !r.Service {
			r.Reason = "neither signature matches"
		}
	default:
		r.Standard, r.OK = true, true
	}
	return r
}

// Config configures a Handler.
type Config struct {
	// Secret is the organization's webhook signing secret (whsec_...).
	Secret string
	// Out receives one line per delivery.
	Out io.Writer
	// Prefix starts every line written to Out.
	Prefix string
	// Tolerance is the webhook-timestamp window (DefaultTolerance if zero).
	Tolerance time.Duration
	// Now, if set, replaces time.Now.
	Now func() time.Time
	// Log receives errors that are not about a delivery (a failed write to Out).
	Log *slog.Logger
}

// Handler receives webhooks: POST on any path. It is safe for concurrent use.
type Handler struct {
	cfg Config

	mu    sync.Mutex // guards seen, order and writes to Out
	seen  map[string]bool
	order []string
}

// NewHandler returns a Handler for cfg.
func NewHandler(cfg Config) *Handler {
	if cfg.Tolerance <= 0 {
		cfg.Tolerance = DefaultTolerance
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	return &Handler{cfg: cfg, seen: map[string]bool{}}
}

// ServeHTTP answers a delivery: 204 when its signature is valid, 401 when
// not; GET answers a short text so that a browser or curl sees the sink is up.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.Method {
	case http.MethodPost:
	case http.MethodGet, http.MethodHead:
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, "fleet webhook sink: POST signed webhooks here\n")
		return
	default:
		w.Header().Set("Allow", "GET, HEAD, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	now := h.cfg.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBody))
	if err != nil {
		h.printf("%s BAD REQUEST from %s: %v", now.Format(time.TimeOnly), r.RemoteAddr, err)
		http.Error(w, "body unreadable or over 1 MiB", http.StatusRequestEntityTooLarge)
		return
	}
	res := Check(h.cfg.Secret, r.Header, body, now, h.cfg.Tolerance)
	if !res.OK {
		// The body is not parsed: nothing unauthenticated is shown.
		h.printf("%s BAD SIGNATURE from %s (%d bytes): %s -> 401", now.Format(time.TimeOnly), r.RemoteAddr, len(body), res.Reason)
		http.Error(w, "bad signature", http.StatusUnauthorized)
		return
	}
	verdict := "signature ok"
	if !res.Service {
		verdict = "signature ok (webhook-signature; X-Service-Signature was made with another secret: rotated?)"
	}
	if n, _ := strconv.Atoi(r.Header.Get(webhook.HeaderAttempt)); n > 1 {
		verdict += fmt.Sprintf(", attempt %d", n)
	}
	if h.repeat(r.Header.Get(webhook.HeaderDeliveryID)) {
		verdict += ", repeat of a delivery already received"
	}
	h.printf("%s %s  %s", now.Format(time.TimeOnly), Describe(body), verdict)
	w.WriteHeader(http.StatusNoContent)
}

// repeat records id and reports whether it was seen before (among the last
// seenLimit ids).
func (h *Handler) repeat(id string) bool {
	if id == "" {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.seen[id] {
		return true
	}
	h.seen[id] = true
	h.order = append(h.order, id)
	if len(h.order) > seenLimit {
		delete(h.seen, h.order[0])
		h.order = h.order[1:]
	}
	return false
}

func (h *Handler) printf(format string, args ...any) {
	line := h.cfg.Prefix + fmt.Sprintf(format, args...) + "\n"
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := io.WriteString(h.cfg.Out, line); err != nil {
		h.cfg.Log.Error("webhook sink: write", "err", err)
	}
}

// delivery is the part of a signal or alert body that Describe shows.
type delivery struct {
	Event    string `json:"event"`
	DeviceID string `json:"deviceId"`
	Channels []struct {
		ID    string `json:"id"`
		Live  string `json:"live"`
		TxOn  bool   `json:"txOn"`
		Error string `json:"error"`
	} `json:"channels"`
	Alert *struct {
		State    string `json:"state"`
		Severity string `json:"severity"`
		Message  string `json:"message"`
	} `json:"alert"`
}

// Describe returns a one-line summary of a (verified) delivery body: its
// event, device, and the channels that changed or the alert.
func Describe(body []byte) string {
	var d delivery
	if err := json.Unmarshal(body, &d); err != nil || d.Event == "" {
		return fmt.Sprintf("(%d bytes, not a Fleet event)", len(body))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s device %s", clip(d.Event, 40), clip(d.DeviceID, 40))
	switch {
	case d.Alert != nil:
		fmt.Fprintf(&b, "  %s %s %q", clip(d.Alert.State, 20), clip(d.Alert.Severity, 20), clip(d.Alert.Message, 100))
	case len(d.Channels) > 0:
		b.WriteString(" ")
		for i, c := range d.Channels {
			if i == maxChannels {
				fmt.Fprintf(&b, " +%d more", len(d.Channels)-i)
				break
			}
			fmt.Fprintf(&b, " %s=%q", clip(c.ID, 20), clip(c.Live, 32))
			if c.TxOn {
				b.WriteString(" tx")
			}
			if c.Error != "" {
				fmt.Fprintf(&b, " error %q", clip(c.Error, 60))
			}
		}
	}
	return b.String()
}

// clip shortens s to at most n runes, marking the cut with "…".
func clip(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n-1]) + "…"
}
