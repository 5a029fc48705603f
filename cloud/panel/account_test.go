package panel_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/storetest"
)

// Accounts (issue 30): an email may hold an account in several
// organizations; sign-in lands in the one whose password fits, or asks;
// Add member tells an OWNER nothing of other organizations; a member's
// temporary password is replaced at first sign-in; everyone changes their
// own password on the Account page.

// userWith adds a user of org with email, role and password pw.
func (h *harness) userWith(org, email string, r cloud.Role, pw string) cloud.User {
	h.t.Helper()
	hash := must(fastHasher.Hash(h.ctx, pw))
	return must(h.ps.CreateUser(h.ctx, cloud.NewUser{OrgID: org, Email: email, Role: r, PasswordHash: hash}))
}

// roleShown is the role the header shows for the signed-in user.
func roleShown(body string) string {
	m := regexp.MustCompile(`<span class="role">([A-Z]+)</span>`).FindStringSubmatch(body)
	if m == nil {
		return ""
	}
	return m[1]
}

// TestSignInAcrossOrganizations: ada@x.example is OWNER of Acme with one
// password and VIEWER of Other with another: each password signs in to
// its organization. With the same password in two organizations the user
// chooses among those two only. Every sign-in makes the same number of
// argon2id derivations, whatever the email's accounts.
func TestSignInAcrossOrganizations(t *testing.T) { stores.Run(t, testSignInAcrossOrganizations) }

func testSignInAcrossOrganizations(t *testing.T, open storetest.Opener) {
	hasher := password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1}, 4)
	h := newHarness(t, open, func(c *panel.Config) { c.Hasher = hasher })
	third := must(h.db.CreateOrg(h.ctx, "Third Secret Org"))
	h.userWith(h.org.ID, "ada@x.example", cloud.RoleOwner, "acme password 1")
	h.userWith(h.other.ID, "ada@x.example", cloud.RoleViewer, "other password 2")
	login := func(c *client, email, pw string) response {
		t.Helper()
		before := hasher.Derived()
		r := c.post("/panel/login", url.Values{"email": {email}, "password": {pw}, "next": {"/panel/alerts"}})
		if n := hasher.Derived() - before; n != cloud.MaxAccountsPerEmail {
			t.Errorf("sign-in of %s derived %d keys, want %d whatever the accounts", email, n, cloud.MaxAccountsPerEmail)
		}
		return r
	}
	for pw, role := range map[string]string{"acme password 1": "OWNER", "other password 2": "VIEWER"} {
		c := h.anon()
		if r := login(c, "Ada@X.example", pw); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts" {
			t.Fatalf("sign in with %q: %d %s", pw, r.status, r.header.Get("Location"))
		}
		if got := roleShown(c.get("/panel/alerts").body); got != role {
			t.Errorf("signed in with %q as %s, want the account whose password it is (%s)", pw, got, role)
		}
	}
	for _, email := range []string{"ada@x.example", "nobody@x.example", "not an address"} {
		if r := login(h.anon(), email, "wrong password 3"); r.status != http.StatusUnauthorized || !strings.Contains(r.body, "Wrong email or password.") {
			t.Errorf("%s with a wrong password: %d", email, r.status)
		}
	}
	login(h.anon(), "owner@acme.example", testPassword)

	// The same password in Other and Third: choose between those two.
	h.userWith(third.ID, "ada@x.example", cloud.RoleMember, "other password 2")
	c := h.anon()
	r := login(c, "ada@x.example", "other password 2")
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/login/organization" {
		t.Fatalf("the same password in two organizations: %d %s", r.status, r.header.Get("Location"))
	}
	page := c.get("/panel/login/organization")
	if page.status != http.StatusOK || !strings.Contains(page.body, "<h1>Choose organization</h1>") ||
		!strings.Contains(page.body, ">Other</button>") || !strings.Contains(page.body, ">Third Secret Org</button>") || strings.Contains(page.body, "Acme") {
		t.Fatalf("choice page (%d) must name Other and Third Secret Org only:\n%s", page.status, page.body)
	}
	if r := c.get("/panel/alerts"); r.status != http.StatusSeeOther || !strings.HasPrefix(r.header.Get("Location"), "/panel/login") {
		t.Errorf("before choosing, a page: %d (not signed in yet)", r.status)
	}
	acmeAda := must(h.ps.UserByOrgEmail(h.ctx, h.org.ID, "ada@x.example"))
	if r := c.post("/panel/login/organization", url.Values{"account": {acmeAda.ID}}); r.status != http.StatusBadRequest {
		t.Errorf("choosing an account the password did not open: %d", r.status)
	}
	thirdAda := must(h.ps.UserByOrgEmail(h.ctx, third.ID, "ada@x.example"))
	r = c.post("/panel/login/organization", url.Values{"account": {thirdAda.ID}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts" {
		t.Fatalf("choose Third: %d %s", r.status, r.header.Get("Location"))
	}
	if got := roleShown(c.get("/panel/alerts").body); got != "MEMBER" {
		t.Errorf("after choosing Third: signed in as %s, want MEMBER", got)
	}
	if r := c.post("/panel/login/organization", url.Values{"account": {thirdAda.ID}}); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/login?notice=ended" {
		t.Errorf("choosing again after signing in: %d %s (the choice is spent)", r.status, r.header.Get("Location"))
	}
	if r := h.anon().get("/panel/login/organization"); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/login" {
		t.Errorf("the choice page without a sign-in: %d", r.status)
	}

	// A disabled account is no choice: the password signs in to the other.
	must(h.ps.DisableUser(h.ctx, third.ID, thirdAda.ID))
	c = h.anon()
	if r := login(c, "ada@x.example", "other password 2"); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts" {
		t.Fatalf("with Third's disabled: %d %s", r.status, r.header.Get("Location"))
	}
	if got := roleShown(c.get("/panel/alerts").body); got != "VIEWER" {
		t.Errorf("with Third's disabled: signed in as %s, want Other's VIEWER", got)
	}
}

