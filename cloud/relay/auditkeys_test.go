package relay

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestAuditCLI: the admin CLI's changes are records of the CLI (the OS
// user @ host, no address) on each store: org create in the new
// organization, key create and revoke (never the key), user create and
// reset-password ({"by":"cli"}, never a hash), device add (never the
// token); a refused command writes none.
func TestAuditCLI(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testAuditCLI(t, db) })
	}
}

func testAuditCLI(t *testing.T, db string) {
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var key struct{ ID, Key string }
	mustJSON(t, &key, "key", "create", "--db", db, "--org", org.ID, "--name", "ci", "--scopes", "devices:read")
	mustJSON(t, &struct{}{}, "key", "revoke", "--db", db, "--id", key.ID)
	var u struct{ ID string }
	out, errOut, code := cliIn(t, "correct horse battery\n", "user", "create", "--db", db, "--org", org.ID, "--email", "ada@acme.example", "--role", "OWNER", "--password-stdin", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil {
		t.Fatalf("user create: %d %s %s", code, out, errOut)
	}
	if _, errOut, code := cliIn(t, "another password 1\n", "user", "reset-password", "--db", db, "--id", u.ID, "--password-stdin"); code != 0 {
		t.Fatalf("reset-password: %s", errOut)
	}
	var dev struct{ ID, Token string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "Press 1", "--serial", "SN-1", "--model", "IG-500")
	if _, _, code := cli(t, "device", "add", "--db", db, "--org", org.ID, "--name", "Press 1 again", "--serial", "SN-1", "--model", "IG-500"); code == 0 {
		t.Fatal("a serial number taken was accepted")
	}

	st, err := openStore(context.Background(), db, storeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	page, err := st.Audit().ListAudit(context.Background(), org.ID, cloud.AuditFilter{})
	if err != nil {
		t.Fatal(err)
	}
	me := CLIActor()
	want := []struct{ action, kind, id string }{ // newest first
		{cloud.ActionDeviceAdded, cloud.TargetDevice, dev.ID},
		{cloud.ActionMemberPassword, cloud.TargetMember, u.ID},
		{cloud.ActionMemberAdded, cloud.TargetMember, u.ID},
		{cloud.ActionKeyRevoked, cloud.TargetKey, key.ID},
		{cloud.ActionKeyCreated, cloud.TargetKey, key.ID},
		{cloud.ActionOrgCreated, cloud.TargetOrg, org.ID},
	}
	if len(page.Records) != len(want) {
		t.Fatalf("records %+v, want %d", page.Records, len(want))
	}
	for i, w := range want {
		r := page.Records[i]
		if r.Action != w.action || r.Target.Kind != w.kind || r.Target.ID != w.id || r.Actor.Kind != cloud.ActorCLI ||
			r.Actor.ID != me.ID || r.Actor.Name != me.Name || r.IP != "" {
			t.Errorf("record %d: %+v, want %s of %s %s by %+v", i, r, w.action, w.kind, w.id, me)
		}
		for _, secret := range []string{key.Key, dev.Token, "argon2", "password 1", "horse"} {
			if strings.Contains(string(r.Details), secret) {
				t.Errorf("%s: details %s hold a secret", r.Action, r.Details)
			}
		}
	}
	if d := string(page.Records[1].Details); d != `{"by":"cli","email":"ada@acme.example"}` {
		t.Errorf("reset-password details %s", d)
	}
}

// TestAuditClaimedThroughEndpoint: a gateway claimed over a running
// relay's claim endpoint is device.claimed by whoever created the claim
// (here the CLI), from the agent's address, with the claim and the serial
// number and never a token; on each store.
func TestAuditClaimedThroughEndpoint(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testAuditClaimedThroughEndpoint(t, db) })
	}
}

func testAuditClaimedThroughEndpoint(t *testing.T, db string) {
	m := startMain(t, db)
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var c struct{ ID, Token string }
	mustJSON(t, &c, "claim", "create", "--db", db, "--org", org.ID, "--model", "IG-500")
	code, body := claimPost(t, m.Addr(), c.Token, `{"serialNumber":"GW-7","model":"IG-500"}`)
	var gw struct{ DeviceID, Token string }
	if code != 200 || json.Unmarshal(body, &gw) != nil {
		t.Fatalf("claim: %d %s", code, body)
	}
	st, err := openStore(context.Background(), db, storeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	page, err := st.Audit().ListAudit(context.Background(), org.ID, cloud.AuditFilter{Action: cloud.ActionDeviceClaimed})
	if err != nil || len(page.Records) != 1 {
		t.Fatalf("claimed records: %+v, %v", page.Records, err)
	}
	r, me := page.Records[0], CLIActor()
	if r.Target != (cloud.AuditTarget{Kind: cloud.TargetDevice, ID: gw.DeviceID}) || r.Actor.Kind != cloud.ActorCLI || r.Actor.ID != me.ID ||
		r.Actor.Name != me.Name || r.IP != "127.0.0.1" {
		t.Errorf("record %+v, want the device claimed by %+v from 127.0.0.1", r, me)
	}
	if want := `{"claimId":"` + c.ID + `","serialNumber":"GW-7"}`; string(r.Details) != want {
		t.Errorf("details %s, want %s", r.Details, want)
	}
	if strings.Contains(string(r.Details), c.Token) || strings.Contains(string(r.Details), gw.Token) {
		t.Errorf("details hold a token")
	}
}
