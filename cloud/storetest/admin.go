package storetest

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/agentlink"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/shared/resource"
)

// testOrgs: a new organization has a Standard Webhooks secret of its own
// and the six default rules, each with its own id.
func testOrgs(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o := e.org("  acme  ")
	if o.Name != "acme" || !strings.HasPrefix(o.WebhookSecret, cloud.WebhookSecretPrefix) || !o.CreatedAt.Equal(t0) {
		t.Errorf("org = %+v", o)
	}
	if key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(o.WebhookSecret, "whsec_")); err != nil || len(key) != 32 {
		t.Errorf("secret %q is not whsec_ + base64 of 32 bytes: %v", o.WebhookSecret, err)
	}
	e.clock.Add(time.Millisecond)
	o2 := e.org("acme")
	if o2.WebhookSecret == o.WebhookSecret || o2.ID == o.ID {
		t.Errorf("two orgs share a secret or id")
	}
	got, err := e.Store.Org(e.ctx, o.ID)
	if err != nil || got.WebhookSecret != o.WebhookSecret || got.Name != "acme" || !got.CreatedAt.Equal(t0) {
		t.Errorf("Org = %+v, %v", got, err)
	}
	if _, err := e.Store.Org(e.ctx, "nosuchorg"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}
	list, err := e.Store.ListOrgs(e.ctx)
	if err != nil || len(list) != 2 || list[0].ID != o.ID || list[1].ID != o2.ID {
		t.Errorf("ListOrgs = %+v, %v", list, err)
	}
	ruleIDs := map[string]bool{}
	for _, org := range []cloud.Org{o, o2} {
		rules, err := e.Engine.Rules(e.ctx, org.ID)
		if err != nil || len(rules) != len(cloud.DefaultAlertRules()) {
			t.Fatalf("rules of %s: %d, %v", org.ID, len(rules), err)
		}
		for _, r := range rules {
			if ruleIDs[r.ID] || r.OrgID != org.ID || !r.Enabled {
				t.Errorf("rule %+v", r)
			}
			ruleIDs[r.ID] = true
		}
	}
	for _, name := range []string{" ", "", strings.Repeat("x", cloud.MaxNameLength+1), "bad\x00name"} {
		if _, err := e.Store.CreateOrg(e.ctx, name); cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("name %q: %v", name, err)
		}
	}
}