// TestAddMemberOfAnotherOrganizationsEmail: an OWNER adds an email that
// another organization holds: it succeeds as any new email does, and the
// answer names nothing of the other organization; only an email of their
// own organization is refused.
func TestAddMemberOfAnotherOrganizationsEmail(t *testing.T) {
	stores.Run(t, testAddMemberOfAnotherOrganizationsEmail)
}

func testAddMemberOfAnotherOrganizationsEmail(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	theirs := h.userWith(h.other.ID, "sam@shared.example", cloud.RoleOwner, "sam's own password")
	c := h.signIn(cloud.RoleOwner)
	fresh := c.post("/panel/settings/members", url.Values{"email": {"nobody.yet@shared.example"}, "role": {"VIEWER"}})
	taken := c.post("/panel/settings/members", url.Values{"email": {"SAM@shared.example"}, "role": {"VIEWER"}})
	for name, r := range map[string]response{"a new email": fresh, "another organization's email": taken} {
		if r.status != http.StatusOK || !strings.Contains(r.body, "added as VIEWER") || !strings.Contains(r.body, `id="new-password"`) {
			t.Errorf("%s: %d", name, r.status)
		}
		for _, leak := range []string{"exists", "already", "Other", h.other.ID, theirs.ID} {
			if strings.Contains(r.body, leak) {
				t.Errorf("%s: the answer says %q", name, leak)
			}
		}
	}
	mine := must(h.ps.UserByOrgEmail(h.ctx, h.org.ID, "sam@shared.example"))
	if mine.ID == theirs.ID || !mine.MustChangePassword || mine.Role != cloud.RoleViewer {
		t.Errorf("added %+v", mine)
	}
	if u := must(h.ps.UserByID(h.ctx, theirs.ID)); u.PasswordHash != theirs.PasswordHash || u.Role != cloud.RoleOwner || u.MustChangePassword {
		t.Errorf("the other organization's account changed: %+v", u)
	}
	// Sam still signs in to their own organization with their password.
	s := h.anon()
	if r := s.post("/panel/login", url.Values{"email": {"sam@shared.example"}, "password": {"sam's own password"}}); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/" {
		t.Fatalf("Sam signs in: %d %s", r.status, r.header.Get("Location"))
	}
	if got := roleShown(s.get("/panel/").body); got != "OWNER" {
		t.Errorf("Sam signed in as %s, want their own organization's OWNER", got)
	}
	if r := c.post("/panel/settings/members", url.Values{"email": {"Sam@Shared.example"}, "role": {"ADMIN"}}); r.status != http.StatusBadRequest ||
		!strings.Contains(r.body, "already exists in this organization") {
		t.Errorf("the same email twice in one organization: %d", r.status)
	}
}

// TestFirstSignInChangesTemporaryPassword: a member added by an OWNER
// signs in with the temporary password and is sent to change it from every
// page until they do; then they land where they were going, stay signed
// in, the change is recorded as theirs, and only the new password works.
func TestFirstSignInChangesTemporaryPassword(t *testing.T) {
	stores.Run(t, testFirstSignInChangesTemporaryPassword)
}

