package relay

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fleet/fleet/test/rig/logbuf"
	"github.com/fleet/fleet/test/rig/smtptest"
)

type testResult struct {
	ID, DeliveryID, State, SentBy, Error string
	StatusCode                           int
}

// TestNotifyCommands: notify add, list, test and remove from the command
// line; with no relay running, test sends the message itself through
// FLEET_SMTP_URL and records the attempt.
func TestNotifyCommands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")

	var ch struct{ ID, OrgID, Name, Kind, Target, MinSeverity string }
	mustJSON(t, &ch, "notify", "add", "--db", db, "--org", org.ID, "--name", "On call", "--kind", "email",
		"--target", "ops@example.com, oncall@example.com", "--min-severity", "WARNING", "--all-rules")
	if ch.ID == "" || ch.OrgID != org.ID || ch.Kind != "email" || ch.Target != "ops@example.com, oncall@example.com" || ch.MinSeverity != "WARNING" {
		t.Errorf("notify add printed %+v", ch)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--kind", "sms", "--target", "x"}, 2, "--kind"},
		{[]string{"--kind", "email", "--target", "x", "--min-severity", "LOUD"}, 2, "--min-severity"},
		{[]string{"--kind", "slack", "--target", "http://hooks.example.com/x"}, 1, "target"},
		{[]string{"--kind", "email", "--target", "not an address"}, 1, "target"},
	} {
		args := append([]string{"notify", "add", "--db", db, "--org", org.ID, "--name", "bad"}, tc.args...)
		if _, errOut, code := cli(t, args...); code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, %q; want %d naming %s", tc.args, code, errOut, tc.code, tc.says)
		}
	}
	var list []struct{ ID, Name string }
	mustJSON(t, &list, "notify", "list", "--db", db, "--org", org.ID)
	if len(list) != 1 || list[0].ID != ch.ID || list[0].Name != "On call" {
		t.Errorf("notify list: %+v", list)
	}
	if out, _, _ := cli(t, "notify", "list", "--db", db, "--org", org.ID); !strings.Contains(out, "On call") || !strings.Contains(out, "WARNING") {
		t.Errorf("notify list (text): %q", out)
	}

	// A password on the command line is refused (ps shows it).
	_, errOut, code := cli(t, "notify", "test", "--db", db, "--id", ch.ID, "--smtp-url", "smtp+insecure://fleet:s3cret@127.0.0.1:25")
	if code != 2 || !strings.Contains(errOut, "FLEET_SMTP_URL") || strings.Contains(errOut, "s3cret") {
		t.Errorf("password on the command line: exit %d, %q", code, errOut)
	}

	srv := smtptest.Start(t, smtptest.Options{Mode: smtptest.Plain})
	t.Setenv("FLEET_SMTP_URL", "smtp+insecure://"+srv.Addr)
	t.Setenv("FLEET_PUBLIC_URL", "https://fleet.example.com")
	var res testResult
	mustJSON(t, &res, "notify", "test", "--db", db, "--id", ch.ID, "--wait", "0s")
	if res.State != "delivered" || res.SentBy != "cli" || res.StatusCode != 250 || res.DeliveryID == "" {
		t.Errorf("notify test: %+v", res)
	}
	m := srv.Wait(t, 5*time.Second)
	if strings.Join(m.To, ",") != "ops@example.com,oncall@example.com" || m.From != "fleet@fleet.example.com" ||
		!strings.Contains(string(m.Data), "Subject: [Fleet test] Test message from Fleet") {
		t.Errorf("test mail: from %s to %v:\n%s", m.From, m.To, m.Data)
	}
	var ds []struct {
		ID, State, Kind string
		Attempts        []struct{ StatusCode int }
	}
	mustJSON(t, &ds, "webhook", "deliveries", "--db", db, "--org", org.ID)
	if len(ds) != 1 || ds[0].ID != res.DeliveryID || ds[0].State != "delivered" || ds[0].Kind != "email" || len(ds[0].Attempts) != 1 || ds[0].Attempts[0].StatusCode != 250 {
		t.Errorf("delivery log: %+v", ds)
	}

	// A refusing server: the outcome and exit 1.
	refuse := smtptest.Start(t, smtptest.Options{Mode: smtptest.Plain, Reply: func(int, smtptest.Received) int { return 550 }})
	t.Setenv("FLEET_SMTP_URL", "smtp+insecure://"+refuse.Addr)
	out, errOut, code := cli(t, "notify", "test", "--db", db, "--id", ch.ID, "--wait", "0s")
	if code != 1 || !strings.Contains(out, "550") || !strings.Contains(out, "not delivered") || !strings.Contains(errOut, "not delivered") {
		t.Errorf("refused test: exit %d, out %q, err %q", code, out, errOut)
	}

	var rm struct {
		ID      string
		Removed bool
	}
	mustJSON(t, &rm, "notify", "remove", "--db", db, "--id", ch.ID)
	if !rm.Removed || rm.ID != ch.ID {
		t.Errorf("notify remove: %+v", rm)
	}
	mustJSON(t, &list, "notify", "list", "--db", db, "--org", org.ID)
	if len(list) != 0 {
		t.Errorf("after remove: %+v", list)
	}
	if _, _, code := cli(t, "notify", "remove", "--db", db, "--id", ch.ID); code != 1 {
		t.Errorf("remove again: exit %d, want 1", code)
	}
}

