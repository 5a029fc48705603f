package panel_test

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/storetest"
)

// TestRoleMatrix requests every route as every role: a role without the
// route's permission gets 403 and, for actions, the organization's state
// is unchanged even though the form would have worked; a role with it is
// served (never 403, never sent to sign in).
func TestRoleMatrix(t *testing.T) { stores.Run(t, testRoleMatrix) }

func testRoleMatrix(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	h.online()
	routes := h.srv.Routes()
	if len(routes) < 20 {
		t.Fatalf("only %d routes", len(routes))
	}
	effective := h.effectiveForms()
	for _, role := range cloud.Roles {
		c := h.signIn(role)
		for _, rt := range routes {
			if rt.Perm == "" || rt.Pattern == "/panel/logout" {
				continue
			}
			path := h.fill(rt.Pattern)
			name := fmt.Sprintf("%s %s %s", role, rt.Method, rt.Pattern)
			allowed := role.Can(rt.Perm)
			if rt.Method == "GET" {
				resp := c.get(path)
				if allowed != (resp.status != http.StatusForbidden) || isSignIn(resp) {
					t.Errorf("%s: status %d, want %s", name, resp.status, want(allowed))
				}
				continue
			}
			if allowed {
				resp := c.post(path, harmlessForm(rt.Pattern, h))
				if resp.status == http.StatusForbidden || isSignIn(resp) {
					t.Errorf("%s: status %d, want it served", name, resp.status)
				}
				continue
			}
			form, ok := effective[rt.Pattern]
			if !ok {
				t.Fatalf("no effective form for %s", rt.Pattern)
			}
			before := h.state()
			resp := h.send(c, rt.Pattern, form)
			if resp.status != http.StatusForbidden {
				t.Errorf("%s: status %d, want 403", name, resp.status)
			}
			if !strings.Contains(resp.body, "does not allow this; nothing was changed") {
				t.Errorf("%s: the 403 page does not say why: %s", name, resp.body)
			}
			if after := h.state(); after != before {
				t.Errorf("%s: refused, yet the organization changed:\nbefore %s\nafter  %s", name, before, after)
			}
		}
		if resp := c.post("/panel/logout", nil); resp.status != http.StatusSeeOther {
			t.Errorf("%s logout: %d", role, resp.status)
		}
	}
}

// TestEffectiveFormsWork proves that the forms the matrix sends to refused
// roles do change things when an OWNER sends them: the 403s above refused
// real changes.
func TestEffectiveFormsWork(t *testing.T) { stores.Run(t, testEffectiveFormsWork) }

func testEffectiveFormsWork(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	h.online()
	c := h.signIn(cloud.RoleOwner)
	forms := h.effectiveForms()
	patterns := slices.Sorted(maps.Keys(forms))
	// Requiring two-factor sign-in goes last: from then on the unenrolled
	// OWNER is led to enrolment.
	patterns = append(slices.DeleteFunc(patterns, func(p string) bool { return p == "/panel/settings/security" }), "/panel/settings/security")
	for _, pattern := range patterns {
		form := forms[pattern]
		before := h.state()
		resp := h.send(c, pattern, form)
		if resp.status >= 400 {
			t.Errorf("%s: %d %s", pattern, resp.status, resp.body)
			continue
		}
		if h.state() == before {
			t.Errorf("%s: the OWNER's form changed nothing", pattern)
		}
	}
}

// send posts form to the route of pattern, with the DBC file of
// effectiveUploads when the route takes one.
func (h *harness) send(c *client, pattern string, form url.Values) response {
	if up, ok := effectiveUploads[pattern]; ok {
		return c.upload(h.fill(pattern), form, up)
	}
	return c.post(h.fill(pattern), form)
}

// testDBC is a DBC file of one message with two signals, one of each byte
// order.
const testDBC = `VERSION ""

NS_ :

BS_:

BU_: ECU Gateway

BO_ 256 EngineData: 8 ECU
 SG_ EngineSpeed : 0|16@1+ (0.25,0) [0|16383.75] "rpm" Gateway
 SG_ CoolantTemp : 23|8@0- (1,-40) [-40|215] "degC" Gateway
`

