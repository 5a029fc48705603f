package storetest

import (
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/webhook"
	"github.com/fleet/fleet/shared/resource"
)

// The panel's part of the contract (cloud.PanelStore): users and the last
// OWNER, sessions, the fleet page's counts and search, keys with their
// creator and last use, and the webhook settings, each scoped to its
// organization.

func (e *env) user(orgID, email string, role cloud.Role) cloud.User {
	e.t.Helper()
	u, err := e.Panel.CreateUser(e.ctx, cloud.NewUser{OrgID: orgID, Email: email, Role: role, PasswordHash: "$argon2id$hash-of-" + email})
	if err != nil {
		e.t.Fatal(err)
	}
	return u
}

func testUsers(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	p := e.Panel
	owner := e.user(o.ID, "  Ada@Acme.Example ", cloud.RoleOwner)
	if owner.Email != "ada@acme.example" || owner.OrgID != o.ID || owner.Role != cloud.RoleOwner || owner.Disabled() || !owner.CreatedAt.Equal(t0) || !owner.PasswordChangedAt.IsZero() {
		t.Errorf("created %+v", owner)
	}
	e.clock.Add(time.Millisecond)
	viewer := e.user(o.ID, "vic@acme.example", cloud.RoleViewer)
	stranger := e.user(other.ID, "sam@other.example", cloud.RoleOwner)
	if _, err := p.CreateUser(e.ctx, cloud.NewUser{OrgID: o.ID, Email: "ADA@acme.example", Role: cloud.RoleViewer, PasswordHash: "h"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("email in use in the organization (any case): %v", err)
	}
	for name, nu := range map[string]cloud.NewUser{
		"bad email":   {OrgID: o.ID, Email: "not an address", Role: cloud.RoleViewer, PasswordHash: "h"},
		"named email": {OrgID: o.ID, Email: "Ada <x@acme.example>", Role: cloud.RoleViewer, PasswordHash: "h"},
		"bad role":    {OrgID: o.ID, Email: "x@acme.example", Role: "ROOT", PasswordHash: "h"},
		"no password": {OrgID: o.ID, Email: "x@acme.example", Role: cloud.RoleViewer},
	} {
		if _, err := p.CreateUser(e.ctx, nu); cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("%s: %v", name, err)
		}
	}
	if _, err := p.CreateUser(e.ctx, cloud.NewUser{OrgID: "nosuchorg", Email: "x@acme.example", Role: cloud.RoleViewer, PasswordHash: "h"}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}
	if us, err := p.UsersByEmail(e.ctx, "ADA@ACME.EXAMPLE", cloud.MaxAccountsPerEmail); err != nil || len(us) != 1 || us[0].ID != owner.ID ||
		us[0].PasswordHash != owner.PasswordHash || us[0].OrgName != "acme" {
		t.Errorf("UsersByEmail = %+v, %v", us, err)
	}
	if us, err := p.UsersByEmail(e.ctx, "nobody@acme.example", cloud.MaxAccountsPerEmail); err != nil || len(us) != 0 {
		t.Errorf("unknown email: %+v, %v", us, err)
	}
	if u, err := p.UserByID(e.ctx, stranger.ID); err != nil || u.OrgID != other.ID {
		t.Errorf("UserByID (any org) = %+v, %v", u, err)
	}
	list, err := p.ListUsers(e.ctx, o.ID)
	if err != nil || len(list) != 2 || list[0].ID != owner.ID || list[1].ID != viewer.ID {
		t.Errorf("ListUsers = %+v, %v", list, err)
	}

	// Changes are scoped to the organization.
	if _, err := p.SetUserRole(e.ctx, o.ID, stranger.ID, cloud.RoleViewer); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("set role across organizations: %v", err)
	}
	if _, err := p.DisableUser(e.ctx, o.ID, stranger.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("disable across organizations: %v", err)
	}
	if _, err := p.SetUserPassword(e.ctx, o.ID, stranger.ID, "h2"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("password across organizations: %v", err)
	}
	if u, _ := p.UserByID(e.ctx, stranger.ID); u.Role != cloud.RoleOwner || u.Disabled() || u.PasswordHash != stranger.PasswordHash {
		t.Errorf("a refused change changed %+v", u)
	}

	// The last active OWNER stays.
	if _, err := p.SetUserRole(e.ctx, o.ID, owner.ID, cloud.RoleAdmin); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("demote the last owner: %v", err)
	}
	if _, err := p.DisableUser(e.ctx, o.ID, owner.ID); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("disable the last owner: %v", err)
	}
	if u, err := p.SetUserRole(e.ctx, o.ID, viewer.ID, cloud.RoleOwner); err != nil || u.Role != cloud.RoleOwner {
		t.Fatalf("promote: %+v, %v", u, err)
	}
	if u, err := p.SetUserRole(e.ctx, o.ID, owner.ID, cloud.RoleMember); err != nil || u.Role != cloud.RoleMember {
		t.Errorf("demote with another owner: %+v, %v", u, err)
	}
	if _, err := p.SetUserRole(e.ctx, o.ID, viewer.ID, cloud.RoleViewer); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("demote the (new) last owner: %v", err)
	}
	if _, err := p.SetUserRole(e.ctx, o.ID, viewer.ID, "GOD"); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("unknown role: %v", err)
	}
	// A disabled OWNER does not count as one.
	third := e.user(o.ID, "third@acme.example", cloud.RoleOwner)
	e.clock.Add(time.Second)
	d, err := p.DisableUser(e.ctx, o.ID, third.ID)
	if err != nil || !d.DisabledAt.Equal(e.clock.Now()) {
		t.Fatalf("disable an owner with another one: %+v, %v", d, err)
	}
	if again, err := p.DisableUser(e.ctx, o.ID, third.ID); err != nil || !again.DisabledAt.Equal(d.DisabledAt) {
		t.Errorf("disable twice: %+v, %v (the first time is kept)", again, err)
	}
	if _, err := p.SetUserRole(e.ctx, o.ID, viewer.ID, cloud.RoleAdmin); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("demote the last active owner beside a disabled one: %v", err)
	}
	e.clock.Add(time.Second)
	u, err := p.SetUserPassword(e.ctx, o.ID, owner.ID, "$argon2id$new")
	if err != nil || u.PasswordHash != "$argon2id$new" || !u.PasswordChangedAt.Equal(e.clock.Now()) || u.MustChangePassword {
		t.Errorf("SetUserPassword = %+v, %v", u, err)
	}
	if got, _ := e.reopen().Panel.UserByID(e.ctx, owner.ID); got.PasswordHash != "$argon2id$new" || got.Role != cloud.RoleMember {
		t.Errorf("another handle reads %+v", got)
	}
}

