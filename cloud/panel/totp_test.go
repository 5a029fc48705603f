package panel_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pquerna/otp/totp"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/storetest"
)

// Two-factor sign-in through the panel, as a person drives it: enrol with
// a code computed from the secret the page shows, sign in with a code, a
// replayed code refused (also in the neighbour step), recovery codes once,
// wrong codes throttled, the organization's requirement leading members
// to enrolment.

// testClock is the panel's clock, moved by the test (the codes' steps and
// the second step's deadline follow it).
type testClock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *testClock) add(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

func newClockedHarness(t *testing.T, open storetest.Opener, tweak ...func(*panel.Config)) (*harness, *testClock) {
	clock := &testClock{}
	return newHarness(t, open, append(tweak, func(c *panel.Config) { c.Now = clock.now })...), clock
}

var (
	secretRe   = regexp.MustCompile(`data-testid="totp-secret">([A-Z2-7]+)<`)
	recoveryRe = regexp.MustCompile(`[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}-[a-z2-7]{4}`)
)

// code is the authenticator's code of secret at t.
func code(t *testing.T, secret string, at time.Time) string {
	t.Helper()
	c, err := totp.GenerateCode(secret, at)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// enrol turns two-factor sign-in on for c's user as the page asks: the
// secret read from the page, a code computed from it. It returns the
// secret and the recovery codes shown.
func (h *harness) enrol(c *client, clock *testClock) (string, []string) {
	h.t.Helper()
	page := c.get("/panel/account/2fa")
	m := secretRe.FindStringSubmatch(page.body)
	if page.status != http.StatusOK || m == nil || !strings.Contains(page.body, `src="data:image/png;base64,`) {
		h.t.Fatalf("enrolment page: %d, secret %v, QR code shown %v", page.status, m, strings.Contains(page.body, "data:image/png"))
	}
	secret := m[1]
	if again := secretRe.FindStringSubmatch(c.get("/panel/account/2fa").body); again == nil || again[1] != secret {
		h.t.Errorf("a reload shows another secret: %v, want %s", again, secret)
	}
	if resp := c.post("/panel/account/2fa/enrol", url.Values{"code": {"000000"}}); resp.status != http.StatusBadRequest || !strings.Contains(resp.body, "does not match") {
		h.t.Errorf("a wrong confirmation code: %d", resp.status)
	}
	resp := c.post("/panel/account/2fa/enrol", url.Values{"code": {code(h.t, secret, clock.now())}})
	codes := recoveryRe.FindAllString(resp.body, -1)
	if resp.status != http.StatusOK || len(codes) != cloud.RecoveryCodeCount {
		h.t.Fatalf("enrol: %d, %d recovery codes shown: %s", resp.status, len(codes), resp.body)
	}
	if strings.Contains(resp.body, secret) {
		h.t.Error("the secret is shown again after enrolment")
	}
	if again := c.get("/panel/account/2fa"); strings.Contains(again.body, codes[0]) || strings.Contains(again.body, secret) || !strings.Contains(again.body, "is <strong>on</strong>") {
		h.t.Errorf("after enrolment the page shows the recovery codes or the secret again, or not that it is on: %s", again.body)
	}
	return secret, codes
}

// password signs in with the password of the user of email: the answer
// (a redirect to the second step for a user with two-factor sign-in).
func (c *client) password(email string) response {
	c.t.Helper()
	return c.post("/panel/login", url.Values{"email": {email}, "password": {testPassword}})
}

func (h *harness) audit(action string) []cloud.AuditRecord {
	h.t.Helper()
	return must(h.db.Audit().ListAudit(h.ctx, h.org.ID, cloud.AuditFilter{Action: action})).Records
}

func TestTwoFactorSignIn(t *testing.T) { stores.Run(t, testTwoFactorSignIn) }

func testTwoFactorSignIn(t *testing.T, open storetest.Opener) {
	// Room for the failures this test makes on purpose (TestTwoFactorThrottle
	// holds the budget).
	h, clock := newClockedHarness(t, open, func(c *panel.Config) { c.Throttle = panel.Throttle{PerAccount: 20, PerAddress: 100, Window: time.Hour} })
	member := h.users[cloud.RoleMember]
	c := h.signIn(cloud.RoleMember)
	secret, codes := h.enrol(c, clock)
	recs := h.audit(cloud.ActionMember2FAEnrolled)
	if len(recs) != 1 || recs[0].Actor.ID != member.ID || recs[0].Target.ID != member.ID || strings.Contains(string(recs[0].Details), secret) {
		t.Errorf("enrolment records %+v", recs)
	}
	enrolCode := code(t, secret, clock.now())

	// The password alone no longer signs in: it leads to the second step,
	// with nothing but the pending user in a fresh session.
	c = h.anon()
	resp := c.password(member.Email)
	if resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/panel/login/2fa" {
		t.Fatalf("password of an enrolled user: %d %s", resp.status, resp.header.Get("Location"))
	}
	pendingToken := c.session()
	if resp := c.get("/panel/"); !isSignIn(resp) || resp.header.Get("Location") == "/panel/login/2fa" {
		t.Errorf("a pending user reached the fleet: %d %s", resp.status, resp.header.Get("Location"))
	}
	page := c.get("/panel/login/2fa")
	if page.status != http.StatusOK || !strings.Contains(page.body, `<label for="code">Authentication code</label>`) || !strings.Contains(page.body, ">Verify</button>") {
		t.Fatalf("second step page: %d %s", page.status, page.body)
	}
	// The code that confirmed the enrolment is spent.
	if resp := c.post("/panel/login/2fa", url.Values{"code": {enrolCode}}); resp.status != http.StatusUnauthorized {
		t.Errorf("the enrolment's code signed in: %d", resp.status)
	}
	// The next step's code signs in, once; a fresh session token.
	clock.add(30 * time.Second)
	good := code(t, secret, clock.now())
	resp = c.post("/panel/login/2fa", url.Values{"code": {good[:3] + " " + good[3:]}})
	if resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/panel/" {
		t.Fatalf("second step with a good code: %d %s %s", resp.status, resp.header.Get("Location"), resp.body)
	}
	if c.session() == pendingToken {
		t.Error("the session token was not renewed at the second step")
	}
	if resp := c.get("/panel/"); resp.status != http.StatusOK {
		t.Fatalf("signed in with a code, the fleet answers %d", resp.status)
	}
	// The same code again, now and in the next step (its neighbour
	// window), is refused.
	for _, move := range []time.Duration{0, 30 * time.Second} {
		clock.add(move)
		c2 := h.anon()
		c2.password(member.Email)
		if resp := c2.post("/panel/login/2fa", url.Values{"code": {good}}); resp.status != http.StatusUnauthorized || !strings.Contains(resp.body, "already used") {
			t.Errorf("replayed code %s later: %d", move, resp.status)
		}
	}

	if recs := h.audit(cloud.ActionSignInFailed); len(recs) != 3 || string(recs[0].Details) != `{"reason":"totp"}` || recs[0].Target.ID != member.ID {
		t.Errorf("wrong codes are recorded as %+v, want 3 session.sign_in_failed for totp", recs)
	}
	if recs := h.audit(cloud.ActionSignedIn); len(recs) == 0 || string(recs[0].Details) != `{"via":"password+totp"}` {
		t.Errorf("the sign-in with a code is recorded as %+v", recs)
	}
	// A recovery code works once, in any case and with or without dashes.
	c3 := h.anon()
	c3.password(member.Email)
	if resp := c3.post("/panel/login/2fa", url.Values{"code": {strings.ToUpper(codes[0])}}); resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/panel/" {
		t.Fatalf("recovery code: %d %s", resp.status, resp.body)
	}
	if page := c3.get("/panel/account/2fa"); !strings.Contains(page.body, `data-testid="recovery-left">9<`) {
		t.Errorf("after one recovery code the page does not say 9 are left")
	}
	c4 := h.anon()
	c4.password(member.Email)
	if resp := c4.post("/panel/login/2fa", url.Values{"code": {strings.ReplaceAll(codes[0], "-", "")}}); resp.status != http.StatusUnauthorized {
		t.Errorf("a used recovery code signed in again: %d", resp.status)
	}

	// The second step waits 5 minutes at most.
	c5 := h.anon()
	c5.password(member.Email)
	clock.add(6 * time.Minute)
	if resp := c5.post("/panel/login/2fa", url.Values{"code": {code(t, secret, clock.now())}}); !isSignIn(resp) || resp.header.Get("Location") == "/panel/" {
		t.Errorf("second step after 6 minutes: %d %s", resp.status, resp.header.Get("Location"))
	}
	if resp := c5.get("/panel/"); !isSignIn(resp) {
		t.Errorf("an expired second step signed in: %d", resp.status)
	}

	// Turning it off takes the password; then the password alone signs in.
	if resp := c.post("/panel/account/2fa/disable", url.Values{"password": {"not the password"}}); resp.status != http.StatusUnauthorized {
		t.Errorf("turn off with a wrong password: %d", resp.status)
	}
	if resp := c.post("/panel/account/2fa/disable", url.Values{"password": {testPassword}}); resp.status != http.StatusSeeOther {
		t.Fatalf("turn off: %d %s", resp.status, resp.body)
	}
	if recs := h.audit(cloud.ActionMember2FAReset); len(recs) != 1 || recs[0].Actor.Kind != cloud.ActorUser || recs[0].Actor.ID != member.ID {
		t.Errorf("turning off is recorded as %+v", recs)
	}
	if resp := h.anon().password(member.Email); resp.header.Get("Location") != "/panel/" {
		t.Errorf("after turning it off the password leads to %s", resp.header.Get("Location"))
	}
}

