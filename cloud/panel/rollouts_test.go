package panel_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// TestOperationsNav: "Rollouts" is in the header for OWNER and ADMIN only,
// and leads to Rollouts, Releases and Claims.
func TestOperationsNav(t *testing.T) { stores.Run(t, testOperationsNav) }

func testOperationsNav(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	for _, role := range cloud.Roles {
		c := h.signIn(role)
		body := c.get("/panel/").body
		has := strings.Contains(body, `<a href="/panel/rollouts">Rollouts</a>`)
		if want := role.Can(cloud.PermOperations); has != want {
			t.Errorf("%s: Rollouts in the header %v, want %v", role, has, want)
		}
		for _, p := range []string{"/panel/rollouts", "/panel/rollouts/new", "/panel/rollouts/" + h.rollouts[0].ID, "/panel/releases", "/panel/claims"} {
			r := c.get(p)
			if want := map[bool]int{true: 200, false: 403}[role.Can(cloud.PermOperations)]; r.status != want {
				t.Errorf("%s GET %s: %d, want %d", role, p, r.status, want)
			}
			if r.status == 200 && !strings.Contains(r.body, `<nav class="subnav" aria-label="Fleet operations">`) {
				t.Errorf("%s GET %s: no Rollouts, Releases, Claims row", role, p)
			}
		}
	}
}

// TestRolloutsPages: the list says each rollout's version, scope, state,
// wave and counts; the form lists the releases' versions; a rollout's page
// follows its devices as their agents report, with the buttons its state
// allows.
func TestRolloutsPages(t *testing.T) { stores.Run(t, testRolloutsPages) }