// testLastOwnerUnderConcurrency: two OWNERs demoting each other at once
// from two handles leave exactly one OWNER.
func testLastOwnerConcurrent(t *testing.T, open Opener) {
	e := newEnv(t, open)
	e2 := e.reopen()
	for round := 0; round < 10; round++ {
		o := e.org(fmt.Sprintf("acme %d", round))
		a := e.user(o.ID, fmt.Sprintf("a%d@acme.example", round), cloud.RoleOwner)
		b := e.user(o.ID, fmt.Sprintf("b%d@acme.example", round), cloud.RoleOwner)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() {
			defer wg.Done()
			_, errs[0] = e.Panel.SetUserRole(e.ctx, o.ID, b.ID, cloud.RoleAdmin)
		}()
		go func() {
			defer wg.Done()
			_, errs[1] = e2.Panel.DisableUser(e.ctx, o.ID, a.ID)
		}()
		wg.Wait()
		owners := 0
		users, _ := e.Panel.ListUsers(e.ctx, o.ID)
		for _, u := range users {
			if u.Role == cloud.RoleOwner && !u.Disabled() {
				owners++
			}
		}
		if owners != 1 || (errs[0] == nil) == (errs[1] == nil) {
			t.Fatalf("round %d: %d active owners left, errors %v", round, owners, errs)
		}
	}
}

