package relay

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
)

// TestOrgOIDCCommands: org set-oidc stores the configuration with the
// secret from stdin or FLEET_OIDC_CLIENT_SECRET (never a flag), prints it
// without the secret, keeps the secret when none is given, --disable alone
// turns it off; org show-oidc shows it; bad values are usage errors; the
// change is the CLI's audit record, without the secret.
func TestOrgOIDCCommands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "fleet.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	const secret = "client-secret-from-stdin-77"
	base := []string{"org", "set-oidc", "--db", db, "--org", org.ID, "--issuer", "https://login.acme.example/realms/acme",
		"--client-id", "fleet", "--domains", "acme.example,Acme.org", "--default-role", "member", "--role-claim", "groups",
		"--role-map", "fleet-admins=ADMIN,fleet-ops=MEMBER"}
	out, errOut, code := cliIn(t, secret+"\n", append(base, "--client-secret-stdin", "--json")...)
	var got map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("set-oidc: %d %s %s", code, out, errOut)
	}
	if strings.Contains(out+errOut, secret) || got["clientSecretSet"] != true || got["enabled"] != true || got["defaultRole"] != "MEMBER" {
		t.Errorf("set-oidc printed %s", out)
	}
	out, _, code = cliIn(t, "", "org", "show-oidc", "--db", db, "--org", org.ID)
	for _, s := range []string{"on", "issuer:        https://login.acme.example/realms/acme", "client secret: set", "domains:       acme.example, acme.org",
		"role map:      fleet-admins=ADMIN,fleet-ops=MEMBER", "/panel/login?org=" + org.ID} {
		if code != 0 || !strings.Contains(out, s) {
			t.Errorf("show-oidc lacks %q: %s", s, out)
		}
	}
	if strings.Contains(out, secret) {
		t.Errorf("show-oidc shows the secret")
	}

	// Without a secret the stored one is kept; from the environment it
	// is replaced.
	if _, errOut, code := cliIn(t, "", base...); code != 0 {
		t.Fatalf("set-oidc without secret: %d %s", code, errOut)
	}
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ps := sqlite.NewPanelStore(st)
	if c, _ := ps.OrgOIDC(context.Background(), org.ID); c.ClientSecret != secret {
		t.Errorf("secret after a change without one: %q", c.ClientSecret)
	}
	t.Setenv(OIDCSecretEnv, "from-the-environment")
	if _, errOut, code := cliIn(t, "", base...); code != 0 {
		t.Fatalf("set-oidc with the environment's secret: %d %s", code, errOut)
	}
	if c, _ := ps.OrgOIDC(context.Background(), org.ID); c.ClientSecret != "from-the-environment" {
		t.Errorf("secret from %s: %q", OIDCSecretEnv, c.ClientSecret)
	}
	// --disable alone keeps the rest.
	if _, errOut, code := cliIn(t, "", "org", "set-oidc", "--db", db, "--org", org.ID, "--disable"); code != 0 {
		t.Fatalf("--disable: %d %s", code, errOut)
	}
	if c, _ := ps.OrgOIDC(context.Background(), org.ID); c.Enabled || c.ClientSecret != "from-the-environment" || len(c.Domains) != 2 {
		t.Errorf("after --disable: %+v", c)
	}
	for name, c := range map[string]struct {
		args []string
		code int
		msg  string
	}{
		"secret as a flag": {append(base, "--client-secret", "x"), 2, "client-secret"},
		"no issuer":        {[]string{"org", "set-oidc", "--db", db, "--org", org.ID, "--client-id", "x", "--domains", "a.example"}, 2, "--issuer is required"},
		"bad role":         {append(base, "--default-role", "ROOT"), 2, "role must be one of"},
		"bad role map":     {append(base, "--role-map", "x"), 2, "is not value=ROLE"},
		"bad issuer":       {append(base, "--issuer", "ftp://x"), 1, "issuer must be an http(s) URL"},
		"unknown org":      {[]string{"org", "show-oidc", "--db", db, "--org", "nosuch"}, 1, "not found"},
	} {
		_, errOut, code := cliIn(t, "", c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%s: exit %d %q, want %d with %q", name, code, errOut, c.code, c.msg)
		}
	}
	recs, err := st.Audit().ListAudit(context.Background(), org.ID, cloud.AuditFilter{Action: cloud.ActionOrgOIDC})
	if err != nil || len(recs.Records) != 4 || recs.Records[0].Actor.Kind != cloud.ActorCLI {
		t.Fatalf("audit records of set-oidc: %+v, %v", recs.Records, err)
	}
	for _, r := range recs.Records {
		if strings.Contains(string(r.Details), secret) || strings.Contains(string(r.Details), "from-the-environment") {
			t.Errorf("audit record holds the secret: %s", r.Details)
		}
	}
}
