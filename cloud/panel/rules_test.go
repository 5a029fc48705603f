package panel_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/shared/resource"
)

// ruleForm is the rule form as a browser posts it with "Save rule": a
// threshold on testPoint over 90 for 2 min, clearing under 85, to channel.
func ruleForm(name, channel string) url.Values {
	return url.Values{"name": {name}, "severity": {"CRITICAL"}, "enabled": {"true"}, "scope": {"all"},
		"kind": {"threshold"}, "source": {"point"}, "pointId": {testPoint}, "op": {">"}, "value": {"90"}, "clear": {"85"}, "for": {"2m"},
		"after": {"5m"}, "statusFor": {"1m"}, "status": {"ERROR"}, "notify": {channel}, "repeatEvery": {"30m"}, "action": {"save"}}
}

// rule returns org's live rule named name, or nil.
func (h *harness) rule(name string) *resource.AlertRule {
	h.t.Helper()
	for _, r := range must(h.db.Rules().ListRules(h.ctx, h.org.ID, cloud.Page{Limit: 1000})).Data {
		if r.Name == name {
			return &r
		}
	}
	return nil
}

// fieldError is the error shown beside the field of id (its
// <p class="field-error" id="<id>-error">), or "".
func fieldError(body, id string) string {
	m := regexp.MustCompile(`<p class="field-error" id="` + regexp.QuoteMeta(id) + `-error">([^<]*)</p>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// inputValue is the value attribute of the input of id, or "(none)".
func inputValue(body, id string) string {
	m := regexp.MustCompile(`<input id="` + regexp.QuoteMeta(id) + `"[^>]* value="([^"]*)"`).FindStringSubmatch(body)
	if m == nil {
		return "(none)"
	}
	return m[1]
}

// TestRulePagesByRole: every new page renders for every role that may
// read it; only ADMIN and OWNER get the editing controls.
func TestRulePagesByRole(t *testing.T) { stores.Run(t, testRulePagesByRole) }

func testRulePagesByRole(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	for _, role := range cloud.Roles {
		c := h.signIn(role)
		edit := role == cloud.RoleOwner || role == cloud.RoleAdmin
		list := c.get("/panel/alerts/rules")
		if list.status != http.StatusOK {
			t.Fatalf("%s rules: %d", role, list.status)
		}
		for _, want := range []string{"high_cpu", "metric.cpuPct &gt;= 90 for 10m, clears below 80", "device_offline", "offline for 30s",
			"event alert.vpn_down, resolved by event vpn.up", "status ERROR for 1m", "Boiler hot", "point." + testPoint + " &gt; 80 for 1m, clears below 75",
			"Ops mail", "all devices", `aria-current="page">Rules</a>`} {
			if !strings.Contains(list.body, want) {
				t.Errorf("%s: the rules list lacks %q", role, want)
			}
		}
		if got := strings.Contains(list.body, `action="/panel/alerts/rules/`+h.rules[2].ID+`/disable"`); got != edit {
			t.Errorf("%s: a Disable button: %v", role, got)
		}
		if got := strings.Contains(list.body, `href="/panel/alerts/rules/new"`); got != edit {
			t.Errorf("%s: a New rule link: %v", role, got)
		}
		form := c.get("/panel/alerts/rules/" + h.rules[0].ID)
		if form.status != http.StatusOK || inputValue(form.body, "rule-point") != testPoint || inputValue(form.body, "rule-clear") != "75" {
			t.Errorf("%s: the rule's form: %d point %q clear %q", role, form.status, inputValue(form.body, "rule-point"), inputValue(form.body, "rule-clear"))
		}
		if got := strings.Contains(form.body, ">Save rule</button>"); got != edit {
			t.Errorf("%s: Save rule shown: %v", role, got)
		}
		if got := strings.Contains(form.body, `<fieldset class="plain" disabled>`); got == edit {
			t.Errorf("%s: read-only form: %v", role, got)
		}
		if r := c.get("/panel/alerts/rules/new"); (r.status == http.StatusOK) != edit {
			t.Errorf("%s: new rule form: %d", role, r.status)
		}
		sil := c.get("/panel/alerts/silences")
		if sil.status != http.StatusOK || !strings.Contains(sil.body, "gate maintenance") || !strings.Contains(sil.body, "1 device: Gatehouse") {
			t.Errorf("%s: silences: %d", role, sil.status)
		}
		member := role != cloud.RoleViewer
		if got := strings.Contains(sil.body, ">Create silence</button>"); got != member {
			t.Errorf("%s: New silence form shown: %v", role, got)
		}
		if got := strings.Contains(sil.body, ">End</button>"); got != member {
			t.Errorf("%s: End shown: %v", role, got)
		}
		n := c.get("/panel/settings/notifications")
		if n.status != http.StatusOK || !strings.Contains(n.body, "Ops mail") || !strings.Contains(n.body, "ops@acme.example") {
			t.Errorf("%s: notifications: %d", role, n.status)
		}
		if got := strings.Contains(n.body, "/services/T0/B0/secret"); got != edit {
			t.Errorf("%s: the chat webhook's secret path shown: %v", role, got)
		}
		if got := strings.Contains(n.body, ">Add channel</button>"); got != edit {
			t.Errorf("%s: Add channel shown: %v", role, got)
		}
		if !strings.Contains(n.body, `href="/panel/settings/notifications" aria-current="page">Notifications</a>`) {
			t.Errorf("%s: no current Notifications link in the navigation", role)
		}
		dev := c.get("/panel/devices/" + h.device.ID)
		if got := strings.Contains(dev.body, `href="/panel/alerts/silences?device=`+h.device.ID+`">Silence this device</a>`); got != member {
			t.Errorf("%s: the device page's Silence this device: %v", role, got)
		}
	}
}

