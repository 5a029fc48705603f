package panel_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestDBCImport: a CAN FD channel's DBC import turns the file's signals
// into the channel's points; a malformed file, an unknown message, a file
// over 1 MiB and a channel of another kind change nothing and say why (a
// malformed file with its line); a VIEWER may not import.
func TestDBCImport(t *testing.T) { stores.Run(t, testDBCImport) }

func testDBCImport(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	path := "/panel/devices/" + h.device.ID + "/channels/canfd-1/dbc"
	file := func(content string) upload { return upload{Field: "dbc", Name: "engine.dbc", Content: []byte(content)} }
	c := h.signIn(cloud.RoleMember)

	page := c.get("/panel/devices/" + h.device.ID).body
	for _, s := range []string{`action="` + path + `"`, `enctype="multipart/form-data"`, `<label for="dbc-canfd-1-file">DBC file</label>`, `Import DBC into canfd-1`} {
		if !strings.Contains(page, s) {
			t.Errorf("the device page's DBC form lacks %s", s)
		}
	}
	if strings.Contains(page, "channels/rs485-1/dbc") {
		t.Error("an RS-485 channel offers a DBC import")
	}

	refused := []struct {
		name   string
		path   string
		form   url.Values
		file   upload
		status int
		says   string
	}{
		{"malformed", path, nil, file(testDBC + "BO_ 512 Broken: eight ECU\n"), http.StatusBadRequest, "engine.dbc:12: expected int. Nothing was changed."},
		{"unknown message", path, url.Values{"messages": {"EngineData, NoSuchMessage"}}, file(testDBC), http.StatusBadRequest, "NoSuchMessage"},
		{"no file", path, nil, upload{}, http.StatusBadRequest, "choose a .dbc file"},
		{"over 1 MiB", path, nil, file(testDBC + strings.Repeat("CM_ \"padding\";\n", 80_000)), http.StatusRequestEntityTooLarge, "larger than 1024 KiB"},
		{"rs485 channel", "/panel/devices/" + h.device.ID + "/channels/rs485-1/dbc", nil, file(testDBC), http.StatusBadRequest, "not a CAN FD channel"},
	}
	for _, tc := range refused {
		before := h.state()
		r := c.upload(tc.path, tc.form, tc.file)
		if r.status != tc.status || !strings.Contains(r.body, tc.says) {
			t.Errorf("%s: %d, want %d saying %q:\n%s", tc.name, r.status, tc.status, tc.says, excerpt(r.body, "banner error"))
		}
		if h.state() != before {
			t.Errorf("%s: the refused import changed the channel", tc.name)
		}
	}

	viewer := h.signIn(cloud.RoleViewer)
	if strings.Contains(viewer.get("/panel/devices/"+h.device.ID).body, "Import DBC") {
		t.Error("a VIEWER is offered the DBC import")
	}
	if r := viewer.upload(path, nil, file(testDBC)); r.status != http.StatusForbidden {
		t.Errorf("VIEWER import: %d", r.status)
	}

	r := c.upload(path, url.Values{"messages": {"EngineData"}}, file(testDBC))
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/devices/"+h.device.ID+"#config-canfd-1" {
		t.Fatalf("import: %d %s", r.status, excerpt(r.body, "banner error"))
	}
	if body := c.get("/panel/devices/" + h.device.ID).body; !strings.Contains(body, "DBC file imported: canfd-1 now has 2 points") {
		t.Errorf("no confirmation after the import: %s", excerpt(body, `class="banner"`))
	}
	ch := must(h.db.Serial().Channel(h.ctx, h.org.ID, h.device.ID, "canfd-1"))
	var names []string
	for _, p := range ch.Config.CANFD.Points {
		names = append(names, p.Name+"/"+p.ByteOrder+"/"+p.Unit)
	}
	if got := strings.Join(names, " "); got != "engine_speed/little/rpm coolant_temp/big/degC" {
		t.Errorf("canfd-1's points after the import: %s", got)
	}
}

// excerpt is the part of body around the first s, for failure messages.
func excerpt(body, s string) string {
	i := strings.Index(body, s)
	if i < 0 {
		return "(no " + s + ")"
	}
	return body[max(0, i-20):min(len(body), i+300)]
}
