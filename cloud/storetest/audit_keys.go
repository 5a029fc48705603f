package storetest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/protocol"
)

// The audit records of keys, members, the organization, devices, claims
// and releases (issue 30): each change made by an actor is one record of
// that actor, with its target, the store's time and details that hold no
// secret; a change made without an actor (the system's) has none, and a
// change that fails writes none (the record is in its transaction).

// noSecret fails unless none of secrets occurs in the record's details.
func noSecret(t testing.TB, r cloud.AuditRecord, secrets ...string) {
	t.Helper()
	for _, s := range secrets {
		if s != "" && strings.Contains(string(r.Details), s) {
			t.Errorf("%s: details %s hold a secret (%.12s…)", r.Action, r.Details, s)
		}
	}
}

// noAudit fails unless the organization holds no record of action.
func (e *env) noAudit(orgID, action, why string) {
	e.t.Helper()
	if recs := e.auditOf(orgID, cloud.AuditFilter{Action: action}); len(recs) != 0 {
		e.t.Errorf("%s: %d records of %s, want none: %+v", why, len(recs), action, recs)
	}
}

// wantDetail fails unless details[key] prints as want (fmt's %v).
func wantDetail(t testing.TB, action string, d map[string]any, key, want string) {
	t.Helper()
	if got := fmt.Sprint(d[key]); got != want {
		t.Errorf("%s: details[%s] = %s, want %s (%v)", action, key, got, want, d)
	}
}