// TestRuleCreateEditDelete: a rule made, changed, switched and deleted
// through the forms is what the store holds.
func TestRuleCreateEditDelete(t *testing.T) { stores.Run(t, testRuleCreateEditDelete) }

func testRuleCreateEditDelete(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleAdmin)
	r := c.post("/panel/alerts/rules", ruleForm("Boiler overheats", h.channels[0].ID))
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts/rules" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	got := h.rule("Boiler overheats")
	if got == nil {
		t.Fatal("the rule was not stored")
	}
	cond := got.Condition
	if got.Severity != resource.SeverityCritical || !got.Enabled || cond.Kind != "threshold" || cond.Source != "point."+testPoint || cond.Op != ">" ||
		*cond.Value != 90 || *cond.Clear != 85 || cond.For != "2m" || got.RepeatEvery != "30m" || len(got.Notify) != 1 || got.Notify[0] != h.channels[0].ID {
		t.Errorf("stored rule: %+v %+v", got, cond)
	}
	if list := c.get("/panel/alerts/rules"); !strings.Contains(list.body, "Rule “Boiler overheats” created.") {
		t.Error("no notice after creating")
	}

	// Edit: an offline rule on a tag now, no channel.
	form := url.Values{"name": {"Boiler gone"}, "severity": {"WARNING"}, "scope": {"tags"}, "tags": {"boiler, hall-a"}, "kind": {"offline"},
		"after": {"10m"}, "source": {"metric.cpuPct"}, "value": {"1"}, "repeatEvery": {"0s"}, "action": {"save"}}
	if r := c.post("/panel/alerts/rules/"+got.ID+"/save", form); r.status != http.StatusSeeOther {
		t.Fatalf("save: %d %s", r.status, r.body)
	}
	edited := must(h.db.Rules().Rule(h.ctx, h.org.ID, got.ID))
	if edited.Name != "Boiler gone" || edited.Enabled || edited.Condition.Kind != "offline" || edited.Condition.After != "10m" ||
		strings.Join(edited.Scope.Tags, ",") != "boiler,hall-a" || len(edited.Notify) != 0 || edited.Severity != resource.SeverityWarning {
		t.Errorf("edited rule: %+v", edited)
	}

	if r := c.post("/panel/alerts/rules/"+got.ID+"/enable", nil); r.status != http.StatusSeeOther || !must(h.db.Rules().Rule(h.ctx, h.org.ID, got.ID)).Enabled {
		t.Errorf("enable: %d", r.status)
	}
	if r := c.post("/panel/alerts/rules/"+got.ID+"/disable", nil); r.status != http.StatusSeeOther || must(h.db.Rules().Rule(h.ctx, h.org.ID, got.ID)).Enabled {
		t.Errorf("disable: %d", r.status)
	}

	ask := c.post("/panel/alerts/rules/"+got.ID+"/delete", nil)
	if ask.status != http.StatusOK || !strings.Contains(ask.body, "Delete the rule “Boiler gone”?") || !strings.Contains(ask.body, ">Delete rule</button>") {
		t.Fatalf("delete asks: %d %s", ask.status, ask.body)
	}
	if h.rule("Boiler gone") == nil {
		t.Fatal("deleted before the confirmation")
	}
	if r := c.post("/panel/alerts/rules/"+got.ID+"/delete", url.Values{"confirm": {"yes"}}); r.status != http.StatusSeeOther {
		t.Fatalf("delete: %d", r.status)
	}
	if h.rule("Boiler gone") != nil {
		t.Error("the rule is still listed after delete")
	}
	if r := c.get("/panel/alerts/rules/" + got.ID); r.status != http.StatusNotFound {
		t.Errorf("a deleted rule's page: %d", r.status)
	}
	// Another organization's rule is 404, as a missing one.
	foreign := must(h.db.Rules().ListRules(h.ctx, h.other.ID, cloud.Page{Limit: 1})).Data[0]
	if r := c.get("/panel/alerts/rules/" + foreign.ID); r.status != http.StatusNotFound {
		t.Errorf("another organization's rule: %d", r.status)
	}
	if r := c.post("/panel/alerts/rules/"+foreign.ID+"/disable", nil); r.status != http.StatusNotFound || !must(h.db.Rules().Rule(h.ctx, h.other.ID, foreign.ID)).Enabled {
		t.Errorf("disable another organization's rule: %d", r.status)
	}
}

