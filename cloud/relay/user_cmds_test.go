package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/fleet/fleet/cloud/apikey"
	"github.com/fleet/fleet/cloud/password"
	"github.com/fleet/fleet/cloud/sqlite"
)

// cliIn runs one command with stdin.
func cliIn(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code := exitStatus(Run(context.Background(), args, strings.NewReader(stdin), &out, &errOut))
	return out.String(), errOut.String(), code
}

func TestUserCommands(t *testing.T) {
	db := filepath.Join(t.TempDir(), "fleet.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")

	var u struct{ ID, Email, Role string }
	out, errOut, code := cliIn(t, "correct horse battery\n", "user", "create", "--db", db, "--org", org.ID, "--email", "Ada@Acme.Example", "--role", "owner", "--password-stdin", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &u) != nil || u.Email != "ada@acme.example" || u.Role != "OWNER" || u.ID == "" {
		t.Fatalf("user create: %d %s %s", code, out, errOut)
	}
	var keys map[string]any
	if err := json.Unmarshal([]byte(out), &keys); err != nil || len(keys) != 3 {
		t.Errorf("user create prints %s, want exactly id, email, role", out)
	}
	// The password is what came in less one trailing newline.
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ps := sqlite.NewPanelStore(st)
	hasher := password.NewHasher(password.Default, 1)
	checkPassword := func(pw string) error {
		got, err := ps.UserByID(context.Background(), u.ID)
		if err != nil {
			t.Fatal(err)
		}
		return hasher.Check(context.Background(), pw, got.PasswordHash)
	}
	if err := checkPassword("correct horse battery"); err != nil {
		t.Errorf("the stored password is not the one given without its newline: %v", err)
	}

	for name, c := range map[string]struct {
		stdin string
		args  []string
		code  int
		msg   string
	}{
		"no --password-stdin": {"correct horse battery\n", []string{"--email", "b@acme.example", "--role", "ADMIN"}, 2, "--password-stdin is required"},
		"short password":      {"short\n", []string{"--email", "b@acme.example", "--role", "ADMIN", "--password-stdin"}, 2, "at least 12 characters"},
		"empty stdin":         {"", []string{"--email", "b@acme.example", "--role", "ADMIN", "--password-stdin"}, 2, "standard input is empty"},
		"bad role":            {"correct horse battery\n", []string{"--email", "b@acme.example", "--role", "ROOT", "--password-stdin"}, 2, "role must be one of"},
		"email taken":         {"correct horse battery\n", []string{"--email", "ADA@acme.example", "--role", "ADMIN", "--password-stdin"}, 1, "already exists"},
	} {
		_, errOut, code := cliIn(t, c.stdin, append([]string{"user", "create", "--db", db, "--org", org.ID}, c.args...)...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("%s: exit %d %q, want %d with %q", name, code, errOut, c.code, c.msg)
		}
	}

	var viewer struct{ ID string }
	out, errOut, code = cliIn(t, "viewer password 1\r\n", "user", "create", "--db", db, "--org", org.ID, "--email", "vic@acme.example", "--role", "VIEWER", "--password-stdin", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &viewer) != nil {
		t.Fatalf("second user: %d %s", code, errOut)
	}
	var list []struct {
		ID, Email, Role, OrgID string
		DisabledAt             *string
	}
	mustJSON(t, &list, "user", "list", "--db", db, "--org", org.ID)
	if len(list) != 2 || list[0].Email != "ada@acme.example" || list[1].Role != "VIEWER" || list[1].OrgID != org.ID {
		t.Errorf("user list: %+v", list)
	}

	if _, errOut, code := cli(t, "user", "set-role", "--db", db, "--id", u.ID, "--role", "ADMIN"); code != 1 || !strings.Contains(errOut, "last OWNER") {
		t.Errorf("demote the last OWNER: %d %s", code, errOut)
	}
	if _, errOut, code := cli(t, "user", "disable", "--db", db, "--id", u.ID); code != 1 || !strings.Contains(errOut, "last OWNER") {
		t.Errorf("disable the last OWNER: %d %s", code, errOut)
	}
	mustJSON(t, &u, "user", "set-role", "--db", db, "--id", viewer.ID, "--role", "member")
	if u.Role != "MEMBER" {
		t.Errorf("set-role printed %+v", u)
	}
	var disabled struct{ DisabledAt *string }
	mustJSON(t, &disabled, "user", "disable", "--db", db, "--id", viewer.ID)
	if disabled.DisabledAt == nil {
		t.Error("disable printed no disabledAt")
	}
	if _, errOut, code := cli(t, "user", "disable", "--db", db, "--id", "nosuchuser"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Errorf("disable an unknown user: %d %s", code, errOut)
	}

	if _, errOut, code := cliIn(t, "a new password here\n", "user", "reset-password", "--db", db, "--id", list[0].ID, "--password-stdin"); code != 0 {
		t.Fatalf("reset-password: %s", errOut)
	}
	u.ID = list[0].ID
	if err := checkPassword("a new password here"); err != nil {
		t.Errorf("reset-password did not set the password: %v", err)
	}
	if got, _ := ps.UserByID(context.Background(), u.ID); got.MustChangePassword {
		t.Error("reset-password without --temporary requires a change (scripts must see no difference)")
	}

	// --temporary: the user must choose their own password at their next
	// sign-in; the JSON says so.
	var tmp struct {
		ID                 string
		MustChangePassword bool
	}
	out, errOut, code = cliIn(t, "a temporary one 1\n", "user", "reset-password", "--db", db, "--id", u.ID, "--password-stdin", "--temporary", "--json")
	if code != 0 || json.Unmarshal([]byte(out), &tmp) != nil || !tmp.MustChangePassword {
		t.Fatalf("reset-password --temporary: %d %s %s", code, out, errOut)
	}
	if got, _ := ps.UserByID(context.Background(), u.ID); !got.MustChangePassword || checkPassword("a temporary one 1") != nil {
		t.Errorf("reset-password --temporary stored %+v", got)
	}
	out, errOut, code = cliIn(t, "a temporary one 2\n", "user", "create", "--db", db, "--org", org.ID, "--email", "tmp@acme.example", "--role", "VIEWER", "--password-stdin", "--temporary")
	if code != 0 || !strings.Contains(out, "the password is temporary") {
		t.Fatalf("user create --temporary: %d %s %s", code, out, errOut)
	}
	if us, _ := ps.UsersByEmail(context.Background(), "tmp@acme.example", 5); len(us) != 1 || !us[0].MustChangePassword {
		t.Errorf("user create --temporary stored %+v", us)
	}

	// An email is unique per organization: another organization may hold it.
	var other struct{ ID string }
	mustJSON(t, &other, "org", "create", "--db", db, "--name", "Globex")
	if _, errOut, code := cliIn(t, "correct horse battery\n", "user", "create", "--db", db, "--org", other.ID, "--email", "ada@acme.example", "--role", "OWNER", "--password-stdin"); code != 0 {
		t.Errorf("the same email in another organization: %d %s", code, errOut)
	}
}