// testAuditKeys: key.created and key.revoked through the admin CLI's and
// the panel's methods, with the key's name, scopes and expiry and never
// the key or its hash; a repeated revocation and another organization's
// key write nothing, nor does a key made without an actor or refused.
func testAuditKeys(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	cli, panel := e.acting(auditCLI), e.acting(auditUser)

	k, key, err := cli.Store.CreateKey(cli.ctx, o.ID, "ci deploys", []string{"devices:write", "devices:read"}, 48*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r, d := e.wantAudit(o.ID, cloud.ActionKeyCreated, auditCLI, cloud.AuditTarget{Kind: cloud.TargetKey, ID: k.ID})
	noSecret(t, r, key, string(k.Hash))
	wantDetail(t, r.Action, d, "name", "ci deploys")
	wantDetail(t, r.Action, d, "scopes", "[devices:read devices:write]")
	wantDetail(t, r.Action, d, "expiresAt", t0.Add(48*time.Hour).Format(time.RFC3339))

	e.clock.Add(time.Second)
	pk, pkey, err := panel.Panel.CreateOrgKey(panel.ctx, cloud.NewKey{OrgID: o.ID, Name: "dashboard", Scopes: []string{"alerts:read"}})
	if err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionKeyCreated, auditUser, cloud.AuditTarget{Kind: cloud.TargetKey, ID: pk.ID})
	noSecret(t, r, pkey, string(pk.Hash))
	wantDetail(t, r.Action, d, "expiresAt", "<nil>")

	e.clock.Add(time.Second)
	if _, err := cli.Store.RevokeKey(cli.ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionKeyRevoked, auditCLI, cloud.AuditTarget{Kind: cloud.TargetKey, ID: k.ID})
	noSecret(t, r, key, string(k.Hash))
	wantDetail(t, r.Action, d, "name", "ci deploys")
	if _, err := panel.Panel.RevokeOrgKey(panel.ctx, o.ID, k.ID); err != nil {
		t.Fatal(err)
	}
	e.wantAudit(o.ID, cloud.ActionKeyRevoked, auditCLI, cloud.AuditTarget{Kind: cloud.TargetKey, ID: k.ID}) // still the one

	e.clock.Add(time.Second)
	if _, err := panel.Panel.RevokeOrgKey(panel.ctx, other.ID, pk.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("another organization revokes acme's key: %v", err)
	}
	if _, err := panel.Panel.RevokeOrgKey(panel.ctx, o.ID, pk.ID); err != nil {
		t.Fatal(err)
	}
	e.wantAudit(o.ID, cloud.ActionKeyRevoked, auditUser, cloud.AuditTarget{Kind: cloud.TargetKey, ID: pk.ID})
	e.noAudit(other.ID, cloud.ActionKeyRevoked, "a refused revocation")

	if _, _, err := cli.Store.CreateKey(cli.ctx, o.ID, "bad", []string{"root"}, 0); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("unknown scope: %v", err)
	}
	quiet, _, err := e.Store.CreateKey(e.ctx, o.ID, "no actor", []string{"devices:read"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Store.RevokeKey(e.ctx, quiet.ID); err != nil {
		t.Fatal(err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: "key."}); len(recs) != 4 {
		t.Errorf("key records: %d, want the 4 above (none for a refused key or a change without an actor): %+v", len(recs), recs)
	}
}

// testAuditMembers: member.added, member.role_changed (from, to),
// member.disabled and member.password_changed (by the CLI: {"by":"cli"})
// with the member's email and never a hash; a demotion of the last OWNER,
// refused, writes nothing, nor does an email already taken or a role set
// to what it was.
func testAuditMembers(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o := e.org("acme")
	cli, panel := e.acting(auditCLI), e.acting(auditUser)
	owner, err := cli.Panel.CreateUser(cli.ctx, cloud.NewUser{OrgID: o.ID, Email: "Owner@Example.com", Role: cloud.RoleOwner, PasswordHash: "$argon2id$owner-hash"})
	if err != nil {
		t.Fatal(err)
	}
	member := cloud.AuditTarget{Kind: cloud.TargetMember, ID: owner.ID}
	r, d := e.wantAudit(o.ID, cloud.ActionMemberAdded, auditCLI, member)
	noSecret(t, r, "owner-hash")
	wantDetail(t, r.Action, d, "email", "owner@example.com")
	wantDetail(t, r.Action, d, "role", "OWNER")

	e.clock.Add(time.Second)
	bob, err := panel.Panel.CreateUser(panel.ctx, cloud.NewUser{OrgID: o.ID, Email: "bob@example.com", Role: cloud.RoleViewer, PasswordHash: "$argon2id$bob-hash"})
	if err != nil {
		t.Fatal(err)
	}
	bobT := cloud.AuditTarget{Kind: cloud.TargetMember, ID: bob.ID}
	e.wantAudit(o.ID, cloud.ActionMemberAdded, auditUser, bobT)
	if _, err := panel.Panel.CreateUser(panel.ctx, cloud.NewUser{OrgID: o.ID, Email: "BOB@example.com", Role: cloud.RoleAdmin, PasswordHash: "$argon2id$x"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Fatalf("email taken: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionMemberAdded}); len(recs) != 2 {
		t.Errorf("a refused member was recorded: %+v", recs)
	}

	e.clock.Add(time.Second)
	if _, err := panel.Panel.SetUserRole(panel.ctx, o.ID, bob.ID, cloud.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionMemberRoleChanged, auditUser, bobT)
	wantDetail(t, r.Action, d, "from", "VIEWER")
	wantDetail(t, r.Action, d, "to", "ADMIN")
	if _, err := panel.Panel.SetUserRole(panel.ctx, o.ID, bob.ID, cloud.RoleAdmin); err != nil {
		t.Fatal(err)
	}
	if _, err := panel.Panel.SetUserRole(panel.ctx, o.ID, owner.ID, cloud.RoleAdmin); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Fatalf("demoting the last OWNER: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionMemberRoleChanged}); len(recs) != 1 {
		t.Errorf("role records: %d, want 1 (none for the same role, none for the refused demotion): %+v", len(recs), recs)
	}
	if _, err := panel.Panel.DisableUser(panel.ctx, o.ID, owner.ID); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Fatalf("disabling the last OWNER: %v", err)
	}
	e.noAudit(o.ID, cloud.ActionMemberDisabled, "a refused disable")

	e.clock.Add(time.Second)
	if _, err := panel.Panel.DisableUser(panel.ctx, o.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := panel.Panel.DisableUser(panel.ctx, o.ID, bob.ID); err != nil {
		t.Fatal(err)
	}
	_, d = e.wantAudit(o.ID, cloud.ActionMemberDisabled, auditUser, bobT)
	wantDetail(t, cloud.ActionMemberDisabled, d, "email", "bob@example.com")

	e.clock.Add(time.Second)
	if _, err := cli.Panel.SetUserPassword(cli.ctx, o.ID, owner.ID, "$argon2id$new-owner-hash"); err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionMemberPassword, auditCLI, member)
	noSecret(t, r, "owner-hash", "new-owner-hash", "argon2id")
	wantDetail(t, r.Action, d, "by", "cli")

	if _, err := e.Panel.SetUserRole(e.ctx, o.ID, bob.ID, cloud.RoleMember); err != nil {
		t.Fatal(err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: "member."}); len(recs) != 5 {
		t.Errorf("member records: %d, want 5 (none for a change without an actor): %+v", len(recs), recs)
	}
}

// testAuditOrg: org.created in the new organization, the alert webhook
// set (its scheme and host, never its path or query) and cleared, the
// signing secret rotated (the grace, never a secret) and a delivery sent
// again (its id and the original's), each the organization's own.
func testAuditOrg(t *testing.T, open Opener) {
	e := newEnv(t, open)
	cli, panel := e.acting(auditCLI), e.acting(auditUser)
	o, err := cli.Store.CreateOrg(cli.ctx, "Acme Corp")
	if err != nil {
		t.Fatal(err)
	}
	orgT := cloud.AuditTarget{Kind: cloud.TargetOrg, ID: o.ID}
	r, d := e.wantAudit(o.ID, cloud.ActionOrgCreated, auditCLI, orgT)
	noSecret(t, r, o.WebhookSecret)
	wantDetail(t, r.Action, d, "name", "Acme Corp")
	other := e.org("other")
	e.noAudit(other.ID, cloud.ActionOrgCreated, "an organization made without an actor")

	e.clock.Add(time.Second)
	const hook = "https://hooks.example.com/services/T000/B000/XXXXsecretpath?token=abc"
	if err := panel.Panel.SetOrgAlertWebhook(panel.ctx, o.ID, hook); err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionAlertWebhook, auditUser, orgT)
	noSecret(t, r, "/services", "secretpath", "token=abc")
	wantDetail(t, r.Action, d, "url", "https://hooks.example.com")
	wantDetail(t, r.Action, d, "cleared", "false")
	if err := panel.Panel.SetOrgAlertWebhook(panel.ctx, o.ID, "ftp://nope"); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("a bad URL: %v", err)
	}
	e.clock.Add(time.Second)
	if err := cli.Store.SetOrgAlertWebhook(cli.ctx, o.ID, ""); err != nil {
		t.Fatal(err)
	}
	recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionAlertWebhook})
	if len(recs) != 2 || recs[0].Actor.Kind != cloud.ActorCLI || string(recs[0].Details) != `{"cleared":true,"url":""}` {
		t.Errorf("webhook records (none for the refused URL; the clearing newest): %+v", recs)
	}

	e.clock.Add(time.Second)
	secret, err := panel.Panel.RotateOrgSecret(panel.ctx, o.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionSecretRotated, auditUser, orgT)
	noSecret(t, r, secret, o.WebhookSecret, strings.TrimPrefix(secret, cloud.WebhookSecretPrefix))
	wantDetail(t, r.Action, d, "grace", "1h0m0s")
	if _, err := panel.Panel.RotateOrgSecret(panel.ctx, o.ID, 100*cloud.MaxSecretGrace); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("a grace too long: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionSecretRotated}); len(recs) != 1 {
		t.Errorf("rotation records: %+v", recs)
	}

	e.clock.Add(time.Second)
	dl := delivery("dlvaudit1", o.ID, "dev1", e.clock.Now())
	if err := e.Outbox.WriteOutbox(e.ctx, []*webhook.Delivery{dl}, nil); err != nil {
		t.Fatal(err)
	}
	id, err := panel.Panel.RedeliverOrgWebhook(panel.ctx, o.ID, dl.ID)
	if err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionWebhookRedeliver, auditUser, cloud.AuditTarget{Kind: cloud.TargetDelivery, ID: id})
	noSecret(t, r, dl.URL, string(dl.Body))
	wantDetail(t, r.Action, d, "deliveryId", id)
	wantDetail(t, r.Action, d, "originalId", dl.ID)
	if _, err := cli.Store.RedeliverWebhook(cli.ctx, "nosuchdelivery"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("redeliver unknown: %v", err)
	}
	if _, err := panel.Panel.RedeliverOrgWebhook(panel.ctx, other.ID, dl.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("another organization's delivery: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionWebhookRedeliver}); len(recs) != 1 {
		t.Errorf("redelivery records: %+v", recs)
	}
	if recs := e.auditOf(other.ID, cloud.AuditFilter{}); len(recs) != 0 {
		t.Errorf("the other organization holds records: %+v", recs)
	}
}