// TestRuleValidation: a bad field's error is shown beside it with what was
// typed, and nothing is saved.
func TestRuleValidation(t *testing.T) { stores.Run(t, testRuleValidation) }

func testRuleValidation(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	cases := []struct {
		name  string
		edit  func(url.Values)
		field string // the id of the input the error is beside
		says  string
	}{
		{"clear on the wrong side", func(v url.Values) { v.Set("clear", "95") }, "rule-clear", "condition.clear: 95 is on the wrong side"},
		{"not a number", func(v url.Values) { v.Set("value", "ninety") }, "rule-value", `condition.value: &#34;ninety&#34; is not a number`},
		{"a point no device has", func(v url.Values) { v.Set("pointId", "rs485-1.nothing") }, "rule-point", "condition.source: no device"},
		{"a name taken", func(v url.Values) { v.Set("name", "high_cpu") }, "rule-name", "name: the organization already has a rule named"},
		{"no name", func(v url.Values) { v.Set("name", "") }, "rule-name", "name is required"},
		{"a bad duration", func(v url.Values) { v.Set("for", "soon") }, "rule-for", "condition.for: "},
		{"a bad repeat", func(v url.Values) { v.Set("repeatEvery", "1m") }, "rule-repeat", "repeatEvery: "},
		{"a bad tag", func(v url.Values) { v.Set("scope", "tags"); v.Set("tags", "Hall A!") }, "rule-tags", "scope.tags[0]: "},
		{"an unknown device", func(v url.Values) { v.Set("scope", "devices"); v.Set("deviceIds", "nope") }, "rule-device-ids", "scope.deviceIds[0]: "},
		{"offline too short", func(v url.Values) { v.Set("kind", "offline"); v.Set("after", "5s") }, "rule-after", "condition.after: "},
	}
	for _, tc := range cases {
		before := h.state()
		form := ruleForm("Valid name", h.channels[0].ID)
		tc.edit(form)
		r := c.post("/panel/alerts/rules", form)
		if r.status != http.StatusBadRequest {
			t.Errorf("%s: status %d", tc.name, r.status)
		}
		if msg := fieldError(r.body, tc.field); !strings.Contains(msg, tc.says) {
			t.Errorf("%s: beside %s: %q, want %q", tc.name, tc.field, msg, tc.says)
		}
		if !strings.Contains(r.body, `id="`+tc.field+`"`) || !strings.Contains(r.body, `aria-describedby="`+tc.field+`-error`) {
			t.Errorf("%s: the field %s is not marked invalid", tc.name, tc.field)
		}
		if got := inputValue(r.body, "rule-name"); got != form.Get("name") {
			t.Errorf("%s: the name typed came back as %q", tc.name, got)
		}
		if after := h.state(); after != before {
			t.Errorf("%s: something was saved", tc.name)
		}
	}
	// Saving an existing rule with an error changes nothing either.
	before := h.state()
	form := ruleForm("Boiler hot", h.channels[0].ID)
	form.Set("clear", "99")
	if r := c.post("/panel/alerts/rules/"+h.rules[0].ID+"/save", form); r.status != http.StatusBadRequest || !strings.Contains(fieldError(r.body, "rule-clear"), "condition.clear") {
		t.Errorf("save with an error: %d", r.status)
	}
	if h.state() != before {
		t.Error("a refused save changed the rule")
	}
}