func testPanelSessions(t *testing.T, open Opener) {
	e := newEnv(t, open)
	p := e.Panel
	exp := t0.Add(30 * time.Minute)
	if err := p.CommitSession(e.ctx, "hash-a", []byte(`{"user":"u1"}`), exp); err != nil {
		t.Fatal(err)
	}
	if err := p.CommitSession(e.ctx, "hash-b", []byte(`{"user":"u2"}`), t0.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if b, ok, err := e.reopen().Panel.FindSession(e.ctx, "hash-a"); err != nil || !ok || string(b) != `{"user":"u1"}` {
		t.Errorf("find from another handle = %q %v %v", b, ok, err)
	}
	if _, ok, err := p.FindSession(e.ctx, "hash-nope"); ok || err != nil {
		t.Errorf("unknown session: %v %v", ok, err)
	}
	if err := p.CommitSession(e.ctx, "hash-a", []byte(`{"user":"u1","flash":"x"}`), exp.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	e.clock.Add(2 * time.Minute) // hash-b expired
	if _, ok, _ := p.FindSession(e.ctx, "hash-b"); ok {
		t.Error("an expired session is found")
	}
	if b, ok, _ := p.FindSession(e.ctx, "hash-a"); !ok || string(b) != `{"user":"u1","flash":"x"}` {
		t.Errorf("replaced session = %q %v", b, ok)
	}
	if n, err := p.DeleteExpiredSessions(e.ctx, e.clock.Now()); err != nil || n != 1 {
		t.Errorf("DeleteExpiredSessions = %d, %v", n, err)
	}
	if err := p.DeleteSession(e.ctx, "hash-a"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := p.FindSession(e.ctx, "hash-a"); ok {
		t.Error("a deleted session is found")
	}
	if err := p.DeleteSession(e.ctx, "hash-a"); err != nil {
		t.Errorf("deleting a missing session: %v", err)
	}
}

func testFleetView(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	names := []string{"Press line 1", "Pump 10%", "Pump_2", "pumphouse", "Gate"}
	var devs []device
	for i, n := range names {
		e.clock.Add(time.Millisecond)
		d, tok, err := e.Store.AddDevice(e.ctx, cloud.NewDevice{OrgID: o.ID, Name: n, SerialNumber: fmt.Sprintf("SN-%d", i), Model: "IG-100", Location: "Hall A"})
		if err != nil {
			t.Fatal(err)
		}
		devs = append(devs, device{DeviceDetail: d, OrgID: o.ID, Token: tok})
	}
	e.online(devs[0], time.Minute)
	foreign := e.device(other.ID, "IG-100")
	for _, dt := range []struct {
		id   string
		tags []string
	}{{devs[1].ID, []string{"pump", "line_3"}}, {devs[2].ID, []string{"pump"}}, {devs[3].ID, []string{"linex3"}}, {foreign.ID, []string{"pump"}}} {
		if err := e.Store.SetDeviceTags(e.ctx, dt.id, dt.tags); err != nil {
			t.Fatal(err)
		}
	}
	counts, err := e.Panel.StatusCounts(e.ctx, o.ID)
	if err != nil || counts[resource.StatusOnline] != 1 || counts[resource.StatusProvisioning] != 4 || len(counts) != 2 {
		t.Errorf("StatusCounts = %v, %v", counts, err)
	}
	search := func(q cloud.DeviceSearch) (int, []string) {
		t.Helper()
		page, err := e.Panel.SearchDevices(e.ctx, o.ID, q)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range page.Devices {
			got = append(got, d.Name)
		}
		return page.Total, got
	}
	for _, c := range []struct {
		q     cloud.DeviceSearch
		total int
		names string
	}{
		{cloud.DeviceSearch{Limit: 10}, 5, "Press line 1,Pump 10%,Pump_2,pumphouse,Gate"},
		{cloud.DeviceSearch{Query: "PUMP", Limit: 10}, 3, "Pump 10%,Pump_2,pumphouse"},
		{cloud.DeviceSearch{Query: "%", Limit: 10}, 1, "Pump 10%"},
		{cloud.DeviceSearch{Query: "p_", Limit: 10}, 1, "Pump_2"},
		{cloud.DeviceSearch{Query: "hall a", Limit: 2, Offset: 2}, 5, "Pump_2,pumphouse"},
		{cloud.DeviceSearch{Query: "sn-4", Limit: 10}, 1, "Gate"},
		{cloud.DeviceSearch{Status: resource.StatusOnline, Limit: 10}, 1, "Press line 1"},
		{cloud.DeviceSearch{Status: resource.StatusOnline, Query: "pump", Limit: 10}, 0, ""},
		{cloud.DeviceSearch{Limit: 10, Offset: 50}, 5, ""},
		{cloud.DeviceSearch{Tags: []string{"pump"}, Limit: 10}, 2, "Pump 10%,Pump_2"},
		{cloud.DeviceSearch{Tags: []string{"line_3", "pump"}, Limit: 10}, 1, "Pump 10%"},
		{cloud.DeviceSearch{Tags: []string{"line_3"}, Query: "gate", Limit: 10}, 0, ""},
		{cloud.DeviceSearch{Tags: []string{"pum"}, Limit: 10}, 0, ""},
		{cloud.DeviceSearch{Tags: []string{"pump"}, Limit: 1, Offset: 1}, 2, "Pump_2"},
	} {
		total, got := search(c.q)
		if total != c.total || strings.Join(got, ",") != c.names {
			t.Errorf("%+v: %d %v, want %d %s", c.q, total, got, c.total, c.names)
		}
	}
}

func testPanelKeys(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	ada := e.user(o.ID, "ada@acme.example", cloud.RoleAdmin)
	cli, _, err := e.Store.CreateKey(e.ctx, o.ID, "from the CLI", []string{cloud.ScopeDevicesRead}, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.clock.Add(time.Second)
	k, key, err := e.Panel.CreateOrgKey(e.ctx, cloud.NewKey{OrgID: o.ID, Name: " ERP ", Scopes: []string{cloud.ScopeAlertsRead}, ExpiresIn: 7 * 24 * time.Hour, CreatedBy: ada.ID})
	if err != nil || k.Name != "ERP" || !strings.HasPrefix(key, "svc_sk_"+k.ID+"_") || !k.ExpiresAt.Equal(e.clock.Now().Add(7*24*time.Hour)) {
		t.Fatalf("CreateOrgKey = %+v %q, %v", k, key, err)
	}
	for name, nk := range map[string]cloud.NewKey{
		"no scopes":   {OrgID: o.ID, Name: "x"},
		"bad scope":   {OrgID: o.ID, Name: "x", Scopes: []string{"root"}},
		"no name":     {OrgID: o.ID, Name: " ", Scopes: []string{cloud.ScopeAlertsRead}},
		"negative":    {OrgID: o.ID, Name: "x", Scopes: []string{cloud.ScopeAlertsRead}, ExpiresIn: -time.Hour},
		"unknown org": {OrgID: "nosuchorg", Name: "x", Scopes: []string{cloud.ScopeAlertsRead}},
	} {
		if _, _, err := e.Panel.CreateOrgKey(e.ctx, nk); err == nil {
			t.Errorf("%s: created", name)
		}
	}
	keys, err := e.Panel.OrgKeys(e.ctx, o.ID)
	if err != nil || len(keys) != 2 || keys[0].ID != k.ID || keys[0].CreatedByEmail != "ada@acme.example" || keys[1].ID != cli.ID || keys[1].CreatedByEmail != "" {
		t.Fatalf("OrgKeys = %+v, %v", keys, err)
	}
	if !keys[0].LastUsedAt.IsZero() {
		t.Errorf("a new key was used at %v", keys[0].LastUsedAt)
	}
	if keys, _ := e.Panel.OrgKeys(e.ctx, other.ID); len(keys) != 0 {
		t.Errorf("another organization lists %+v", keys)
	}

	rec, ok := e.Store.Keys().(cloud.KeyUseRecorder)
	if !ok {
		t.Fatal("the store's KeyService records no key use (cloud.KeyUseRecorder): the panel's 'last used' would stay empty")
	}
	lastUsed := func() time.Time {
		keys, _ := e.reopen().Panel.OrgKeys(e.ctx, o.ID)
		return keys[0].LastUsedAt
	}
	at := e.clock.Now()
	if err := rec.RecordKeyUse(e.ctx, k.ID, at); err != nil {
		t.Fatal(err)
	}
	if got := lastUsed(); !got.Equal(at) {
		t.Errorf("last used %v, want %v", got, at)
	}
	rec.RecordKeyUse(e.ctx, k.ID, at.Add(30*time.Second))
	if got := lastUsed(); !got.Equal(at) {
		t.Errorf("a use within a minute moved last used to %v", got)
	}
	rec.RecordKeyUse(e.ctx, k.ID, at.Add(2*time.Minute))
	if got := lastUsed(); !got.Equal(at.Add(2 * time.Minute)) {
		t.Errorf("last used %v, want %v", got, at.Add(2*time.Minute))
	}

	if _, err := e.Panel.RevokeOrgKey(e.ctx, other.ID, k.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("revoke from another organization: %v", err)
	}
	if got, _ := e.Store.Keys().KeyByID(e.ctx, k.ID); !got.RevokedAt.IsZero() {
		t.Error("revoked by another organization")
	}
	r, err := e.Panel.RevokeOrgKey(e.ctx, o.ID, k.ID)
	if err != nil || !r.RevokedAt.Equal(e.clock.Now()) {
		t.Errorf("RevokeOrgKey = %+v, %v", r, err)
	}
}

func testPanelWebhooks(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	p := e.Panel
	st, err := p.WebhookSettings(e.ctx, o.ID)
	if err != nil || st.Secret != o.WebhookSecret || st.AlertURL != "" || !st.PreviousValidUntil.IsZero() {
		t.Errorf("WebhookSettings = %+v, %v", st, err)
	}
	if err := p.SetOrgAlertWebhook(e.ctx, o.ID, "https://example.com/alerts"); err != nil {
		t.Fatal(err)
	}
	if err := p.SetOrgAlertWebhook(e.ctx, o.ID, "http://example.com/alerts"); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("http URL: %v", err)
	}
	secret, err := p.RotateOrgSecret(e.ctx, o.ID, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	st, _ = p.WebhookSettings(e.ctx, o.ID)
	if st.AlertURL != "https://example.com/alerts" || st.Secret != secret || !st.PreviousValidUntil.Equal(e.clock.Now().Add(time.Hour)) {
		t.Errorf("after rotation: %+v", st)
	}
	e.clock.Add(2 * time.Hour)
	if st, _ = p.WebhookSettings(e.ctx, o.ID); !st.PreviousValidUntil.IsZero() {
		t.Errorf("the previous secret still signs after its grace: %+v", st)
	}
	if _, err := p.WebhookSettings(e.ctx, "nosuchorg"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}

	at := e.clock.Now()
	mine, theirs := delivery("dlvmine", o.ID, "dev1", at), delivery("dlvtheirs", other.ID, "dev2", at)
	if err := e.Outbox.WriteOutbox(e.ctx, []*webhook.Delivery{mine, theirs}, nil); err != nil {
		t.Fatal(err)
	}
	if err := e.Outbox.WriteOutbox(e.ctx, nil, []webhook.Attempt{
		{DeliveryID: mine.ID, Number: 1, At: at, StatusCode: 503, State: webhook.StatePending, NextAttemptAt: at.Add(5 * time.Second)},
		{DeliveryID: mine.ID, Number: 2, At: at.Add(5 * time.Second), StatusCode: 410, State: webhook.StateFailed},
	}); err != nil {
		t.Fatal(err)
	}
	ds, err := p.RecentDeliveries(e.ctx, o.ID, 10)
	if err != nil || len(ds) != 1 || ds[0].ID != mine.ID || ds[0].Attempts != 2 || ds[0].LastStatus != 410 || ds[0].State != "failed" || ds[0].Event != mine.Event {
		t.Fatalf("RecentDeliveries = %+v, %v", ds, err)
	}
	if _, err := p.RedeliverOrgWebhook(e.ctx, o.ID, theirs.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("redeliver another organization's delivery: %v", err)
	}
	id, err := p.RedeliverOrgWebhook(e.ctx, o.ID, mine.ID)
	if err != nil || id == mine.ID {
		t.Fatalf("RedeliverOrgWebhook = %q, %v", id, err)
	}
	if ds, _ := p.RecentDeliveries(e.ctx, o.ID, 10); len(ds) != 2 || ds[0].ID != id || ds[0].RedeliveryOf != mine.ID || ds[0].Attempts != 0 {
		t.Errorf("after redeliver: %+v", ds)
	}
	if ds, _ := p.RecentDeliveries(e.ctx, other.ID, 10); len(ds) != 1 {
		t.Errorf("the other organization's log changed: %+v", ds)
	}
}
