package api_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

// TestPatchDevice: PATCH /devices/{id} on a real store, every response
// checked against the OpenAPI document (specTransport).
func TestPatchDevice(t *testing.T) {
	t.Parallel()
	stores.Run(t, testPatchDevice)
}

func testPatchDevice(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	d := e.device(e.orgA.ID, "IG-500")
	path := "/api/v1/public/devices/" + d.ID
	patch := func(key, body string) resp { return e.req(http.MethodPatch, path, key, body) }

	// The list page is rendered (and cached) before the change.
	var l resource.List[resource.Device]
	e.get("/devices", e.keyA).decode(t, &l)
	if len(l.Data) != 1 || l.Data[0].Tags == nil || len(l.Data[0].Tags) != 0 {
		t.Fatalf("list before: %+v", l.Data)
	}

	r := patch(e.keyA, `{"name":" press 3 ","location":"Hall B","notes":"oiled\non Monday","tags":["site:north","line-3"]}`)
	r.want(t, http.StatusOK, "")
	var got resource.One[resource.DeviceDetail]
	r.decode(t, &got)
	if got.Data.ID != d.ID || got.Data.Name != "press 3" || got.Data.Location != "Hall B" || got.Data.Notes == nil ||
		*got.Data.Notes != "oiled\non Monday" || !slices.Equal(got.Data.Tags, []string{"line-3", "site:north"}) {
		t.Fatalf("patch: %s", r.body)
	}
	// The list and the detail show it at once (the page cache follows).
	e.get("/devices", e.keyA).decode(t, &l)
	if len(l.Data) != 1 || l.Data[0].Name != "press 3" || !slices.Equal(l.Data[0].Tags, got.Data.Tags) {
		t.Fatalf("list after: %+v", l.Data)
	}
	e.get("/devices/"+d.ID, e.keyA).decode(t, &got)
	if got.Data.Name != "press 3" || len(got.Data.Tags) != 2 {
		t.Fatalf("detail after: %+v", got.Data)
	}
	// null clears the notes, and only them.
	r = patch(e.keyA, `{"notes":null}`)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"notes":null`) || !strings.Contains(string(r.body), `"tags":["line-3","site:north"]`) {
		t.Fatalf("notes not cleared: %s", r.body)
	}
	r = patch(e.keyA, `{"tags":[]}`)
	r.want(t, http.StatusOK, "")
	if !strings.Contains(string(r.body), `"tags":[]`) || !strings.Contains(string(r.body), `"name":"press 3"`) {
		t.Fatalf("tags not cleared: %s", r.body)
	}

	for _, c := range []struct {
		name, body, code, field string
	}{
		{"empty object", `{}`, cloud.EINVALID, "at least one"},
		{"unknown field", `{"name":"x","colour":"red"}`, cloud.EINVALID, "colour"},
		{"name blank", `{"name":"  ","tags":["new"]}`, cloud.EINVALID, "name"},
		{"name null", `{"name":null}`, cloud.EINVALID, "name"},
		{"name wrong type", `{"name":3}`, cloud.EINVALID, "name"},
		{"name too long", `{"name":"` + strings.Repeat("n", 201) + `"}`, cloud.EINVALID, "name"},
		{"location control", `{"name":"ok","location":"a\u0000b"}`, cloud.EINVALID, "location"},
		{"location null", `{"location":null}`, cloud.EINVALID, "location"},
		{"notes too long", `{"name":"ok","notes":"` + strings.Repeat("é", cloud.MaxNotesLength+1) + `"}`, cloud.EINVALID, "notes"},
		{"notes wrong type", `{"notes":true}`, cloud.EINVALID, "notes"},
		{"tags not array", `{"tags":"a,b"}`, cloud.EINVALID, "tags"},
		{"tags null", `{"tags":null}`, cloud.EINVALID, "tags"},
		{"tag bad", `{"name":"ok","tags":["fine","Not OK"]}`, cloud.EINVALID, "tags[1]"},
		{"too many tags", `{"tags":["a","b","c","d","e","f","g","h","i","j","k","l","m","n","o","p","q"]}`, cloud.EINVALID, "tags"},
		{"not json", `{"name":`, "invalid_json", ""},
		{"two values", `{"name":"a"}{"name":"b"}`, "invalid_json", ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := patch(e.keyA, c.body)
			r.want(t, http.StatusBadRequest, c.code)
			if c.field != "" && !strings.HasPrefix(r.errMessage(), c.field) && !strings.Contains(r.errMessage(), c.field) {
				t.Fatalf("message %q does not name %q", r.errMessage(), c.field)
			}
		})
	}
	// Nothing of a refused patch was written.
	e.get("/devices/"+d.ID, e.keyA).decode(t, &got)
	if got.Data.Name != "press 3" || got.Data.Location != "Hall B" || len(got.Data.Tags) != 0 {
		t.Fatalf("after refused patches: %+v", got.Data)
	}

	// Scopes: devices:write is needed; another organization's device is
	// not found.
	patch(e.key(e.orgA.ID, cloud.ScopeDevicesRead), `{"name":"x"}`).want(t, http.StatusForbidden, "insufficient_scope")
	patch(e.keyB, `{"name":"stolen"}`).want(t, http.StatusNotFound, "not_found")
	e.req(http.MethodPatch, "/api/v1/public/devices/nosuchdevice", e.keyA, `{"name":"x"}`).want(t, http.StatusNotFound, "not_found")
	e.req(http.MethodPatch, path, e.keyA, `{"name":"x"}`, "Content-Type", "text/plain").want(t, http.StatusUnsupportedMediaType, "")
	e.get("/devices/"+d.ID, e.keyA).decode(t, &got)
	if got.Data.Name != "press 3" {
		t.Fatalf("renamed by a refused request: %q", got.Data.Name)
	}
}

// TestDeviceTagFilter: GET /devices?tag= (repeatable, every tag must
// match), keyset pages unchanged.
func TestDeviceTagFilter(t *testing.T) {
	t.Parallel()
	stores.Run(t, testDeviceTagFilter)
}

func testDeviceTagFilter(t *testing.T, open storetest.Opener) {
	t.Parallel()
	e := newEnv(t, open)
	var both []string
	for i := range 5 {
		d := e.device(e.orgA.ID, "IG-500")
		tags := `["site:north"]`
		if i != 1 {
			tags = `["line-3","site:north"]`
			both = append(both, d.ID)
		}
		e.req(http.MethodPatch, "/api/v1/public/devices/"+d.ID, e.keyA, `{"tags":`+tags+`}`).want(t, http.StatusOK, "")
	}
	var ids []string
	next := ""
	for range 10 {
		q := "/devices?tag=site:north&tag=line-3&limit=2"
		if next != "" {
			q += "&cursor=" + next
		}
		var l resource.List[resource.Device]
		r := e.get(q, e.keyA)
		r.want(t, http.StatusOK, "")
		r.decode(t, &l)
		for _, d := range l.Data {
			ids = append(ids, d.ID)
		}
		if !l.Pagination.HasMore {
			break
		}
		next = *l.Pagination.NextCursor
	}
	if !slices.Equal(ids, both) {
		t.Fatalf("tag=site:north&tag=line-3 listed %v, want %v", ids, both)
	}
	var l resource.List[resource.Device]
	e.get("/devices?tag=site:north", e.keyA).decode(t, &l)
	if len(l.Data) != 5 {
		t.Fatalf("tag=site:north listed %d", len(l.Data))
	}
	e.get("/devices?tag=site:north", e.keyB).decode(t, &l)
	if len(l.Data) != 0 {
		t.Fatalf("another organization lists %d", len(l.Data))
	}
	for _, q := range []string{"tag=Site", "tag=", "tag=a&tag=b%20c", "tag=" + strings.Repeat("a", 33),
		"tag=a&tag=b&tag=c&tag=d&tag=e&tag=f&tag=g&tag=h&tag=i&tag=j&tag=k&tag=l&tag=m&tag=n&tag=o&tag=p&tag=q"} {
		r := e.get("/devices?"+q, e.keyA)
		r.want(t, http.StatusBadRequest, cloud.EINVALID)
		if !strings.HasPrefix(r.errMessage(), "tag") {
			t.Errorf("%s: message %q does not name tag", q, r.errMessage())
		}
	}
	// status still refuses a repeat.
	e.get("/devices?status=ONLINE&status=OFFLINE", e.keyA).want(t, http.StatusBadRequest, cloud.EINVALID)
}
