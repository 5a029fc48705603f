package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud"
)

// Accounts (issue 30): an email is unique in its organization only; sign-in
// reads every organization's account with it; a password set by someone
// else is temporary until its user chooses their own, and each change of
// a password has its audit record.

// testAccountsAcrossOrgs: two organizations each hold ada@x.example; one
// organization cannot hold it twice; UsersByEmail returns both with their
// organization's name, active first, then oldest, bounded.
func testAccountsAcrossOrgs(t *testing.T, open Opener) {
	e := newEnv(t, open)
	p := e.Panel
	acme, globex := e.org("Acme"), e.org("Globex")
	a := e.user(acme.ID, "ada@x.example", cloud.RoleOwner)
	e.clock.Add(time.Millisecond)
	g, err := p.CreateUser(e.ctx, cloud.NewUser{OrgID: globex.ID, Email: "ADA@X.example", Role: cloud.RoleViewer, PasswordHash: "h-globex", MustChangePassword: true})
	if err != nil || g.OrgID != globex.ID || g.Email != "ada@x.example" || !g.MustChangePassword {
		t.Fatalf("the same email in another organization: %+v, %v", g, err)
	}
	if _, err := p.CreateUser(e.ctx, cloud.NewUser{OrgID: globex.ID, Email: "ada@X.EXAMPLE", Role: cloud.RoleViewer, PasswordHash: "h"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("the same email twice in one organization: %v", err)
	}
	if got, _ := e.reopen().Panel.UserByID(e.ctx, g.ID); !got.MustChangePassword || got.PasswordHash != "h-globex" {
		t.Errorf("another handle reads %+v", got)
	}
	us, err := p.UsersByEmail(e.ctx, " Ada@X.Example", cloud.MaxAccountsPerEmail)
	if err != nil || len(us) != 2 || us[0].ID != a.ID || us[0].OrgName != "Acme" || us[1].ID != g.ID || us[1].OrgName != "Globex" ||
		us[0].MustChangePassword || !us[1].MustChangePassword {
		t.Fatalf("UsersByEmail = %+v, %v", us, err)
	}
	if u, err := p.UserByOrgEmail(e.ctx, globex.ID, "ada@x.example"); err != nil || u.ID != g.ID {
		t.Errorf("UserByOrgEmail(globex) = %+v, %v", u, err)
	}
	// A disabled account comes after the active ones.
	e.user(acme.ID, "bob@x.example", cloud.RoleOwner) // so that Ada is not the last OWNER
	if _, err := p.DisableUser(e.ctx, acme.ID, a.ID); err != nil {
		t.Fatal(err)
	}
	if us, _ := p.UsersByEmail(e.ctx, "ada@x.example", cloud.MaxAccountsPerEmail); len(us) != 2 || us[0].ID != g.ID || us[1].ID != a.ID || !us[1].Disabled() {
		t.Errorf("with Acme's disabled: %+v", us)
	}
	// The number read is bounded, whatever the caller asks.
	for i := range cloud.MaxAccountsPerEmail + 2 {
		o := e.org("many " + string(rune('a'+i)))
		e.user(o.ID, "many@x.example", cloud.RoleOwner)
	}
	if us, _ := p.UsersByEmail(e.ctx, "many@x.example", 1000); len(us) != cloud.MaxAccountsPerEmail {
		t.Errorf("UsersByEmail(limit 1000) read %d accounts, want %d", len(us), cloud.MaxAccountsPerEmail)
	}
	if us, _ := p.UsersByEmail(e.ctx, "many@x.example", 2); len(us) != 2 {
		t.Errorf("UsersByEmail(limit 2) read %d", len(us))
	}
	if us, err := p.UsersByEmail(e.ctx, "not an address", 5); err != nil || len(us) != 0 {
		t.Errorf("UsersByEmail(not an address) = %+v, %v", us, err)
	}
}

// testPasswordChanges: a temporary password requires a change; the user's
// own change clears it and is recorded "by": "self" in the same
// transaction; an admin's reset clears it too unless temporary. Each one
// moves PasswordChangedAt (which ends older sessions).
func testPasswordChanges(t *testing.T, open Opener) {
	e := newEnv(t, open)
	o, other := e.org("acme"), e.org("other")
	p := e.Panel
	u, err := p.CreateUser(e.ctx, cloud.NewUser{OrgID: o.ID, Email: "new@acme.example", Role: cloud.RoleMember, PasswordHash: "h0", MustChangePassword: true})
	if err != nil || !u.MustChangePassword {
		t.Fatalf("create with a temporary password: %+v, %v", u, err)
	}
	self := cloud.Actor{Kind: cloud.ActorUser, ID: u.ID, Name: u.Email, IP: "192.0.2.9"}
	me := e.acting(self)
	e.clock.Add(time.Second)
	if _, err := me.Panel.ChangeOwnPassword(me.ctx, other.ID, u.ID, "h1"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("change across organizations: %v", err)
	}
	if _, err := me.Panel.ChangeOwnPassword(me.ctx, o.ID, u.ID, ""); cloud.ErrorCode(err) != cloud.EINVALID {
		t.Errorf("empty hash: %v", err)
	}
	c, err := me.Panel.ChangeOwnPassword(me.ctx, o.ID, u.ID, "h1")
	if err != nil || c.MustChangePassword || c.PasswordHash != "h1" || !c.PasswordChangedAt.Equal(e.clock.Now()) {
		t.Fatalf("ChangeOwnPassword = %+v, %v", c, err)
	}
	if got, _ := e.reopen().Panel.UserByID(e.ctx, u.ID); got.MustChangePassword || got.PasswordHash != "h1" {
		t.Errorf("another handle reads %+v", got)
	}
	target := cloud.AuditTarget{Kind: cloud.TargetMember, ID: u.ID}
	if _, d := me.wantAudit(o.ID, cloud.ActionMemberPassword, self, target); d["by"] != "self" || d["email"] != u.Email || len(d) != 2 {
		t.Errorf("details %v, want by self and the email, nothing else", d)
	}
	if recs := e.auditOf(other.ID, cloud.AuditFilter{}); len(recs) != 0 {
		t.Errorf("the other organization holds %d records", len(recs))
	}

	cli := e.acting(auditCLI)
	e.clock.Add(time.Second)
	tmp, err := cli.Panel.SetTemporaryPassword(cli.ctx, o.ID, u.ID, "h2")
	if err != nil || !tmp.MustChangePassword || tmp.PasswordHash != "h2" || !tmp.PasswordChangedAt.Equal(e.clock.Now()) {
		t.Fatalf("SetTemporaryPassword = %+v, %v", tmp, err)
	}
	recs := e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionMemberPassword, ActorKind: cloud.ActorCLI})
	if len(recs) != 1 || string(recs[0].Details) != `{"by":"cli","email":"new@acme.example","temporary":true}` {
		t.Errorf("the reset's records: %+v", recs)
	}
	e.clock.Add(time.Second)
	if r, err := cli.Panel.SetUserPassword(cli.ctx, o.ID, u.ID, "h3"); err != nil || r.MustChangePassword {
		t.Errorf("SetUserPassword = %+v, %v (a password given for good)", r, err)
	}
	// No actor (the system's own change): no record, the change all the same.
	e.clock.Add(time.Second)
	if r, err := p.SetTemporaryPassword(e.ctx, o.ID, u.ID, "h4"); err != nil || !r.MustChangePassword {
		t.Errorf("without an actor: %+v, %v", r, err)
	}
	if n := len(e.auditOf(o.ID, cloud.AuditFilter{Action: cloud.ActionMemberPassword})); n != 3 {
		t.Errorf("%d password records, want 3 (self, temporary, reset)", n)
	}
}

