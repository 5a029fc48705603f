package api_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/legacy"

	"github.com/fleet/fleet/cloud/api"
)

// specValidator checks responses against the embedded OpenAPI document.
type specValidator struct {
	doc    *openapi3.T
	router routers.Router
}

var (
	specOnce sync.Once
	specVal  *specValidator
	specErr  error
)

// loadSpec parses and validates the document once per test binary.
func loadSpec(tb testing.TB) *specValidator {
	tb.Helper()
	specOnce.Do(func() {
		loader := openapi3.NewLoader()
		doc, err := loader.LoadFromData(api.OpenAPI())
		if err != nil {
			specErr = fmt.Errorf("load: %w", err)
			return
		}
		if err := doc.Validate(context.Background()); err != nil {
			specErr = fmt.Errorf("validate: %w", err)
			return
		}
		// Route on paths relative to the server prefix.
		doc.Servers = nil
		r, err := legacy.NewRouter(doc)
		if err != nil {
			specErr = fmt.Errorf("router: %w", err)
			return
		}
		specVal = &specValidator{doc: doc, router: r}
	})
	if specErr != nil {
		tb.Fatalf("openapi document: %v", specErr)
	}
	return specVal
}

// validate checks one response (body already read) against the document:
// the operation's documented status, headers and body, or for unknown
// routes and wrong methods the NotFound response (405 with an Allow header).
func (v *specValidator) validate(req *http.Request, status int, header http.Header, body []byte) error {
	if req.URL.Path == "/healthz" || req.URL.Path == "/readyz" {
		// /healthz and /readyz are outside the API (no rate-limit
		// headers): check their 405 body only.
		if req.Method != http.MethodGet {
			if status != http.StatusMethodNotAllowed || header.Get("Allow") != "GET" {
				return fmt.Errorf("%s %s: %d", req.URL.Path, req.Method, status)
			}
			return v.validateComponent("NotFound", http.Header{}, body, true)
		}
		if (status != http.StatusOK || !bytes.Contains(body, []byte(`"status":"ok"`))) &&
			(status != http.StatusServiceUnavailable || !bytes.Contains(body, []byte(`"status":"unavailable"`))) {
			return fmt.Errorf("%s: %d %s", req.URL.Path, status, body)
		}
		return nil
	}
	rel := *req
	u := *req.URL
	rel.URL = &u
	if rest, ok := strings.CutPrefix(u.Path, api.Prefix); ok && rest != "" {
		u.Path = rest
	} else {
		u.Path = "/__outside_the_api__" + u.Path
	}
	route, params, err := v.findRoute(&rel)
	if err != nil {
		var re *routers.RouteError
		if !errors.As(err, &re) {
			return err
		}
		reason := re.Reason
		if reason == routers.ErrPathNotFound.Error() {
			// The legacy router reports a templated path with another
			// method as not found: try the other methods.
			for _, m := range []string{"GET", "POST", "PUT", "PATCH", "DELETE"} {
				alt := rel
				alt.Method = m
				if _, _, err := v.findRoute(&alt); err == nil {
					reason = routers.ErrMethodNotAllowed.Error()
				}
			}
		}
		switch reason {
		case routers.ErrPathNotFound.Error():
			if status != http.StatusNotFound {
				return fmt.Errorf("unknown route answered %d, want 404", status)
			}
			return v.validateComponent("NotFound", header, body)
		case routers.ErrMethodNotAllowed.Error():
			if status != http.StatusMethodNotAllowed || header.Get("Allow") == "" {
				return fmt.Errorf("wrong method answered %d (Allow %q), want 405 with Allow", status, header.Get("Allow"))
			}
			// The error envelope and headers of any error, as NotFound
			// describes them (no operation answers 405, so no response
			// component of its own).
			return v.validateComponent("NotFound", header, body)
		}
		return err
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: &rel, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: status,
		Header: header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	return openapi3filter.ValidateResponse(context.Background(), in)
}

// findRoute is the router's FindRoute, except that a template whose last
// parameter would match nothing ("/alert-rules" against
// "/alert-rules/{id}", which the legacy router accepts) is not found.
func (v *specValidator) findRoute(req *http.Request) (*routers.Route, map[string]string, error) {
	route, params, err := v.router.FindRoute(req)
	if err == nil && strings.Count(route.Path, "/") != strings.Count(req.URL.Path, "/") {
		return nil, nil, &routers.RouteError{Reason: routers.ErrPathNotFound.Error()}
	}
	return route, params, err
}

// validateComponent checks a response against components.responses[name]:
// required headers present and matching, body matching the schema.
func (v *specValidator) validateComponent(name string, header http.Header, body []byte, bodyOnly ...bool) error {
	ref := v.doc.Components.Responses[name]
	if ref == nil || ref.Value == nil {
		return fmt.Errorf("no component response %s", name)
	}
	opts := []openapi3.SchemaValidationOption{openapi3.EnableJSONSchema2020()}
	for h, hr := range ref.Value.Headers {
		if len(bodyOnly) > 0 {
			break
		}
		vals := header.Values(h)
		if len(vals) == 0 {
			if hr.Value.Required {
				return fmt.Errorf("%s: header %s missing", name, h)
			}
			continue
		}
		var val any = vals[0]
		if hr.Value.Schema.Value.Type.Is("integer") {
			var n json.Number = json.Number(vals[0])
			f, err := n.Float64()
			if err != nil {
				return fmt.Errorf("%s: header %s=%q: not a number", name, h, vals[0])
			}
			val = f
		}
		if err := hr.Value.Schema.Value.VisitJSON(val, opts...); err != nil {
			return fmt.Errorf("%s: header %s: %w", name, h, err)
		}
	}
	var doc any
	if err := json.Unmarshal(body, &doc); err != nil {
		return fmt.Errorf("%s: body is not JSON: %w", name, err)
	}
	mt := ref.Value.Content.Get("application/json")
	if err := mt.Schema.Value.VisitJSON(doc, opts...); err != nil {
		return fmt.Errorf("%s: body: %w", name, err)
	}
	return nil
}

// specTransport validates every response that passes through it against the
// OpenAPI document and reports mismatches as test errors. Every test client
// uses it, so the document cannot drift from the code.
type specTransport struct {
	tb      testing.TB
	base    http.RoundTripper
	v       *specValidator
	checked atomic.Int64
}

func (t *specTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, err
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	if err := t.v.validate(req, resp.StatusCode, resp.Header, body); err != nil {
		t.tb.Errorf("response does not match the OpenAPI document: %s %s -> %d: %v\nbody: %.600s", req.Method, req.URL.RequestURI(), resp.StatusCode, err, body)
	}
	t.checked.Add(1)
	return resp, nil
}

func TestOpenAPIDocumentIsValid31(t *testing.T) {
	t.Parallel()
	v := loadSpec(t)
	if !strings.HasPrefix(v.doc.OpenAPI, "3.1") {
		t.Fatalf("openapi = %q, want 3.1.x", v.doc.OpenAPI)
	}
	// Every route of the spec's endpoint table, and every route added to it,
	// is described with its success status ("METHOD status"; 200 when not
	// given).
	want := map[string][]string{
		"/devices":                                  {"GET"},
		"/devices/{id}":                             {"GET", "PATCH"},
		"/devices/{id}/metrics":                     {"GET"},
		"/devices/{id}/events":                      {"GET"},
		"/devices/{id}/points":                      {"GET"},
		"/devices/{id}/points/{pointId}/samples":    {"GET"},
		"/devices/{id}/serial":                      {"GET", "PATCH"},
		"/devices/{id}/serial/telemetry":            {"GET"},
		"/devices/{id}/serial/channels/{channelId}": {"GET", "PUT"},
		"/alerts":                  {"GET"},
		"/alerts/{id}/acknowledge": {"POST"},
		"/alerts/{id}/resolve":     {"POST"},
		// DESIGN.md "Alert rules and notifications" (additive).
		"/alert-rules":         {"GET", "POST 201"},
		"/alert-rules/preview": {"POST"},
		"/alert-rules/{id}":    {"GET", "PATCH", "DELETE 204"},
		"/silences":            {"GET", "POST 201"},
		"/silences/{id}":       {"DELETE 204"},
		// DESIGN.md "Fleet operations: tags, claiming, agent updates"
		// (additive).
		"/rollouts":             {"GET", "POST 201"},
		"/rollouts/{id}":        {"GET"},
		"/rollouts/{id}/pause":  {"POST"},
		"/rollouts/{id}/resume": {"POST"},
		"/rollouts/{id}/cancel": {"POST"},
		"/devices/{id}/reboot":  {"POST 202"},
	}
	for path, methods := range want {
		item := v.doc.Paths.Value(path)
		if item == nil {
			t.Errorf("path %s missing", path)
			continue
		}
		for _, mc := range methods {
			m, success, ok := strings.Cut(mc, " ")
			if !ok {
				success = "200"
			}
			op := item.GetOperation(m)
			if op == nil {
				t.Errorf("%s %s missing", m, path)
				continue
			}
			for _, code := range []string{success, "401", "403", "429", "500"} {
				if op.Responses.Value(code) == nil {
					t.Errorf("%s %s: response %s not documented", m, path, code)
				}
			}
		}
	}
}