func testFirstSignInChangesTemporaryPassword(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	owner := h.signIn(cloud.RoleOwner)
	r := owner.post("/panel/settings/members", url.Values{"email": {"new.hire@acme.example"}, "role": {"MEMBER"}})
	m := regexp.MustCompile(`id="new-password" class="secret" readonly value="([A-Za-z0-9]+)"`).FindStringSubmatch(r.body)
	if r.status != http.StatusOK || m == nil || !strings.Contains(r.body, "Temporary password") {
		t.Fatalf("add member: %d", r.status)
	}
	temp := m[1]
	if !strings.Contains(owner.get("/panel/settings/members").body, "temporary password not yet changed") {
		t.Error("Members does not mark the member whose temporary password is unchanged")
	}
	earlier := h.anon() // a session signed in with the temporary password before the change
	if r := earlier.post("/panel/login", url.Values{"email": {"new.hire@acme.example"}, "password": {temp}}); r.status != http.StatusSeeOther {
		t.Fatalf("earlier sign-in: %d", r.status)
	}
	c := h.anon()
	if r := c.post("/panel/login", url.Values{"email": {"new.hire@acme.example"}, "password": {temp}, "next": {"/panel/alerts"}}); r.status != http.StatusSeeOther {
		t.Fatalf("sign in with the temporary password: %d", r.status)
	}
	for _, path := range []string{"/panel/alerts", "/panel/", "/panel/devices/" + h.device.ID, "/panel/account"} {
		r := c.get(path)
		want := "/panel/account/password?next=" + url.QueryEscape(path)
		if path == "/panel/account" {
			want = "/panel/account/password"
		}
		if r.status != http.StatusSeeOther || r.header.Get("Location") != want {
			t.Errorf("GET %s before the change: %d %s, want to %s", path, r.status, r.header.Get("Location"), want)
		}
	}
	c.header.Set("HX-Request", "true")
	if r := c.get("/panel/devices/" + h.device.ID + "/channels"); r.status != http.StatusUnauthorized || r.header.Get("HX-Redirect") != "/panel/account/password" {
		t.Errorf("htmx before the change: %d %q", r.status, r.header.Get("HX-Redirect"))
	}
	c.header.Del("HX-Request")
	before := h.state()
	if r := c.post("/panel/alerts/"+h.alerts[0].ID+"/acknowledge", nil); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/account/password" {
		t.Errorf("an action before the change: %d %s", r.status, r.header.Get("Location"))
	}
	if h.state() != before {
		t.Error("an action before the change changed the organization")
	}
	page := c.get("/panel/account/password?next=%2Fpanel%2Falerts")
	for _, s := range []string{"Your password was set by someone else", `<label for="current-password">Current password</label>`,
		`<label for="new-password">New password</label>`, `<label for="repeat-password">Repeat new password</label>`, `>Change password</button>`,
		`name="next" value="/panel/alerts"`} {
		if !strings.Contains(page.body, s) {
			t.Errorf("the forced change page lacks %s", s)
		}
	}
	good := "my very own password"
	for name, tc := range map[string]struct {
		form   url.Values
		status int
		msg    string
	}{
		"wrong current":  {url.Values{"current": {"not the password"}, "new": {good}, "repeat": {good}}, http.StatusUnauthorized, "The current password is wrong."},
		"short":          {url.Values{"current": {temp}, "new": {"short"}, "repeat": {"short"}}, http.StatusBadRequest, "at least 12 characters"},
		"same":           {url.Values{"current": {temp}, "new": {temp}, "repeat": {temp}}, http.StatusBadRequest, "other than the current one"},
		"repeat differs": {url.Values{"current": {temp}, "new": {good}, "repeat": {good + "!"}}, http.StatusBadRequest, "The two new passwords differ."},
	} {
		if r := c.post("/panel/account/password", tc.form); r.status != tc.status || !strings.Contains(r.body, tc.msg) {
			t.Errorf("%s: %d, want %d with %q", name, r.status, tc.status, tc.msg)
		}
	}
	if u := must(h.ps.UserByOrgEmail(h.ctx, h.org.ID, "new.hire@acme.example")); !u.MustChangePassword {
		t.Fatal("a refused change cleared the requirement")
	}
	token := c.session()
	r = c.post("/panel/account/password", url.Values{"current": {temp}, "new": {good}, "repeat": {good}, "next": {"/panel/alerts"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts" {
		t.Fatalf("change: %d %s", r.status, r.header.Get("Location"))
	}
	if c.session() == token {
		t.Error("the session kept its token across the password change")
	}
	if r := c.get("/panel/alerts"); r.status != http.StatusOK || !strings.Contains(r.body, "Your password is changed") {
		t.Errorf("after the change, the page asked for: %d", r.status)
	}
	if r := h.withSession(token).get("/panel/alerts"); r.status != http.StatusSeeOther {
		t.Errorf("the session's old token still works: %d", r.status)
	}
	if r := earlier.get("/panel/alerts"); r.status != http.StatusSeeOther || !strings.Contains(r.header.Get("Location"), "notice=ended") {
		t.Errorf("the earlier session after the change: %d %s", r.status, r.header.Get("Location"))
	}
	u := must(h.ps.UserByOrgEmail(h.ctx, h.org.ID, "new.hire@acme.example"))
	if u.MustChangePassword {
		t.Error("the requirement stays after the change")
	}
	recs := must(h.db.Audit().ListAudit(h.ctx, h.org.ID, cloud.AuditFilter{Action: cloud.ActionMemberPassword})).Records
	if len(recs) != 1 || recs[0].Actor.Kind != cloud.ActorUser || recs[0].Actor.ID != u.ID || recs[0].Target.ID != u.ID || string(recs[0].Details) != `{"by":"self","email":"new.hire@acme.example"}` {
		t.Errorf("audit records of the change: %+v", recs)
	}
	if r := h.anon().post("/panel/login", url.Values{"email": {"new.hire@acme.example"}, "password": {temp}}); r.status != http.StatusUnauthorized {
		t.Errorf("the temporary password after the change: %d", r.status)
	}
	if r := h.anon().post("/panel/login", url.Values{"email": {"new.hire@acme.example"}, "password": {good}}); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/" {
		t.Errorf("the new password: %d %s", r.status, r.header.Get("Location"))
	}
}

