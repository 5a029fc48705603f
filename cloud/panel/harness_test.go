package panel_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/panel"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/storetest"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/ids"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/shared/serialcfg"
	"github.com/fleet/fleet/test/rig/dialects"
)

// The tests run the panel on a real store (each on SQLite and on
// PostgreSQL, see stores) behind a real HTTP server on loopback, signed in
// as people of each role.

// stores are the dialects every test of the panel runs on.
var stores dialects.Each

func TestMain(m *testing.M) { stores.Main(m) }

const testPassword = "correct horse battery staple"

// testPoint is the point the harness's device reads on rs485-1.
const testPoint = "rs485-1.boiler_temp"

// fastHasher keeps argon2id cheap in tests.
var fastHasher = password.NewHasher(password.Params{MemoryKiB: 64, Time: 1, Threads: 1}, 4)

type harness struct {
	t        *testing.T
	ctx      context.Context
	s        storetest.Stores
	db       cloud.Store
	ps       cloud.PanelStore
	srv      *panel.Server
	ts       *httptest.Server
	org      cloud.Org
	other    cloud.Org
	users    map[cloud.Role]cloud.User
	device   resource.DeviceDetail // an IG-500 of org
	token    string                // device's agent token
	gate     resource.DeviceDetail // an IG-100 of org (no serial I/O)
	foreign  resource.DeviceDetail // a device of the other organization
	alerts   []resource.Alert      // one ACTIVE alert per alert action route
	key      *cloud.APIKey
	delivery string // an alert webhook delivery that failed with 503
	// rules of org for the rule routes: [0] "Boiler hot" (a threshold on
	// testPoint), [1] disabled, [2] enabled, [3] to delete.
	rules []resource.AlertRule
	// channels of org: [0] e-mail (to test), [1] slack (to remove).
	channels []resource.NotificationChannel
	silence  resource.Silence // an active silence of org
	// releases of org: [0] 1.4.0 arm64, [1] 1.4.0 amd64, [2] 1.3.0 amd64.
	releases []cloud.Release
	// rollouts of org, of 1.4.0 to device: [0] running (to pause), [1]
	// paused (to resume), [2] running (to cancel).
	rollouts []resource.RolloutDetail
	claim    cloud.Claim // an active claim of org (to revoke)
}

