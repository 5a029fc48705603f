package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestRolloutRequests: what the rollout and reboot routes refuse before
// the store is asked, each answered as the document says: bodies decoded
// strictly (the message names the member), query parameters, ids that
// cannot be ids, scopes, methods, media type and size.
func TestRolloutRequests(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRolloutRequests)
}

func testRolloutRequests(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	for _, c := range []struct {
		name  string
		body  any
		field string // the message starts with it
	}{
		{"unknown member", `{"version":"1.2.0","colour":"red"}`, "colour"},
		{"member in another case", `{"Version":"1.2.0"}`, "Version"},
		{"member twice", `{"version":"1.2.0","version":"1.3.0"}`, "version"},
		{"version not a string", `{"version":120}`, "version"},
		{"scope null", `{"version":"1.2.0","scope":null}`, "scope"},
		{"scope not an object", `{"version":"1.2.0","scope":"all"}`, "scope"},
		{"scope unknown member", `{"version":"1.2.0","scope":{"devices":["x"]}}`, "scope.devices"},
		{"scope ids not strings", `{"version":"1.2.0","scope":{"deviceIds":[1]}}`, "scope.deviceIds"},
		{"waves not integers", `{"version":"1.2.0","waves":[10.5,100]}`, "waves"},
		{"waves not a list", `{"version":"1.2.0","waves":100}`, "waves"},
		{"maxFailures a string", `{"version":"1.2.0","maxFailures":"2"}`, "maxFailures"},
		{"healthFor a number", `{"version":"1.2.0","healthFor":120}`, "healthFor"},
		{"an array", `[]`, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call(http.MethodPost, "/rollouts", e.keyA, c.body).wantInvalid(t, c.field)
		})
	}
	e.call(http.MethodPost, "/rollouts", e.keyA, `{"version":`).want(t, http.StatusBadRequest, "invalid_json")
	e.call(http.MethodPost, "/rollouts", e.keyA, `{"version":"1"} {}`).want(t, http.StatusBadRequest, "invalid_json")
	e.req(http.MethodPost, api.Prefix+"/rollouts", e.keyA, `{"version":"1.2.0"}`, "Content-Type", "text/plain").want(t, http.StatusUnsupportedMediaType, "unsupported_media_type")
	big := `{"version":"` + strings.Repeat("1", api.MaxBodyBytes) + `"}`
	e.call(http.MethodPost, "/rollouts", e.keyA, big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	e.call(http.MethodPost, "/rollouts/abc123/pause", e.keyA, big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	e.call(http.MethodPost, "/devices/"+d.ID+"/reboot", e.keyA, big).want(t, http.StatusRequestEntityTooLarge, "payload_too_large")
	e.call(http.MethodPost, "/rollouts?dryRun=true", e.keyA, `{"version":"1.2.0"}`).wantInvalid(t, `"dryRun"`)

	// Query parameters of the list and of the others.
	e.get("/rollouts?limit=0", e.keyA).wantInvalid(t, "limit")
	e.get("/rollouts?limit=101", e.keyA).wantInvalid(t, "limit")
	e.get("/rollouts?state=running", e.keyA).wantInvalid(t, `"state"`)
	e.get("/rollouts/abc123?x=1", e.keyA).wantInvalid(t, `"x"`)
	e.call(http.MethodPost, "/rollouts/abc123/cancel?force=1", e.keyA, nil).wantInvalid(t, `"force"`)
	e.call(http.MethodPost, "/devices/"+d.ID+"/reboot?now=1", e.keyA, nil).wantInvalid(t, `"now"`)

	// Ids that cannot be ids are not found, without the store.
	e.get("/rollouts/Not-An-Id", e.keyA).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPost, "/rollouts/Not-An-Id/resume", e.keyA, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPost, "/devices/Not-An-Id/reboot", e.keyA, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPost, "/rollouts/abc123/restart", e.keyA, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)

	// Scopes: reading needs devices:read, the rest devices:write.
	read := e.key(e.orgA.ID, cloud.ScopeDevicesRead)
	write := e.key(e.orgA.ID, cloud.ScopeDevicesWrite)
	for _, c := range []struct {
		method, path, key, scope string
	}{
		{http.MethodGet, "/rollouts", write, cloud.ScopeDevicesRead},
		{http.MethodGet, "/rollouts/abc123", write, cloud.ScopeDevicesRead},
		{http.MethodPost, "/rollouts", read, cloud.ScopeDevicesWrite},
		{http.MethodPost, "/rollouts/abc123/pause", read, cloud.ScopeDevicesWrite},
		{http.MethodPost, "/rollouts/abc123/resume", read, cloud.ScopeDevicesWrite},
		{http.MethodPost, "/rollouts/abc123/cancel", read, cloud.ScopeDevicesWrite},
		{http.MethodPost, "/devices/" + d.ID + "/reboot", read, cloud.ScopeDevicesWrite},
	} {
		r := e.call(c.method, c.path, c.key, nil)
		r.want(t, http.StatusForbidden, cloud.EFORBIDDEN)
		if !strings.Contains(r.errMessage(), c.scope) {
			t.Errorf("%s %s: 403 %q does not name %s", c.method, c.path, r.errMessage(), c.scope)
		}
		e.call(c.method, c.path, "", nil).want(t, http.StatusUnauthorized, cloud.EUNAUTHORIZED)
	}

	// Other methods: 405 with the ones the path allows.
	for _, c := range []struct{ method, path, allow string }{
		{http.MethodDelete, "/rollouts", "GET, POST"},
		{http.MethodPatch, "/rollouts/abc123", "GET"},
		{http.MethodGet, "/rollouts/abc123/pause", "POST"},
		{http.MethodGet, "/devices/" + d.ID + "/reboot", "POST"},
	} {
		r := e.call(c.method, c.path, e.keyA, nil)
		r.want(t, http.StatusMethodNotAllowed, "method_not_allowed")
		if a := r.header.Get("Allow"); a != c.allow {
			t.Errorf("%s %s: Allow %q, want %q", c.method, c.path, a, c.allow)
		}
	}
}
