package panel_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestDeviceEdit: OWNER, ADMIN and MEMBER edit a device's name, location,
// notes and tags on its page; a VIEWER sees the values but no form, and
// its post is refused with nothing changed.
func TestDeviceEdit(t *testing.T) { stores.Run(t, testDeviceEdit) }

func testDeviceEdit(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	page := "/panel/devices/" + h.device.ID
	for i, role := range []cloud.Role{cloud.RoleOwner, cloud.RoleAdmin, cloud.RoleMember} {
		c := h.signIn(role)
		if body := c.get(page).body; !strings.Contains(body, "<summary>Edit device</summary>") || !strings.Contains(body, ">Save device</button>") {
			t.Fatalf("%s: the device page has no Edit device form", role)
		}
		name := fmt.Sprintf("Press line %d", i+2)
		form := url.Values{"name": {name}, "location": {"Hall B"}, "tags": {"Line-3, pump ,line-3"}, "notes": {"Belt replaced\r\nby " + string(role)}}
		// Tags are lower-case: the typed value comes back beside its error.
		if r := c.post(page+"/edit", form); r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="device-tags-error"`) || !strings.Contains(r.body, `value="Line-3, pump ,line-3"`) {
			t.Errorf("%s: an upper-case tag: %d, or its error is not beside Tags", role, r.status)
		}
		form.Set("tags", "line-3, pump ,line-3")
		r := c.post(page+"/edit", form)
		if r.status != http.StatusSeeOther || r.header.Get("Location") != page+"#details" {
			t.Fatalf("%s: edit: %d %s", role, r.status, r.body)
		}
		d := must(h.db.Devices().Device(h.ctx, h.org.ID, h.device.ID))
		if d.Name != name || d.Location != "Hall B" || strings.Join(d.Tags, ",") != "line-3,pump" || d.Notes == nil || *d.Notes != "Belt replaced\nby "+string(role) {
			t.Errorf("%s: after the edit the device is %q %q %v %v", role, d.Name, d.Location, d.Tags, d.Notes)
		}
		body := c.get(page).body
		for _, s := range []string{"Device saved.", `<a class="tag" href="/panel/?tag=line-3">line-3</a>`, "Belt replaced\nby " + string(role), `value="line-3, pump"`} {
			if !strings.Contains(body, s) {
				t.Errorf("%s: the device page after the edit lacks %q", role, s)
			}
		}
	}
	// Empty notes clear them.
	c := h.signIn(cloud.RoleMember)
	if r := c.post(page+"/edit", url.Values{"name": {"Press line 1"}, "location": {""}, "tags": {""}, "notes": {"  "}}); r.status != http.StatusSeeOther {
		t.Fatalf("clearing: %d %s", r.status, r.body)
	}
	if d := must(h.db.Devices().Device(h.ctx, h.org.ID, h.device.ID)); d.Notes != nil || len(d.Tags) != 0 || d.Location != "" {
		t.Errorf("after clearing: notes %v, tags %v, location %q", d.Notes, d.Tags, d.Location)
	}

	v := h.signIn(cloud.RoleViewer)
	must(h.db.Devices().PatchDevice(h.ctx, h.org.ID, h.device.ID, cloud.DevicePatch{Notes: ptr("Spare belt in the cabinet"), Tags: &[]string{"line-3"}}))
	body := v.get(page).body
	if strings.Contains(body, "Save device") || strings.Contains(body, `action="`+page+`/edit"`) {
		t.Error("a VIEWER is offered the Edit device form")
	}
	for _, s := range []string{"Spare belt in the cabinet", `<a class="tag" href="/panel/?tag=line-3">line-3</a>`} {
		if !strings.Contains(body, s) {
			t.Errorf("a VIEWER's device page lacks %q", s)
		}
	}
	before := h.state()
	if r := v.post(page+"/edit", url.Values{"name": {"Viewer was here"}, "tags": {"x"}}); r.status != http.StatusForbidden {
		t.Errorf("VIEWER edit: %d", r.status)
	}
	if h.state() != before {
		t.Error("the VIEWER's refused edit changed the device")
	}
	// Another organization's device is not found, and stays as it was.
	if r := c.post("/panel/devices/"+h.foreign.ID+"/edit", url.Values{"name": {"Mine now"}}); r.status != http.StatusNotFound {
		t.Errorf("another organization's device: %d", r.status)
	}
	if d := must(h.db.Devices().Device(h.ctx, h.other.ID, h.foreign.ID)); d.Name != "Not yours" {
		t.Errorf("another organization's device was renamed to %q", d.Name)
	}
}

func ptr[T any](v T) *T { return &v }

// TestDeviceEditErrors: an invalid field is shown beside it, the form
// keeps what was typed, and nothing is saved, not even the valid fields.
func TestDeviceEditErrors(t *testing.T) { stores.Run(t, testDeviceEditErrors) }

func testDeviceEditErrors(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	page := "/panel/devices/" + h.device.ID
	c := h.signIn(cloud.RoleAdmin)
	before := must(h.db.Devices().Device(h.ctx, h.org.ID, h.device.ID))
	tooMany := make([]string, cloud.MaxDeviceTags+1)
	for i := range tooMany {
		tooMany[i] = fmt.Sprintf("t%d", i)
	}
	for _, c2 := range []struct {
		field string
		form  url.Values
		typed string
	}{
		{"tags", url.Values{"name": {"Renamed"}, "location": {"Hall Z"}, "tags": {"ok, not a tag!"}, "notes": {"kept"}}, "ok, not a tag!"},
		{"tags", url.Values{"name": {"Renamed"}, "location": {"Hall Z"}, "tags": {strings.Join(tooMany, ",")}, "notes": {"kept"}}, "t15,t16"},
		{"name", url.Values{"name": {""}, "location": {"Hall Z"}, "tags": {"line-3"}, "notes": {"kept"}}, "Hall Z"},
		{"notes", url.Values{"name": {"Renamed"}, "location": {"Hall Z"}, "tags": {"line-3"}, "notes": {strings.Repeat("n", cloud.MaxNotesLength+1)}}, "Renamed"},
	} {
		r := c.post(page+"/edit", c2.form)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", c2.field, r.status)
			continue
		}
		if !strings.Contains(r.body, `id="device-`+c2.field+`-error"`) {
			t.Errorf("%s: the error is not beside its field", c2.field)
		}
		if !strings.Contains(r.body, `<details id="edit-device" class="channel-config" open>`) {
			t.Errorf("%s: the form is not open on its error", c2.field)
		}
		if !strings.Contains(r.body, c2.typed) {
			t.Errorf("%s: what was typed (%q) is gone", c2.field, c2.typed)
		}
		after := must(h.db.Devices().Device(h.ctx, h.org.ID, h.device.ID))
		if after.Name != before.Name || after.Location != before.Location || after.Notes != nil || len(after.Tags) != 0 {
			t.Errorf("%s: the refused edit saved something: %q %q %v %v", c2.field, after.Name, after.Location, after.Notes, after.Tags)
		}
	}
}

// TestFleetTagFilter: the fleet page filters by one tag or by two (every
// one must match, typed comma-separated or repeated), with Search, Status
// and paging, and shows each device's tags.
func TestFleetTagFilter(t *testing.T) { stores.Run(t, testFleetTagFilter) }

func testFleetTagFilter(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	devices := h.db.Devices()
	for i := 0; i < 55; i++ {
		d, _ := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: fmt.Sprintf("Pump %02d", i), SerialNumber: fmt.Sprintf("P-%02d", i), Model: "IG-100"}))
		tags := []string{"pump"}
		if i%5 == 0 {
			tags = append(tags, "line-3")
		}
		must(devices.PatchDevice(h.ctx, h.org.ID, d.ID, cloud.DevicePatch{Tags: &tags}))
	}
	must(devices.PatchDevice(h.ctx, h.org.ID, h.device.ID, cloud.DevicePatch{Tags: &[]string{"line-3"}}))
	must(devices.PatchDevice(h.ctx, h.other.ID, h.foreign.ID, cloud.DevicePatch{Tags: &[]string{"pump", "line-3"}}))
	c := h.signIn(cloud.RoleViewer)
	first := c.get("/panel/?tag=pump").body
	for _, s := range []string{"Devices 1–50 of 55", `<label for="tag">Tag</label>`, `value="pump"`, `href="/panel/?page=2&amp;tag=pump" rel="next"`, `<a class="tag" href="/panel/?tag=line-3">line-3</a>`} {
		if !strings.Contains(first, s) {
			t.Errorf("?tag=pump lacks %q", s)
		}
	}
	if strings.Contains(first, "Press line 1") || strings.Contains(first, "Not yours") {
		t.Error("?tag=pump shows a device without the tag")
	}
	if body := c.get("/panel/?tag=pump&page=2").body; !strings.Contains(body, "Devices 51–55 of 55") {
		t.Error("page 2 of ?tag=pump is wrong")
	}
	for _, q := range []string{"tag=line-3,pump", "tag=pump&tag=line-3", "tag=+Line-3+,+pump"} {
		body := c.get("/panel/?" + q).body
		if !strings.Contains(body, "Devices 1–11 of 11") || strings.Contains(body, "Press line 1") || !strings.Contains(body, `value="line-3, pump"`) {
			t.Errorf("?%s: want the 11 pumps of line 3", q)
		}
	}
	if body := c.get("/panel/?tag=line-3").body; !strings.Contains(body, "Devices 1–12 of 12") || !strings.Contains(body, "Press line 1") {
		t.Error("?tag=line-3: want 12 devices with Press line 1")
	}
	if body := c.get("/panel/?tag=line-3&q=pump+05").body; !strings.Contains(body, "Devices 1–1 of 1") || !strings.Contains(body, "Pump 05") {
		t.Error("?tag=line-3&q=pump 05: want Pump 05 alone")
	}
	if body := c.get("/panel/?tag=line-3&status=ONLINE").body; !strings.Contains(body, "No devices match.") {
		t.Error("?tag=line-3&status=ONLINE: none is online")
	}
	body := c.get("/panel/?tag=line-3&q=pump").body
	for _, s := range []string{`href="/panel/?q=pump&amp;status=PROVISIONING&amp;tag=line-3"`, `href="/panel/?q=pump&amp;tag=line-3"`} {
		if !strings.Contains(body, s) {
			t.Errorf("the status links lose the tag filter: no %q", s)
		}
	}
	if body := c.get("/panel/?tag=pum").body; !strings.Contains(body, "No devices match.") {
		t.Error("a prefix of a tag matches")
	}
	if body := c.get("/panel/?tag=" + url.QueryEscape("<b>x</b>")).body; !strings.Contains(body, `id="tag-error"`) || !strings.Contains(body, "&lt;b&gt;x&lt;/b&gt;") || strings.Contains(body, "<b>x") {
		t.Error("a tag filter that is no tag is not shown as text with its error")
	}
}

// TestDeviceNotesAreText: notes and the typed form come back as text.
func TestDeviceNotesAreText(t *testing.T) { stores.Run(t, testDeviceNotesAreText) }

func testDeviceNotesAreText(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	page := "/panel/devices/" + h.device.ID
	c := h.signIn(cloud.RoleOwner)
	evil := `<script>alert(1)</script>`
	if r := c.post(page+"/edit", url.Values{"name": {"Press line 1"}, "notes": {evil}, "tags": {""}}); r.status != http.StatusSeeOther {
		t.Fatalf("edit: %d %s", r.status, r.body)
	}
	r := c.post(page+"/edit", url.Values{"name": {`<img src=x onerror=alert(2)>`}, "notes": {evil}, "tags": {`"><svg onload=alert(3)>`}})
	for _, body := range []string{c.get(page).body, r.body} {
		for _, raw := range []string{"<script>alert", "<img src=x", "<svg"} {
			if strings.Contains(body, raw) {
				t.Errorf("the device page renders %q as markup", raw)
			}
		}
		if !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
			t.Error("the notes are not shown as text")
		}
	}
}
