package panel_test

import (
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/testwait"
)

// TestUserTextIsText: names and texts that devices, agents and people
// choose are rendered as text, never markup.
func TestUserTextIsText(t *testing.T) { stores.Run(t, testUserTextIsText) }

func testUserTextIsText(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	evil := `<img src=x onerror="alert(1)">`
	d, tok := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: evil, SerialNumber: "SN-X", Model: "IG-500", Location: "<script>alert(2)</script>"}))
	agent := h.agent(tok)
	storetest.Connect(t, h.s.Agent, agent, time.Now(), protocol.Hello{AgentVersion: "1.0.0", DeviceName: "<b>agent</b>", DeviceLocation: "<i>loc</i>"})
	storetest.Events(t, h.s.Agent, agent, resource.Event{Type: "serial.error", Severity: resource.SeverityError, Message: `<svg onload=alert(3)>`})
	storetest.Alert(t, h.s.Engine, h.db.Alerts(), storetest.NewAlert{OrgID: h.org.ID, DeviceID: d.ID, Rule: "high_cpu", Message: `<a href=javascript:alert(4)>x</a>`})
	c := h.signIn(cloud.RoleViewer)
	for _, path := range []string{"/panel/", "/panel/devices/" + d.ID, "/panel/alerts"} {
		body := c.get(path).body
		for _, raw := range []string{"<img src=x", "<script>alert", "<b>agent", "<svg", "<a href=javascript"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s renders %q as markup", path, raw)
			}
		}
	}
	if body := c.get("/panel/").body; !strings.Contains(body, "&lt;img src=x onerror=&#34;alert(1)&#34;&gt;") {
		t.Error("the fleet page does not show the device's name as text")
	}
}

// TestSecurityHeaders: every page carries the CSP (no inline script, no
// framing), and no page holds an inline script.
func TestSecurityHeaders(t *testing.T) { stores.Run(t, testSecurityHeaders) }

func testSecurityHeaders(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	inline := regexp.MustCompile(`<script(?:\s+[^>]*)?>`)
	for _, path := range []string{"/panel/login", "/panel/", "/panel/devices/" + h.device.ID, "/panel/devices/" + h.device.ID + "/points/" + testPoint, "/panel/alerts", "/panel/settings/api-keys", "/panel/settings/webhooks", "/panel/settings/members", "/panel/alerts/rules", "/panel/alerts/rules/new", "/panel/alerts/rules/" + h.rules[0].ID,
		"/panel/alerts/silences", "/panel/settings/notifications", "/panel/alerts/" + h.alerts[0].ID, "/panel/nothing",
		"/panel/rollouts", "/panel/rollouts/new", "/panel/rollouts/" + h.rollouts[0].ID, "/panel/releases", "/panel/claims", "/panel/settings/sso"} {
		r := c.get(path)
		csp := r.header.Get("Content-Security-Policy")
		if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self'") || strings.Contains(csp, "unsafe-inline") {
			t.Errorf("%s: CSP %q", path, csp)
		}
		for _, tag := range inline.FindAllString(r.body, -1) {
			if !strings.Contains(tag, " src=") {
				t.Errorf("%s: inline script %s", path, tag)
			}
		}
		if r.header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", path)
		}
	}
}

func TestCrossOriginPostRefused(t *testing.T) { stores.Run(t, testCrossOriginPostRefused) }

func testCrossOriginPostRefused(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	form := url.Values{"name": {"CSRF"}, "scope": {cloud.ScopeDevicesRead}, "expires": {"7"}}
	before := h.state()
	c.header.Set("Origin", "http://evil.example")
	if r := c.post("/panel/settings/api-keys", form); r.status != http.StatusForbidden || !strings.Contains(r.body, "came from another site") {
		t.Errorf("cross-origin POST: %d", r.status)
	}
	c.header.Del("Origin")
	c.header.Set("Sec-Fetch-Site", "same-site")
	if r := c.post("/panel/settings/api-keys", form); r.status != http.StatusForbidden {
		t.Errorf("same-site, cross-origin POST: %d", r.status)
	}
	if h.state() != before {
		t.Error("a refused cross-origin POST changed the organization")
	}
	c.header.Set("Sec-Fetch-Site", "same-origin")
	if r := c.post("/panel/settings/api-keys", form); r.status != http.StatusOK {
		t.Errorf("same-origin POST: %d", r.status)
	}
}

