package sqlite_test

import (
	"context"
	"encoding/base64"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/sqlite"
	"github.com/fleet/fleet/shared/resource"
)

func TestCreateOrgWithDefaultRules(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	o := MustOrg(t, db, "  acme  ")
	if o.Name != "acme" || !strings.HasPrefix(o.WebhookSecret, "whsec_") || len(o.WebhookSecret) < 6+43 {
		t.Errorf("org = %+v", o)
	}
	// Standard Webhooks libraries take the text after whsec_ as base64 key bytes.
	if key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(o.WebhookSecret, "whsec_")); err != nil || len(key) != 32 {
		t.Errorf("secret %q is not whsec_ + base64 of 32 bytes: %v", o.WebhookSecret, err)
	}
	o2 := MustOrg(t, db, "acme")
	if o2.WebhookSecret == o.WebhookSecret || o2.ID == o.ID {
		t.Errorf("two orgs share a secret or id")
	}
	got, err := db.Org(ctx, o.ID)
	if err != nil || got.WebhookSecret != o.WebhookSecret {
		t.Errorf("Org = %+v, %v", got, err)
	}
	ruleIDs := map[string]bool{}
	for _, r := range sqlite.DefaultRules() {
		id, err := db.RuleID(ctx, o.ID, r.Name)
		if err != nil {
			t.Errorf("rule %s: %v", r.Name, err)
		}
		id2, _ := db.RuleID(ctx, o2.ID, r.Name)
		if ruleIDs[id] || id == id2 {
			t.Errorf("rule %s id %s not unique", r.Name, id)
		}
		ruleIDs[id] = true
	}
	if len(ruleIDs) != 6 {
		t.Errorf("%d default rules, want 6", len(ruleIDs))
	}
	if _, err := db.CreateOrg(ctx, " "); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("empty name: %v", err)
	}
}