// TestKeyListShowsLastUse: key list prints each key's last use once the
// key authenticated a request, and who made it in the panel.
func TestKeyListShowsLastUse(t *testing.T) {
	db := filepath.Join(t.TempDir(), "fleet.db")
	var org struct{ ID string }
	mustJSON(t, &org, "org", "create", "--db", db, "--name", "Acme")
	var k struct{ ID, Key string }
	mustJSON(t, &k, "key", "create", "--db", db, "--org", org.ID, "--name", "ci", "--scopes", "devices:read")
	st, err := sqlite.Open(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := apikey.NewAuthenticator(st.Keys(), st.Now, 0).Authenticate(context.Background(), k.Key); err != nil {
		t.Fatal(err)
	}
	var list []struct {
		ID         string
		LastUsedAt *string
		CreatedBy  string
	}
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		mustJSON(t, &list, "key", "list", "--db", db, "--org", org.ID)
		if len(list) == 1 && list[0].LastUsedAt != nil || time.Now().After(end) {
			break
		}
	}
	if len(list) != 1 || list[0].LastUsedAt == nil || list[0].CreatedBy != "" {
		t.Fatalf("key list: %+v", list)
	}
	out, _, _ := cli(t, "key", "list", "--db", db, "--org", org.ID)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "LAST USED") || strings.HasSuffix(lines[1], "never") {
		t.Errorf("key list table:\n%s", out)
	}
}