// OldUsersSQL is two users of one organization, a key one of them made and
// a second organization, as a relay before migration 0021 (emails unique
// across the relay) stored them, in statements both dialects run.
const OldUsersSQL = `INSERT INTO orgs (id, name, webhook_secret, created_at) VALUES
	('orgacc', 'Acc', 'whsec_a', 1700000000000), ('orgacc2', 'Acc two', 'whsec_b', 1700000000000);
INSERT INTO users (id, org_id, email, role, password_hash, disabled_at, password_changed_at, created_at) VALUES
	('usrada', 'orgacc', 'ada@x.example', 'OWNER', '$argon2id$ada', NULL, 1700000001000, 1700000000000),
	('usrbob', 'orgacc', 'bob@x.example', 'VIEWER', '$argon2id$bob', 1700000002000, NULL, 1700000000001);
INSERT INTO api_keys (id, org_id, name, hash, scopes, created_at, created_by) VALUES
	('keyold', 'orgacc', 'ci', 'not a hash', 'devices:read', 1700000000000, 'usrada');`

// CheckMigratedUsers checks OldUsersSQL's rows on s after migration 0021:
// every user as it was (none must change a password), the key's creator
// still named, and the email now unique per organization only.
func CheckMigratedUsers(t *testing.T, s cloud.Stores) {
	t.Helper()
	ctx := context.Background()
	p := s.Panel
	ada, err := p.UserByID(ctx, "usrada")
	if err != nil || ada.OrgID != "orgacc" || ada.Email != "ada@x.example" || ada.Role != cloud.RoleOwner || ada.PasswordHash != "$argon2id$ada" ||
		ada.PasswordChangedAt.UnixMilli() != 1700000001000 || ada.Disabled() || ada.MustChangePassword || ada.CreatedAt.UnixMilli() != 1700000000000 {
		t.Errorf("Ada after the migration: %+v, %v", ada, err)
	}
	if bob, err := p.UserByID(ctx, "usrbob"); err != nil || bob.DisabledAt.UnixMilli() != 1700000002000 || bob.Role != cloud.RoleViewer {
		t.Errorf("Bob after the migration: %+v, %v", bob, err)
	}
	if list, err := p.ListUsers(ctx, "orgacc"); err != nil || len(list) != 2 || list[0].ID != "usrada" || list[1].ID != "usrbob" {
		t.Errorf("ListUsers after the migration: %+v, %v", list, err)
	}
	keys, err := p.OrgKeys(ctx, "orgacc")
	if err != nil || len(keys) != 1 || keys[0].CreatedByEmail != "ada@x.example" {
		t.Errorf("the old key after the migration: %+v, %v", keys, err)
	}
	if _, err := p.CreateUser(ctx, cloud.NewUser{OrgID: "orgacc", Email: "Ada@x.example", Role: cloud.RoleViewer, PasswordHash: "h"}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("Ada's email again in her organization: %v", err)
	}
	other, err := p.CreateUser(ctx, cloud.NewUser{OrgID: "orgacc2", Email: "ada@x.example", Role: cloud.RoleViewer, PasswordHash: "h"})
	if err != nil {
		t.Fatalf("Ada's email in another organization: %v", err)
	}
	if us, err := p.UsersByEmail(ctx, "ada@x.example", cloud.MaxAccountsPerEmail); err != nil || len(us) != 2 || us[0].ID != "usrada" || us[1].ID != other.ID {
		t.Errorf("UsersByEmail after the migration: %+v, %v", us, err)
	}
	if _, _, err := p.CreateOrgKey(ctx, cloud.NewKey{OrgID: "orgacc2", Name: "new", Scopes: []string{"devices:read"}, CreatedBy: other.ID}); err != nil {
		t.Errorf("a key made by a user of the rebuilt table: %v", err)
	}
}
