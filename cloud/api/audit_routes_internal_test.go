package api

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/fleet/fleet/test/rig/dialects"
)

// writeMethods are the methods that change something.
var writeMethods = map[string]bool{http.MethodPost: true, http.MethodPut: true, http.MethodPatch: true, http.MethodDelete: true}

// TestNoRouteWritesTheAuditLog: the audit log is never writable or
// deletable through the public API (issue 30): no route of the server with
// every optional part mounted, and no path of the OpenAPI document, takes
// a write method on a path that names the audit log.
func TestNoRouteWritesTheAuditLog(t *testing.T) {
	s := dialects.SQLite(t, nil)
	srv := NewServer(Config{Devices: s.Store.Devices(), Serial: s.Store.Serial(), Alerts: s.Store.Alerts(),
		Points: s.Store.Points(), Rules: s.Store.Rules(), Rollouts: s.Store.Rollouts()})
	routes := 0
	err := chi.Walk(srv.mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routes++
		if writeMethods[method] && strings.Contains(strings.ToLower(route), "audit") {
			t.Errorf("the API routes %s %s: a write of the audit log", method, route)
		}
		return nil
	})
	if err != nil || routes < 20 {
		t.Fatalf("walked %d routes: %v", routes, err)
	}
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(OpenAPI(), &doc); err != nil || len(doc.Paths) < 10 {
		t.Fatalf("OpenAPI paths: %d, %v", len(doc.Paths), err)
	}
	for path, ops := range doc.Paths {
		for method := range ops {
			if writeMethods[strings.ToUpper(method)] && strings.Contains(strings.ToLower(path), "audit") {
				t.Errorf("the OpenAPI document has %s %s: a write of the audit log", strings.ToUpper(method), path)
			}
		}
	}
}