// TestRulePreview: "Preview" shows what the rule would have done over the
// last 7 days of the stored history, keeps the form as typed and saves
// nothing.
func TestRulePreview(t *testing.T) { stores.Run(t, testRulePreview) }

func testRulePreview(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	agent := h.agent(h.token)
	now := time.Now().UTC().Truncate(time.Minute)
	at := func(d time.Duration, cpu float64) resource.MetricSample {
		return resource.MetricSample{CapturedAt: resource.T(now.Add(-d)), CPUPct: cpu}
	}
	// Two runs over 70 on the device: 60 min open, then 30 min open; one
	// older than 7 days that the preview does not count.
	storetest.Metrics(t, h.s.Agent, agent,
		at(8*24*time.Hour, 99), at(8*24*time.Hour-time.Minute, 10),
		at(5*time.Hour, 10), at(4*time.Hour, 80), at(3*time.Hour+30*time.Minute, 85), at(3*time.Hour, 20),
		at(2*time.Hour, 75), at(90*time.Minute, 30), at(time.Hour, 10))
	c := h.signIn(cloud.RoleOwner)
	form := url.Values{"name": {"Busy CPU"}, "severity": {"WARNING"}, "scope": {"all"}, "kind": {"threshold"}, "source": {"metric.cpuPct"},
		"op": {">"}, "value": {"70"}, "clear": {"50"}, "for": {"0s"}, "repeatEvery": {"0s"}, "enabled": {"true"}, "action": {"preview"}}
	before := h.state()
	r := c.post("/panel/alerts/rules", form)
	if r.status != http.StatusOK {
		t.Fatalf("preview: %d %s", r.status, r.body)
	}
	if !strings.Contains(r.body, `would have opened <strong data-testid="preview-opened">2</strong> alerts on 1 device.`) {
		t.Errorf("preview summary: %s", section(r.body, `id="preview"`))
	}
	row := regexp.MustCompile(`(?s)<tr data-device-id="` + h.device.ID + `">.*?</tr>`).FindString(r.body)
	if !strings.Contains(row, "Press line 1") || !strings.Contains(row, `data-label="Opened">2<`) || !strings.Contains(row, `data-label="Time open">1 h 30 min<`) {
		t.Errorf("preview row: %q", row)
	}
	for id, want := range map[string]string{"rule-name": "Busy CPU", "rule-value": "70", "rule-clear": "50", "rule-for": "0s"} {
		if got := inputValue(r.body, id); got != want {
			t.Errorf("after preview %s is %q, want %q", id, got, want)
		}
	}
	if h.state() != before || h.rule("Busy CPU") != nil {
		t.Error("the preview saved something")
	}
	// A preview with an error shows it beside its field and no numbers.
	form.Set("clear", "80")
	r = c.post("/panel/alerts/rules", form)
	if r.status != http.StatusBadRequest || !strings.Contains(fieldError(r.body, "rule-clear"), "condition.clear") || strings.Contains(r.body, "would have opened") {
		t.Errorf("preview with an error: %d %s", r.status, fieldError(r.body, "rule-clear"))
	}
	// The preview of an existing rule's form keeps it unchanged.
	form.Set("clear", "50")
	form.Set("name", "Boiler hot")
	if r := c.post("/panel/alerts/rules/"+h.rules[0].ID+"/save", form); r.status != http.StatusOK || !strings.Contains(r.body, "would have opened") {
		t.Errorf("preview on the edit form: %d", r.status)
	}
	if h.state() != before {
		t.Error("the edit form's preview saved something")
	}
}

// section is the text of body from the tag holding attr, for messages.
func section(body, attr string) string {
	i := strings.Index(body, attr)
	if i < 0 {
		return "(missing)"
	}
	return body[i:min(len(body), i+600)]
}

