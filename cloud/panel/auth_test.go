package panel_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/storetest"
)

func sessionCookie(t *testing.T, r response) *http.Cookie {
	t.Helper()
	for _, c := range (&http.Response{Header: r.header}).Cookies() {
		if c.Name == panel.SessionCookie {
			return c
		}
	}
	t.Fatalf("no %s cookie in %v", panel.SessionCookie, r.header)
	return nil
}

func TestSignIn(t *testing.T) { stores.Run(t, testSignIn) }

func testSignIn(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.anon()
	if r := c.get("/panel/alerts"); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/login?next=%2Fpanel%2Falerts" {
		t.Fatalf("signed out: %d %s", r.status, r.header.Get("Location"))
	}
	page := c.get("/panel/login")
	for _, s := range []string{`<label for="email">Email</label>`, `<label for="password">Password</label>`, `>Sign in</button>`} {
		if !strings.Contains(page.body, s) {
			t.Errorf("sign-in page lacks %s", s)
		}
	}
	for _, email := range []string{"owner@acme.example", "nobody@acme.example"} {
		r := c.post("/panel/login", url.Values{"email": {email}, "password": {"wrong password!"}})
		if r.status != http.StatusUnauthorized || !strings.Contains(r.body, "Wrong email or password.") {
			t.Errorf("%s with a wrong password: %d", email, r.status)
		}
	}
	r := c.post("/panel/login", url.Values{"email": {"OWNER@acme.example"}, "password": {testPassword}, "next": {"/panel/alerts"}})
	if r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/alerts" {
		t.Fatalf("sign in: %d %s", r.status, r.header.Get("Location"))
	}
	ck := sessionCookie(t, r)
	if !ck.HttpOnly || ck.SameSite != http.SameSiteLaxMode || ck.Path != "/panel/" || ck.Secure {
		t.Errorf("cookie %+v: want HttpOnly, SameSite=Lax, Path /panel/, not Secure without TLS", ck)
	}
	if r := c.get("/panel/alerts"); r.status != http.StatusOK {
		t.Fatalf("signed in: %d", r.status)
	}
	// next never leaves the panel.
	for _, next := range []string{"//evil.example/x", "https://evil.example/", "/api/v1/public/devices", "/panel/\\evil"} {
		r := h.anon().post("/panel/login", url.Values{"email": {"owner@acme.example"}, "password": {testPassword}, "next": {next}})
		if loc := r.header.Get("Location"); loc != "/panel/" {
			t.Errorf("next %q: redirected to %q", next, loc)
		}
	}
}

func TestSecureCookieUnderTLS(t *testing.T) { stores.Run(t, testSecureCookieUnderTLS) }

func testSecureCookieUnderTLS(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open, func(c *panel.Config) { c.Secure = true })
	r := h.anon().post("/panel/login", url.Values{"email": {"owner@acme.example"}, "password": {testPassword}})
	if !sessionCookie(t, r).Secure {
		t.Error("the session cookie is not Secure when the relay serves TLS")
	}
}

// TestFreshSessionAtSignIn: signing in replaces the session id; the one
// held before (planted by an attacker, say) is dead.
func TestFreshSessionAtSignIn(t *testing.T) { stores.Run(t, testFreshSessionAtSignIn) }

func testFreshSessionAtSignIn(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.anon()
	first := sessionCookie(t, c.post("/panel/login", url.Values{"email": {"viewer@acme.example"}, "password": {testPassword}}))
	second := sessionCookie(t, c.post("/panel/login", url.Values{"email": {"admin@acme.example"}, "password": {testPassword}}))
	if first.Value == second.Value {
		t.Fatal("sign-in kept the session id")
	}
	if r := h.withSession(first.Value).get("/panel/"); !isSignIn(r) {
		t.Errorf("the session id from before sign-in still works: %d", r.status)
	}
}

func TestSignOut(t *testing.T) { stores.Run(t, testSignOut) }

func testSignOut(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleMember)
	token := c.session()
	if r := c.post("/panel/logout", nil); r.status != http.StatusSeeOther || r.header.Get("Location") != "/panel/login?notice=signed-out" {
		t.Fatalf("sign out: %d %s", r.status, r.header.Get("Location"))
	}
	if r := h.withSession(token).get("/panel/"); !isSignIn(r) {
		t.Errorf("the signed-out session still works: %d", r.status)
	}
}

// TestTamperedSession: a cookie the store does not know signs the user out
// with a notice.
func TestTamperedSession(t *testing.T) { stores.Run(t, testTamperedSession) }

func testTamperedSession(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleOwner)
	tok := c.session()
	bad := h.withSession(tok[:len(tok)-2] + "xx")
	r := bad.get("/panel/settings/api-keys")
	if !isSignIn(r) || !strings.Contains(r.header.Get("Location"), "notice=ended") {
		t.Fatalf("tampered cookie: %d %s", r.status, r.header.Get("Location"))
	}
	if page := bad.get(r.header.Get("Location")); !strings.Contains(page.body, "Your session ended. Sign in again.") {
		t.Error("the sign-in page does not say the session ended")
	}
}

func TestIdleAndAbsoluteTimeouts(t *testing.T) { stores.Run(t, testIdleAndAbsoluteTimeouts) }