// TestTwoFactorThrottle: wrong codes count as failed sign-ins of the
// account; over the budget even the right code is refused.
func TestTwoFactorThrottle(t *testing.T) { stores.Run(t, testTwoFactorThrottle) }

func testTwoFactorThrottle(t *testing.T, open storetest.Opener) {
	h, clock := newClockedHarness(t, open, func(c *panel.Config) { c.Throttle = panel.Throttle{PerAccount: 3, PerAddress: 100, Window: time.Hour} })
	admin := h.users[cloud.RoleAdmin]
	secret, _ := h.enrol(h.signIn(cloud.RoleAdmin), clock)
	c := h.anon()
	c.password(admin.Email)
	for i := range 3 {
		if resp := c.post("/panel/login/2fa", url.Values{"code": {"123456"}}); resp.status != http.StatusUnauthorized {
			t.Fatalf("wrong code %d: %d", i, resp.status)
		}
	}
	clock.add(30 * time.Second)
	resp := c.post("/panel/login/2fa", url.Values{"code": {code(t, secret, clock.now())}})
	if resp.status != http.StatusTooManyRequests || resp.header.Get("Retry-After") == "" {
		t.Fatalf("the right code after 3 wrong ones: %d, want 429", resp.status)
	}
	// The password step of that account is throttled as well.
	if resp := h.anon().password(admin.Email); resp.status != http.StatusTooManyRequests {
		t.Errorf("password after 3 wrong codes: %d, want 429", resp.status)
	}
}

