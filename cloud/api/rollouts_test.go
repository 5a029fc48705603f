package api_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/api"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
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

// decodeRollout decodes {"data": rollout detail}.
func decodeRollout(t *testing.T, r resp) resource.RolloutDetail {
	t.Helper()
	var one resource.One[resource.RolloutDetail]
	r.decode(t, &one)
	return one.Data
}

// fleetOf adds n IG-500 devices of orgID, each connected with agent
// version 1.0.0 on amd64, sorted by id (a rollout's order).
func (e *env) fleetOf(orgID string, n int) []string {
	e.t.Helper()
	var out []string
	for range n {
		d := e.device(orgID, "IG-500")
		storetest.Connect(e.t, e.s.Agent, e.agent(d.ID), time.Now(), protocol.Hello{AgentVersion: "1.0.0", Arch: "amd64"})
		out = append(out, d.ID)
	}
	slices.Sort(out)
	return out
}

// TestRollouts: a rollout through the API on the real store: created
// running with its devices by wave, read, listed newest first page by
// page, paused, resumed and canceled (409 from a state that forbids it),
// refused naming the field for what the store checks, and invisible to
// another organization.
func TestRollouts(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRollouts)
}

func testRollouts(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	data, sig := storetest.ReleaseBinary(t, 4096)
	storetest.Release(t, e.s.Store.Releases(), cloud.NewRelease{OrgID: e.orgA.ID, Version: "2.0.0", Arch: "amd64", Signature: sig}, data)
	ids := e.fleetOf(e.orgA.ID, 3)
	other := e.fleetOf(e.orgB.ID, 1)

	r := e.call(http.MethodPost, "/rollouts", e.keyA, map[string]any{"version": "2.0.0", "waves": []int{1, 100}, "maxFailures": 1, "healthFor": "1m"})
	r.want(t, http.StatusCreated, "")
	ro := decodeRollout(t, r)
	if ro.State != resource.RolloutRunning || ro.Version != "2.0.0" || !slices.Equal(ro.Waves, []int{1, 100}) || ro.MaxFailures != 1 ||
		ro.Total != 3 || ro.Counts[resource.RolloutDevicePending] != 3 || ro.Reason != nil || len(ro.Devices) != 3 {
		t.Fatalf("created %s", r.body)
	}
	for i, d := range ro.Devices {
		wave := min(i, 1)
		if d.DeviceID != ids[i] || d.Wave != wave || d.State != resource.RolloutDevicePending || d.Error != nil {
			t.Errorf("device %d: %+v, want %s in wave %d, pending", i, d, ids[i], wave)
		}
	}
	path := "/rollouts/" + ro.ID
	if got := decodeRollout(t, e.get(path, e.keyA)); got.ID != ro.ID || len(got.Devices) != 3 || got.HealthFor != ro.HealthFor {
		t.Fatalf("GET %s: %+v", path, got)
	}

	// A second rollout (a scope by device), then the list: newest first,
	// a page at a time.
	r = e.call(http.MethodPost, "/rollouts", e.keyA, map[string]any{"version": "2.0.0", "scope": map[string]any{"deviceIds": []string{ids[2]}}})
	r.want(t, http.StatusCreated, "")
	second := decodeRollout(t, r)
	if second.Total != 1 || second.Devices[0].DeviceID != ids[2] || !slices.Equal(second.Waves, []int{100}) || second.MaxFailures != 0 {
		t.Fatalf("second rollout %s", r.body)
	}
	var l resource.List[resource.Rollout]
	e.get("/rollouts?limit=1", e.keyA).decode(t, &l)
	if len(l.Data) != 1 || l.Data[0].ID != second.ID || !l.Pagination.HasMore || l.Pagination.NextCursor == nil {
		t.Fatalf("first page %+v", l)
	}
	e.get("/rollouts?limit=1&cursor="+*l.Pagination.NextCursor, e.keyA).decode(t, &l)
	if len(l.Data) != 1 || l.Data[0].ID != ro.ID || l.Data[0].Total != 3 || l.Pagination.HasMore {
		t.Fatalf("second page %+v", l)
	}

	// The actions, and the states that forbid them.
	for _, c := range []struct {
		action, state string
		status        int
	}{
		{"pause", resource.RolloutPaused, http.StatusOK},
		{"pause", "", http.StatusConflict},
		{"resume", resource.RolloutRunning, http.StatusOK},
		{"resume", "", http.StatusConflict},
		{"cancel", resource.RolloutCanceled, http.StatusOK},
		{"cancel", "", http.StatusConflict},
		{"resume", "", http.StatusConflict},
		{"pause", "", http.StatusConflict},
	} {
		r := e.call(http.MethodPost, path+"/"+c.action, e.keyA, nil)
		if c.status == http.StatusConflict {
			r.want(t, http.StatusConflict, cloud.ECONFLICT)
			continue
		}
		r.want(t, c.status, "")
		if got := decodeRollout(t, r); got.State != c.state {
			t.Fatalf("%s: state %s, want %s", c.action, got.State, c.state)
		}
	}
	if got := decodeRollout(t, e.get(path, e.keyA)); got.Counts[resource.RolloutDeviceSkipped] != 3 {
		t.Errorf("canceled before its first wave: counts %v, want 3 skipped", got.Counts)
	}

	// What the store checks, named.
	for _, c := range []struct {
		name  string
		body  map[string]any
		field string
	}{
		{"no release", map[string]any{"version": "9.9.9"}, "version"},
		{"no version", map[string]any{}, "version"},
		{"waves decreasing", map[string]any{"version": "2.0.0", "waves": []int{50, 40, 100}}, "waves[1]"},
		{"waves short of 100", map[string]any{"version": "2.0.0", "waves": []int{10, 50}}, "waves"},
		{"healthFor too short", map[string]any{"version": "2.0.0", "healthFor": "5s"}, "healthFor"},
		{"maxFailures negative", map[string]any{"version": "2.0.0", "maxFailures": -1}, "maxFailures"},
		{"ids and tags", map[string]any{"version": "2.0.0", "scope": map[string]any{"deviceIds": []string{ids[0]}, "tags": []string{"a"}}}, "scope"},
		{"no such device", map[string]any{"version": "2.0.0", "scope": map[string]any{"deviceIds": []string{"nosuchdevice"}}}, "scope.deviceIds[0]"},
		{"another org's device", map[string]any{"version": "2.0.0", "scope": map[string]any{"deviceIds": []string{other[0]}}}, "scope.deviceIds[0]"},
		{"no device tagged", map[string]any{"version": "2.0.0", "scope": map[string]any{"tags": []string{"line-9"}}}, "scope"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e.call(http.MethodPost, "/rollouts", e.keyA, c.body).wantInvalid(t, c.field)
		})
	}

	// Another organization sees none of it.
	e.get(path, e.keyB).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPost, "/rollouts/"+second.ID+"/pause", e.keyB, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.get("/rollouts", e.keyB).decode(t, &l)
	if len(l.Data) != 0 {
		t.Errorf("org B lists %+v", l.Data)
	}
	// Org B has no release of 2.0.0.
	e.call(http.MethodPost, "/rollouts", e.keyB, map[string]any{"version": "2.0.0"}).wantInvalid(t, "version")
}

