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
	"github.com/fleet/fleet/shared/protocol"
)

var claimTokenRE = regexp.MustCompile(cloud.ClaimTokenPrefix + `[A-Za-z0-9]+`)

// TestClaimsPage: a claim made in the panel is shown once with the agent's
// command line (the token in FLEET_CLAIM, never an argument) and works;
// the list says each claim's state; an error comes back beside its field;
// Revoke asks first.
func TestClaimsPage(t *testing.T) { stores.Run(t, testClaimsPage) }

func testClaimsPage(t *testing.T, open storetest.Opener) {
	h := newHarness(t, open)
	c := h.signIn(cloud.RoleAdmin)
	page := c.get("/panel/claims").body
	for _, s := range []string{`<label for="claim-model">Model</label>`, `<label for="claim-tags">Tags</label>`, `<label for="claim-uses">Uses</label>`,
		`<label for="claim-expires">Expires</label>`, `<option value="7" selected>7 days</option>`, ">Create claim</button>",
		`data-claim-id="` + h.claim.ID + `"`, `<span class="rstate rstate-active">active</span>`, "0 of 2", `aria-label="Revoke claim ` + h.claim.ID + `"`} {
		if !strings.Contains(page, s) {
			t.Errorf("the claims page lacks %q", s)
		}
	}

	r := c.post("/panel/claims", url.Values{"model": {"IG-500"}, "tags": {"line-4, pump"}, "uses": {"3"}, "expires": {"30"}})
	if r.status != http.StatusOK {
		t.Fatalf("create: %d %s", r.status, firstError(r.body))
	}
	token := claimTokenRE.FindString(r.body)
	if token == "" || !strings.Contains(r.body, "shown only this once") || !strings.Contains(r.body, `data-testid="new-claim"`) {
		t.Fatalf("the new claim's token is not shown with its copy field")
	}
	cmd := regexp.MustCompile(`(?s)<pre class="command" data-testid="claim-command"><code>(.*?)</code></pre>`).FindStringSubmatch(r.body)
	if cmd == nil || !strings.Contains(cmd[1], "FLEET_CLAIM='"+token+"' fleet-agent --relay "+h.ts.URL) || strings.Contains(cmd[1], "--claim") ||
		!strings.Contains(cmd[1], "--model IG-500") || !strings.Contains(cmd[1], "--serial") {
		t.Errorf("the agent's command line: %q", cmd)
	}
	if !strings.Contains(r.body, "claim: "+token) {
		t.Error("no agent.yaml lines with the token")
	}
	// The token works, once per serial, with the claim's tags.
	claimed := must(h.db.Claims().RedeemClaim(h.ctx, cloud.ClaimRedeem{Token: token, ClaimRequest: protocol.ClaimRequest{SerialNumber: "SN-C1", Model: "IG-500"}, At: time.Now()}))
	if d := must(h.db.Devices().Device(h.ctx, h.org.ID, claimed.DeviceID)); strings.Join(d.Tags, ",") != "line-4,pump" {
		t.Errorf("the claimed device's tags: %v", d.Tags)
	}
	page = c.get("/panel/claims").body
	if strings.Contains(page, token) || strings.Contains(page, cloud.ClaimTokenPrefix) {
		t.Error("the claims list shows a token again")
	}
	if !strings.Contains(page, "1 of 3") || !strings.Contains(page, `<a class="tag" href="/panel/?tag=pump">pump</a>`) {
		t.Error("the list does not show the new claim's use and tags")
	}

	// Refused fields, beside their field, with what was typed.
	for _, tc := range []struct{ field, value, id, typed string }{
		{"uses", "0", "claim-uses", `value="0"`},
		{"uses", "many", "claim-uses", `value="many"`},
		{"tags", "Line 4", "claim-tags", `value="Line 4"`},
		{"model", "IG-9", "claim-model", ""},
		{"expires", "forever", "claim-expires", ""},
	} {
		f := url.Values{"model": {"IG-500"}, "tags": {""}, "uses": {"1"}, "expires": {"7"}}
		f.Set(tc.field, tc.value)
		before := h.state()
		r := c.post("/panel/claims", f)
		if r.status != http.StatusBadRequest || !strings.Contains(r.body, `id="`+tc.id+`-error"`) || !strings.Contains(r.body, tc.typed) || claimTokenRE.MatchString(r.body) {
			t.Errorf("%s=%q: %d: %s", tc.field, tc.value, r.status, firstError(r.body))
		}
		if h.state() != before {
			t.Errorf("%s=%q: a refused claim changed the organization", tc.field, tc.value)
		}
	}

	// States: used up, expired, revoked.
	_, once := must2(h.db.Claims().CreateClaim(h.ctx, cloud.NewClaim{OrgID: h.org.ID, Model: "IG-100", Uses: 1}))
	must(h.db.Claims().RedeemClaim(h.ctx, cloud.ClaimRedeem{Token: once, ClaimRequest: protocol.ClaimRequest{SerialNumber: "SN-C2", Model: "IG-100"}, At: time.Now()}))
	short, _ := must2(h.db.Claims().CreateClaim(h.ctx, cloud.NewClaim{OrgID: h.org.ID, Model: "IG-100", ExpiresIn: time.Millisecond}))
	time.Sleep(5 * time.Millisecond)
	r = c.post("/panel/claims/"+h.claim.ID+"/revoke", nil)
	if r.status != http.StatusOK || !strings.Contains(r.body, "Revoke the claim "+h.claim.ID) || !strings.Contains(r.body, ">Revoke claim</button>") {
		t.Errorf("revoke without confirmation: %d", r.status)
	}
	if r := c.post("/panel/claims/"+h.claim.ID+"/revoke", url.Values{"confirm": {"yes"}}); r.status != http.StatusSeeOther {
		t.Errorf("revoke: %d", r.status)
	}
	page = c.get("/panel/claims").body
	for _, s := range []string{"Claim " + h.claim.ID + " revoked.", `<span class="rstate rstate-revoked">revoked</span>`, `<span class="rstate rstate-used_up">used up</span>`,
		`<span class="rstate rstate-expired">expired</span>`} {
		if !strings.Contains(page, s) {
			t.Errorf("the claims page lacks %q", s)
		}
	}
	if strings.Contains(page, `aria-label="Revoke claim `+short.ID+`"`) || strings.Contains(page, `aria-label="Revoke claim `+h.claim.ID+`"`) {
		t.Error("an expired or revoked claim offers Revoke")
	}
	if _, err := h.db.Claims().RedeemClaim(h.ctx, cloud.ClaimRedeem{Token: once, ClaimRequest: protocol.ClaimRequest{SerialNumber: "SN-C3", Model: "IG-100"}, At: time.Now()}); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("a used-up claim redeemed: %v", err)
	}
	// Another organization's claim is not found.
	foreign := newHarness(t, open)
	if r := c.post("/panel/claims/"+foreign.claim.ID+"/revoke", url.Values{"confirm": {"yes"}}); r.status != http.StatusNotFound {
		t.Errorf("revoke another organization's claim: %d", r.status)
	}
}
