package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/resource"
)

// jsonPost is a POST of a JSON body, as a handler reads it.
func jsonPost(body string) *http.Request {
	r := httptest.NewRequest("POST", "/", strings.NewReader(body))
	r.Header.Set("Content-Type", "application/json")
	return r
}

// FuzzRuleBodies decodes arbitrary bodies as POST /alert-rules, PATCH
// /alert-rules/{id}, POST /alert-rules/preview and POST /silences do: no
// panic; each refusal is a 400 of the input with a bounded message; an
// accepted rule body gets its defaults and compiles or is refused naming a
// field; an accepted preview range is from < to <= now within
// cloud.MaxPreviewRange.
func FuzzRuleBodies(f *testing.F) {
	for _, s := range []string{
		`{"name":"Hot","severity":"WARNING","condition":{"kind":"threshold","source":"metric.cpuPct","op":">","value":85,"clear":80,"for":"5m"}}`,
		`{"name":"x","severity":"INFO","scope":{"tags":["hall-b"]},"condition":{"kind":"offline","after":"10m"},"notify":["abc"],"repeatEvery":"30m"}`,
		`{"condition":{"kind":"status","status":"ERROR","for":"1m"},"from":"2026-11-20T00:00:00Z","to":"2026-11-21T00:00:00Z"}`,
		`{"enabled":false}`, `{"condition":null}`, `{"condition":{"kind":"event","type":"a","x":1}}`, `{}`, `[]`, `{"scope":{"deviceIds":[1]}}`,
		`{"to":"2026-11-23T00:00:00Z","comment":"c","scope":{}}`,
	} {
		f.Add(s)
	}
	now := time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, body string) {
		rec := httptest.NewRecorder
		post := func() *http.Request { return jsonPost(body) }
		var b previewBody
		if err := decodeBody(rec(), post(), &b); err != nil {
			inputError(t, "rule body", err)
		} else if rule, err := b.rule(); err != nil {
			inputError(t, "rule members", err)
		} else {
			if rule.Notify == nil || rule.RepeatEvery == "" {
				t.Fatalf("defaults missing: %+v", rule)
			}
			if _, err := cloud.CompileRule("org", rule); err != nil {
				inputError(t, "CompileRule", err)
			}
			if from, to, err := previewRange(b.From, b.To, now); err != nil {
				inputError(t, "preview range", err)
			} else if !from.Before(to) || to.After(now) || to.Sub(from) > cloud.MaxPreviewRange {
				t.Fatalf("range %s..%s accepted", resource.FormatTime(from), resource.FormatTime(to))
			}
		}
		if _, err := decodeRulePatch(rec(), post()); err != nil {
			inputError(t, "rule patch", err)
		}
		var s silenceBody
		if err := decodeBody(rec(), post(), &s); err != nil {
			inputError(t, "silence body", err)
		}
	})
}
