package panel_test

import (
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/test/rig/oidcprovider"
)

// The single sign-on tests sign in through a real OpenID provider on
// loopback (test/rig/oidcprovider: zitadel/oidc's example provider), with
// a browser stand-in that fills in the provider's login form.

const (
	ssoClientID     = "fleet-relay"
	ssoClientSecret = "provider-client-secret-1234"
	ssoPassword     = "verysecure"
)

// ssoRig is a harness whose organization signs in through a provider.
type ssoRig struct {
	*harness
	p *oidcprovider.Provider
}

func newSSORig(t *testing.T, open storetest.Opener, tweak ...func(*panel.Config)) *ssoRig {
	h := newHarness(t, open, tweak...)
	p := oidcprovider.Start(t, oidcprovider.Config{ClientID: ssoClientID, ClientSecret: ssoClientSecret,
		RedirectURIs: []string{h.ts.URL + "/panel/sso/callback"},
		Users: []oidcprovider.User{
			{Username: "nia", Password: ssoPassword, Email: "nia@acme.example", EmailVerified: true},
			{Username: "boss", Password: ssoPassword, Email: "boss@acme.example", EmailVerified: true},
			{Username: "viewer", Password: ssoPassword, Email: "viewer@acme.example", EmailVerified: true},
			{Username: "mallory", Password: ssoPassword, Email: "mallory@evil.example", EmailVerified: true},
		}})
	if _, err := h.ps.SetOrgOIDC(h.ctx, cloud.OIDCConfig{OrgID: h.org.ID, Issuer: p.Issuer, ClientID: ssoClientID, ClientSecret: ssoClientSecret,
		Domains: []string{"acme.example"}, DefaultRole: cloud.RoleMember, RoleClaim: "preferred_username",
		RoleMap: map[string]cloud.Role{"boss": cloud.RoleAdmin}, Enabled: true}); err != nil {
		t.Fatal(err)
	}
	return &ssoRig{harness: h, p: p}
}

// ssoVisit is what a single sign-on through the provider showed.
type ssoVisit struct {
	authURL  *url.URL // where the relay sent the browser
	callback *url.URL // where the provider sent it back
	last     response // the relay's answer to the callback
}

// signInSSO starts a single sign-on with start (POST /panel/sso), signs
// in at the provider as username, lets tamper change the callback URL,
// and returns what happened.
func (r *ssoRig) signInSSO(c *client, start url.Values, username string, tamper func(q url.Values)) ssoVisit {
	t := r.t
	t.Helper()
	var v ssoVisit
	resp := c.post("/panel/sso", start)
	refresh, ok := strings.CutPrefix(resp.header.Get("Refresh"), "0; url=")
	if resp.status != http.StatusOK || !ok || !strings.Contains(resp.body, `id="sso-continue"`) {
		t.Fatalf("start: %d %s", resp.status, resp.body)
	}
	v.authURL, _ = url.Parse(refresh)
	if !strings.HasPrefix(v.authURL.String(), r.p.Issuer) {
		t.Fatalf("start sent the browser to %s, not the provider %s", v.authURL, r.p.Issuer)
	}
	// The provider's redirects to its login form.
	next, body := r.follow(c, "GET", v.authURL.String(), nil)
	if next != nil {
		t.Fatalf("provider did not show its login form: stopped at %s", next)
	}
	m := regexp.MustCompile(`name="id" value="([^"]+)"`).FindStringSubmatch(body)
	if m == nil {
		t.Fatalf("no login form at the provider: %s", body)
	}
	next, body = r.follow(c, "POST", r.p.Issuer+"login/username", url.Values{"id": {m[1]}, "username": {username}, "password": {ssoPassword}})
	if next == nil {
		t.Fatalf("provider did not send the browser back: %s", body)
	}
	v.callback = next
	if tamper != nil {
		q := next.Query()
		tamper(q)
		next.RawQuery = q.Encode()
	}
	v.last = c.get(next.RequestURI())
	return v
}