// TestRebootDevice: POST /devices/{id}/reboot queues a reboot for a
// connected device (202, the same command while it waits) that its agent
// is sent; a device that is not connected is 409, another organization's
// 404.
func TestRebootDevice(t *testing.T) {
	t.Parallel()
	stores.Run(t, testRebootDevice)
}

func testRebootDevice(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	on := e.fleetOf(e.orgA.ID, 1)[0]
	never := e.device(e.orgA.ID, "IG-500")
	theirs := e.fleetOf(e.orgB.ID, 1)[0]

	r := e.call(http.MethodPost, "/devices/"+on+"/reboot", e.keyA, nil)
	r.want(t, http.StatusAccepted, "")
	var a resource.One[cloud.RebootAccepted]
	r.decode(t, &a)
	if a.Data.DeviceID != on || a.Data.CommandID == "" {
		t.Fatalf("reboot: %s", r.body)
	}
	var again resource.One[cloud.RebootAccepted]
	e.call(http.MethodPost, "/devices/"+on+"/reboot", e.keyA, nil).decode(t, &again)
	if again.Data != a.Data {
		t.Errorf("reboot again: %+v, want %+v", again.Data, a.Data)
	}
	cmds, err := e.s.Commands.PendingCommands(context.Background(), e.agent(on))
	if err != nil || len(cmds) != 1 || cmds[0].ID != a.Data.CommandID || cmds[0].Kind != protocol.CommandReboot {
		t.Fatalf("the agent is sent %+v (%v), want the reboot %s", cmds, err, a.Data.CommandID)
	}

	r = e.call(http.MethodPost, "/devices/"+never.ID+"/reboot", e.keyA, nil)
	r.want(t, http.StatusConflict, cloud.ECONFLICT)
	if !strings.Contains(r.errMessage(), "connected") {
		t.Errorf("409 says %q", r.errMessage())
	}
	e.call(http.MethodPost, "/devices/"+theirs+"/reboot", e.keyA, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	e.call(http.MethodPost, "/devices/nosuchdevice0000000000000/reboot", e.keyA, nil).want(t, http.StatusNotFound, cloud.ENOTFOUND)
	if cmds, _ := e.s.Commands.PendingCommands(context.Background(), e.agent(theirs)); len(cmds) != 0 {
		t.Errorf("org B's device was given %+v", cmds)
	}
}