func newHarness(t *testing.T, open storetest.Opener, tweak ...func(*panel.Config)) *harness {
	t.Helper()
	ctx := context.Background()
	s := open(t, nil)
	db := s.Store
	h := &harness{t: t, ctx: ctx, s: s, db: db, ps: s.Panel, users: map[cloud.Role]cloud.User{}}
	h.org = must(db.CreateOrg(ctx, "Acme"))
	h.other = must(db.CreateOrg(ctx, "Other"))
	for _, r := range cloud.Roles {
		h.users[r] = h.mustUser(h.org.ID, strings.ToLower(string(r))+"@acme.example", r)
	}
	h.mustUser(h.other.ID, "owner@other.example", cloud.RoleOwner)
	h.device, h.token = must2(db.AddDevice(ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Press line 1", SerialNumber: "SN-1", Model: "IG-500", Location: "Hall A"}))
	h.gate, _ = must2(db.AddDevice(ctx, cloud.NewDevice{OrgID: h.org.ID, Name: "Gatehouse", SerialNumber: "SN-2", Model: "IG-100"}))
	h.foreign, _ = must2(db.AddDevice(ctx, cloud.NewDevice{OrgID: h.other.ID, Name: "Not yours", SerialNumber: "SN-9", Model: "IG-500"}))
	for _, rule := range []string{"high_cpu", "high_mem", "disk_full", "high_temp"} {
		h.alerts = append(h.alerts, storetest.Alert(t, s.Engine, db.Alerts(), storetest.NewAlert{OrgID: h.org.ID, DeviceID: h.device.ID, Rule: rule, Message: rule + " over its threshold"}))
	}
	h.delivery = ids.New()
	now := time.Now()
	if err := s.Outbox.WriteOutbox(ctx, []*webhook.Delivery{{ID: h.delivery, OrgID: h.org.ID, DeviceID: h.device.ID,
		Event: "alert.opened", URL: "https://example.com/alerts", Body: []byte(`{}`), NextAttemptAt: now, CreatedAt: now}},
		[]webhook.Attempt{{DeliveryID: h.delivery, Number: 1, At: now, StatusCode: 503, State: webhook.StateFailed}}); err != nil {
		t.Fatal(err)
	}
	// rs485-1 reads one point, testPoint.
	ch := must(db.Serial().Channel(ctx, h.org.ID, h.device.ID, "rs485-1"))
	ch.Config.RS485.Points = []serialcfg.RS485Point{{Name: "boiler_temp", Function: "holding", Register: 0, Type: "f32", Unit: "°C"}}
	must(db.Serial().PutChannel(ctx, h.org.ID, h.device.ID, "rs485-1", ch.Config))
	h.key, _ = must2(db.CreateKey(ctx, h.org.ID, "ERP", []string{cloud.ScopeDevicesRead}, 0))
	rs := db.Rules()
	for _, c := range []cloud.NewChannel{
		{OrgID: h.org.ID, Name: "Ops mail", Kind: resource.ChannelEmail, Target: "ops@acme.example", MinSeverity: resource.SeverityWarning},
		{OrgID: h.org.ID, Name: "Ops chat", Kind: resource.ChannelSlack, Target: "https://hooks.example.com/services/T0/B0/secret"},
	} {
		h.channels = append(h.channels, must(rs.CreateChannel(ctx, c)))
	}
	for i, name := range []string{"Boiler hot", "Spare off", "Spare on", "Spare to delete"} {
		r := testRule(name)
		r.Enabled = i != 1
		if i == 0 {
			r.Notify = []string{h.channels[0].ID}
		}
		h.rules = append(h.rules, must(rs.CreateRule(ctx, h.org.ID, r)))
	}
	h.silence = must(rs.CreateSilence(ctx, h.org.ID, cloud.NewSilence{Scope: resource.RuleScope{DeviceIDs: []string{h.gate.ID}},
		To: time.Now().Add(2 * time.Hour), Comment: "gate maintenance", CreatedBy: "cli"}))
	bin, sig := storetest.ReleaseBinary(t, 2048)
	for _, nr := range []cloud.NewRelease{{Version: "1.4.0", Arch: "arm64"}, {Version: "1.4.0", Arch: "amd64"}, {Version: "1.3.0", Arch: "amd64"}} {
		nr.OrgID, nr.Signature = h.org.ID, sig
		h.releases = append(h.releases, storetest.Release(t, db.Releases(), nr, bin))
	}
	for range 3 {
		h.rollouts = append(h.rollouts, must(db.Rollouts().CreateRollout(ctx, h.org.ID, resource.NewRollout{Version: "1.4.0",
			Scope: resource.RolloutScope{DeviceIDs: []string{h.device.ID}}})))
	}
	h.rollouts[1] = must(db.Rollouts().ActRollout(ctx, h.org.ID, h.rollouts[1].ID, "pause"))
	h.claim, _ = must2(db.Claims().CreateClaim(ctx, cloud.NewClaim{OrgID: h.org.ID, Model: "IG-500", Tags: []string{"line-3"}, Uses: 2}))
	cfg := panel.Config{
		Devices: db.Devices(), Serial: db.Serial(), Alerts: db.Alerts(), Points: db.Points(),
		Fleet: h.ps, Glance: h.ps, Users: h.ps, Sessions: h.ps, Keys: h.ps, Webhooks: h.ps, Rules: rs, TwoFactor: h.ps, OIDC: h.ps,
		Rollouts: db.Rollouts(), Releases: db.Releases(), Claims: db.Claims(), Audit: db.Audit(),
		Hasher: fastHasher, Now: time.Now,
	}
	for _, f := range tweak {
		f(&cfg)
	}
	var err error
	if h.srv, err = panel.New(cfg); err != nil {
		t.Fatal(err)
	}
	h.ts = httptest.NewServer(h.srv)
	t.Cleanup(h.ts.Close)
	return h
}

// testRule is a threshold rule on testPoint: over 80 for 1 min, clears
// under 75.
func testRule(name string) resource.AlertRule {
	v, c := 80.0, 75.0
	return resource.AlertRule{Name: name, Enabled: true, Severity: resource.SeverityError, Notify: []string{}, RepeatEvery: "0s",
		Condition: resource.RuleCondition{Kind: resource.ConditionThreshold, Source: "point." + testPoint, Op: ">", Value: &v, Clear: &c, For: "1m"}}
}

// online connects device's agent: the device is ONLINE (a reboot needs a
// connected device).
func (h *harness) online() {
	h.t.Helper()
	storetest.Connect(h.t, h.s.Agent, h.agent(h.token), time.Now(), protocol.Hello{AgentVersion: "1.3.0", Arch: "arm64"})
}

// agent is d, a device of org, as its agent (of token) writes.
func (h *harness) agent(token string) agentlink.Device {
	h.t.Helper()
	return storetest.Auth(h.t, h.s.Agent, token)
}

func (h *harness) mustUser(org, email string, r cloud.Role) cloud.User {
	h.t.Helper()
	hash, err := fastHasher.Hash(h.ctx, testPassword)
	if err != nil {
		h.t.Fatal(err)
	}
	return must(h.ps.CreateUser(h.ctx, cloud.NewUser{OrgID: org, Email: email, Role: r, PasswordHash: hash}))
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func must2[T, U any](v T, u U, err error) (T, U) {
	if err != nil {
		panic(err)
	}
	return v, u
}

// client is a browser stand-in: a cookie jar, no redirects followed.
type client struct {
	t    *testing.T
	hc   *http.Client
	base string
	// header is added to every request.
	header http.Header
}

func (h *harness) anon() *client {
	jar, _ := cookiejar.New(nil)
	return &client{t: h.t, base: h.ts.URL, header: http.Header{}, hc: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}}
}

// withSession returns a client that sends token as its session cookie
// (one a browser kept, replayed, or forged).
func (h *harness) withSession(token string) *client {
	c := h.anon()
	c.header.Set("Cookie", panel.SessionCookie+"="+token)
	return c
}

// session is the session token in c's cookie jar.
func (c *client) session() string {
	u, _ := url.Parse(c.base + "/panel/")
	return c.hc.Jar.Cookies(u)[0].Value
}

// signIn returns a client signed in as the user of role r.
func (h *harness) signIn(r cloud.Role) *client {
	h.t.Helper()
	c := h.anon()
	resp := c.post("/panel/login", url.Values{"email": {h.users[r].Email}, "password": {testPassword}})
	if resp.status != http.StatusSeeOther || resp.header.Get("Location") != "/panel/" {
		h.t.Fatalf("sign in as %s: %d %s", r, resp.status, resp.body)
	}
	return c
}

type response struct {
	status int
	header http.Header
	body   string
}

func (c *client) do(req *http.Request) response {
	c.t.Helper()
	for k, v := range c.header {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{resp.StatusCode, resp.Header, string(b)}
}

func (c *client) get(path string) response {
	c.t.Helper()
	req, _ := http.NewRequest("GET", c.base+path, nil)
	return c.do(req)
}

// upload posts form as multipart/form-data with one file, as a browser
// sends a form with a file input.
func (c *client) upload(path string, form url.Values, file upload) response {
	c.t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	for k, vs := range form {
		for _, v := range vs {
			mw.WriteField(k, v)
		}
	}
	if file.Field != "" {
		fw, err := mw.CreateFormFile(file.Field, file.Name)
		if err != nil {
			c.t.Fatal(err)
		}
		fw.Write(file.Content)
	}
	mw.Close()
	req, _ := http.NewRequest("POST", c.base+path, &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	return c.do(req)
}

// upload is a file a form sends.
type upload struct {
	Field, Name string
	Content     []byte
}

func (c *client) post(path string, form url.Values) response {
	c.t.Helper()
	req, _ := http.NewRequest("POST", c.base+path, strings.NewReader(form.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return c.do(req)
}

// state is everything a panel action could change in the organization, as
// JSON, to prove that a refused action changed nothing.
func (h *harness) state() string {
	h.t.Helper()
	ctx := h.ctx
	var v []any
	v = append(v, must(h.ps.OrgKeys(ctx, h.org.ID)), must(h.ps.ListUsers(ctx, h.org.ID)))
	for _, s := range []resource.AlertState{resource.AlertActive, resource.AlertAcknowledged, resource.AlertResolved} {
		v = append(v, must(h.db.Alerts().ListAlerts(ctx, h.org.ID, cloud.AlertFilter{State: s, Page: cloud.Page{Limit: 100}})))
	}
	v = append(v, must(h.db.Serial().Serial(ctx, h.org.ID, h.device.ID)))
	v = append(v, must(h.db.Devices().Device(ctx, h.org.ID, h.device.ID)))
	v = append(v, must(h.ps.WebhookSettings(ctx, h.org.ID)))
	v = append(v, must(h.ps.TwoFactorOf(ctx, h.org.ID, h.users[cloud.RoleOwner].ID)))
	v = append(v, must(h.ps.RecentDeliveries(ctx, h.org.ID, 100)))
	rs := h.db.Rules()
	v = append(v, must(rs.ListRules(ctx, h.org.ID, cloud.Page{Limit: 1000})), must(rs.ListChannels(ctx, h.org.ID)),
		must(rs.ListSilences(ctx, h.org.ID, cloud.SilenceFilter{Page: cloud.Page{Limit: 1000}})))
	v = append(v, must(h.db.Rollouts().ListRollouts(ctx, h.org.ID, cloud.Page{Limit: 1000})), must(h.db.Claims().ListClaims(ctx, h.org.ID)),
		must(h.s.Commands.PendingCommands(ctx, h.agent(h.token))))
	sso, _ := h.ps.OrgOIDC(ctx, h.org.ID) // zero without single sign-on
	v = append(v, sso)
	b, err := json.Marshal(v)
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}
