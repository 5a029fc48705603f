package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
	"github.com/fleet/fleet/test/rig/linktest"
	"github.com/fleet/fleet/test/rig/logbuf"
)

// claimPost posts body to the claim endpoint of the relay at addr with
// token as bearer token and returns the status and the body.
func claimPost(t *testing.T, addr, token, body string) (int, []byte) {
	t.Helper()
	return apiCall(t, http.MethodPost, "http://"+addr+protocol.ClaimPath, token, body)
}

// TestClaimEndpoint: `claim create` prints a token once, `claim list`
// never; over a running relay's claim endpoint a two-use claim registers
// two gateways (the claim's model and tags) whose tokens open the agent
// websocket, refuses the third (401 saying used up) with nothing created,
// answers the same serial again with the same device; bad requests are
// refused for what they are; `claim revoke` refuses it from then on;
// refused tokens are throttled per address (429) and no token is ever in
// the relay's log. On each store.
func TestClaimEndpoint(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testClaimEndpoint(t, db) })
	}
}

func testClaimEndpoint(t *testing.T, db string) {
	var logs logbuf.Buffer
	m := NewMain(&logs)
	if err := m.ParseFlags([]string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0", "--rate-limit", "100000"}); err != nil {
		t.Fatal(err)
	}
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	addr := m.Addr()

	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var c struct {
		ID, Token, Model, State string
		Tags                    []string
		Uses, Used              int
		ExpiresAt               *string
	}
	mustJSON(t, &c, "claim", "create", "--db", db, "--org", org.ID, "--model", "IG-500", "--tags", "line-3, site:north", "--uses", "2", "--expires", "7d")
	if !strings.HasPrefix(c.Token, cloud.ClaimTokenPrefix) || c.Model != "IG-500" || c.Uses != 2 || c.State != "active" || c.ExpiresAt == nil ||
		strings.Join(c.Tags, ",") != "line-3,site:north" {
		t.Fatalf("claim create printed %+v", c)
	}
	secret := strings.TrimPrefix(c.Token, cloud.ClaimTokenPrefix)
	human, _, code := cli(t, "claim", "create", "--db", db, "--org", org.ID, "--model", "IG-100")
	if code != 0 || !strings.Contains(human, cloud.ClaimTokenPrefix) || !strings.Contains(human, "shown only this once") {
		t.Errorf("claim create for humans (exit %d): %q", code, human)
	}
	for _, bad := range [][]string{
		{"--model", "IG-9000"}, {"--model", "IG-500", "--uses", "0"}, {"--model", "IG-500", "--expires", "soon"},
		{"--model", "IG-500", "--tags", "Not OK"}, {},
	} {
		if _, errOut, code := cli(t, append([]string{"claim", "create", "--db", db, "--org", org.ID}, bad...)...); code == 0 {
			t.Errorf("claim create %q: exit 0, %q", bad, errOut)
		}
	}

	post := func(token, serial string) (int, protocol.ClaimResponse, string) {
		t.Helper()
		code, body := claimPost(t, addr, token, fmt.Sprintf(`{"serialNumber":%q,"model":"IG-500"}`, serial))
		var out protocol.ClaimResponse
		json.Unmarshal(body, &out)
		var e resource.ErrorBody
		json.Unmarshal(body, &e)
		return code, out, e.Error.Message
	}
	code1, gw1, _ := post(c.Token, "GW-1")
	code2, gw2, _ := post(c.Token, "GW-2")
	if code1 != 200 || code2 != 200 || gw1.DeviceID == "" || gw2.DeviceID == gw1.DeviceID || !strings.HasPrefix(gw2.Token, "fleet_dt_") {
		t.Fatalf("two claims: %d %+v, %d %+v", code1, gw1, code2, gw2)
	}
	dialRelay(t, addr, gw2.Token) // the device token opens the agent endpoint
	code3, _, msg := post(c.Token, "GW-3")
	if code3 != 401 || !strings.Contains(msg, "used up") {
		t.Errorf("third claim: %d %q", code3, msg)
	}
	again, gw1b, _ := post(c.Token, "GW-1")
	if again != 200 || gw1b.DeviceID != gw1.DeviceID || gw1b.Token == gw1.Token {
		t.Errorf("GW-1 again: %d %+v", again, gw1b)
	}
	if _, resp, err := linktest.Dial(t, "http://"+addr, gw1.Token); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Errorf("the replaced token still opens the agent endpoint: %v", err)
	}
	dialRelay(t, addr, gw1b.Token)

	var devices []resource.Device
	mustJSON(t, &devices, "device", "list", "--db", db, "--org", org.ID)
	if len(devices) != 2 {
		t.Fatalf("devices after the refused third: %+v", devices)
	}
	for _, d := range devices {
		if d.Model != "IG-500" || strings.Join(d.Tags, ",") != "line-3,site:north" || (d.Name != "GW-1" && d.Name != "GW-2") {
			t.Errorf("claimed device %+v", d)
		}
	}

	// Requests refused for what they are.
	for _, tc := range []struct {
		method, token, body string
		code                int
		want                string
	}{
		{http.MethodGet, c.Token, "", 405, "POST"},
		{http.MethodPost, "", `{"serialNumber":"GW-9"}`, 401, "claim token is required"},
		{http.MethodPost, c.Token, `{"serialNumber":`, 400, ""},
		{http.MethodPost, c.Token, `{"serialNumber":"GW-9","extra":1}`, 400, "extra"},
		{http.MethodPost, c.Token, `{"serialNumber":"` + strings.Repeat("x", 5000) + `"}`, 413, "4096"},
		{http.MethodPost, c.Token, `{"serialNumber":"GW-1","model":"IG-100"}`, 400, "model"},
	} {
		code, body := apiCall(t, tc.method, "http://"+addr+protocol.ClaimPath, tc.token, tc.body)
		if code != tc.code || !strings.Contains(string(body), tc.want) {
			t.Errorf("%s %s: %d %s, want %d saying %q", tc.method, tc.body[:min(len(tc.body), 40)], code, body, tc.code, tc.want)
		}
	}
	var other struct{ ID string }
	mustJSON(t, &other, "device", "add", "--db", db, "--org", org.ID, "--name", "by hand", "--serial", "HAND-1", "--model", "IG-500")
	var c2 struct{ ID, Token string }
	mustJSON(t, &c2, "claim", "create", "--db", db, "--org", org.ID, "--model", "IG-500", "--uses", "5")
	if code, _, msg := post(c2.Token, "HAND-1"); code != 409 || !strings.Contains(msg, "HAND-1") {
		t.Errorf("a serial added by hand: %d %q", code, msg)
	}

	// List and revoke.
	var list []struct {
		ID, State string
		Used      int
		Token     string
	}
	mustJSON(t, &list, "claim", "list", "--db", db, "--org", org.ID)
	if len(list) != 3 || list[0].ID != c.ID || list[0].State != "used_up" || list[0].Used != 2 || list[0].Token != "" {
		t.Errorf("claim list = %+v", list)
	}
	if out, _, code := cli(t, "claim", "list", "--db", db, "--org", org.ID); code != 0 || strings.Contains(out, secret) || !strings.Contains(out, "used_up") || !strings.Contains(out, "2/2") {
		t.Errorf("claim list for humans (exit %d): %q", code, out)
	}
	var rev struct{ ID, RevokedAt string }
	mustJSON(t, &rev, "claim", "revoke", "--db", db, "--id", c2.ID)
	if rev.ID != c2.ID || rev.RevokedAt == "" {
		t.Errorf("claim revoke printed %+v", rev)
	}
	if code, _, msg := post(c2.Token, "GW-5"); code != 401 || !strings.Contains(msg, "revoked") {
		t.Errorf("revoked claim: %d %q", code, msg)
	}
	if _, errOut, code := cli(t, "claim", "revoke", "--db", db, "--id", "nosuchclaim"); code == 0 || !strings.Contains(errOut, "not found") {
		t.Errorf("claim revoke of an unknown claim: exit %d %q", code, errOut)
	}

	// Guessing tokens: refused, then throttled for the address.
	throttled := false
	for i := 0; i < 40 && !throttled; i++ {
		code, _, _ := post(fmt.Sprintf("fleet_ct_GUESS%d", i), "GW-9")
		throttled = code == 429
	}
	if !throttled {
		t.Error("40 refused claim tokens from one address were never answered 429")
	}
	if code, _, _ := post(c.Token, "GW-1"); code != 429 {
		t.Errorf("a good token from a throttled address: %d, want 429", code)
	}

	for _, tok := range []string{secret, strings.TrimPrefix(gw1.Token, "fleet_dt_"), strings.TrimPrefix(gw1b.Token, "fleet_dt_")} {
		if strings.Contains(logs.String(), tok) {
			t.Fatalf("a token is in the relay's log")
		}
	}
	if !strings.Contains(logs.String(), "gateway claimed") {
		t.Errorf("no claim in the relay's log")
	}
}