// TestRequireTwoFactor: an OWNER requires two-factor sign-in; a member
// without it, signed in already or signing in, is led to enrolment from
// every page and action until enrolled, and cannot turn it off.
func TestRequireTwoFactor(t *testing.T) { stores.Run(t, testRequireTwoFactor) }

func testRequireTwoFactor(t *testing.T, open storetest.Opener) {
	h, clock := newClockedHarness(t, open)
	owner := h.signIn(cloud.RoleOwner)
	viewer := h.signIn(cloud.RoleViewer)
	if resp := h.signIn(cloud.RoleAdmin).post("/panel/settings/security", url.Values{"require2fa": {"true"}}); resp.status != http.StatusForbidden {
		t.Errorf("an ADMIN requires two-factor sign-in: %d", resp.status)
	}
	if page := owner.get("/panel/settings/security"); !strings.Contains(page.body, "Require two-factor sign-in for every member") {
		t.Fatalf("security page: %d", page.status)
	}
	if resp := owner.post("/panel/settings/security", url.Values{"require2fa": {"true"}}); resp.status != http.StatusSeeOther {
		t.Fatalf("require: %d %s", resp.status, resp.body)
	}
	recs := h.audit(cloud.ActionOrg2FA)
	if len(recs) != 1 || string(recs[0].Details) != `{"from":false,"to":true}` || recs[0].Actor.ID != h.users[cloud.RoleOwner].ID {
		t.Errorf("requirement records %+v", recs)
	}
	// An open session of a member without it: every page leads to
	// enrolment, actions change nothing.
	for _, path := range []string{"/panel/", "/panel/alerts", "/panel/devices/" + h.device.ID} {
		if resp := viewer.get(path); resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/panel/account/2fa" {
			t.Errorf("GET %s of an unenrolled member: %d %s", path, resp.status, resp.header.Get("Location"))
		}
	}
	before := h.state()
	if resp := owner.post("/panel/alerts/"+h.alerts[0].ID+"/acknowledge", nil); resp.header.Get("Location") != "/panel/account/2fa" {
		t.Errorf("an unenrolled OWNER's action: %d %s", resp.status, resp.header.Get("Location"))
	}
	if h.state() != before {
		t.Error("an unenrolled member changed the organization")
	}
	if page := viewer.get("/panel/account/2fa"); page.status != http.StatusOK || !strings.Contains(page.body, "Your organization requires two-factor sign-in") {
		t.Errorf("enrolment page under the requirement: %d", page.status)
	}
	// A fresh sign-in lands on a page that leads to enrolment.
	c := h.anon()
	if resp := c.password(h.users[cloud.RoleMember].Email); resp.header.Get("Location") != "/panel/" {
		t.Fatalf("password of an unenrolled member: %d %s", resp.status, resp.header.Get("Location"))
	}
	if resp := c.get("/panel/"); resp.header.Get("Location") != "/panel/account/2fa" {
		t.Errorf("first page after sign-in: %d %s", resp.status, resp.header.Get("Location"))
	}
	h.enrol(viewer, clock)
	if resp := viewer.get("/panel/"); resp.status != http.StatusOK {
		t.Errorf("an enrolled member's fleet page: %d", resp.status)
	}
	resp := viewer.post("/panel/account/2fa/disable", url.Values{"password": {testPassword}})
	if resp.status != http.StatusConflict || !strings.Contains(html.UnescapeString(resp.body), "requires two-factor sign-in") {
		t.Errorf("turn off under the requirement: %d", resp.status)
	}
	// The OWNER too enrols before anything else, lifting the requirement
	// included.
	if resp := owner.post("/panel/settings/security", url.Values{}); resp.header.Get("Location") != "/panel/account/2fa" {
		t.Errorf("the OWNER, unenrolled, lifts the requirement: %d %s", resp.status, resp.header.Get("Location"))
	}
	h.enrol(owner, clock)
	if resp := owner.post("/panel/settings/security", url.Values{}); resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/panel/settings/security" {
		t.Errorf("the OWNER lifts the requirement: %d %s", resp.status, resp.header.Get("Location"))
	}
	if recs := h.audit(cloud.ActionOrg2FA); len(recs) != 2 || string(recs[0].Details) != `{"from":true,"to":false}` {
		t.Errorf("requirement records %+v", recs)
	}
}
