package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/resource"
)

// inputError fails unless err is a customer's 400: validation_error,
// invalid_cursor or invalid_json, with a bounded, printable message.
func inputError(t *testing.T, what string, err error) {
	t.Helper()
	switch cloud.ErrorCode(err) {
	case cloud.EINVALID, cloud.ECURSOR, codeInvalidJSON:
	default:
		t.Fatalf("%s: %v is not a 400 of the input", what, err)
	}
	if msg := cloud.ErrorMessage(err); len(msg) > 400 || !utf8.ValidString(msg) {
		t.Fatalf("%s: message of %d bytes or not UTF-8: %q", what, len(msg), msg)
	}
}

// FuzzQuery parses arbitrary query strings as every list endpoint does and
// reads every parameter: no panic; each refusal is a 400 naming the input
// with a bounded message; what is accepted is within range (limit, cursor
// an id, a metrics window from <= to within years 0001 to 9999).
func FuzzQuery(f *testing.F) {
	for _, s := range []string{"limit=25&status=ONLINE", "cursor=huo1a5t8b65l18ij5pmfsdbb&limit=100", "from=2026-01-02T03:04:05Z&to=2026-01-02T04:04:05.123%2B01:00",
		"to=0000-01-01T00:00:00Z", "limit=1&limit=2", "Limit=5", "type=serial.error&severity=ERROR", "state=RESOLVED&deviceId=x", "%zz", "from=9999-12-31T23:59:59.999999999Z"} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, raw string) {
		q := params{r: &http.Request{URL: &url.URL{RawQuery: raw}}}
		q.query("limit", "cursor", "status", "severity", "type", "state", "deviceId", "from", "to")
		if q.err != nil {
			inputError(t, "parseQuery", q.err)
			return
		}
		// read reads one parameter as a handler would, on its own.
		read := func(f func(p *params)) error { p := q; f(&p); return p.err }
		var n int
		if err := read(func(p *params) { n = p.limit(25, 100) }); err != nil {
			inputError(t, "limit", err)
		} else if n < 1 || n > 100 {
			t.Fatalf("limit %d accepted", n)
		}
		var c string
		if err := read(func(p *params) { c = p.cursor() }); err != nil {
			inputError(t, "cursor", err)
		} else if c != "" && !ids.Valid(c) {
			t.Fatalf("cursor %q accepted", c)
		}
		for name, get := range map[string]func(p *params){
			"status":   func(p *params) { p.status() },
			"severity": func(p *params) { p.severity() },
			"state":    func(p *params) { p.state() },
			"type":     func(p *params) { p.eventType() },
			"deviceId": func(p *params) { p.deviceID() },
		} {
			if err := read(get); err != nil {
				inputError(t, name, err)
			}
		}
		var from, to time.Time
		if err := read(func(p *params) { from, to = p.metricsWindow(now) }); err != nil {
			inputError(t, "metrics window", err)
			return
		}
		if from.After(to) || from.Before(resource.MinTime) || to.After(resource.MaxTime) {
			t.Fatalf("window %v .. %v accepted", from, to)
		}
		for _, ts := range []time.Time{from, to} {
			if s := resource.FormatTime(ts); len(s) != len(resource.TimeLayout) {
				t.Fatalf("window bound %q is not RFC 3339 with three fractional digits", s)
			}
		}
	})
}

// FuzzSerialPatchBody decodes arbitrary PATCH /serial bodies: no panic;
// refusals are 400s; an accepted patch sets something (the serial I/O
// switch among them), with a valid mode
// and a webhook URL that passes the URL policy.
func FuzzSerialPatchBody(f *testing.F) {
	for _, s := range []string{`{"mode":"managed","webhookUrl":"https://hooks.example.com/fleet","webhookEnabled":true}`, `{"webhookUrl":null}`,
		`{"Mode":"both"}`, `{"mode":"both","mode":"managed"}`, `{"webhookUrl":"https://[::1%25lo]/"}`, `{}`, `[]`, `{"mode":"x"} {}`, `{"enabled":false}`, `{"enabled":0}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		p, err := decodeSerialPatch(body)
		if err != nil {
			inputError(t, "PATCH body", err)
			return
		}
		if p.Mode == nil && p.WebhookURL == nil && p.WebhookEnabled == nil && !p.ClearWebhookURL && p.Enabled == nil {
			t.Fatalf("empty patch accepted from %q", body)
		}
		if p.Mode != nil && !resource.ValidMode(*p.Mode) {
			t.Fatalf("mode %q accepted", *p.Mode)
		}
		if p.WebhookURL != nil && cloud.ValidateWebhookURL("webhookUrl", *p.WebhookURL) != nil {
			t.Fatalf("webhook URL %q accepted", *p.WebhookURL)
		}
	})
}

// FuzzBearerToken: the Authorization header parser takes only "Bearer "
// (any case) and a bounded printable token.
func FuzzBearerToken(f *testing.F) {
	for _, s := range []string{"Bearer svc_sk_huo1a5t8b65l18ij5pmfsdbb_secret", "bearer  x", "Basic abc", "Bearer", "Bearer a b", "BEARER \x00"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tok, ok := bearerToken(h)
		if !ok {
			return
		}
		if tok == "" || len(tok) > 512 || !strings.EqualFold(h[:7], "bearer ") || !strings.HasSuffix(h, tok) {
			t.Fatalf("bearerToken(%q) = %q", h, tok)
		}
		for i := 0; i < len(tok); i++ {
			if tok[i] <= ' ' || tok[i] >= 0x7f {
				t.Fatalf("token %q holds byte %#x", tok, tok[i])
			}
		}
	})
}
