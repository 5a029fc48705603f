package api

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
)

// FuzzRolloutBody decodes arbitrary bodies as POST /rollouts does: no
// panic; each refusal is a 400 of the input with a bounded message; an
// accepted body keeps the members it was given.
func FuzzRolloutBody(f *testing.F) {
	for _, s := range []string{
		`{"version":"1.4.0","scope":{"tags":["line-3"]},"waves":[1,10,100],"maxFailures":2,"healthFor":"2m"}`,
		`{"version":"1.4.0","scope":{"deviceIds":["abc","def"]}}`, `{"version":"1.4.0"}`, `{"version":"1.4.0","scope":{}}`,
		`{"scope":null}`, `{"scope":{"deviceIds":[1]}}`, `{"waves":[10.5]}`, `{"maxFailures":-1}`, `{}`, `[]`, `null`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, body string) {
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		var b rolloutBody
		if err := decodeBody(httptest.NewRecorder(), r, &b); err != nil {
			inputError(t, "rollout body", err)
			return
		}
		nr, err := b.rollout()
		if err != nil {
			inputError(t, "rollout scope", err)
			return
		}
		if nr.Version != b.Version || !slices.Equal(nr.Waves, b.Waves) || nr.HealthFor != b.HealthFor || nr.MaxFailures != b.MaxFailures {
			t.Fatalf("body %q gave %+v", body, nr)
		}
	})
}
