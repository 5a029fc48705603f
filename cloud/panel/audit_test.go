package panel_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// record writes an audit record of org by a, as a door would.
func (h *harness) record(org string, a cloud.Actor, action string, target cloud.AuditTarget, details any) {
	h.t.Helper()
	if err := h.db.Audit().RecordAudit(cloud.WithActor(context.Background(), a), org, action, target, details); err != nil {
		h.t.Fatal(err)
	}
}

var (
	auditAna = cloud.Actor{Kind: cloud.ActorUser, ID: "usr-ana", Name: "ana@acme.example", IP: "192.0.2.7"}
	auditCI  = cloud.Actor{Kind: cloud.ActorAPIKey, ID: "key-ci", Name: "=HYPERLINK(\"http://evil.example\")", IP: "2001:db8::1"}
	auditCLI = cloud.Actor{Kind: cloud.ActorCLI, ID: "root", Name: "root@relay-1"}
)

// auditRows are the data-audit-id rows of an audit page, in order, with the
// action of each.
func auditRows(body string) []string {
	var out []string
	for _, m := range regexp.MustCompile(`(?s)<tr data-audit-id="[^"]+">.*?<code>([^<]+)</code>`).FindAllStringSubmatch(body, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestAuditPage: OWNER and ADMIN read the organization's audit log newest
// first with the time to the millisecond, actor, action, target, address
// and details as text; filters select; "Older records" pages on; the CSV
// holds every selected record with its header, guarded against formulas;
// another organization's records never appear; MEMBER and VIEWER get 403.
func TestAuditPage(t *testing.T) { stores.Run(t, testAuditPage) }

func testAuditPage(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	dev := cloud.AuditTarget{Kind: cloud.TargetDevice, ID: h.device.ID}
	key := cloud.AuditTarget{Kind: cloud.TargetKey, ID: h.key.ID}
	// Each in its own millisecond, oldest first.
	tick := func() { time.Sleep(2 * time.Millisecond) }
	h.record(h.org.ID, auditCLI, cloud.ActionKeyCreated, key, map[string]any{"name": "ERP"})
	tick()
	h.record(h.org.ID, auditAna, cloud.ActionDeviceUpdated, dev, map[string]any{"name": "<script>alert(1)</script>"})
	tick()
	h.record(h.org.ID, auditCI, cloud.ActionKeyRevoked, key, map[string]any{"note": "-2+3"})
	tick()
	h.record(h.other.ID, auditAna, cloud.ActionRuleDeleted, cloud.AuditTarget{Kind: cloud.TargetRule, ID: "rule-of-other"}, nil)
	tick()
	for i := range 55 {
		h.record(h.org.ID, auditAna, cloud.ActionChannelConfigured, cloud.AuditTarget{Kind: cloud.TargetChannel, ID: h.device.ID + "/rs485-1"},
			map[string]any{"n": i})
	}

	for _, role := range []cloud.Role{cloud.RoleMember, cloud.RoleViewer} {
		c := h.signIn(role)
		for _, p := range []string{"/panel/settings/audit", "/panel/settings/audit.csv"} {
			if r := c.get(p); r.status != http.StatusForbidden || strings.Contains(r.body, "ana@acme.example") {
				t.Errorf("%s GET %s: %d, want 403 without records", role, p, r.status)
			}
		}
		if r := c.get("/panel/"); strings.Contains(r.body, `href="/panel/settings/audit"`) {
			t.Errorf("%s sees the Audit log link", role)
		}
	}
	for _, role := range []cloud.Role{cloud.RoleOwner, cloud.RoleAdmin} {
		c := h.signIn(role)
		if r := c.get("/panel/"); !strings.Contains(r.body, `<a href="/panel/settings/audit"`) {
			t.Errorf("%s has no Audit log link", role)
		}
		r := c.get("/panel/settings/audit")
		if r.status != http.StatusOK {
			t.Fatalf("%s: audit page %d", role, r.status)
		}
		rows := auditRows(r.body)
		if len(rows) != cloud.DefaultAuditPage || rows[0] != cloud.ActionChannelConfigured {
			t.Fatalf("%s: first page %d rows %q", role, len(rows), rows)
		}
	}

	c := h.signIn(cloud.RoleAdmin)
	first := c.get("/panel/settings/audit")
	older := regexp.MustCompile(`<a href="([^"]+)" rel="next">Older records</a>`).FindStringSubmatch(first.body)
	if older == nil {
		t.Fatal("no Older records link on a full page")
	}
	second := c.get(strings.ReplaceAll(older[1], "&amp;", "&"))
	rows := auditRows(second.body)
	if want := []string{cloud.ActionChannelConfigured, cloud.ActionChannelConfigured, cloud.ActionChannelConfigured, cloud.ActionChannelConfigured,
		cloud.ActionChannelConfigured, cloud.ActionKeyRevoked, cloud.ActionDeviceUpdated, cloud.ActionKeyCreated}; strings.Join(rows, " ") != strings.Join(want, " ") {
		t.Errorf("second page %q, want %q", rows, want)
	}
	if strings.Contains(second.body, "Older records") || !strings.Contains(second.body, "Newest records") {
		t.Error("the last page links Older records, or not Newest records")
	}
	for _, body := range []string{first.body, second.body} {
		if strings.Contains(body, "rule-of-other") || strings.Contains(body, "<code>"+cloud.ActionRuleDeleted+"</code>") {
			t.Error("another organization's record is shown")
		}
	}
	// User text is text; the time to the millisecond with the full ISO time.
	if strings.Contains(second.body, "<script>alert") || !strings.Contains(second.body, "&lt;script&gt;alert(1)&lt;/script&gt;") {
		t.Error("details are not rendered as text")
	}
	if !regexp.MustCompile(`<time datetime="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z" title="[^"]+Z" data-local>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} UTC</time>`).MatchString(second.body) {
		t.Error("no time to the millisecond with its ISO form")
	}
	for _, want := range []string{"ana@acme.example", "root@relay-1", "192.0.2.7", "2001:db8::1", h.key.ID} {
		if !strings.Contains(second.body, want) {
			t.Errorf("the page does not show %q", want)
		}
	}

	// Filters.
	for _, tc := range []struct {
		query string
		want  int
	}{
		{"action=key.", 2},
		{"action=" + cloud.ActionKeyRevoked, 1},
		{"actor=cli", 1},
		{"actor=api_key", 1},
		{"actor=user&action=device.", 1},
		{"target=" + h.key.ID, 2},
		{"since=24h&action=key.", 2},
		{"from=" + time.Now().UTC().Add(48*time.Hour).Format(time.DateOnly) + "&action=key.", 0},
		{"to=" + time.Now().UTC().Add(-48*time.Hour).Format(time.DateOnly), 0},
		{"to=" + time.Now().UTC().Format(time.DateOnly) + "&action=key.", 2},
	} {
		r := c.get("/panel/settings/audit?" + tc.query)
		if got := len(auditRows(r.body)); r.status != 200 || got != tc.want {
			t.Errorf("?%s: %d, %d rows, want %d", tc.query, r.status, got, tc.want)
		}
	}
	for _, q := range []string{"since=1y", "actor=robot", "action=key", "action=nothing.", "from=yesterday", "before=garbage", "target=" + strings.Repeat("x", 201)} {
		r := c.get("/panel/settings/audit?" + q)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `role="alert"`) || len(auditRows(r.body)) != 0 {
			t.Errorf("?%s: %d, want 400 saying why", q, r.status)
		}
	}
	// The selected filters stay selected.
	r := c.get("/panel/settings/audit?action=key.&actor=cli&since=7d")
	for _, want := range []string{`<option value="key." selected>`, `<option value="cli" selected>`, `<option value="7d" selected>`, `href="/panel/settings/audit.csv?action=key.&amp;actor=cli&amp;since=7d"`} {
		if !strings.Contains(r.body, want) {
			t.Errorf("filtered page lacks %s", want)
		}
	}

	// CSV: the header, every record the filters select (more than a page
	// of the screen), formulas guarded, another organization's never.
	resp := c.get("/panel/settings/audit.csv")
	if resp.status != 200 || !strings.HasPrefix(resp.header.Get("Content-Type"), "text/csv") ||
		!regexp.MustCompile(`^attachment; filename="audit-log-\d{4}-\d\d-\d\d\.csv"$`).MatchString(resp.header.Get("Content-Disposition")) {
		t.Fatalf("CSV: %d %v", resp.status, resp.header)
	}
	recs, err := csv.NewReader(strings.NewReader(resp.body)).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(recs[0], ",") != "id,at,actor_kind,actor_id,actor_name,action,target_kind,target_id,ip,details" || len(recs) != 1+58 {
		t.Fatalf("CSV: header %q and %d rows, want 58", recs[0], len(recs)-1)
	}
	var revoked []string
	for _, rec := range recs[1:] {
		if rec[5] == cloud.ActionRuleDeleted {
			t.Error("the CSV holds another organization's record")
		}
		if rec[5] == cloud.ActionKeyRevoked {
			revoked = rec
		}
		if !regexp.MustCompile(`^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$`).MatchString(rec[1]) {
			t.Errorf("CSV time %q", rec[1])
		}
	}
	if revoked == nil || revoked[2] != "api_key" || revoked[3] != "key-ci" || revoked[4] != `'=HYPERLINK("http://evil.example")` ||
		revoked[7] != h.key.ID || revoked[8] != "2001:db8::1" || revoked[9] != `{"note":"-2+3"}` {
		t.Errorf("CSV row of key.revoked: %q", revoked)
	}
	filtered := c.get("/panel/settings/audit.csv?action=key.&actor=cli")
	if recs, _ := csv.NewReader(strings.NewReader(filtered.body)).ReadAll(); len(recs) != 2 || recs[1][5] != cloud.ActionKeyCreated {
		t.Errorf("filtered CSV: %q", recs)
	}
	if r := c.get("/panel/settings/audit.csv?actor=robot"); r.status != http.StatusBadRequest {
		t.Errorf("CSV with a bad filter: %d", r.status)
	}
	other := h.signInAs("owner@other.example")
	if r := other.get("/panel/settings/audit"); strings.Join(auditRows(r.body), " ") != cloud.ActionRuleDeleted || strings.Contains(r.body, h.key.ID) {
		t.Errorf("the other organization's OWNER sees %q", auditRows(r.body))
	}
	if r := other.get("/panel/settings/audit.csv"); strings.Count(r.body, "\n") != 2 || strings.Contains(r.body, h.key.ID) {
		t.Errorf("the other organization's CSV: %q", r.body)
	}
}

// signInAs returns a client signed in as the user of email.
func (h *harness) signInAs(email string) *client {
	h.t.Helper()
	c := h.anon()
	if r := c.post("/panel/login", url.Values{"email": {email}, "password": {testPassword}}); r.status != http.StatusSeeOther {
		h.t.Fatalf("sign in as %s: %d", email, r.status)
	}
	return c
}

// TestAuditLogReadOnly: no route of the panel writes or deletes the audit
// log (no POST, PUT, PATCH or DELETE on a path naming it), and an OWNER's
// POST, PUT, PATCH or DELETE to the audit page or its CSV is 405 or 404
// with the log and the organization unchanged.
func TestAuditLogReadOnly(t *testing.T) { stores.Run(t, testAuditLogReadOnly) }

func testAuditLogReadOnly(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	reads := 0
	for _, rt := range h.srv.Routes() {
		if !strings.Contains(strings.ToLower(rt.Pattern), "audit") {
			continue
		}
		if rt.Method != http.MethodGet {
			t.Errorf("the panel routes %s %s: a write of the audit log", rt.Method, rt.Pattern)
		}
		reads++
	}
	if reads != 2 {
		t.Errorf("%d audit routes, want the page and its CSV", reads)
	}
	h.record(h.org.ID, auditAna, cloud.ActionKeyCreated, cloud.AuditTarget{Kind: cloud.TargetKey, ID: h.key.ID}, nil)
	log := func() string {
		return fmt.Sprint(must(h.db.Audit().ListAudit(h.ctx, h.org.ID, cloud.AuditFilter{Limit: cloud.MaxAuditPage})).Records)
	}
	c := h.signIn(cloud.RoleOwner)
	beforeLog, beforeState := log(), h.state()
	for _, path := range []string{"/panel/settings/audit", "/panel/settings/audit.csv", "/panel/settings/audit/delete", "/panel/settings/audit/" + h.key.ID} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
			req, _ := http.NewRequest(method, c.base+path, strings.NewReader(url.Values{"id": {h.key.ID}, "before": {"9999999999999"}}.Encode()))
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
			if r := c.do(req); r.status != http.StatusMethodNotAllowed && r.status != http.StatusNotFound {
				t.Errorf("%s %s: %d, want 405 or 404", method, path, r.status)
			}
		}
	}
	if log() != beforeLog || h.state() != beforeState {
		t.Error("a write to the audit routes changed the log or the organization")
	}
	if !strings.Contains(beforeLog, cloud.ActionKeyCreated) {
		t.Errorf("the log lost its record: %s", beforeLog)
	}
}