// TestSilencesForm: a MEMBER creates a silence of a device for 4 h and ends
// it; an error is shown beside its field and nothing is saved.
func TestSilencesForm(t *testing.T) { stores.Run(t, testSilencesForm) }

func testSilencesForm(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleMember)
	pre := c.get("/panel/alerts/silences?device=" + h.device.ID)
	if inputValue(pre.body, "silence-device-ids") != h.device.ID || !strings.Contains(pre.body, `id="silence-scope-devices" name="scope" value="devices" checked`) {
		t.Errorf("the form is not prefilled with the device: %q", inputValue(pre.body, "silence-device-ids"))
	}
	start := time.Now()
	r := c.post("/panel/alerts/silences", url.Values{"scope": {"devices"}, "deviceIds": {h.device.ID}, "duration": {"4h"}, "comment": {"<b>firmware</b> update"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var made *resource.Silence
	for _, s := range must(h.db.Rules().ListSilences(h.ctx, h.org.ID, cloud.SilenceFilter{Page: cloud.Page{Limit: 100}})).Data {
		if s.Comment == "<b>firmware</b> update" {
			made = &s
		}
	}
	if made == nil || len(made.Scope.DeviceIDs) != 1 || made.Scope.DeviceIDs[0] != h.device.ID || made.CreatedBy != "user:member@acme.example" {
		t.Fatalf("stored silence: %+v", made)
	}
	if d := made.To.Sub(made.From.Time); d != 4*time.Hour || made.From.Before(start.Add(-time.Minute)) {
		t.Errorf("silence from %v to %v", made.From, made.To)
	}
	list := c.get("/panel/alerts/silences")
	if !strings.Contains(list.body, "&lt;b&gt;firmware&lt;/b&gt; update") || !strings.Contains(list.body, `data-silence-id="`+made.ID+`"`) {
		t.Error("the new silence is not listed, as text")
	}

	// A To in the past, an explicit From and To, a bad tag: beside their
	// fields, nothing saved.
	past := time.Now().UTC().Add(-time.Hour).Format("2006-01-02T15:04")
	for _, tc := range []struct {
		form  url.Values
		field string
		says  string
	}{
		{url.Values{"scope": {"all"}, "to": {past}, "duration": {""}}, "silence-to", "to: must be"},
		{url.Values{"scope": {"all"}, "to": {"tomorrow"}}, "silence-to", "to: not a date and time"},
		{url.Values{"scope": {"all"}, "duration": {""}}, "silence-to", "to is required"},
		{url.Values{"scope": {"tags"}, "tags": {"Bad Tag"}, "duration": {"1h"}}, "silence-tags", "scope.tags[0]"},
	} {
		before := h.state()
		r := c.post("/panel/alerts/silences", tc.form)
		if r.status != http.StatusBadRequest || !strings.Contains(fieldError(r.body, tc.field), tc.says) {
			t.Errorf("%v: %d, beside %s %q", tc.form, r.status, tc.field, fieldError(r.body, tc.field))
		}
		if h.state() != before {
			t.Errorf("%v: saved something", tc.form)
		}
	}
	from, to := time.Now().UTC().Add(time.Hour).Truncate(time.Minute), time.Now().UTC().Add(3*time.Hour).Truncate(time.Minute)
	if r := c.post("/panel/alerts/silences", url.Values{"scope": {"tags"}, "tags": {"hall-a"}, "from": {from.Format("2006-01-02T15:04")}, "to": {to.Format("2006-01-02T15:04")}, "duration": {"1h"}}); r.status != http.StatusSeeOther {
		t.Errorf("a silence from and to: %d %s", r.status, r.body)
	}

	if r := c.post("/panel/alerts/silences/"+made.ID+"/end", nil); r.status != http.StatusSeeOther {
		t.Fatalf("end: %d", r.status)
	}
	if list := c.get("/panel/alerts/silences"); strings.Contains(list.body, `data-silence-id="`+made.ID+`"`) || !strings.Contains(list.body, "Silence ended") {
		t.Error("an ended silence is still listed")
	}
}

// TestNotificationsForm: an ADMIN adds a channel (and to every rule),
// errors beside their field, removes one after confirmation.
func TestNotificationsForm(t *testing.T) { stores.Run(t, testNotificationsForm) }

func testNotificationsForm(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleAdmin)
	for _, tc := range []struct {
		form  url.Values
		field string
		says  string
	}{
		{url.Values{"name": {"Mail"}, "kind": {"email"}, "target": {"not an address"}, "minSeverity": {"INFO"}}, "channel-target", "target: "},
		{url.Values{"name": {"Chat"}, "kind": {"slack"}, "target": {"http://hooks.example.com/x"}, "minSeverity": {"INFO"}}, "channel-target", "target"},
		{url.Values{"name": {""}, "kind": {"email"}, "target": {"a@acme.example"}, "minSeverity": {"INFO"}}, "channel-name", "name is required"},
		{url.Values{"name": {"Pager"}, "kind": {"pager"}, "target": {"a@acme.example"}, "minSeverity": {"INFO"}}, "channel-kind", "kind: "},
	} {
		before := h.state()
		r := c.post("/panel/settings/notifications", tc.form)
		if r.status != http.StatusBadRequest || !strings.Contains(fieldError(r.body, tc.field), tc.says) {
			t.Errorf("%v: %d, beside %s %q", tc.form, r.status, tc.field, fieldError(r.body, tc.field))
		}
		if got := inputValue(r.body, "channel-name"); got != tc.form.Get("name") {
			t.Errorf("%v: the name came back as %q", tc.form, got)
		}
		if h.state() != before {
			t.Errorf("%v: saved something", tc.form)
		}
	}
	r := c.post("/panel/settings/notifications", url.Values{"name": {"On call"}, "kind": {"email"}, "target": {"a@acme.example, b@acme.example"},
		"minSeverity": {"ERROR"}, "allRules": {"true"}})
	if r.status != http.StatusSeeOther {
		t.Fatalf("add: %d %s", r.status, r.body)
	}
	var added resource.NotificationChannel
	for _, ch := range must(h.db.Rules().ListChannels(h.ctx, h.org.ID)) {
		if ch.Name == "On call" {
			added = ch
		}
	}
	if added.Kind != "email" || added.MinSeverity != resource.SeverityError || added.Target != "a@acme.example, b@acme.example" {
		t.Fatalf("stored channel: %+v", added)
	}
	for _, rule := range must(h.db.Rules().ListRules(h.ctx, h.org.ID, cloud.Page{Limit: 1000})).Data {
		if !strings.Contains(strings.Join(rule.Notify, ","), added.ID) {
			t.Errorf("“Send alerts of every rule”: %s does not notify it", rule.Name)
		}
	}
	if page := c.get("/panel/settings/notifications"); !strings.Contains(page.body, `data-channel-id="`+added.ID+`"`) || !strings.Contains(page.body, "Every rule now sends its alerts to it.") {
		t.Error("the new channel is not listed")
	}

	ask := c.post("/panel/settings/notifications/"+added.ID+"/remove", nil)
	if ask.status != http.StatusOK || !strings.Contains(ask.body, ">Remove channel</button>") {
		t.Fatalf("remove asks: %d", ask.status)
	}
	if r := c.post("/panel/settings/notifications/"+added.ID+"/remove", url.Values{"confirm": {"yes"}}); r.status != http.StatusSeeOther {
		t.Fatalf("remove: %d", r.status)
	}
	for _, ch := range must(h.db.Rules().ListChannels(h.ctx, h.org.ID)) {
		if ch.ID == added.ID {
			t.Error("the channel is still there")
		}
	}
	// Another organization's channel is 404.
	foreign := must(h.db.Rules().CreateChannel(h.ctx, cloud.NewChannel{OrgID: h.other.ID, Name: "Theirs", Kind: "email", Target: "x@other.example"}))
	for _, action := range []string{"test", "remove"} {
		if r := c.post("/panel/settings/notifications/"+foreign.ID+"/"+action, url.Values{"confirm": {"yes"}}); r.status != http.StatusNotFound {
			t.Errorf("%s another organization's channel: %d", action, r.status)
		}
	}
}

// TestSendTest: "Send test" queues a test message: the page says so and
// the delivery is in the webhook delivery log.
func TestSendTest(t *testing.T) { stores.Run(t, testSendTest) }

func testSendTest(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	r := c.post("/panel/settings/notifications/"+h.channels[0].ID+"/test", nil)
	if r.status != http.StatusSeeOther {
		t.Fatalf("send test: %d %s", r.status, r.body)
	}
	page := c.get("/panel/settings/notifications")
	m := regexp.MustCompile(`Test message to “Ops mail” queued as delivery (\S+);`).FindStringSubmatch(page.body)
	if m == nil {
		t.Fatalf("no queued notice: %s", section(page.body, `class="banner"`))
	}
	log := c.get("/panel/settings/webhooks")
	if !strings.Contains(log.body, m[1]) || !strings.Contains(log.body, "notify.test") {
		t.Errorf("delivery %s is not in the delivery log", m[1])
	}
}

// TestAlertPage: an alert's page (where notifications link) works for any
// alert of the user's organization, with the actions of the role; another
// organization's alert is 404.
func TestAlertPage(t *testing.T) { stores.Run(t, testAlertPage) }

func testAlertPage(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	a := h.alerts[0]
	for _, role := range cloud.Roles {
		c := h.signIn(role)
		r := c.get("/panel/alerts/" + a.ID)
		if r.status != http.StatusOK {
			t.Fatalf("%s: %d", role, r.status)
		}
		for _, want := range []string{"<h1>high_cpu over its threshold</h1>", `href="/panel/devices/` + h.device.ID + `">Press line 1</a>`, ">ACTIVE<", a.ID} {
			if !strings.Contains(r.body, want) {
				t.Errorf("%s: the alert's page lacks %q", role, want)
			}
		}
		act := role != cloud.RoleViewer
		if got := strings.Contains(r.body, `formaction="/panel/alerts/`+a.ID+`/acknowledge">Acknowledge</button>`); got != act {
			t.Errorf("%s: Acknowledge shown: %v", role, got)
		}
		if r := c.get("/panel/alerts"); !strings.Contains(r.body, `<a href="/panel/alerts/`+a.ID+`">`) {
			t.Errorf("%s: the alerts list does not link the alert's page", role)
		}
	}
	c := h.signIn(cloud.RoleMember)
	r := c.post("/panel/alerts/"+a.ID+"/acknowledge", url.Values{"back": {"/panel/alerts/" + a.ID}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts/"+a.ID {
		t.Errorf("acknowledge from the alert's page: %d to %s", r.status, r.header.Get("Location"))
	}
	if page := c.get("/panel/alerts/" + a.ID); !strings.Contains(page.body, ">ACKNOWLEDGED<") {
		t.Error("the alert's page does not show it acknowledged")
	}
	foreignDev, _ := must2(h.db.AddDevice(h.ctx, cloud.NewDevice{OrgID: h.other.ID, Name: "Theirs", SerialNumber: "SN-F", Model: "IG-500"}))
	foreign := storetest.Alert(t, h.s.Engine, h.db.Alerts(), storetest.NewAlert{OrgID: h.other.ID, DeviceID: foreignDev.ID, Rule: "high_cpu", Message: "theirs"})
	for _, id := range []string{foreign.ID, "no-such-alert"} {
		if r := c.get("/panel/alerts/" + id); r.status != http.StatusNotFound || strings.Contains(r.body, "theirs") {
			t.Errorf("alert %s: %d", id, r.status)
		}
	}
}

// TestRuleTextIsText: names people give rules and channels, and the
// payload of an alert, are rendered as text.
func TestRuleTextIsText(t *testing.T) { stores.Run(t, testRuleTextIsText) }

func testRuleTextIsText(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	must(h.db.Rules().CreateRule(h.ctx, h.org.ID, testRule(`<img src=x onerror=alert(1)>`)))
	must(h.db.Rules().CreateChannel(h.ctx, cloud.NewChannel{OrgID: h.org.ID, Name: `<svg onload=alert(2)>`, Kind: "email", Target: "x@acme.example"}))
	c := h.signIn(cloud.RoleOwner)
	for _, path := range []string{"/panel/alerts/rules", "/panel/settings/notifications", "/panel/alerts/rules/" + h.rules[0].ID} {
		body := c.get(path).body
		for _, raw := range []string{"<img src=x", "<svg onload"} {
			if strings.Contains(body, raw) {
				t.Errorf("%s renders %q as markup", path, raw)
			}
		}
	}
	if body := c.get("/panel/alerts/rules").body; !strings.Contains(body, "&lt;img src=x onerror=alert(1)&gt;") {
		t.Error("the rule's name is not shown as text")
	}
}