// follow requests u and the redirects after it until one leads to the
// relay (returned, not requested) or a page is shown (its body).
func (r *ssoRig) follow(c *client, method, u string, form url.Values) (*url.URL, string) {
	t := r.t
	t.Helper()
	for range 10 {
		var body io.Reader
		if form != nil {
			body = strings.NewReader(form.Encode())
		}
		req, _ := http.NewRequest(method, u, body)
		if form != nil {
			req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		}
		resp, err := c.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode < 300 || resp.StatusCode > 399 || loc == "" {
			return nil, string(b)
		}
		next, err := resp.Request.URL.Parse(loc)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(next.String(), r.ts.URL) {
			return next, ""
		}
		method, u, form = "GET", next.String(), nil
	}
	t.Fatal("too many redirects")
	return nil, ""
}

func TestSSO(t *testing.T) { stores.Run(t, testSSO) }

// testSSO: a first sign-in through the provider makes the member with the
// default role (or the mapped one) and signs them in; the flow used PKCE
// S256, state and nonce; an existing member signs in as themselves; the
// sign-in page offers "Sign in with <org>" for ?org=ID.
func testSSO(t *testing.T, open storetest.Opener) {
	r := newSSORig(t, open)
	page := r.anon().get("/panel/login?org=" + r.org.ID)
	for _, s := range []string{">Sign in with Acme</button>", ">Continue with single sign-on</button>", `name="org" value="` + r.org.ID + `"`} {
		if !strings.Contains(page.body, s) {
			t.Errorf("sign-in page with ?org= lacks %s", s)
		}
	}
	if page := r.anon().get("/panel/login?org=" + r.other.ID); strings.Contains(page.body, "Sign in with Other") {
		t.Error("an organization without single sign-on is offered")
	}

	c := r.anon()
	v := r.signInSSO(c, url.Values{"email": {"nia@acme.example"}, "next": {"/panel/alerts"}}, "nia", nil)
	q := v.authURL.Query()
	if q.Get("code_challenge_method") != "S256" || len(q.Get("code_challenge")) != 43 || q.Get("state") == "" || q.Get("nonce") == "" ||
		q.Get("client_id") != ssoClientID || q.Get("scope") != "openid email profile" || q.Get("redirect_uri") != r.ts.URL+"/panel/sso/callback" {
		t.Errorf("authorization request %s: want PKCE S256, state, nonce, the client, scopes and the redirect URI", v.authURL)
	}
	if v.callback.Query().Get("code") == "" || v.callback.Query().Get("state") != q.Get("state") {
		t.Errorf("callback %s", v.callback)
	}
	if v.last.status != http.StatusSeeOther || v.last.header.Get("Location") != "/panel/alerts" {
		t.Fatalf("callback answered %d %s: %s", v.last.status, v.last.header.Get("Location"), v.last.body)
	}
	if page := c.get("/panel/alerts"); page.status != http.StatusOK || !strings.Contains(page.body, "nia@acme.example") {
		t.Fatalf("signed in through the provider: %d", page.status)
	}
	nia, err := r.ps.UserByOrgEmail(r.ctx, r.org.ID, "nia@acme.example")
	if err != nil || nia.Role != cloud.RoleMember {
		t.Fatalf("first sign-in made %+v, %v; want a MEMBER", nia, err)
	}
	// The member made has no password anyone knows.
	if resp := r.anon().post("/panel/login", url.Values{"email": {"nia@acme.example"}, "password": {ssoPassword}}); resp.status != http.StatusUnauthorized {
		t.Errorf("password sign-in of an SSO member with the provider's password: %d", resp.status)
	}
	// The callback is used once: replaying it is refused.
	if again := c.get(v.callback.RequestURI()); again.status != http.StatusBadRequest || !strings.Contains(again.body, "already used") {
		t.Errorf("replayed callback: %d", again.status)
	}

	// The role claim maps boss to ADMIN; ?org= routes without the email.
	c2 := r.anon()
	v = r.signInSSO(c2, url.Values{"org": {r.org.ID}}, "boss", nil)
	if v.last.status != http.StatusSeeOther {
		t.Fatalf("boss: %d %s", v.last.status, v.last.body)
	}
	if boss, err := r.ps.UserByOrgEmail(r.ctx, r.org.ID, "boss@acme.example"); err != nil || boss.Role != cloud.RoleAdmin {
		t.Errorf("mapped role: %+v, %v", boss, err)
	}
	// An existing member signs in as themselves, role unchanged.
	c3 := r.anon()
	if v = r.signInSSO(c3, url.Values{"email": {"viewer@acme.example"}}, "viewer", nil); v.last.status != http.StatusSeeOther {
		t.Fatalf("existing member: %d %s", v.last.status, v.last.body)
	}
	if page := c3.get("/panel/"); !strings.Contains(page.body, "viewer@acme.example") || !strings.Contains(page.body, ">VIEWER<") {
		t.Errorf("existing member's page does not show them as VIEWER")
	}
}

