package relay

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
	"github.com/fleet/fleet/cloud/sqlite"
)

// TestUserReset2FA: user reset-2fa (a lost phone) deletes a user's
// two-factor key and recovery codes, recorded as the CLI's; a second run
// changes nothing; an unknown user is an error.
func TestUserReset2FA(t *testing.T) {
	db := filepath.Join(t.TempDir(), "fleet.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var u struct{ ID string }
	if out, errOut, code := cliIn(t, "correct horse battery\n", "user", "create", "--db", db, "--org", org.ID, "--email", "ada@acme.example", "--role", "OWNER", "--password-stdin", "--json"); code != 0 || json.Unmarshal([]byte(out), &u) != nil {
		t.Fatalf("user create: %d %s", code, errOut)
	}
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ps := sqlite.NewPanelStore(st)
	ctx := context.Background()
	hashes := make([]string, cloud.RecoveryCodeCount)
	for i := range hashes {
		hashes[i] = fmt.Sprintf("hash-%d", i)
	}
	if err := ps.EnrollTOTP(ctx, org.ID, u.ID, cloud.TOTPEnrolment{Secret: "JBSWY3DPEHPK3PXP", Step: 1, RecoveryHashes: hashes}); err != nil {
		t.Fatal(err)
	}

	var out struct {
		ID, Email string
		Reset     bool
	}
	mustJSON(t, &out, "user", "reset-2fa", "--db", db, "--id", u.ID)
	if !out.Reset || out.ID != u.ID || out.Email != "ada@acme.example" {
		t.Errorf("reset-2fa printed %+v", out)
	}
	if st, err := ps.TwoFactorOf(ctx, org.ID, u.ID); err != nil || st.Enrolled() || st.RecoveryLeft != 0 {
		t.Errorf("after reset-2fa: %+v, %v", st, err)
	}
	page, err := st.Audit().ListAudit(ctx, org.ID, cloud.AuditFilter{Action: cloud.ActionMember2FAReset})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("reset records: %+v, %v", page.Records, err)
	}
	if r := page.Records[0]; r.Actor.Kind != cloud.ActorCLI || r.Actor != CLIActor() || r.Target != (cloud.AuditTarget{Kind: cloud.TargetMember, ID: u.ID}) {
		t.Errorf("reset record %+v, want the CLI's on the member", r)
	}
	text, _, code := cli(t, "user", "reset-2fa", "--db", db, "--id", u.ID)
	if code != 0 || !strings.Contains(text, "has no two-factor sign-in; nothing changed") {
		t.Errorf("second reset-2fa: %d %q", code, text)
	}
	if page, _ := st.Audit().ListAudit(ctx, org.ID, cloud.AuditFilter{Action: cloud.ActionMember2FAReset}); len(page.Records) != 1 {
		t.Errorf("a reset that changed nothing was recorded: %d records", len(page.Records))
	}
	if _, errOut, code := cli(t, "user", "reset-2fa", "--db", db, "--id", "nosuchuser"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("reset-2fa of an unknown user: %d %s", code, errOut)
	}
}