// effectiveUploads are the files the routes that take one are sent.
var effectiveUploads = map[string]upload{
	"/panel/devices/{id}/channels/{ch}/dbc": {Field: "dbc", Name: "engine.dbc", Content: []byte(testDBC)},
}

func want(allowed bool) string {
	if allowed {
		return "served"
	}
	return "403"
}

func isSignIn(r response) bool {
	return r.status == http.StatusSeeOther && strings.HasPrefix(r.header.Get("Location"), "/panel/login")
}

// fill puts the harness's ids into a route pattern.
func (h *harness) fill(pattern string) string {
	r := strings.NewReplacer(
		"/devices/{id}", "/devices/"+h.device.ID,
		"{ch}/dbc", "canfd-1/dbc",
		"{ch}", "rs485-1",
		"{point}", testPoint,
		"/alerts/{id}/acknowledge", "/alerts/"+h.alerts[0].ID+"/acknowledge",
		"/alerts/{id}/resolve", "/alerts/"+h.alerts[1].ID+"/resolve",
		"/rules/{id}/save", "/rules/"+h.rules[0].ID+"/save",
		"/rules/{id}/enable", "/rules/"+h.rules[1].ID+"/enable",
		"/rules/{id}/disable", "/rules/"+h.rules[2].ID+"/disable",
		"/rules/{id}/delete", "/rules/"+h.rules[3].ID+"/delete",
		"/rules/{id}", "/rules/"+h.rules[0].ID,
		"/silences/{id}", "/silences/"+h.silence.ID,
		"/notifications/{id}/test", "/notifications/"+h.channels[0].ID+"/test",
		"/notifications/{id}/remove", "/notifications/"+h.channels[1].ID+"/remove",
		"/alerts/{id}", "/alerts/"+h.alerts[0].ID,
		"/api-keys/{id}", "/api-keys/"+h.key.ID,
		"/members/{id}", "/members/"+h.users[cloud.RoleViewer].ID,
		"/deliveries/{id}", "/deliveries/"+h.delivery,
		"/rollouts/{id}/pause", "/rollouts/"+h.rollouts[0].ID+"/pause",
		"/rollouts/{id}/resume", "/rollouts/"+h.rollouts[1].ID+"/resume",
		"/rollouts/{id}/cancel", "/rollouts/"+h.rollouts[2].ID+"/cancel",
		"/rollouts/{id}", "/rollouts/"+h.rollouts[0].ID,
		"/claims/{id}", "/claims/"+h.claim.ID,
		"{$}", "",
	)
	return r.Replace(pattern)
}

// harmlessForm is a form that a permitted role may send without changing
// what later requests of the matrix need: no confirmation, empty or
// unchanged values.
func harmlessForm(pattern string, h *harness) url.Values {
	switch pattern {
	case "/panel/settings/members/{id}/role":
		return url.Values{"role": {string(cloud.RoleViewer)}}
	case "/panel/settings/webhooks/url":
		return url.Values{"url": {""}}
	}
	return url.Values{}
}