func testKeys(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o := e.org("acme")
	other := e.org("other")
	k, key, err := e.Store.CreateKey(e.ctx, o.ID, "ci", []string{"alerts:write", "devices:read"}, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "svc_sk_"+k.ID+"_") || !k.ExpiresAt.Equal(t0.Add(90*24*time.Hour)) || strings.Join(k.Scopes, ",") != "devices:read,alerts:write" {
		t.Errorf("key %+v %q", k, key)
	}
	_, secret, _ := apikey.Parse(key)
	if strings.Contains(string(k.Hash), secret) {
		t.Error("secret kept in clear")
	}
	got, err := e.Store.Keys().KeyByID(e.ctx, k.ID)
	if err != nil || got.OrgID != o.ID || string(got.Hash) != string(k.Hash) || !got.ExpiresAt.Equal(k.ExpiresAt) || !got.RevokedAt.IsZero() || !got.CreatedAt.Equal(t0) {
		t.Errorf("KeyByID = %+v, %v", got, err)
	}
	auth := apikey.NewAuthenticator(e.Store.Keys(), e.clock.Now, 0)
	if a, err := auth.Authenticate(e.ctx, key); err != nil || a.ID != k.ID {
		t.Errorf("authenticate = %+v, %v", a, err)
	}
	e.clock.Add(time.Millisecond)
	never, _, err := e.Store.CreateKey(e.ctx, o.ID, "forever", []string{"devices:read"}, 0)
	if err != nil || !never.ExpiresAt.IsZero() {
		t.Errorf("never-expiring key %+v, %v", never, err)
	}
	if _, _, err := e.Store.CreateKey(e.ctx, other.ID, "x", []string{"devices:read"}, 0); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		org, name string
		scopes    []string
		code      string
	}{
		{o.ID, "", []string{"devices:read"}, cloud.EINVALID},
		{o.ID, "x", nil, cloud.EINVALID},
		{o.ID, "x", []string{"root"}, cloud.EINVALID},
		{"nosuchorg", "x", []string{"devices:read"}, cloud.ENOTFOUND},
	} {
		if _, _, err := e.Store.CreateKey(e.ctx, tc.org, tc.name, tc.scopes, 0); cloud.ErrorCode(err) != tc.code {
			t.Errorf("CreateKey(%q, %q, %v): %v, want %s", tc.org, tc.name, tc.scopes, err, tc.code)
		}
	}
	list, err := e.Store.ListKeys(e.ctx, o.ID)
	if err != nil || len(list) != 2 || list[0].ID != k.ID || list[1].ID != never.ID {
		t.Fatalf("ListKeys = %v, %v", list, err)
	}
	// Another handle on the database (another relay) has the key in its
	// caches: authenticated twice, the second time from its caches when
	// the store offers a data version.
	e2 := e.reopen()
	auth2 := apikey.NewAuthenticator(e2.Store.Keys(), e.clock.Now, 0)
	for range 2 {
		if _, err := auth2.Authenticate(e.ctx, key); err != nil {
			t.Fatalf("key on another handle: %v", err)
		}
	}
	e.clock.Add(time.Hour)
	r, err := e.Store.RevokeKey(e.ctx, k.ID)
	revokedAt := t0.Add(time.Hour + time.Millisecond)
	if err != nil || !r.RevokedAt.Equal(revokedAt) {
		t.Fatalf("revoke = %+v, %v", r, err)
	}
	// Revocation shows on the very next authentication, also through
	// the other handle.
	if _, err := auth.Authenticate(e.ctx, key); cloud.ErrorCode(err) != cloud.EREVOKED {
		t.Errorf("revoked key authenticates: %v", err)
	}
	if _, err := auth2.Authenticate(e.ctx, key); cloud.ErrorCode(err) != cloud.EREVOKED {
		t.Errorf("revoked key on another handle that had it cached: %v", err)
	}
	e.clock.Add(time.Hour)
	r, err = e.Store.RevokeKey(e.ctx, k.ID)
	if err != nil || !r.RevokedAt.Equal(revokedAt) {
		t.Errorf("second revoke moved revokedAt to %v (%v)", r.RevokedAt, err)
	}
	if _, err := e.Store.RevokeKey(e.ctx, "nosuchkey"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("revoke unknown: %v", err)
	}
	if _, err := e.Store.Keys().KeyByID(e.ctx, "nosuchkey"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("KeyByID unknown: %v", err)
	}
}

func testDevicesAndTokens(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o := e.org("acme")
	other := e.org("other")
	d, token, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: o.ID, Name: "press 4", SerialNumber: "SN1", Model: "IG-500", Location: "hall B"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(token, apikey.DeviceTokenPrefix) || d.Status != resource.StatusProvisioning || d.Location != "hall B" || !d.CreatedAt.Equal(t0) {
		t.Errorf("device %+v token %q", d, token)
	}
	dev, err := e.Agent.AuthDevice(e.ctx, sum(token))
	if err != nil || dev.ID != d.ID || dev.OrgID != o.ID || dev.Model != "IG-500" || dev.Status != resource.StatusProvisioning {
		t.Errorf("AuthDevice = %+v, %v", dev, err)
	}
	if _, _, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: o.ID, Name: "dup", SerialNumber: "SN1", Model: "IG-100"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("duplicate serial: %v", err)
	}
	if _, _, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: other.ID, Name: "same serial elsewhere", SerialNumber: "SN1", Model: "IG-100"}); err != nil {
		t.Errorf("same serial in another org: %v", err)
	}
	if _, _, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: "nosuchorg", Name: "x", SerialNumber: "SN9", Model: "IG-100"}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}
	_, _, err = e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: o.ID, Name: "x", SerialNumber: "SN2", Model: "IG-999"})
	if cloud.ErrorCode(err) != cloud.EINVALID || !strings.Contains(err.Error(), "IG-500") || !strings.Contains(err.Error(), "IG-100") {
		t.Errorf("unknown model: %v (must list the catalog's models)", err)
	}
	e.clock.Add(time.Minute)
	at, err := e.Store.RevokeDevice(e.ctx, d.ID)
	if err != nil || !at.Equal(t0.Add(time.Minute)) {
		t.Fatalf("revoke: %v, %v", at, err)
	}
	e.clock.Add(time.Minute)
	if again, err := e.Store.RevokeDevice(e.ctx, d.ID); err != nil || !again.Equal(at) {
		t.Errorf("second revoke: %v, %v; want the first time kept", again, err)
	}
	for _, s := range []*env{e, e.reopen()} {
		if _, err := s.Agent.AuthDevice(e.ctx, sum(token)); !errors.Is(err, agentlink.ErrUnauthorized) {
			t.Errorf("revoked token: %v", err)
		}
	}
	if _, err := e.Agent.AuthDevice(e.ctx, sum("fleet_dt_nope")); !errors.Is(err, agentlink.ErrUnauthorized) {
		t.Errorf("unknown token: %v", err)
	}
	if _, err := e.Store.RevokeDevice(e.ctx, "nosuchdevice"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("revoke unknown device: %v", err)
	}
}

