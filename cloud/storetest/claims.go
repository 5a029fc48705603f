package storetest

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/shared/protocol"
	"github.com/fleet/fleet/shared/resource"
)

// claim creates a claim of nc and returns it with its token.
func (e *env) claim(nc cloud.NewClaim) (cloud.Claim, string) {
	e.t.Helper()
	c, token, err := e.Store.Claims().CreateClaim(e.ctx, nc)
	if err != nil {
		e.t.Fatalf("CreateClaim(%+v): %v", nc, err)
	}
	return c, token
}

// redeem redeems token for serial as an IG-500 agent would.
func (e *env) redeem(token, serial string) (protocol.ClaimResponse, error) {
	return e.Store.Claims().RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: token,
		ClaimRequest: protocol.ClaimRequest{SerialNumber: serial, Model: "IG-500"}, At: e.clock.Now()})
}

// devicesOf lists every device of the organization.
func (e *env) devicesOf(orgID string) []resource.Device {
	e.t.Helper()
	l, err := e.Store.Devices().ListDevices(e.ctx, orgID, cloud.DeviceFilter{Page: cloud.Page{Limit: 1000}})
	if err != nil {
		e.t.Fatal(err)
	}
	return l.Data
}

// wantRefused checks that err is code with a message holding want.
func wantRefused(t testing.TB, what string, err error, code, want string) {
	t.Helper()
	if cloud.ErrorCode(err) != code || !strings.Contains(cloud.ErrorMessage(err), want) {
		t.Errorf("%s: %v, want %s saying %q", what, err, code, want)
	}
}