// testAuditDevices: device.added (never the token; a serial number taken
// writes nothing), device.updated through PatchDevice and SetDeviceTags
// with each field changed from and to (nothing when nothing changes, or
// for another organization's device), device.revoked once.
func testAuditDevices(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	cli, api := e.acting(auditCLI), e.acting(auditKey)
	d, token, err := cli.Store.AddDevice(cli.ctx, cloud.NewDevice{OrgID: o.ID, Name: "Press line 1", SerialNumber: "SN-AUDIT-1", Model: "IG-500", Location: "Hall 2"})
	if err != nil {
		t.Fatal(err)
	}
	dev := cloud.AuditTarget{Kind: cloud.TargetDevice, ID: d.ID}
	r, det := e.wantAudit(o.ID, cloud.ActionDeviceAdded, auditCLI, dev)
	noSecret(t, r, token)
	wantDetail(t, r.Action, det, "serialNumber", "SN-AUDIT-1")
	wantDetail(t, r.Action, det, "name", "Press line 1")
	wantDetail(t, r.Action, det, "model", "IG-500")
	if _, _, err := cli.Store.AddDevice(cli.ctx, cloud.NewDevice{OrgID: o.ID, Name: "again", SerialNumber: "SN-AUDIT-1", Model: "IG-500"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Fatalf("a serial taken: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionDeviceAdded}); len(recs) != 1 {
		t.Errorf("a refused device was recorded: %+v", recs)
	}

	e.clock.Add(time.Second)
	name, notes, tags := "Press line 1b", "check the fuse", []string{"line-1", "hall-2"}
	if _, err := api.Store.Devices().PatchDevice(api.ctx, o.ID, d.ID, cloud.DevicePatch{Name: &name, Notes: &notes, Tags: &tags}); err != nil {
		t.Fatal(err)
	}
	r, _ = e.wantAudit(o.ID, cloud.ActionDeviceUpdated, auditKey, dev)
	if want := `{"name":{"from":"Press line 1","to":"Press line 1b"},"notes":{"from":null,"to":"check the fuse"},"tags":{"from":[],"to":["hall-2","line-1"]}}`; string(r.Details) != want {
		t.Errorf("update details %s, want %s", r.Details, want)
	}
	same := "Hall 2"
	if _, err := api.Store.Devices().PatchDevice(api.ctx, o.ID, d.ID, cloud.DevicePatch{Name: &name, Location: &same}); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Store.Devices().PatchDevice(api.ctx, other.ID, d.ID, cloud.DevicePatch{Name: &notes}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("another organization's device: %v", err)
	}
	bad := strings.Repeat("x", cloud.MaxNotesLength+1)
	if _, err := api.Store.Devices().PatchDevice(api.ctx, o.ID, d.ID, cloud.DevicePatch{Notes: &bad}); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("notes too long: %v", err)
	}
	e.wantAudit(o.ID, cloud.ActionDeviceUpdated, auditKey, dev) // still the one

	e.clock.Add(time.Second)
	if err := cli.Store.SetDeviceTags(cli.ctx, d.ID, []string{"line-2"}); err != nil {
		t.Fatal(err)
	}
	recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionDeviceUpdated})
	if len(recs) != 2 || recs[0].Actor != auditCLI || string(recs[0].Details) != `{"tags":{"from":["hall-2","line-1"],"to":["line-2"]}}` {
		t.Errorf("SetDeviceTags record: %+v", recs)
	}
	e.clock.Add(time.Second)
	if _, err := api.Store.Devices().PatchDevice(api.ctx, o.ID, d.ID, cloud.DevicePatch{ClearNotes: true}); err != nil {
		t.Fatal(err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionDeviceUpdated}); len(recs) != 3 || string(recs[0].Details) != `{"notes":{"from":"check the fuse","to":null}}` {
		t.Errorf("notes cleared: %+v", recs)
	}

	e.clock.Add(time.Second)
	if _, err := cli.Store.RevokeDevice(cli.ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	if _, err := cli.Store.RevokeDevice(cli.ctx, d.ID); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(-time.Second)
	r, det = e.wantAudit(o.ID, cloud.ActionDeviceRevoked, auditCLI, dev)
	noSecret(t, r, token)
	wantDetail(t, r.Action, det, "serialNumber", "SN-AUDIT-1")
	if _, err := cli.Store.RevokeDevice(cli.ctx, "nosuchdevice"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("revoke unknown: %v", err)
	}

	quiet := e.device(o.ID, "IG-500")
	if _, err := e.Store.RevokeDevice(e.ctx, quiet.ID); err != nil {
		t.Fatal(err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{TargetKind: cloud.TargetDevice, TargetID: quiet.ID}); len(recs) != 0 {
		t.Errorf("changes without an actor were recorded: %+v", recs)
	}
	if recs := e.auditOf(other.ID, cloud.AuditFilter{}); len(recs) != 0 {
		t.Errorf("the other organization holds records: %+v", recs)
	}
}

// testAuditClaims: claim.created (never the token) and claim.revoked
// (once); a device claimed by an agent is device.claimed by the claim's
// creator from the agent's address, with the claim and the serial number
// (also when the same serial is claimed again), and nothing when the
// claim was made without an actor or the redeem is refused; release.added
// with version, arch, size and SHA-256.
func testAuditClaims(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o := e.org("acme")
	panel, api := e.acting(auditUser), e.acting(auditKey)
	c, token, err := panel.Store.Claims().CreateClaim(panel.ctx, cloud.NewClaim{OrgID: o.ID, Model: "IG-500", Tags: []string{"line-1"}, Uses: 2, ExpiresIn: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	r, d := e.wantAudit(o.ID, cloud.ActionClaimCreated, auditUser, cloud.AuditTarget{Kind: cloud.TargetClaim, ID: c.ID})
	noSecret(t, r, token, strings.TrimPrefix(token, cloud.ClaimTokenPrefix))
	wantDetail(t, r.Action, d, "model", "IG-500")
	wantDetail(t, r.Action, d, "uses", "2")
	wantDetail(t, r.Action, d, "tags", "[line-1]")

	e.clock.Add(time.Second)
	agent := auditUser
	agent.IP = "198.51.100.23"
	redeem := func(serial string) protocol.ClaimResponse {
		t.Helper()
		out, err := e.Store.Claims().RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: token, IP: agent.IP,
			ClaimRequest: protocol.ClaimRequest{SerialNumber: serial, Model: "IG-500"}, At: e.clock.Now()})
		if err != nil {
			t.Fatalf("redeem %s: %v", serial, err)
		}
		return out
	}
	out := redeem("GW-A1")
	r, d = e.wantAudit(o.ID, cloud.ActionDeviceClaimed, agent, cloud.AuditTarget{Kind: cloud.TargetDevice, ID: out.DeviceID})
	noSecret(t, r, token, out.Token)
	if want := `{"claimId":"` + c.ID + `","serialNumber":"GW-A1"}`; string(r.Details) != want {
		t.Errorf("claimed details %s, want %s", r.Details, want)
	}
	e.clock.Add(time.Second)
	again := redeem("GW-A1")
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionDeviceClaimed, TargetID: out.DeviceID}); len(recs) != 2 || recs[0].At.Equal(recs[1].At) || again.DeviceID != out.DeviceID {
		t.Errorf("claimed again: %+v", recs)
	}
	e.clock.Add(time.Second)
	redeem("GW-A2")
	if _, err := e.Store.Claims().RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: token, IP: agent.IP,
		ClaimRequest: protocol.ClaimRequest{SerialNumber: "GW-A3", Model: "IG-500"}, At: e.clock.Now()}); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Fatalf("a used-up claim: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionDeviceClaimed}); len(recs) != 3 {
		t.Errorf("claimed records: %d, want 3 (none for the refused one)", len(recs))
	}

	e.clock.Add(time.Second)
	if _, err := api.Store.Claims().RevokeClaim(api.ctx, o.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := api.Store.Claims().RevokeClaim(api.ctx, o.ID, c.ID); err != nil {
		t.Fatal(err)
	}
	e.wantAudit(o.ID, cloud.ActionClaimRevoked, auditKey, cloud.AuditTarget{Kind: cloud.TargetClaim, ID: c.ID})

	quiet, quietToken, err := e.Store.Claims().CreateClaim(e.ctx, cloud.NewClaim{OrgID: o.ID, Model: "IG-500"})
	if err != nil {
		t.Fatal(err)
	}
	qd, err := e.Store.Claims().RedeemClaim(e.ctx, cloud.ClaimRedeem{Token: quietToken, IP: agent.IP,
		ClaimRequest: protocol.ClaimRequest{SerialNumber: "GW-Q1", Model: "IG-500"}, At: e.clock.Now()})
	if err != nil {
		t.Fatal(err)
	}
	for _, tgt := range []string{quiet.ID, qd.DeviceID} {
		if recs := e.auditOf(o.ID, cloud.AuditFilter{TargetID: tgt}); len(recs) != 0 {
			t.Errorf("a claim made without an actor, and its device, were recorded: %+v", recs)
		}
	}

	e.clock.Add(time.Second)
	data, sig := ReleaseBinary(t, cloud.ReleaseChunkBytes+77)
	cli := e.acting(auditCLI)
	rel, err := cli.Store.Releases().AddRelease(cli.ctx, cloud.NewRelease{OrgID: o.ID, Version: "2.0.0", Arch: "arm64", Signature: sig}, strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	r, d = e.wantAudit(o.ID, cloud.ActionReleaseAdded, auditCLI, cloud.AuditTarget{Kind: cloud.TargetRelease, ID: rel.ID})
	wantDetail(t, r.Action, d, "version", "2.0.0")
	wantDetail(t, r.Action, d, "arch", "arm64")
	if d["size"] != float64(rel.Size) {
		t.Errorf("release.added: size %v, want %d", d["size"], rel.Size)
	}
	wantDetail(t, r.Action, d, "sha256", rel.SHA256)
	if _, err := cli.Store.Releases().AddRelease(cli.ctx, cloud.NewRelease{OrgID: o.ID, Version: "2.0.0", Arch: "arm64", Signature: sig}, strings.NewReader(string(data))); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Fatalf("the same release again: %v", err)
	}
	if _, err := cli.Store.Releases().AddRelease(cli.ctx, cloud.NewRelease{OrgID: o.ID, Version: "2.0.1", Arch: "arm64", Signature: sig}, strings.NewReader("")); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Fatalf("an empty binary: %v", err)
	}
	if recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionReleaseAdded}); len(recs) != 1 {
		t.Errorf("release records: %+v", recs)
	}
}

