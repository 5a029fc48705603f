package storetest

import (
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// testOIDCConfig: an organization's single sign-on configuration is stored
// with its secret (read back by the store, for the token endpoint), an
// empty secret keeps the stored one, the audit record says only whether the
// secret is set; a domain belongs to one organization; only an enabled
// configuration routes its domains; a member created at first sign-in
// has its own record; another organization reads nothing.
func testOIDCConfig(t *testing.T, open Opener) {
	e := newEnv(t, open)
	acme, other := e.org("acme"), e.org("other")
	ps := e.Panel
	if _, err := ps.OrgOIDC(e.ctx, acme.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Fatalf("no config yet: %v", err)
	}
	const secret = "s3cr3t-client-secret-value"
	a := e.acting(auditCLI)
	c, err := ps.SetOrgOIDC(a.ctx, cloud.OIDCConfig{OrgID: acme.ID, Issuer: "https://login.acme.example/realms/acme",
		ClientID: "fleet", ClientSecret: secret, Domains: []string{"Acme.example", "@acme-labs.example", "acme.example"},
		DefaultRole: "viewer", RoleClaim: "groups", RoleMap: map[string]cloud.Role{"fleet-admins": cloud.RoleAdmin}, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.Domains, ",") != "acme-labs.example,acme.example" || c.DefaultRole != cloud.RoleViewer {
		t.Errorf("stored %+v", c)
	}
	got, err := ps.OrgOIDC(e.ctx, acme.ID)
	if err != nil || got.ClientSecret != secret || got.Issuer != c.Issuer || got.RoleMap["fleet-admins"] != cloud.RoleAdmin || !got.Enabled ||
		strings.Join(got.Domains, ",") != "acme-labs.example,acme.example" || got.RoleClaim != "groups" {
		t.Errorf("read back %+v, %v", got, err)
	}
	_, d := a.wantAudit(acme.ID, cloud.ActionOrgOIDC, auditCLI, cloud.AuditTarget{Kind: cloud.TargetOrg, ID: acme.ID})
	if d["clientSecretSet"] != true || d["clientSecretChanged"] != true || d["issuer"] != c.Issuer {
		t.Errorf("audit details %v", d)
	}
	for _, r := range a.auditOf(acme.ID, cloud.AuditFilter{}) {
		if strings.Contains(string(r.Details), secret) {
			t.Errorf("audit record %s holds the client secret: %s", r.Action, r.Details)
		}
	}

	if on, err := ps.OIDCEnabled(e.ctx); err != nil || !on {
		t.Errorf("OIDCEnabled with acme's on: %v, %v", on, err)
	}
	// Routing by domain, and only while enabled.
	if byDomain, err := ps.OIDCByDomain(e.ctx, "acme-labs.example"); err != nil || byDomain.OrgID != acme.ID || byDomain.ClientSecret != secret {
		t.Errorf("by domain: %+v, %v", byDomain, err)
	}
	if _, err := ps.OIDCByDomain(e.ctx, "other.example"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown domain: %v", err)
	}
	// Another organization cannot take a domain, and reads no config.
	if _, err := ps.SetOrgOIDC(e.ctx, cloud.OIDCConfig{OrgID: other.ID, Domains: []string{"acme.example"}}); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("other org takes acme.example: %v", err)
	}
	if _, err := ps.OrgOIDC(e.ctx, other.ID); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("other org after a refused change: %v", err)
	}
	// An empty secret keeps the stored one; disabling stops the routing.
	c.ClientSecret, c.Enabled, c.Domains = "", false, []string{"acme.example"}
	if _, err := ps.SetOrgOIDC(e.ctx, c); err != nil {
		t.Fatal(err)
	}
	if got, _ := ps.OrgOIDC(e.ctx, acme.ID); got.ClientSecret != secret || got.Enabled || len(got.Domains) != 1 {
		t.Errorf("after a change without secret: %+v", got)
	}
	if _, err := ps.OIDCByDomain(e.ctx, "acme.example"); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("disabled config routes: %v", err)
	}
	if on, err := ps.OIDCEnabled(e.ctx); err != nil || on {
		t.Errorf("OIDCEnabled with every config off: %v, %v", on, err)
	}
	// The freed domain can now be another organization's.
	if _, err := ps.SetOrgOIDC(e.ctx, cloud.OIDCConfig{OrgID: other.ID, Domains: []string{"acme-labs.example"}}); err != nil {
		t.Errorf("freed domain: %v", err)
	}
	for _, bad := range []cloud.OIDCConfig{
		{OrgID: acme.ID, Issuer: "ftp://x.example", Domains: []string{"acme.example"}},
		{OrgID: acme.ID, Domains: []string{"not a domain"}},
		{OrgID: acme.ID, DefaultRole: "ROOT"},
		{OrgID: acme.ID, RoleMap: map[string]cloud.Role{"x": cloud.RoleAdmin}},
		{OrgID: acme.ID, Issuer: "https://x.example", ClientID: "fleet", Enabled: true, ClientSecret: "x"}, // no domain
	} {
		if _, err := ps.SetOrgOIDC(e.ctx, bad); cloud.ErrorCode(err) != cloud.EINVALID {
			t.Errorf("SetOrgOIDC(%+v): %v, want EINVALID", bad, err)
		}
	}
	if _, err := ps.SetOrgOIDC(e.ctx, cloud.OIDCConfig{OrgID: "nosuchorg"}); cloud.ErrorCode(err) != cloud.ENOTFOUND {
		t.Errorf("unknown org: %v", err)
	}

	// A member made by a first sign-in, and its record.
	u, err := ps.CreateOIDCMember(e.ctx, cloud.NewUser{OrgID: acme.ID, Email: "Nia@acme.example", Role: cloud.RoleAdmin, PasswordHash: "x"}, "192.0.2.9")
	if err != nil {
		t.Fatal(err)
	}
	if found, err := ps.UserByOrgEmail(e.ctx, acme.ID, "nia@acme.example"); err != nil || found.ID != u.ID || found.Role != cloud.RoleAdmin {
		t.Errorf("created member %+v, %v", found, err)
	}
	self := cloud.Actor{Kind: cloud.ActorUser, ID: u.ID, Name: "nia@acme.example", IP: "192.0.2.9"}
	if _, d := e.wantAudit(acme.ID, cloud.ActionMemberAdded, self, cloud.AuditTarget{Kind: cloud.TargetMember, ID: u.ID}); d["via"] != "oidc" {
		t.Errorf("member.added details %v", d)
	}
	// An email is unique within its organization (migration 0021): the
	// same one again there is a conflict, in another organization a member
	// of its own.
	if _, err := ps.CreateOIDCMember(e.ctx, cloud.NewUser{OrgID: acme.ID, Email: "NIA@acme.example", Role: cloud.RoleViewer, PasswordHash: "x"}, ""); cloud.ErrorCode(err) != cloud.ECONFLICT {
		t.Errorf("the same email again in its organization: %v, want %s", err, cloud.ECONFLICT)
	}
	if o, err := ps.CreateOIDCMember(e.ctx, cloud.NewUser{OrgID: other.ID, Email: "nia@acme.example", Role: cloud.RoleViewer, PasswordHash: "x"}, ""); err != nil || o.ID == u.ID || o.OrgID != other.ID {
		t.Errorf("the same email in another organization: %+v, %v; want a member of that organization", o, err)
	}
}