func testOrgWebhookSettings(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o := e.org("acme")
	if err := e.Store.SetOrgAlertWebhook(e.ctx, o.ID, "https://hooks.example.com/alerts"); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Store.Org(e.ctx, o.ID); got.AlertWebhookURL != "https://hooks.example.com/alerts" {
		t.Errorf("org alert URL %q", got.AlertWebhookURL)
	}
	for _, bad := range []string{"http://hooks.example.com/", "https://user:pw@example.com/"} {
		if err := e.Store.SetOrgAlertWebhook(e.ctx, o.ID, bad); cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("URL %q: %v", bad, err)
		}
	}
	if err := e.Store.SetOrgAlertWebhook(e.ctx, "nosuchorg", "https://x.example.com/"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}
	if err := e.Store.SetOrgAlertWebhook(e.ctx, o.ID, ""); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Store.Org(e.ctx, o.ID); got.AlertWebhookURL != "" {
		t.Errorf("cleared URL reads %q", got.AlertWebhookURL)
	}

	// Rotation with a grace period: the previous secret signs too until
	// the grace ends.
	sec, err := e.Outbox.OrgSecrets(e.ctx, o.ID)
	if err != nil || sec.Current != o.WebhookSecret || sec.Previous != "" {
		t.Fatalf("secrets = %+v, %v", sec, err)
	}
	ns, err := e.Store.RotateOrgSecret(e.ctx, o.ID, time.Hour)
	if err != nil || ns == o.WebhookSecret || !strings.HasPrefix(ns, cloud.WebhookSecretPrefix) {
		t.Fatalf("rotate = %q, %v", ns, err)
	}
	if sec, _ := e.Outbox.OrgSecrets(e.ctx, o.ID); sec.Current != ns || sec.Previous != o.WebhookSecret {
		t.Errorf("during grace: %+v", sec)
	}
	e.clock.Add(time.Hour)
	if sec, _ := e.Outbox.OrgSecrets(e.ctx, o.ID); sec.Current != ns || sec.Previous != "" {
		t.Errorf("after grace: %+v", sec)
	}
	ns2, err := e.Store.RotateOrgSecret(e.ctx, o.ID, 0)
	if sec, _ := e.Outbox.OrgSecrets(e.ctx, o.ID); err != nil || sec.Current != ns2 || sec.Previous != "" {
		t.Errorf("rotation without grace: %+v, %v", sec, err)
	}
	if _, err := e.Store.RotateOrgSecret(e.ctx, o.ID, cloud.MaxSecretGrace+time.Second); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("grace beyond the maximum: %v", err)
	}
	if _, err := e.Store.RotateOrgSecret(e.ctx, "nosuchorg", 0); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("rotate unknown org: %v", err)
	}
	if _, err := e.Outbox.OrgSecrets(e.ctx, "nosuchorg"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("secrets of unknown org: %v", err)
	}
}