// testClaims: a claim token is shown once and only the claim is listed; a
// two-use claim registers two gateways (the claim's model and tags,
// PROVISIONING, named by their serial or the name given, a device.claimed
// event) and refuses the third with nothing created; the same serial again
// is the same device with a fresh token (the old one refused), no use
// counted, also once the claim is used up; a model other than the
// claim's, a serial registered otherwise, an unknown, expired or revoked
// claim are refused and create nothing; claims are the organization's.
func testClaims(t *testing.T, open Opener) {
	e := newEnv(t, open)
	org, other := e.org("acme"), e.org("other")
	svc := e.Store.Claims()

	for _, tc := range []struct {
		nc   cloud.NewClaim
		want string
	}{
		{cloud.NewClaim{OrgID: org.ID, Model: "IG-9000"}, "model"},
		{cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Tags: []string{"ok", "Not OK"}}, "tags[1]"},
		{cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Uses: 100001}, "uses"},
		{cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Uses: -1}, "uses"},
		{cloud.NewClaim{OrgID: org.ID, Model: "IG-500", ExpiresIn: -time.Hour}, "expires"},
	} {
		_, _, err := svc.CreateClaim(e.ctx, tc.nc)
		wantRefused(t, fmt.Sprintf("CreateClaim(%+v)", tc.nc), err, cloud.EINVALID, tc.want)
	}
	if _, _, err := svc.CreateClaim(e.ctx, cloud.NewClaim{OrgID: "nosuchorg", Model: "IG-500"}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("claim of an unknown organization: %v", err)
	}

	c, token := e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Tags: []string{"site:north", "line-3", "line-3"}, Uses: 2})
	if !strings.HasPrefix(token, cloud.ClaimTokenPrefix) || len(token) < len(cloud.ClaimTokenPrefix)+50 || c.Uses != 2 || c.Used != 0 ||
		!slices.Equal(c.Tags, []string{"line-3", "site:north"}) || c.ExpiresAt != nil || c.State(e.clock.Now()) != "active" {
		t.Fatalf("created %+v with token of %d characters", c, len(token))
	}
	e.clock.Add(time.Millisecond) // listed oldest first
	one, _ := e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-100"})
	if one.Uses != 1 {
		t.Errorf("default uses = %d", one.Uses)
	}
	list, err := svc.ListClaims(e.ctx, org.ID)
	if err != nil || len(list) != 2 || list[0].ID != c.ID || list[1].ID != one.ID {
		t.Fatalf("ListClaims = %+v, %v", list, err)
	}
	if b, _ := json.Marshal(list); strings.Contains(string(b), token[len(cloud.ClaimTokenPrefix):]) {
		t.Fatalf("the list holds the token: %s", b)
	}
	if l, err := svc.ListClaims(e.ctx, other.ID); err != nil || len(l) != 0 {
		t.Errorf("another organization's claims: %+v, %v", l, err)
	}

	// Two gateways.
	first, err := e.redeem(token, "GW-1")
	if err != nil {
		t.Fatal(err)
	}
	second, err := svc.RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: token, At: e.clock.Now(),
		ClaimRequest: protocol.ClaimRequest{SerialNumber: " GW-2 ", Name: "press 7", Location: "hall B"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []protocol.ClaimResponse{first, second} {
		if r.DeviceID == "" || !strings.HasPrefix(r.Token, "fleet_dt_") {
			t.Fatalf("redeemed %+v", r)
		}
	}
	d1, d2 := e.deviceRow(org.ID, first.DeviceID), e.deviceRow(org.ID, second.DeviceID)
	if d1.Name != "GW-1" || d1.SerialNumber != "GW-1" || d1.Model != "IG-500" || d1.Status != resource.StatusProvisioning || !slices.Equal(d1.Tags, c.Tags) {
		t.Errorf("first device %+v", d1)
	}
	if d2.Name != "press 7" || d2.SerialNumber != "GW-2" || d2.Location != "hall B" || !slices.Equal(d2.Tags, c.Tags) {
		t.Errorf("second device %+v", d2)
	}
	for _, r := range []protocol.ClaimResponse{first, second} {
		if dev, err := e.Agent.AuthDevice(e.ctx, sum(r.Token)); err != nil || dev.ID != r.DeviceID || dev.OrgID != org.ID {
			t.Errorf("the token of %s authenticates %+v, %v", r.DeviceID, dev, err)
		}
	}
	evs := e.eventsOf(device{DeviceDetail: d2, OrgID: org.ID}, protocol.EventDeviceClaimed)
	var data map[string]string
	if len(evs) != 1 || json.Unmarshal(evs[0].Data, &data) != nil || data["claimId"] != c.ID || data["serialNumber"] != "GW-2" || len(data) != 2 {
		t.Errorf("device.claimed events %+v", evs)
	}

	// The third is refused, and nothing is created.
	_, err = e.redeem(token, "GW-3")
	wantRefused(t, "third redeem", err, cloud.EUNAUTHORIZED, "used up")
	if ds := e.devicesOf(org.ID); len(ds) != 2 {
		t.Errorf("%d devices after a refused claim", len(ds))
	}
	if l, _ := svc.ListClaims(e.ctx, org.ID); l[0].Used != 2 || l[0].State(e.clock.Now()) != "used_up" {
		t.Errorf("claim after two uses: %+v", l[0])
	}

	// The same serial again, also through a used-up claim: the same
	// device, a fresh token; the old one no longer works.
	again, err := e.redeem(token, "GW-1")
	if err != nil || again.DeviceID != first.DeviceID || again.Token == first.Token {
		t.Fatalf("GW-1 again: %+v, %v", again, err)
	}
	if _, err := e.Agent.AuthDevice(e.ctx, sum(first.Token)); !errors.Is(err, agentlink.ErrUnauthorized) {
		t.Errorf("the replaced token: %v", err)
	}
	if dev, err := e.Agent.AuthDevice(e.ctx, sum(again.Token)); err != nil || dev.ID != first.DeviceID {
		t.Errorf("the fresh token: %+v, %v", dev, err)
	}
	if l, _ := svc.ListClaims(e.ctx, org.ID); l[0].Used != 2 || len(e.devicesOf(org.ID)) != 2 {
		t.Errorf("claiming again counted a use or made a device: %+v", l[0])
	}

	// Refusals that create nothing.
	other1, otherToken := e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Uses: 5})
	added := e.device(org.ID, "IG-500")
	_, err = e.redeem(otherToken, added.SerialNumber)
	wantRefused(t, "a serial added by hand", err, cloud.ECONFLICT, added.SerialNumber)
	_, err = e.redeem(otherToken, "GW-2")
	wantRefused(t, "a serial claimed through another claim", err, cloud.ECONFLICT, "GW-2")
	_, err = svc.RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: otherToken, ClaimRequest: protocol.ClaimRequest{SerialNumber: "GW-9", Model: "IG-100"}})
	wantRefused(t, "another model", err, cloud.EINVALID, "model")
	_, err = svc.RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: otherToken, ClaimRequest: protocol.ClaimRequest{SerialNumber: " "}})
	wantRefused(t, "no serial", err, cloud.EINVALID, "serialNumber")
	for _, bad := range []string{"", "fleet_ct_NOSUCHTOKEN", "fleet_dt_" + otherToken[9:], otherToken + "x"} {
		_, err = e.redeem(bad, "GW-9")
		wantRefused(t, fmt.Sprintf("token %q", bad), err, cloud.EUNAUTHORIZED, "unknown claim token")
	}
	// An unknown token is refused before its body is looked at.
	_, err = svc.RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: "fleet_ct_NOSUCHTOKEN"})
	wantRefused(t, "unknown token, empty body", err, cloud.EUNAUTHORIZED, "unknown claim token")

	// Revoked: refused; revoking is idempotent and the organization's.
	if _, err := svc.RevokeClaim(e.ctx, other.ID, other1.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("revoke through another organization: %v", err)
	}
	if org, err := e.Store.ClaimOrg(e.ctx, other1.ID); err != nil || org != other1.OrgID {
		t.Errorf("ClaimOrg = %q, %v", org, err)
	}
	if _, err := e.Store.ClaimOrg(e.ctx, "nosuchclaim"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("ClaimOrg of an unknown claim: %v", err)
	}
	r1, err := svc.RevokeClaim(e.ctx, org.ID, other1.ID)
	if err != nil || r1.RevokedAt == nil || r1.State(e.clock.Now()) != "revoked" {
		t.Fatalf("revoke: %+v, %v", r1, err)
	}
	e.clock.Add(time.Minute)
	if r2, err := svc.RevokeClaim(e.ctx, org.ID, other1.ID); err != nil || !r2.RevokedAt.Equal(*r1.RevokedAt) {
		t.Errorf("revoke again: %+v, %v", r2, err)
	}
	_, err = e.redeem(otherToken, "GW-10")
	wantRefused(t, "revoked claim", err, cloud.EUNAUTHORIZED, "revoked")
	if _, err := svc.RevokeClaim(e.ctx, org.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	_, err = e.redeem(token, "GW-1")
	wantRefused(t, "the same serial through a revoked claim", err, cloud.EUNAUTHORIZED, "revoked")

	// Expired.
	exp, expToken := e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Uses: 10, ExpiresIn: 7 * 24 * time.Hour})
	if exp.ExpiresAt == nil || !exp.ExpiresAt.Equal(exp.CreatedAt.Add(7*24*time.Hour)) {
		t.Fatalf("expiry %v of a claim created at %v", exp.ExpiresAt, exp.CreatedAt)
	}
	if _, err := e.redeem(expToken, "GW-20"); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(7 * 24 * time.Hour)
	_, err = e.redeem(expToken, "GW-21")
	wantRefused(t, "expired claim", err, cloud.EUNAUTHORIZED, "expired")
	_, err = e.redeem(expToken, "GW-20")
	wantRefused(t, "the same serial through an expired claim", err, cloud.EUNAUTHORIZED, "expired")
	if l, _ := svc.ListClaims(e.ctx, org.ID); l[len(l)-1].State(e.clock.Now()) != "expired" || l[len(l)-1].Used != 1 {
		t.Errorf("expired claim listed as %+v", l[len(l)-1])
	}
	if ds := e.devicesOf(org.ID); len(ds) != 4 {
		t.Errorf("%d devices, want GW-1, GW-2, the one added and GW-20", len(ds))
	}

	// A device whose token was revoked is not given a new one by a claim.
	rc, rcToken := e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-500"})
	gone, err := e.redeem(rcToken, "GW-30")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.RevokeDevice(e.ctx, gone.DeviceID); err != nil {
		t.Fatal(err)
	}
	_, err = e.redeem(rcToken, "GW-30")
	wantRefused(t, "re-claim of a revoked device", err, cloud.ECONFLICT, "revoked")
	_ = rc
}