// TestChangePasswordFromAccount: every role has the Account page (linked
// from the header); a change ends the other sessions and keeps this one;
// wrong current passwords count as failed sign-ins of the account.
func TestChangePasswordFromAccount(t *testing.T) { stores.Run(t, testChangePasswordFromAccount) }

func testChangePasswordFromAccount(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open, func(c *panel.Config) { c.Throttle = panel.Throttle{PerAccount: 3, PerAddress: 50, Window: time.Hour} })
	for _, role := range cloud.Roles {
		c := h.signIn(role)
		page := c.get("/panel/account")
		if page.status != http.StatusOK || !strings.Contains(page.body, `href="/panel/account"`) || !strings.Contains(page.body, `<h2 id="password-h">Change password</h2>`) ||
			strings.Contains(page.body, "set by someone else") {
			t.Errorf("%s: Account page %d", role, page.status)
		}
	}
	other := h.signIn(cloud.RoleViewer)
	c := h.signIn(cloud.RoleViewer)
	next := "a password of my own"
	r := c.post("/panel/account/password", url.Values{"current": {testPassword}, "new": {next}, "repeat": {next}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/account" {
		t.Fatalf("change: %d %s", r.status, r.header.Get("Location"))
	}
	if r := c.get("/panel/account"); r.status != http.StatusOK || !strings.Contains(r.body, "Your other sessions are signed out") {
		t.Errorf("this session after the change: %d", r.status)
	}
	if r := other.get("/panel/"); r.status != http.StatusSeeOther {
		t.Errorf("another session after the change: %d", r.status)
	}
	// Three wrong current passwords spend the account's sign-in budget: the
	// right one is refused too, on this page and at sign-in.
	for i := range 3 {
		if r := c.post("/panel/account/password", url.Values{"current": {"wrong guess " + string(rune('a'+i))}, "new": {"whatever else 1"}, "repeat": {"whatever else 1"}}); r.status != http.StatusUnauthorized {
			t.Fatalf("wrong current password %d: %d", i+1, r.status)
		}
	}
	if r := c.post("/panel/account/password", url.Values{"current": {next}, "new": {"whatever else 1"}, "repeat": {"whatever else 1"}}); r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" {
		t.Errorf("after 3 wrong current passwords, the right one: %d, want 429", r.status)
	}
	if r := h.anon().post("/panel/login", url.Values{"email": {"viewer@acme.example"}, "password": {next}}); r.status != http.StatusTooManyRequests {
		t.Errorf("sign-in after 3 wrong current passwords: %d, want 429", r.status)
	}
	if u := must(h.ps.UserByOrgEmail(h.ctx, h.org.ID, "viewer@acme.example")); fastHasher.Check(h.ctx, next, u.PasswordHash) != nil {
		t.Error("a refused change changed the password")
	}
	var d map[string]any
	recs := must(h.db.Audit().ListAudit(h.ctx, h.org.ID, cloud.AuditFilter{Action: cloud.ActionMemberPassword})).Records
	if len(recs) != 1 || json.Unmarshal(recs[0].Details, &d) != nil || d["by"] != "self" {
		t.Errorf("audit records: %+v", recs)
	}
}