func TestKeys(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	now := time.Date(2026, 2, 1, 0, 0, 0, 0, time.UTC)
	db.Now = func() time.Time { return now }
	o := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	k, key, err := db.CreateKey(ctx, o.ID, "ci", []string{"alerts:write", "devices:read"}, 90*24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(key, "svc_sk_"+k.ID+"_") || !k.ExpiresAt.Equal(now.Add(90*24*time.Hour)) || strings.Join(k.Scopes, ",") != "devices:read,alerts:write" {
		t.Errorf("key %+v %q", k, key)
	}
	_, secret, _ := apikey.Parse(key)
	if strings.Contains(string(k.Hash), secret) {
		t.Error("secret stored in clear")
	}
	var stored []byte
	if err := db.R.QueryRowContext(ctx, `SELECT hash FROM api_keys WHERE id = ?`, k.ID).Scan(&stored); err != nil || strings.Contains(string(stored), secret) {
		t.Errorf("stored hash %q, %v", stored, err)
	}
	now = now.Add(time.Millisecond)
	never, _, err := db.CreateKey(ctx, o.ID, "forever", []string{"devices:read"}, 0)
	if err != nil || !never.ExpiresAt.IsZero() {
		t.Errorf("never-expiring key %+v, %v", never, err)
	}
	if _, _, err := db.CreateKey(ctx, other.ID, "x", []string{"devices:read"}, 0); err != nil {
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
		if _, _, err := db.CreateKey(ctx, tc.org, tc.name, tc.scopes, 0); cloud.ErrorCode(err) != tc.code {
			t.Errorf("CreateKey(%q, %q, %v): %v, want %s", tc.org, tc.name, tc.scopes, err, tc.code)
		}
	}
	list, err := db.ListKeys(ctx, o.ID)
	if err != nil || len(list) != 2 || list[0].ID != k.ID || list[1].ID != never.ID {
		t.Fatalf("ListKeys = %v, %v", list, err)
	}
	now = now.Add(time.Hour - time.Millisecond)
	r, err := db.RevokeKey(ctx, k.ID)
	if err != nil || !r.RevokedAt.Equal(now) {
		t.Fatalf("revoke = %+v, %v", r, err)
	}
	now = now.Add(time.Hour)
	r, err = db.RevokeKey(ctx, k.ID)
	if err != nil || !r.RevokedAt.Equal(now.Add(-time.Hour)) {
		t.Errorf("second revoke moved revokedAt to %v (%v)", r.RevokedAt, err)
	}
	if _, err := db.RevokeKey(ctx, "nosuchkey"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("revoke unknown: %v", err)
	}
	if _, err := db.KeyByID(ctx, "nosuchkey"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("KeyByID unknown: %v", err)
	}
}

func TestDevicesAndTokens(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	o := MustOrg(t, db, "acme")
	other := MustOrg(t, db, "other")
	d, token, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: o.ID, Name: "press 4", SerialNumber: "SN1", Model: "IG-500", Location: "hall B"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(token, apikey.DeviceTokenPrefix) || d.Status != resource.StatusProvisioning || d.Location != "hall B" {
		t.Errorf("device %+v token %q", d, token)
	}
	var n int
	db.R.QueryRowContext(ctx, `SELECT COUNT(*) FROM devices WHERE token_hash = ?`, []byte(token)).Scan(&n)
	if n != 0 {
		t.Error("token stored in clear")
	}
	ref, err := db.DeviceByToken(ctx, token)
	if err != nil || ref.ID != d.ID || ref.OrgID != o.ID || ref.Model != "IG-500" {
		t.Errorf("DeviceByToken = %+v, %v", ref, err)
	}
	if _, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: o.ID, Name: "dup", SerialNumber: "SN1", Model: "IG-100"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("duplicate serial: %v", err)
	}
	if _, _, err := db.AddDevice(ctx, sqlite.NewDevice{OrgID: other.ID, Name: "same serial elsewhere", SerialNumber: "SN1", Model: "IG-100"}); err != nil {
		t.Errorf("same serial in another org: %v", err)
	}
	_, _, err = db.AddDevice(ctx, sqlite.NewDevice{OrgID: o.ID, Name: "x", SerialNumber: "SN2", Model: "IG-999"})
	if cloud.ErrorCode(err) != cloud.EINVALID || !strings.Contains(err.Error(), "IG-500") || !strings.Contains(err.Error(), "IG-100") {
		t.Errorf("unknown model: %v (must list the catalog's models)", err)
	}
	at, err := db.RevokeDevice(ctx, d.ID)
	if err != nil || at.IsZero() {
		t.Fatalf("revoke: %v, %v", at, err)
	}
	if _, err := db.DeviceByToken(ctx, token); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("revoked token: %v", err)
	}
	if _, err := db.DeviceByToken(ctx, "fleet_dt_nope"); cloud.ErrorCode(err) != cloud.EUNAUTHORIZED {
		t.Errorf("unknown token: %v", err)
	}
	if _, err := db.RevokeDevice(ctx, "nosuchdevice"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("revoke unknown device: %v", err)
	}
	prev, err := db.SetDeviceStatus(ctx, d.ID, resource.StatusOnline, time.Now())
	if err != nil || prev != resource.StatusProvisioning {
		t.Errorf("SetDeviceStatus: %v, %v", prev, err)
	}
	if err := db.SetDeviceInfo(ctx, d.ID, sqlite.DeviceInfo{FirmwareVersion: "1.2.3", IPAddress: "10.0.0.7", AgentDeviceName: "gw-7", AgentTimezone: "Europe/Berlin"}); err != nil {
		t.Fatal(err)
	}
	dd, err := sqlite.NewDeviceService(db).Device(ctx, o.ID, d.ID)
	if err != nil || dd.FirmwareVersion != "1.2.3" || dd.IPAddress != "10.0.0.7" || dd.AgentDeviceName != "gw-7" || dd.AgentTimezone != "Europe/Berlin" || dd.Status != resource.StatusOnline || dd.Notes != nil {
		t.Errorf("detail = %+v, %v", dd, err)
	}
}

func TestRetention(t *testing.T) {
	ctx := context.Background()
	db := MustOpen(t)
	now := time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC)
	db.Now = func() time.Time { return now }
	o := MustOrg(t, db, "acme")
	d := MustDevice(t, db, o.ID, "IG-500")
	var samples []resource.MetricSample
	var events []resource.Event
	for i := 0; i < 12000; i++ { // more than one delete batch
		at := now.Add(-time.Duration(i) * 5 * time.Minute)
		samples = append(samples, resource.MetricSample{CapturedAt: resource.T(at)})
		if i%2 == 0 {
			events = append(events, resource.Event{Type: "heartbeat", CreatedAt: resource.T(at)})
		}
	}
	if _, err := db.InsertMetrics(ctx, d.ID, samples); err != nil {
		t.Fatal(err)
	}
	if _, err := db.InsertEvents(ctx, d.ID, events); err != nil {
		t.Fatal(err)
	}
	keep := 30 * 24 * time.Hour
	m, e, err := db.SweepRetention(ctx, keep)
	if err != nil {
		t.Fatal(err)
	}
	// Samples every 5 minutes: 30 days hold 8640 intervals; ages 0..8640*5min are kept.
	if m != 12000-8641 || e != 6000-4321 {
		t.Errorf("deleted %d metrics and %d events, want %d and %d", m, e, 12000-8641, 6000-4321)
	}
	var oldest int64
	db.R.QueryRowContext(ctx, `SELECT MIN(captured_at) FROM metrics`).Scan(&oldest)
	if oldest < now.Add(-keep).UnixMilli() {
		t.Errorf("a sample older than the retention survived")
	}
	if m, e, _ := db.SweepRetention(ctx, keep); m != 0 || e != 0 {
		t.Errorf("second sweep deleted %d, %d", m, e)
	}
}