// OldClaimToken is the token of the claim OldClaimSQL stores.
const OldClaimToken = cloud.ClaimTokenPrefix + "MADEBEFOREMIGRATION0018"

// OldClaimSQL is an organization with a claim of OldClaimToken made before
// migration 0018_claim_creator (no creator), in statements both dialects
// run; blob spells a byte string's hex digits as the dialect's literal. A
// dialect's migration test runs it on a database migrated up to 0017 and
// then CheckOldClaimCreator.
func OldClaimSQL(blob func(hex string) string) string {
	sum := sha256.Sum256([]byte(OldClaimToken))
	return `INSERT INTO orgs (id, name, webhook_secret, created_at) VALUES ('orgclaim', 'Old', 'whsec_old', 1700000000000);
INSERT INTO claims (id, org_id, token_hash, model, tags, uses, used, expires_at, revoked_at, created_at)
	VALUES ('claimold', 'orgclaim', ` + blob(hex.EncodeToString(sum[:])) + `, 'IG-500', '[]', 1, 0, NULL, NULL, 1700000000000);`
}

// CheckOldClaimCreator checks, after migration 0018_claim_creator, that a
// gateway claimed through OldClaimSQL's claim is device.claimed by the
// CLI, "unknown" (whoever made a claim before the migration is not
// known), from the agent's address.
func CheckOldClaimCreator(t *testing.T, s cloud.Stores) {
	t.Helper()
	ctx := context.Background()
	out, err := s.Claims().RedeemClaim(ctx, cloud.ClaimRedeem{Token: OldClaimToken, IP: "203.0.113.5",
		ClaimRequest: protocol.ClaimRequest{SerialNumber: "GW-OLD", Model: "IG-500"}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Audit().ListAudit(ctx, "orgclaim", cloud.AuditFilter{})
	if err != nil || len(p.Records) != 1 {
		t.Fatalf("records after the claim: %+v, %v", p.Records, err)
	}
	r := p.Records[0]
	if r.Action != cloud.ActionDeviceClaimed || r.Target.ID != out.DeviceID || r.Actor.Kind != cloud.ActorCLI ||
		r.Actor.ID != "unknown" || r.IP != "203.0.113.5" {
		t.Errorf("record %+v, want device.claimed by the CLI, unknown, from the agent", r)
	}
}