func testIdleAndAbsoluteTimeouts(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open, func(c *panel.Config) { c.IdleTimeout, c.Lifetime = time.Second, 3*time.Second })
	idle := h.signIn(cloud.RoleViewer)
	busy := h.signIn(cloud.RoleViewer)
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		if r := busy.get("/panel/"); r.status != http.StatusOK {
			if time.Until(deadline) > 1500*time.Millisecond {
				t.Fatalf("a session in use ended before its lifetime: %d", r.status)
			}
			break
		}
		time.Sleep(400 * time.Millisecond)
	}
	if r := busy.get("/panel/"); !isSignIn(r) {
		t.Errorf("a session in use outlived its 3 s lifetime: %d", r.status)
	}
	if r := idle.get("/panel/"); !isSignIn(r) {
		t.Errorf("a session idle for 4 s outlived its 1 s idle timeout: %d", r.status)
	}
}

// TestChangesApplyOnNextRequest: a role change, a disabled user and a new
// password take effect on the user's very next request.
func TestChangesApplyOnNextRequest(t *testing.T) { stores.Run(t, testChangesApplyOnNextRequest) }

func testChangesApplyOnNextRequest(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	us := h.ps
	viewer := h.signIn(cloud.RoleViewer)
	if r := viewer.get("/panel/settings/api-keys"); r.status != http.StatusForbidden {
		t.Fatalf("VIEWER on API keys: %d", r.status)
	}
	must(us.SetUserRole(h.ctx, h.org.ID, h.users[cloud.RoleViewer].ID, cloud.RoleAdmin))
	if r := viewer.get("/panel/settings/api-keys"); r.status != http.StatusOK {
		t.Errorf("promoted to ADMIN, next request: %d", r.status)
	}
	member := h.signIn(cloud.RoleMember)
	must(us.DisableUser(h.ctx, h.org.ID, h.users[cloud.RoleMember].ID))
	if r := member.get("/panel/"); !isSignIn(r) {
		t.Errorf("disabled, next request: %d", r.status)
	}
	if r := h.anon().post("/panel/login", url.Values{"email": {"member@acme.example"}, "password": {testPassword}}); r.status != http.StatusForbidden || !strings.Contains(r.body, "disabled") {
		t.Errorf("a disabled user signs in: %d", r.status)
	}
	owner := h.signIn(cloud.RoleOwner)
	must(us.SetUserPassword(h.ctx, h.org.ID, h.users[cloud.RoleOwner].ID, must(fastHasher.Hash(h.ctx, "a brand new password"))))
	if r := owner.get("/panel/"); !isSignIn(r) {
		t.Errorf("password changed, the old session's next request: %d", r.status)
	}
}

func TestSignInThrottle(t *testing.T) { stores.Run(t, testSignInThrottle) }

func testSignInThrottle(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open, func(c *panel.Config) { c.Throttle = panel.Throttle{PerAccount: 3, PerAddress: 5, Window: time.Hour} })
	c := h.anon()
	for i := 0; i < 3; i++ {
		if r := c.post("/panel/login", url.Values{"email": {"admin@acme.example"}, "password": {"guess number " + string(rune('0'+i))}}); r.status != http.StatusUnauthorized {
			t.Fatalf("failure %d: %d", i+1, r.status)
		}
	}
	r := c.post("/panel/login", url.Values{"email": {"admin@acme.example"}, "password": {testPassword}})
	if r.status != http.StatusTooManyRequests || r.header.Get("Retry-After") == "" || !strings.Contains(r.body, "Too many failed sign-ins") {
		t.Fatalf("after 3 failures the right password: %d, want 429 with Retry-After", r.status)
	}
	// Another account from the same address still signs in, until the
	// address's budget (5) is spent.
	if r := c.post("/panel/login", url.Values{"email": {"viewer@acme.example"}, "password": {testPassword}}); r.status != http.StatusSeeOther {
		t.Fatalf("another account: %d", r.status)
	}
	for i := 0; i < 2; i++ {
		c.post("/panel/login", url.Values{"email": {"nobody" + string(rune('a'+i)) + "@acme.example"}, "password": {"x"}})
	}
	if r := c.post("/panel/login", url.Values{"email": {"owner@acme.example"}, "password": {testPassword}}); r.status != http.StatusTooManyRequests {
		t.Errorf("after 5 failures from one address: %d, want 429", r.status)
	}
}

// countingSessions counts the session writes reaching the store.
type countingSessions struct {
	cloud.SessionStore
	commits atomic.Int64
}

func (c *countingSessions) CommitSession(ctx context.Context, h string, b []byte, exp time.Time) error {
	c.commits.Add(1)
	return c.SessionStore.CommitSession(ctx, h, b, exp)
}

// TestPagesDoNotRewriteTheSession: with the default idle timeout, reading
// pages moves the session's expiry in the store at most once a minute, not
// on every request; a change of the session (a notice) is written at once.
func TestPagesDoNotRewriteTheSession(t *testing.T) { stores.Run(t, testPagesDoNotRewriteTheSession) }

func testPagesDoNotRewriteTheSession(t *testing.T, open storetest.Opener) {
	counter := &countingSessions{}
	h := newHarness(t, open, func(c *panel.Config) { counter.SessionStore = c.Sessions; c.Sessions = counter })
	c := h.signIn(cloud.RoleMember)
	after := counter.commits.Load()
	for i := 0; i < 5; i++ {
		if r := c.get("/panel/"); r.status != http.StatusOK {
			t.Fatal(r.status)
		}
	}
	if n := counter.commits.Load() - after; n > 1 {
		t.Errorf("5 page loads wrote the session %d times", n)
	}
	before := counter.commits.Load()
	c.post("/panel/alerts/acknowledge", url.Values{}) // sets a notice
	if counter.commits.Load() == before {
		t.Error("a notice in the session was not written")
	}
	if !strings.Contains(c.get("/panel/alerts").body, "Select at least one alert.") {
		t.Error("the notice did not reach the next page")
	}
}