// testClaimRaces: two redeems racing from two handles (two relays) for a
// claim's last use create one device between them, the other refused as
// used up; the same serial racing with itself is one device.
func testClaimRaces(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e2 := e.reopen()
	org := e.org("acme")
	for round := 0; round < 8; round++ {
		_, token := e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-500", Uses: 2})
		if _, err := e.redeem(token, fmt.Sprintf("R%d-first", round)); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		res := make([]protocol.ClaimResponse, 2)
		errs := make([]error, 2)
		for i, env := range []*env{e, e2} {
			wg.Go(func() { res[i], errs[i] = env.redeem(token, fmt.Sprintf("R%d-racer-%d", round, i)) })
		}
		wg.Wait()
		if (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: racing for the last use: %v and %v", round, errs[0], errs[1])
		}
		for _, err := range errs {
			if err != nil {
				wantRefused(t, "the loser", err, cloud.EUNAUTHORIZED, "used up")
			}
		}

		// The same serial twice at once through a fresh claim.
		_, token = e.claim(cloud.NewClaim{OrgID: org.ID, Model: "IG-500"})
		serial := fmt.Sprintf("R%d-twice", round)
		for i, env := range []*env{e, e2} {
			wg.Go(func() { res[i], errs[i] = env.redeem(token, serial) })
		}
		wg.Wait()
		if errs[0] != nil || errs[1] != nil || res[0].DeviceID != res[1].DeviceID || res[0].Token == res[1].Token {
			t.Fatalf("round %d: the same serial twice: %+v %v, %+v %v", round, res[0], errs[0], res[1], errs[1])
		}
	}
	if ds := e.devicesOf(org.ID); len(ds) != 8*3 {
		t.Errorf("%d devices, want 3 per round", len(ds))
	}
}