func TestSSORefusals(t *testing.T) { stores.Run(t, testSSORefusals) }

// testSSORefusals: a wrong state, a flow over 10 minutes old, a foreign
// domain, a disabled member and a token signed by a key the issuer does not publish
// are each refused with a message on the sign-in page, and nobody is
// signed in or created.
func testSSORefusals(t *testing.T, open storetest.Opener) {
	var later atomic.Int64 // how far the panel's clock is ahead
	r := newSSORig(t, open, func(c *panel.Config) { c.Now = func() time.Time { return time.Now().Add(time.Duration(later.Load())) } })
	before := len(must(r.ps.ListUsers(r.ctx, r.org.ID)))
	refused := func(name string, v ssoVisit, status int, msg string) {
		t.Helper()
		if v.last.status != status || !strings.Contains(v.last.body, msg) || !strings.Contains(v.last.body, `action="/panel/login"`) {
			t.Errorf("%s: %d, want %d with %q on the sign-in page: %s", name, v.last.status, status, msg, v.last.body)
		}
	}
	c := r.anon()
	refused("wrong state", r.signInSSO(c, url.Values{"email": {"nia@acme.example"}}, "nia", func(q url.Values) { q.Set("state", "forged") }),
		http.StatusBadRequest, "state differs")
	if page := c.get("/panel/"); page.status != http.StatusSeeOther {
		t.Errorf("signed in after a wrong state: %d", page.status)
	}
	refused("foreign domain", r.signInSSO(r.anon(), url.Values{"email": {"mallory@acme.example"}}, "mallory", nil),
		http.StatusForbidden, "mallory@evil.example is not in an email domain of Acme")

	refused("a flow older than 10 minutes", r.signInSSO(r.anon(), url.Values{"email": {"nia@acme.example"}}, "nia", func(url.Values) {
		later.Store(int64(11 * time.Minute))
	}), http.StatusBadRequest, "took longer than 10 minutes")
	later.Store(0)

	must(r.ps.DisableUser(r.ctx, r.org.ID, r.users[cloud.RoleViewer].ID))
	refused("disabled member", r.signInSSO(r.anon(), url.Values{"email": {"viewer@acme.example"}}, "viewer", nil),
		http.StatusForbidden, "This account is disabled")

	r.p.PublishOtherKeys(true)
	refused("another key", r.signInSSO(r.anon(), url.Values{"email": {"nia@acme.example"}}, "nia", nil),
		http.StatusForbidden, "not signed by the provider&#39;s keys")
	r.p.PublishOtherKeys(false)

	if after := len(must(r.ps.ListUsers(r.ctx, r.org.ID))); after != before {
		t.Errorf("refused sign-ins made members: %d before, %d after", before, after)
	}
	// An email domain no organization holds is refused before the provider.
	if resp := r.anon().post("/panel/sso", url.Values{"email": {"x@nowhere.example"}}); resp.status != http.StatusNotFound ||
		!strings.Contains(resp.body, "No organization signs in with single sign-on for @nowhere.example") {
		t.Errorf("unknown domain: %d %s", resp.status, resp.body)
	}
	// Nothing of the flow without a start: a callback out of the blue.
	if resp := r.anon().get("/panel/sso/callback?code=x&state=y"); resp.status != http.StatusBadRequest {
		t.Errorf("callback without a flow: %d", resp.status)
	}
	// After the refusals a good sign-in still works.
	if v := r.signInSSO(r.anon(), url.Values{"email": {"nia@acme.example"}}, "nia", nil); v.last.status != http.StatusSeeOther {
		t.Errorf("sign-in after refusals: %d %s", v.last.status, v.last.body)
	}
}