func testRolloutsPages(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleAdmin)
	list := c.get("/panel/rollouts").body
	for _, s := range []string{`<a href="/panel/rollouts/` + h.rollouts[1].ID + `"><strong>1.4.0</strong></a>`, "1 device: Press line 1",
		`<span class="rstate rstate-paused">paused</span>`, `<span class="rstate rstate-running">running</span>`, "1/1", "1: 1 pending", ">New rollout</a>"} {
		if !strings.Contains(list, s) {
			t.Errorf("the rollouts list lacks %q", s)
		}
	}
	form := c.get("/panel/rollouts/new").body
	for _, s := range []string{`<option value="1.4.0">1.4.0 (amd64, arm64)</option>`, `<option value="1.3.0">1.3.0 (amd64)</option>`,
		`value="1, 10, 100"`, `<label for="rollout-waves">Waves</label>`, `<label for="rollout-max-failures">Max failures</label>`,
		`<label for="rollout-health-for">Health window</label>`, `value="2m"`, ">Start rollout</button>"} {
		if !strings.Contains(form, s) {
			t.Errorf("the new rollout form lacks %q", s)
		}
	}

	// Two devices tagged line-3, the second of them running the agent
	// 1.3.0 on arm64.
	tagged := []resource.DeviceDetail{}
	var tokens []string
	for _, sn := range []string{"SN-31", "SN-32"} {
		d, tok := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Line 3 " + sn, SerialNumber: sn, Model: "IG-500"}))
		must(h.db.Devices().PatchDevice(h.ctx, h.org.ID, d.ID, cloud.DevicePatch{Tags: &[]string{"line-3"}}))
		tagged, tokens = append(tagged, d), append(tokens, tok)
	}
	for _, tok := range tokens {
		storetest.Connect(t, h.s.Agent, h.agent(tok), time.Now(), protocol.Hello{AgentVersion: "1.3.0", Arch: "arm64"})
	}
	r := c.post("/panel/rollouts", url.Values{"version": {"1.4.0"}, "scope": {"tags"}, "tags": {"line-3"}, "waves": {"50, 100"}, "maxFailures": {"0"}, "healthFor": {"1m"}})
	if r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/panel/rollouts/") {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	page := r.header.Get("Location")
	id := strings.TrimPrefix(page, "/panel/rollouts/")
	ro := must(h.db.Rollouts().Rollout(h.ctx, h.org.ID, id))
	if ro.Version != "1.4.0" || strings.Join(ro.Scope.Tags, ",") != "line-3" || len(ro.Waves) != 2 || ro.Waves[0] != 50 || ro.HealthFor != "1m0s" && ro.HealthFor != "1m" || ro.Total != 2 {
		t.Fatalf("stored rollout %+v", ro.Rollout)
	}
	body := c.get(page).body
	for _, s := range []string{"Rollout of 1.4.0 to 2 devices created", "devices tagged line-3", "50 %, 100 %", ">Pause</button>", ">Cancel rollout</button>",
		`hx-select="#waves-live"`, `hx-select="#devices-live"`, "Wave 1", "Wave 2", "2 pending"} {
		if !strings.Contains(body, s) {
			t.Errorf("the new rollout's page lacks %q", s)
		}
	}
	if strings.Contains(body, ">Resume</button>") {
		t.Error("a running rollout offers Resume")
	}

	// The engine starts wave 1 (the first device); its agent reports.
	if _, err := h.s.Commands.AdvanceRollouts(h.ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	// Devices are in waves by id: the first of wave 1 is the lower id.
	w1, w2 := 0, 1
	if tagged[1].ID < tagged[0].ID {
		w1, w2 = 1, 0
	}
	first := h.agent(tokens[w1])
	cmds := must(h.s.Commands.PendingCommands(h.ctx, first))
	if len(cmds) != 1 || cmds[0].Update == nil {
		t.Fatalf("wave 1's device got %+v", cmds)
	}
	if err := h.s.Commands.CommandStatus(h.ctx, first, protocol.CommandStatus{ID: cmds[0].ID, State: protocol.CommandDownloading}, time.Now()); err != nil {
		t.Fatal(err)
	}
	body = c.get(page).body
	for _, s := range []string{`<span class="rstate rstate-downloading">downloading</span>`, "1 pending · 1 downloading", `<td data-label="From version">1.3.0</td>`, `aria-current="step"`} {
		if !strings.Contains(body, s) {
			t.Errorf("while wave 1 downloads the page lacks %q", s)
		}
	}
	if dev := c.get("/panel/devices/" + tagged[w1].ID).body; !strings.Contains(dev, `<span class="status status-updating">UPDATING</span>`) {
		t.Error("the updating device's page does not show UPDATING")
	}
	evil := `<img src=x onerror=alert(1)>`
	if err := h.s.Commands.CommandStatus(h.ctx, first, protocol.CommandStatus{ID: cmds[0].ID, State: protocol.CommandRolledBack, Error: evil}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.s.Commands.AdvanceRollouts(h.ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	body = c.get(page).body
	for _, s := range []string{`<span class="rstate rstate-stopped">stopped</span>`, `<span class="rstate rstate-rolled_back">rolled back</span>`, "&lt;img src=x", "Stopped: "} {
		if !strings.Contains(body, s) {
			t.Errorf("after the rollback the page lacks %q", s)
		}
	}
	if strings.Contains(body, "<img src=x") || strings.Contains(body, ">Pause</button>") || strings.Contains(body, `hx-trigger="every 5s"`) {
		t.Error("a stopped rollout's page renders the agent's error as markup, offers Pause or keeps refreshing")
	}
	// The filters: wave 2's device is pending.
	body = c.get(page + "?wave=2&state=pending").body
	if !strings.Contains(body, `data-device-id="`+tagged[w2].ID+`"`) || strings.Contains(body, `data-device-id="`+tagged[w1].ID+`"`) {
		t.Error("?wave=2&state=pending does not list exactly wave 2's pending device")
	}
}

// TestRolloutForm: every kind of refused field comes back beside its field
// with what was typed, and nothing is stored.
func TestRolloutForm(t *testing.T) { stores.Run(t, testRolloutForm) }

func testRolloutForm(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	good := url.Values{"version": {"1.4.0"}, "scope": {"devices"}, "deviceIds": {h.device.ID}, "waves": {"10, 100"}, "maxFailures": {"0"}, "healthFor": {"2m"}}
	for _, tc := range []struct {
		field, value, id, typed string
	}{
		{"version", "9.9.9", "rollout-version", ""},
		{"waves", "50, 10", "rollout-waves", `value="50, 10"`},
		{"waves", "10, 50", "rollout-waves", `value="10, 50"`},
		{"waves", "ten, 100", "rollout-waves", `value="ten, 100"`},
		{"maxFailures", "-1", "rollout-max-failures", `value="-1"`},
		{"healthFor", "5s", "rollout-health-for", `value="5s"`},
		{"healthFor", "soon", "rollout-health-for", `value="soon"`},
		{"deviceIds", h.foreign.ID, "rollout-device-ids", `value="` + h.foreign.ID + `"`},
		{"deviceIds", "", "rollout-device-ids", ""},
	} {
		before := h.state()
		f := url.Values{}
		for k, v := range good {
			f[k] = v
		}
		f.Set(tc.field, tc.value)
		r := c.post("/panel/rollouts", f)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="`+tc.id+`-error"`) || !strings.Contains(r.body, tc.typed) {
			t.Errorf("%s=%q: %d, or the error is not beside the field with what was typed: %s", tc.field, tc.value, r.status, firstError(r.body))
		}
		if h.state() != before {
			t.Errorf("%s=%q: a refused rollout changed the organization", tc.field, tc.value)
		}
	}
	// No version stored: the form says where releases come from.
	h2 := newHarness(t, open, func(c *panel.Config) { c.Releases = nil })
	if body := h2.signIn(cloud.RoleOwner).get("/panel/rollouts/new").body; !strings.Contains(body, "No release is stored yet") {
		t.Error("the form without releases does not say how to add one")
	}
}

var firstErrorRE = regexp.MustCompile(`<p class="field-error"[^>]*>[^<]*</p>|<p class="banner error"[^>]*>[^<]*</p>`)

// firstError is the first error a page shows, for failure messages.
func firstError(body string) string { return firstErrorRE.FindString(body) }

// TestRolloutActions: Pause, Resume and Cancel (after confirmation) change
// the rollout's state; an action its state does not allow is shown on its
// page (409) and changes nothing.
func TestRolloutActions(t *testing.T) { stores.Run(t, testRolloutActions) }

func testRolloutActions(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleAdmin)
	running, paused, other := "/panel/rollouts/"+h.rollouts[0].ID, "/panel/rollouts/"+h.rollouts[1].ID, "/panel/rollouts/"+h.rollouts[2].ID
	if body := c.get(paused).body; !strings.Contains(body, ">Resume</button>") || strings.Contains(body, ">Pause</button>") || !strings.Contains(body, ">Cancel rollout</button>") {
		t.Error("a paused rollout's buttons are not Resume and Cancel rollout")
	}
	before := h.state()
	if r := c.post(running+"/resume", nil); r.status != http.StatusConflict || !strings.Contains(r.body, `role="alert"`) || !strings.Contains(r.body, "Rollout of 1.4.0") {
		t.Errorf("resume a running rollout: %d, want 409 on its page", r.status)
	}
	if h.state() != before {
		t.Error("a refused resume changed the organization")
	}
	state := func(path string) string {
		return must(h.db.Rollouts().Rollout(h.ctx, h.org.ID, path[strings.LastIndexByte(path, '/')+1:])).State
	}
	if r := c.post(running+"/pause", nil); r.status != http.StatusSeeOther || r.header.Get("Location") != running || state(running) != resource.RolloutPaused {
		t.Errorf("pause: %d, state %s", r.status, state(running))
	}
	if body := c.get(running).body; !strings.Contains(body, "Rollout paused") {
		t.Error("pause: no notice")
	}
	if r := c.post(paused+"/resume", nil); r.status != http.StatusSeeOther || state(paused) != resource.RolloutRunning {
		t.Errorf("resume: %d, state %s", r.status, state(paused))
	}
	r := c.post(other+"/cancel", nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "Cancel the rollout of 1.4.0?") || !strings.Contains(r.body, "Its 1 pending device are skipped") || state(other) != resource.RolloutRunning {
		t.Errorf("cancel without confirmation: %d, state %s", r.status, state(other))
	}
	if r := c.post(other+"/cancel", url.Values{"confirm": {"yes"}}); r.status != http.StatusSeeOther || state(other) != resource.RolloutCanceled {
		t.Errorf("cancel: %d, state %s", r.status, state(other))
	}
	body := c.get(other).body
	if !strings.Contains(body, `<span class="rstate rstate-skipped">skipped</span>`) || strings.Contains(body, ">Cancel rollout</button>") {
		t.Error("a canceled rollout's device is not skipped, or it offers Cancel")
	}
	// Another organization's rollout is not found.
	foreign := newHarness(t, open)
	if r := c.get("/panel/rollouts/" + foreign.rollouts[0].ID); r.status != http.StatusNotFound {
		t.Errorf("another organization's rollout: %d", r.status)
	}
}

// TestReleasesPage lists the releases and how to add one.
func TestReleasesPage(t *testing.T) { stores.Run(t, testReleasesPage) }

func testReleasesPage(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	body := h.signIn(cloud.RoleOwner).get("/panel/releases").body
	rel := h.releases[0]
	for _, s := range []string{`data-release-id="` + rel.ID + `"`, "<strong>1.4.0</strong>", ">arm64</td>", ">2.0 KiB</td>", `<code title="` + rel.SHA256 + `">` + rel.SHA256[:12] + `…</code>`,
		"fleet-relay release add --db relay.db --org " + h.org.ID, "--arch amd64|arm64|armv7", "make build AGENT_VERSION="} {
		if !strings.Contains(body, s) {
			t.Errorf("the releases page lacks %q", s)
		}
	}
	if n := strings.Count(body, "data-release-id="); n != 3 {
		t.Errorf("%d releases listed, want 3", n)
	}
}

// TestDeviceReboot: the device page's Reboot asks first, queues the command
// for a connected device and says why a disconnected one cannot be
// rebooted; a VIEWER has no button.
func TestDeviceReboot(t *testing.T) { stores.Run(t, testDeviceReboot) }

func testDeviceReboot(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	page := "/panel/devices/" + h.device.ID
	c := h.signIn(cloud.RoleMember)
	if body := c.get(page).body; !strings.Contains(body, `action="`+page+`/reboot"`) || !strings.Contains(body, "<dt>Agent version</dt><dd>—</dd>") {
		t.Error("a MEMBER's device page has no Reboot, or the agent version of a device never connected is not —")
	}
	if body := h.signIn(cloud.RoleViewer).get(page).body; strings.Contains(body, "/reboot") {
		t.Error("a VIEWER sees Reboot")
	}
	before := h.state()
	if r := c.post(page+"/reboot", nil); r.status != http.StatusOK || !strings.Contains(r.body, "Reboot “Press line 1”?") || !strings.Contains(r.body, ">Reboot now</button>") {
		t.Errorf("reboot without confirmation: %d", r.status)
	}
	r := c.post(page+"/reboot", url.Values{"confirm": {"yes"}})
	if r.status != http.StatusConflict || !strings.Contains(r.body, `id="reboot-error"`) || !strings.Contains(r.body, "<h1>Press line 1") {
		t.Errorf("reboot of a device never connected: %d, want 409 on its page: %s", r.status, firstError(r.body))
	}
	if h.state() != before {
		t.Error("a refused reboot changed the organization")
	}
	h.online()
	if body := c.get(page).body; !strings.Contains(body, "<dt>Agent version</dt><dd>1.3.0</dd>") {
		t.Error("the device page does not show the agent's version")
	}
	if r := c.post(page+"/reboot", url.Values{"confirm": {"yes"}}); r.status != http.StatusSeeOther || r.header.Get("Location") != page+"#details" {
		t.Fatalf("reboot: %d %s", r.status, firstError(r.body))
	}
	cmds := must(h.s.Commands.PendingCommands(h.ctx, h.agent(h.token)))
	if len(cmds) != 1 || cmds[0].Kind != protocol.CommandReboot {
		t.Fatalf("after Reboot the device's commands are %+v", cmds)
	}
	if err := h.s.Commands.CommandStatus(h.ctx, h.agent(h.token), protocol.CommandStatus{ID: cmds[0].ID, State: protocol.CommandRebooting}, time.Now()); err != nil {
		t.Fatal(err)
	}
	body := c.get(page).body
	if !strings.Contains(body, "Reboot sent to “Press line 1”") || !strings.Contains(body, `<span class="status status-rebooting">REBOOTING</span>`) {
		t.Error("after the agent took the reboot the page does not say REBOOTING")
	}
	if fleet := c.get("/panel/").body; !strings.Contains(fleet, `<span class="status status-rebooting">REBOOTING</span>`) {
		t.Error("the fleet page does not show REBOOTING")
	}
}

// TestSerialSwitch: the serial I/O switch turns the device's serial I/O off
// (after confirmation) and on again.
func TestSerialSwitch(t *testing.T) { stores.Run(t, testSerialSwitch) }

func testSerialSwitch(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	page := "/panel/devices/" + h.device.ID
	c := h.signIn(cloud.RoleMember)
	enabled := func() bool { return must(h.db.Serial().Serial(h.ctx, h.org.ID, h.device.ID)).Enabled }
	if !enabled() {
		t.Fatal("serial I/O starts off")
	}
	if body := c.get(page).body; !strings.Contains(body, "Serial I/O is <strong>on</strong>") || !strings.Contains(body, ">Turn serial I/O off</button>") {
		t.Error("the device page has no switch saying serial I/O is on")
	}
	if r := c.post(page+"/serial/enabled", url.Values{"enabled": {"false"}}); r.status != http.StatusOK || !strings.Contains(r.body, `name="enabled" value="false"`) || !enabled() {
		t.Errorf("off without confirmation: %d, enabled %v", r.status, enabled())
	}
	if r := c.post(page+"/serial/enabled", url.Values{"enabled": {"false"}, "confirm": {"yes"}}); r.status != http.StatusSeeOther || enabled() {
		t.Errorf("off: %d, enabled %v", r.status, enabled())
	}
	if body := c.get(page).body; !strings.Contains(body, "Serial I/O is <strong>off</strong>") || !strings.Contains(body, ">Turn serial I/O on</button>") {
		t.Error("the device page does not say serial I/O is off")
	}
	if r := c.post(page+"/serial/enabled", url.Values{"enabled": {"true"}}); r.status != http.StatusSeeOther || !enabled() {
		t.Errorf("on: %d, enabled %v", r.status, enabled())
	}
	if r := c.post(page+"/serial/enabled", url.Values{"enabled": {"maybe"}}); r.status != http.StatusBadRequest {
		t.Errorf("enabled=maybe: %d", r.status)
	}
	if body := h.signIn(cloud.RoleViewer).get(page).body; strings.Contains(body, "Turn serial I/O") || !strings.Contains(body, "Serial I/O is <strong>on</strong>") {
		t.Error("a VIEWER sees the switch's button, or not its state")
	}
}