func TestOversizedFormRefused(t *testing.T) { stores.Run(t, testOversizedFormRefused) }

func testOversizedFormRefused(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	before := h.state()
	r := c.post("/panel/settings/api-keys", url.Values{"name": {strings.Repeat("k", 70<<10)}, "scope": {cloud.ScopeDevicesRead}, "expires": {"7"}})
	if r.status != http.StatusRequestEntityTooLarge || !strings.Contains(r.body, "larger than 64 KiB") {
		t.Errorf("oversized form: %d", r.status)
	}
	if h.state() != before {
		t.Error("an oversized form changed the organization")
	}
}

func TestOtherOrganizationIsNotFound(t *testing.T) { stores.Run(t, testOtherOrganizationIsNotFound) }

func testOtherOrganizationIsNotFound(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	for _, p := range []string{"/panel/devices/" + h.foreign.ID, "/panel/devices/" + h.foreign.ID + "/channels", "/panel/devices/no-such-device"} {
		if r := c.get(p); r.status != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, r.status)
		}
	}
	if r := c.post("/panel/devices/"+h.foreign.ID+"/serial", url.Values{"mode": {"both"}}); r.status != http.StatusNotFound {
		t.Errorf("POST to another organization's device: %d", r.status)
	}
	if body := c.get("/panel/").body; strings.Contains(body, "Not yours") {
		t.Error("the fleet page lists another organization's device")
	}
}

// TestKeyLifecycle: create (shown once, with its creator), used (last used
// shown), revoked after a confirmation.
func TestKeyLifecycle(t *testing.T) { stores.Run(t, testKeyLifecycle) }

func testKeyLifecycle(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleAdmin)
	page := c.get("/panel/settings/api-keys").body
	for _, s := range []string{`<label for="key-name">Name</label>`, `<label for="expires">Expires</label>`, `>Create key</button>`, `>Never</option>`, `>365 days</option>`} {
		if !strings.Contains(page, s) {
			t.Errorf("API keys page lacks %s", s)
		}
	}
	for _, sc := range cloud.AllScopes {
		if !strings.Contains(page, fmt.Sprintf(`<label for="scope-%s">%s</label>`, sc, sc)) {
			t.Errorf("no checkbox labelled %s", sc)
		}
	}
	if r := c.post("/panel/settings/api-keys", url.Values{"name": {""}, "expires": {"30"}}); r.status != http.StatusBadRequest || !strings.Contains(r.body, "Choose at least one scope.") {
		t.Errorf("empty form: %d", r.status)
	}
	r := c.post("/panel/settings/api-keys", url.Values{"name": {"ERP sync"}, "scope": {cloud.ScopeDevicesRead, cloud.ScopeAlertsRead}, "expires": {"7"}})
	key := regexp.MustCompile(`svc_sk_[A-Za-z0-9_]+`).FindString(r.body)
	if r.status != http.StatusOK || key == "" || !strings.Contains(r.body, "shown only this once") {
		t.Fatalf("create: %d, key %q", r.status, key)
	}
	if strings.Contains(c.get("/panel/settings/api-keys").body, key) {
		t.Fatal("the key is shown a second time")
	}
	auth := apikey.NewAuthenticator(h.db.Keys(), time.Now, 0)
	k, err := auth.Authenticate(h.ctx, key)
	if err != nil || !k.HasScope(cloud.ScopeAlertsRead) || k.HasScope(cloud.ScopeDevicesWrite) {
		t.Fatalf("the new key: %v %v", k, err)
	}
	if exp := k.ExpiresAt.Sub(k.CreatedAt); exp != 7*24*time.Hour {
		t.Errorf("expires after %s, want 7 days", exp)
	}
	waitFor(t, "last use recorded", func() bool {
		for _, ki := range must(h.ps.OrgKeys(h.ctx, h.org.ID)) {
			if ki.ID == k.ID {
				return !ki.LastUsedAt.IsZero()
			}
		}
		return false
	})
	row := regexp.MustCompile(`(?s)<tr data-key-id="` + k.ID + `">.*?</tr>`).FindString(c.get("/panel/settings/api-keys").body)
	if !strings.Contains(row, `<code class="id">`+k.ID+`</code>`) {
		t.Errorf("the key id is not one unbroken id: %s", row)
	}
	if !strings.Contains(row, "admin@acme.example") || !regexp.MustCompile(`>(now|\d+ s ago)</time>`).MatchString(row) || !strings.Contains(row, ">Revoke</button>") {
		t.Errorf("key row lacks creator, last use or Revoke: %s", row)
	}
	confirm := c.post("/panel/settings/api-keys/"+k.ID+"/revoke", nil)
	if confirm.status != http.StatusOK || !strings.Contains(confirm.body, "Revoke key</button>") {
		t.Fatalf("revoke asks for confirmation: %d", confirm.status)
	}
	if _, err := auth.Authenticate(h.ctx, key); err != nil {
		t.Fatalf("revoked before the confirmation: %v", err)
	}
	if r := c.post("/panel/settings/api-keys/"+k.ID+"/revoke", url.Values{"confirm": {"yes"}}); r.status != http.StatusSeeOther {
		t.Fatalf("confirmed revoke: %d", r.status)
	}
	if _, err := auth.Authenticate(h.ctx, key); cloud.ErrorCode(err) != cloud.EREVOKED {
		t.Errorf("after revoke: %v", err)
	}
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	testwait.For(t, what, 5*time.Second, ok)
}

