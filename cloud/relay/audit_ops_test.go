package relay

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/fleet/fleet/cloud"
)

// TestAuditCLIOperations: the admin CLI's changes of operations are
// recorded as the CLI's (the OS user at this host) on each store: the
// serial switch of `device set --serial-enabled`, `channel import-dbc`
// (the file and its count), `notify add` and `notify remove` (of a chat
// URL its scheme and host only).
func TestAuditCLIOperations(t *testing.T) {
	for name, db := range databases(t) {
		t.Run(name, func(t *testing.T) { testAuditCLIOperations(t, db) })
	}
}

func testAuditCLIOperations(t *testing.T, db string) {
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var dev struct{ ID string }
	mustJSON(t, &dev, "device", "add", "--db", db, "--org", org.ID, "--name", "Press line 1", "--serial", "S1", "--model", "IG-500")
	var out json.RawMessage
	mustJSON(t, &out, "device", "set", "--db", db, "--id", dev.ID, "--serial-enabled", "false")
	mustJSON(t, &out, "channel", "import-dbc", "--db", db, "--device", dev.ID, "--channel", "canfd-1", "--file", filepath.Join("..", "..", "deploy", "demo", "demo.dbc"))
	var ch struct{ ID string }
	mustJSON(t, &ch, "notify", "add", "--db", db, "--org", org.ID, "--name", "ops chat", "--kind", "slack", "--target", "https://chat.example.com/hooks/T1/s3cr3t")
	mustJSON(t, &out, "notify", "remove", "--db", db, "--id", ch.ID)

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
	var got []string
	for _, r := range page.Records {
		if r.Actor != me || r.IP != "" {
			t.Errorf("%s by %+v from %q, want %+v", r.Action, r.Actor, r.IP, me)
		}
		if strings.Contains(string(r.Details), "s3cr3t") {
			t.Errorf("%s keeps the chat URL's path: %s", r.Action, r.Details)
		}
		got = append(got, r.Action+" "+r.Target.Kind+" "+string(r.Details))
	}
	// Newest first; other lanes' records (the organization, the device)
	// are left to their own tests.
	want := []string{
		cloud.ActionNotifyRemoved + ` notification_channel {"kind":"slack","minSeverity":"INFO","name":"ops chat","target":"https://chat.example.com"}`,
		cloud.ActionNotifyCreated + ` notification_channel {"kind":"slack","minSeverity":"INFO","name":"ops chat","target":"https://chat.example.com"}`,
		cloud.ActionPointsImported + ` channel {"kind":"canfd","changed":["points"],"file":"demo.dbc","points":`,
		cloud.ActionSerialUpdated + ` serial {"enabled":{"from":true,"to":false}}`,
	}
	var mine []string
	for _, g := range got {
		if strings.HasPrefix(g, "notification_channel.") || strings.HasPrefix(g, "channel.") || strings.HasPrefix(g, "serial.") {
			mine = append(mine, g)
		}
	}
	if len(mine) != len(want) {
		t.Fatalf("records:\n%s\nwant:\n%s", strings.Join(mine, "\n"), strings.Join(want, "\n"))
	}
	for i := range want {
		if !strings.HasPrefix(mine[i], want[i]) {
			t.Errorf("record %d:\n%s\nwant:\n%s", i, mine[i], want[i])
		}
	}
}
