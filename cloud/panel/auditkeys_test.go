package panel_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// auditOf is every record of the organization f selects, newest first.
func (h *harness) auditOf(orgID string, f cloud.AuditFilter) []cloud.AuditRecord {
	h.t.Helper()
	f.Limit = cloud.MaxAuditPage
	p, err := h.db.Audit().ListAudit(h.ctx, orgID, f)
	if err != nil {
		h.t.Fatal(err)
	}
	return p.Records
}

// wantOneRecord checks that the organization holds one record of action
// about target, by the panel user u from loopback within [from, now].
func (h *harness) wantOneRecord(orgID, action string, u cloud.User, target cloud.AuditTarget, from time.Time) map[string]any {
	h.t.Helper()
	recs := h.auditOf(orgID, cloud.AuditFilter{Action: action, TargetKind: target.Kind, TargetID: target.ID})
	if len(recs) != 1 {
		h.t.Fatalf("records of %s on %+v: %+v, want one", action, target, recs)
	}
	r := recs[0]
	if r.Actor.Kind != cloud.ActorUser || r.Actor.ID != u.ID || r.Actor.Name != u.Email || r.IP != "127.0.0.1" {
		h.t.Errorf("%s: actor %+v ip %q, want the user %s from 127.0.0.1", action, r.Actor, r.IP, u.Email)
	}
	if r.At.Before(from.Truncate(time.Millisecond)) || r.At.After(time.Now()) {
		h.t.Errorf("%s: at %v, not within the request (from %v)", action, r.At, from)
	}
	var d map[string]any
	if err := json.Unmarshal(r.Details, &d); err != nil {
		h.t.Errorf("%s: details %s: %v", action, r.Details, err)
	}
	return d
}

// TestAuditKeyCreatedInPanel: an ADMIN creates a key in Settings → API
// keys; the audit log holds key.created by that user from the browser's
// address, with the key's name and scopes and never the key shown.
func TestAuditKeyCreatedInPanel(t *testing.T) { stores.Run(t, testAuditKeyCreatedInPanel) }

func testAuditKeyCreatedInPanel(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	admin := h.users[cloud.RoleAdmin]
	c := h.signIn(cloud.RoleAdmin)
	from := time.Now()
	r := c.post("/panel/settings/api-keys", url.Values{"name": {"Line dashboard"}, "scope": {cloud.ScopeDevicesRead}, "expires": {"30"}})
	if r.status != http.StatusOK {
		t.Fatalf("create key: %d %s", r.status, r.body)
	}
	var made cloud.KeyInfo
	for _, k := range must(h.ps.OrgKeys(h.ctx, h.org.ID)) {
		if k.Name == "Line dashboard" {
			made = k
		}
	}
	if made.ID == "" || !strings.Contains(r.body, "svc_sk_"+made.ID+"_") {
		t.Fatalf("the key was not made and shown: %+v", made)
	}
	d := h.wantOneRecord(h.org.ID, cloud.ActionKeyCreated, admin, cloud.AuditTarget{Kind: cloud.TargetKey, ID: made.ID}, from)
	if d["name"] != "Line dashboard" || len(d["scopes"].([]any)) != 1 || d["expiresAt"] == nil {
		t.Errorf("details %v", d)
	}
	rec := h.auditOf(h.org.ID, cloud.AuditFilter{Action: cloud.ActionKeyCreated})[0]
	if strings.Contains(string(rec.Details), "svc_sk_") || strings.Contains(string(rec.Details), string(made.Hash)) {
		t.Errorf("details %s hold the key", rec.Details)
	}
	if recs := h.auditOf(h.other.ID, cloud.AuditFilter{}); len(recs) != 0 {
		t.Errorf("the other organization sees %+v", recs)
	}
}

// TestAuditSignInAndOut: a sign-in is session.signed_in (via password), a
// wrong password for a known account session.sign_in_failed of that
// account, a wrong password for an unknown email nothing, a sign-out
// session.signed_out, each by the member from the browser's address.
func TestAuditSignInAndOut(t *testing.T) { stores.Run(t, testAuditSignInAndOut) }

func testAuditSignInAndOut(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	member := h.users[cloud.RoleMember]
	target := cloud.AuditTarget{Kind: cloud.TargetMember, ID: member.ID}
	c := h.anon()
	from := time.Now()
	const wrong = "not the password at all"
	if r := c.post("/panel/login", url.Values{"email": {member.Email}, "password": {wrong}}); r.status != http.StatusUnauthorized {
		t.Fatalf("wrong password: %d", r.status)
	}
	if r := c.post("/panel/login", url.Values{"email": {"nobody@acme.example"}, "password": {wrong}}); r.status != http.StatusUnauthorized {
		t.Fatalf("unknown email: %d", r.status)
	}
	d := h.wantOneRecord(h.org.ID, cloud.ActionSignInFailed, member, target, from)
	if d["reason"] != "password" {
		t.Errorf("failure details %v", d)
	}
	for _, org := range []string{h.org.ID, h.other.ID} {
		for _, rec := range h.auditOf(org, cloud.AuditFilter{}) {
			if strings.Contains(string(rec.Details), wrong) || strings.Contains(string(rec.Details), "nobody") {
				t.Errorf("a record tells of the password or the unknown email: %+v", rec)
			}
		}
	}
	if r := c.post("/panel/login", url.Values{"email": {member.Email}, "password": {testPassword}}); r.status != http.StatusSeeOther {
		t.Fatalf("sign in: %d", r.status)
	}
	if d := h.wantOneRecord(h.org.ID, cloud.ActionSignedIn, member, target, from); d["via"] != "password" {
		t.Errorf("sign-in details %v", d)
	}
	if r := c.post("/panel/logout", nil); r.status != http.StatusSeeOther {
		t.Fatalf("sign out: %d", r.status)
	}
	h.wantOneRecord(h.org.ID, cloud.ActionSignedOut, member, target, from)
	if n := len(h.auditOf(h.org.ID, cloud.AuditFilter{Action: "session."})); n != 3 {
		t.Errorf("session records: %d, want 3", n)
	}
}