// TestChannelConfigErrorBesideField: serialcfg's error is shown beside the
// field it names and nothing is saved; a valid form is saved.
func TestChannelConfigErrorBesideField(t *testing.T) {
	stores.Run(t, testChannelConfigErrorBesideField)
}

func testChannelConfigErrorBesideField(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleMember)
	form := h.effectiveForms()["/panel/devices/{id}/channels/{ch}"]
	before := h.state()
	form.Set("baudRate", "19200")
	form.Set("slaveId", "400")
	r := c.post("/panel/devices/"+h.device.ID+"/channels/rs485-1", form)
	if r.status != http.StatusBadRequest {
		t.Fatalf("invalid slave id: %d", r.status)
	}
	if !regexp.MustCompile(`(?s)id="f-rs485-1-slaveId".*?aria-invalid="true".*?<p class="field-error" id="f-rs485-1-slaveId-error">must be between 1 and 247`).MatchString(r.body) {
		t.Errorf("no error beside the slave id field")
	}
	if h.state() != before {
		t.Error("an invalid config was saved")
	}
	form.Set("slaveId", "7")
	if r := c.post("/panel/devices/"+h.device.ID+"/channels/rs485-1", form); r.status != http.StatusSeeOther {
		t.Fatalf("valid config: %d %s", r.status, r.body)
	}
	ch := must(h.db.Serial().Channel(h.ctx, h.org.ID, h.device.ID, "rs485-1"))
	if ch.Config.RS485.BaudRate != 19200 || ch.Config.RS485.SlaveID != 7 {
		t.Errorf("saved %+v", ch.Config.RS485)
	}
	if r := c.post("/panel/devices/"+h.device.ID+"/serial", url.Values{"mode": {"both"}, "webhookUrl": {"http://insecure.example"}}); r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="webhookUrl-error"`) {
		t.Errorf("http webhook URL: %d", r.status)
	}
	if body := c.get("/panel/devices/" + h.gate.ID).body; !strings.Contains(body, "has no serial I/O port") {
		t.Error("the IG-100's page does not say it has no serial I/O")
	}
}

func TestAlertsBulk(t *testing.T) { stores.Run(t, testAlertsBulk) }

func testAlertsBulk(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleMember)
	page := c.get("/panel/alerts").body
	if !strings.Contains(page, ">Acknowledge selected</button>") || !strings.Contains(page, "Press line 1") {
		t.Fatal("alerts page lacks the bulk buttons or the device name")
	}
	r := c.post("/panel/alerts/acknowledge", url.Values{"id": {h.alerts[0].ID, h.alerts[1].ID}, "back": {"/panel/alerts?state=ACTIVE"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts?state=ACTIVE" {
		t.Fatalf("bulk acknowledge: %d %s", r.status, r.header.Get("Location"))
	}
	if !strings.Contains(c.get("/panel/alerts").body, "2 alerts acknowledged.") {
		t.Error("no notice after the bulk acknowledge")
	}
	acked := must(h.db.Alerts().ListAlerts(h.ctx, h.org.ID, cloud.AlertFilter{State: resource.AlertAcknowledged, Page: cloud.Page{Limit: 10}}))
	if len(acked.Data) != 2 {
		t.Errorf("%d acknowledged alerts, want 2", len(acked.Data))
	}
	if r := c.post("/panel/alerts/"+h.alerts[2].ID+"/resolve", nil); r.status != http.StatusSeeOther {
		t.Fatalf("resolve one: %d", r.status)
	}
	resolved := must(h.db.Alerts().ListAlerts(h.ctx, h.org.ID, cloud.AlertFilter{State: resource.AlertResolved, Page: cloud.Page{Limit: 10}}))
	if len(resolved.Data) != 1 || resolved.Data[0].ID != h.alerts[2].ID {
		t.Errorf("resolved alerts %+v, want %s", resolved.Data, h.alerts[2].ID)
	}
	viewer := h.signIn(cloud.RoleViewer)
	if strings.Contains(viewer.get("/panel/alerts").body, ">Acknowledge") {
		t.Error("a VIEWER is offered Acknowledge")
	}
}

func TestMembers(t *testing.T) { stores.Run(t, testMembers) }

func testMembers(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	r := c.post("/panel/settings/members", url.Values{"email": {"new.hire@acme.example"}, "role": {"MEMBER"}})
	pw := regexp.MustCompile(`id="new-password" class="secret" readonly value="([A-Za-z0-9]+)"`).FindStringSubmatch(r.body)
	if r.status != http.StatusOK || pw == nil {
		t.Fatalf("add member: %d", r.status)
	}
	if r := h.anon().post("/panel/login", url.Values{"email": {"new.hire@acme.example"}, "password": {pw[1]}}); r.status != http.StatusSeeOther {
		t.Errorf("the new member cannot sign in with the shown password: %d", r.status)
	}
	if r := c.post("/panel/settings/members", url.Values{"email": {"new.hire@acme.example"}, "role": {"VIEWER"}}); r.status != http.StatusBadRequest || !strings.Contains(r.body, "already exists") {
		t.Errorf("duplicate email: %d", r.status)
	}
	// The last OWNER can be neither demoted nor disabled: the page offers
	// neither on their row and says why; the server still refuses both.
	owner := h.users[cloud.RoleOwner]
	row := func(id string) string {
		return regexp.MustCompile(`(?s)<tr data-member-id="` + id + `">.*?</tr>`).FindString(c.get("/panel/settings/members").body)
	}
	sole := row(owner.ID)
	if sole == "" || strings.Contains(sole, "Change role") || strings.Contains(sole, ">Disable<") || !strings.Contains(sole, "The only active OWNER") {
		t.Errorf("the sole OWNER's row offers a change or does not say why: %s", sole)
	}
	if other := row(h.users[cloud.RoleAdmin].ID); !strings.Contains(other, "Change role") || !strings.Contains(other, ">Disable<") {
		t.Errorf("an ADMIN's row lacks Change role or Disable: %s", other)
	}
	c.post("/panel/settings/members/"+owner.ID+"/role", url.Values{"role": {"ADMIN"}})
	if !strings.Contains(c.get("/panel/settings/members").body, "last OWNER and cannot be demoted") {
		t.Error("no notice when demoting the last OWNER")
	}
	c.post("/panel/settings/members/"+owner.ID+"/disable", url.Values{"confirm": {"yes"}})
	if u := must(h.ps.UserByID(h.ctx, owner.ID)); u.Role != cloud.RoleOwner || u.Disabled() {
		t.Errorf("the last OWNER became %s, disabled %v", u.Role, u.Disabled())
	}
	admin := h.users[cloud.RoleAdmin]
	if r := c.post("/panel/settings/members/"+admin.ID+"/role", url.Values{"role": {"OWNER"}}); r.status != http.StatusSeeOther {
		t.Fatalf("promote: %d", r.status)
	}
	if two := row(owner.ID); !strings.Contains(two, "Change role") || !strings.Contains(two, ">Disable<") {
		t.Errorf("with two OWNERs, the first's row lacks Change role or Disable: %s", two)
	}
	if r := c.post("/panel/settings/members/"+owner.ID+"/role", url.Values{"role": {"VIEWER"}}); r.status != http.StatusSeeOther {
		t.Fatalf("step down with another OWNER: %d", r.status)
	}
	if r := c.get("/panel/settings/members"); r.status != http.StatusForbidden {
		t.Errorf("after stepping down to VIEWER, Members: %d", r.status)
	}
}

func TestFleetPage(t *testing.T) { stores.Run(t, testFleetPage) }

func testFleetPage(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	for i := 0; i < 60; i++ {
		must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: fmt.Sprintf("Pump %02d", i), SerialNumber: fmt.Sprintf("P-%02d", i), Model: "IG-100", Location: "Hall C"}))
	}
	storetest.Connect(t, h.s.Agent, h.agent(h.token), time.Now(), protocol.Hello{AgentVersion: "1.0.0"})
	c := h.signIn(cloud.RoleViewer)
	first := c.get("/panel/").body
	for _, s := range []string{"Devices 1–50 of 62", "<strong>62</strong> all", "<strong>1</strong> <span class=\"status status-online\">ONLINE</span>", `rel="next"`, `<label for="q">Search</label>`, `<label for="status">Status</label>`} {
		if !strings.Contains(first, s) {
			t.Errorf("fleet page lacks %q", s)
		}
	}
	if second := c.get("/panel/?page=2").body; !strings.Contains(second, "Devices 51–62 of 62") || !strings.Contains(second, `rel="prev"`) {
		t.Error("page 2 is wrong")
	}
	if body := c.get("/panel/?q=pump+0").body; !strings.Contains(body, "Devices 1–10 of 10") {
		t.Error("search for 'pump 0' did not find 10 devices")
	}
	if body := c.get("/panel/?status=ONLINE").body; !strings.Contains(body, "Devices 1–1 of 1") || !strings.Contains(body, "Press line 1") {
		t.Error("status filter ONLINE is wrong")
	}
	if body := c.get("/panel/?q=%25").body; !strings.Contains(body, "No devices match.") {
		t.Error("'%' is a wildcard in the search")
	}
}

func TestDevicePageCharts(t *testing.T) { stores.Run(t, testDevicePageCharts) }

func testDevicePageCharts(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	now := time.Now().UTC().Truncate(time.Minute)
	var samples []resource.MetricSample
	for i := 0; i < 2016; i++ { // a week at one per 5 minutes
		samples = append(samples, resource.MetricSample{CapturedAt: resource.T(now.Add(-time.Duration(i) * 5 * time.Minute)), CPUPct: 12.5, MemPct: 40, DiskUsedPct: 60, TempCPU: 51, LoadAvg1: 0.7})
	}
	storetest.Metrics(t, h.s.Agent, h.agent(h.token), samples...)
	c := h.signIn(cloud.RoleViewer)
	for rng, n := range map[string]int{"1h": 12, "24h": 288, "7d": 2016} {
		body := c.get("/panel/devices/" + h.device.ID + "?range=" + rng).body
		if !strings.Contains(body, fmt.Sprintf("%d samples in the last %s.", n, rng)) {
			t.Errorf("range %s: want %d samples: %s", rng, n, regexp.MustCompile(`\d+ samples in the last \w+`).FindString(body))
		}
	}
	body := c.get("/panel/devices/" + h.device.ID).body
	for _, s := range []string{`data-series="cpuPct"`, `data-series="memPct"`, `data-series="diskUsedPct"`, `data-series="tempCpu"`, `data-series="loadAvg1"`, `hx-trigger="live:device from:body"`} {
		if !strings.Contains(body, s) {
			t.Errorf("device page lacks %s", s)
		}
	}
	// The live table alone, as htmx asks for it; signed out it tells htmx
	// to go to sign-in.
	if frag := c.get("/panel/devices/" + h.device.ID + "/channels"); frag.status != http.StatusOK || strings.Contains(frag.body, "<html") || !strings.Contains(frag.body, "rs485-1") {
		t.Errorf("channels fragment: %d", frag.status)
	}
	anon := h.anon()
	anon.header.Set("HX-Request", "true")
	if r := anon.get("/panel/devices/" + h.device.ID + "/channels"); r.status != http.StatusUnauthorized || !strings.HasPrefix(r.header.Get("HX-Redirect"), "/panel/login") {
		t.Errorf("signed-out htmx request: %d %q", r.status, r.header.Get("HX-Redirect"))
	}
}