// TestNotifyThroughRunningRelay: a running relay sends the test messages
// of notify test: e-mail through --smtp-url (STARTTLS, AUTH, the password
// from FLEET_SMTP_URL and never logged) and chat to an HTTPS incoming
// webhook, linking to --public-url.
func TestNotifyThroughRunningRelay(t *testing.T) {
	db := filepath.Join(t.TempDir(), "relay.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")

	smtpSrv := smtptest.Start(t, smtptest.Options{Mode: smtptest.StartTLS, User: "fleet", Password: "s3cret-pw"})
	var mu sync.Mutex
	var chat []string
	hook := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		chat = append(chat, string(b))
		mu.Unlock()
	}))
	defer hook.Close()

	t.Setenv("FLEET_SMTP_URL", "smtp://fleet:s3cret-pw@"+smtpSrv.Addr)
	logs := &logbuf.Buffer{}
	m := NewMain(logs)
	if err := m.ParseFlags([]string{"--db", db, "--listen", "127.0.0.1:0", "--metrics-listen", "none", "--public-url", "https://fleet.example.com",
		"--smtp-from", "alerts@example.com", "--webhook-allow-private", "--webhook-ca", caFile(t, hook)}); err != nil {
		t.Fatal(err)
	}
	m.Config.Notify.SMTPRootCAs = smtpSrv.CA
	if err := m.Run(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if s := logs.String(); strings.Contains(s, "s3cret-pw") || !strings.Contains(s, "smtp://fleet:xxxxx@"+smtpSrv.Addr) {
		t.Errorf("logs show the password or not the server:\n%s", s)
	}

	var mail, slack struct{ ID string }
	mustJSON(t, &mail, "notify", "add", "--db", db, "--org", org.ID, "--name", "mail", "--kind", "email", "--target", "ops@example.com")
	mustJSON(t, &slack, "notify", "add", "--db", db, "--org", org.ID, "--name", "chat", "--kind", "slack", "--target", hook.URL+"/services/T/B/x")
	t.Setenv("FLEET_SMTP_URL", "") // the command must not send itself
	var res testResult
	mustJSON(t, &res, "notify", "test", "--db", db, "--id", mail.ID, "--wait", "10s")
	if res.State != "delivered" || res.SentBy != "relay" || res.StatusCode != 250 {
		t.Errorf("email test: %+v", res)
	}
	got := smtpSrv.Wait(t, 5*time.Second)
	if !got.TLS || got.User != "fleet" || got.From != "alerts@example.com" {
		t.Errorf("mail: %+v", got)
	}
	mustJSON(t, &res, "notify", "test", "--db", db, "--id", slack.ID, "--wait", "10s")
	if res.State != "delivered" || res.SentBy != "relay" || res.StatusCode != 200 {
		t.Errorf("slack test: %+v", res)
	}
	mu.Lock()
	defer mu.Unlock()
	var body struct{ Text string }
	if len(chat) != 1 || json.Unmarshal([]byte(chat[0]), &body) != nil || !strings.Contains(body.Text, "Test message from Fleet") {
		t.Errorf("chat messages: %q", chat)
	}
}