func TestSSOSettings(t *testing.T) { stores.Run(t, testSSOSettings) }

// testSSOSettings: the OWNER configures single sign-on in the panel; the
// secret is never shown back (the field says "set"), an empty secret keeps
// it; other roles are refused.
func testSSOSettings(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	if page := h.anon().get("/panel/login"); strings.Contains(page.body, "single sign-on") {
		t.Error("the sign-in page offers single sign-on while no organization has it on")
	}
	o := h.signIn(cloud.RoleOwner)
	page := o.get("/panel/settings/sso")
	if page.status != http.StatusOK || !strings.Contains(page.body, h.ts.URL+"/panel/sso/callback") {
		t.Fatalf("settings page: %d", page.status)
	}
	form := url.Values{"issuer": {"https://login.acme.example/realms/acme"}, "client_id": {"fleet"}, "client_secret": {"top-secret-value-42"},
		"domains": {"acme.example, acme.org"}, "default_role": {"VIEWER"}, "role_claim": {"groups"}, "role_map": {"fleet-admins=ADMIN"}, "enabled": {"on"}}
	if r := o.post("/panel/settings/sso", form); r.status != http.StatusSeeOther {
		t.Fatalf("save: %d %s", r.status, r.body)
	}
	page = o.get("/panel/settings/sso")
	if strings.Contains(page.body, "top-secret-value-42") || !strings.Contains(page.body, `placeholder="set"`) ||
		!strings.Contains(page.body, "acme.example, acme.org") || !strings.Contains(page.body, "fleet-admins=ADMIN") {
		t.Errorf("settings page after save shows the secret or lacks the fields: %s", page.body)
	}
	if page := h.anon().get("/panel/login"); !strings.Contains(page.body, ">Continue with single sign-on</button>") {
		t.Error("the sign-in page does not offer single sign-on once an organization has it on")
	}
	form.Set("client_secret", "")
	form.Set("domains", "acme.example")
	if r := o.post("/panel/settings/sso", form); r.status != http.StatusSeeOther {
		t.Fatalf("save without secret: %d %s", r.status, r.body)
	}
	if c := must(h.ps.OrgOIDC(h.ctx, h.org.ID)); c.ClientSecret != "top-secret-value-42" || len(c.Domains) != 1 {
		t.Errorf("stored %+v", c)
	}
	form.Set("role_map", "x=ROOT")
	if r := o.post("/panel/settings/sso", form); r.status != http.StatusBadRequest || !strings.Contains(r.body, "role must be one of") {
		t.Errorf("bad role map: %d", r.status)
	}
	for _, role := range []cloud.Role{cloud.RoleAdmin, cloud.RoleMember, cloud.RoleViewer} {
		c := h.signIn(role)
		if r := c.get("/panel/settings/sso"); r.status != http.StatusForbidden {
			t.Errorf("%s opens single sign-on settings: %d", role, r.status)
		}
		if r := c.post("/panel/settings/sso", form); r.status != http.StatusForbidden {
			t.Errorf("%s saves single sign-on settings: %d", role, r.status)
		}
	}
}