// effectiveForms are forms that change the organization when an OWNER
// sends them, by route pattern.
func (h *harness) effectiveForms() map[string]url.Values {
	ch := must(h.db.Serial().Channel(h.ctx, h.org.ID, h.device.ID, "rs485-1"))
	raw := must(json.Marshal(ch.Config))
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		h.t.Fatal(err)
	}
	chForm := url.Values{}
	flatten("", doc, chForm)
	chForm.Set("baudRate", "19200")
	return map[string]url.Values{
		"/panel/devices/{id}/channels/{ch}":     chForm,
		"/panel/devices/{id}/channels/{ch}/dbc": {},
		"/panel/devices/{id}/serial":            {"mode": {"both"}, "webhookUrl": {"https://example.com/signals"}, "webhookEnabled": {"true"}},
		"/panel/devices/{id}/edit":              {"name": {"Press line 2"}, "location": {"Hall B"}, "tags": {"line-2"}, "notes": {"moved"}},
		"/panel/alerts/acknowledge":             {"id": {h.alerts[2].ID}},
		"/panel/alerts/resolve":                 {"id": {h.alerts[3].ID}},
		"/panel/alerts/{id}/acknowledge":        {},
		"/panel/alerts/{id}/resolve":            {},
		"/panel/settings/api-keys":              {"name": {"Replayed"}, "scope": {cloud.ScopeDevicesRead}, "expires": {"30"}},
		"/panel/settings/api-keys/{id}/revoke":  {"confirm": {"yes"}},
		"/panel/settings/members":               {"email": {"new@acme.example"}, "role": {"MEMBER"}},
		"/panel/settings/sso": {"issuer": {"https://login.acme.example"}, "client_id": {"fleet"}, "client_secret": {"s"},
			"domains": {"acme.example"}, "default_role": {"VIEWER"}, "enabled": {"on"}},
		"/panel/settings/members/{id}/role":                  {"role": {"ADMIN"}},
		"/panel/settings/members/{id}/disable":               {"confirm": {"yes"}},
		"/panel/settings/webhooks/url":                       {"url": {"https://example.com/alerts"}},
		"/panel/settings/webhooks/rotate":                    {"grace": {"0"}},
		"/panel/settings/webhooks/deliveries/{id}/redeliver": {},
		"/panel/alerts/rules":                                ruleForm("Replayed rule", h.channels[0].ID),
		"/panel/alerts/rules/{id}/save":                      ruleForm("Boiler very hot", h.channels[0].ID),
		"/panel/alerts/rules/{id}/enable":                    {},
		"/panel/alerts/rules/{id}/disable":                   {},
		"/panel/alerts/rules/{id}/delete":                    {"confirm": {"yes"}},
		"/panel/alerts/silences":                             {"scope": {"all"}, "duration": {"4h"}, "comment": {"replayed"}},
		"/panel/alerts/silences/{id}/end":                    {},
		"/panel/settings/notifications":                      {"name": {"Replayed"}, "kind": {"email"}, "target": {"x@acme.example"}, "minSeverity": {"INFO"}},
		"/panel/settings/notifications/{id}/test":            {},
		"/panel/settings/notifications/{id}/remove":          {"confirm": {"yes"}},
		"/panel/devices/{id}/serial/enabled":                 {"enabled": {"false"}, "confirm": {"yes"}},
		"/panel/devices/{id}/reboot":                         {"confirm": {"yes"}},
		"/panel/rollouts": {"version": {"1.4.0"}, "scope": {"devices"}, "deviceIds": {h.device.ID}, "waves": {"50, 100"},
			"maxFailures": {"1"}, "healthFor": {"1m"}},
		"/panel/rollouts/{id}/pause":  {},
		"/panel/rollouts/{id}/resume": {},
		"/panel/rollouts/{id}/cancel": {"confirm": {"yes"}},
		"/panel/claims":               {"model": {"IG-500"}, "tags": {"line-4"}, "uses": {"5"}, "expires": {"7"}},
		"/panel/claims/{id}/revoke":   {"confirm": {"yes"}},
		"/panel/settings/security":    {"require2fa": {"true"}},
	}
}

func flatten(prefix string, v any, out url.Values) {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			p := k
			if prefix != "" {
				p = prefix + "." + k
			}
			flatten(p, x, out)
		}
	case []any:
		for i, x := range v {
			flatten(fmt.Sprintf("%s[%d]", prefix, i), x, out)
		}
	case bool:
		if v {
			out.Set(prefix, "true")
		}
	case float64:
		out.Set(prefix, fmt.Sprint(v))
	case string:
		out.Set(prefix, v)
	}
}
